"""One shard's files and its answering job in a process of its own (answer_job.py), for
the tests that kill a job and check what the rerun pays: tests/test_llm_kill_resume.py
and tests/faults/test_cost_ledger.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from context_effects.llm.shards import write_request_shard
from context_effects.llm.types import LLMRequest

DRIVER = Path(__file__).with_name("answer_job.py")


class ShardFiles:
    """The files of one shard as the answering rules lay them out: the ledger is a
    declared output, the attempts log beside it under .attempts/ is not."""

    def __init__(self, work: Path, requests: Sequence[LLMRequest]) -> None:
        work.mkdir(parents=True, exist_ok=True)
        self.work = work
        self.requests = work / "requests.parquet"
        self.responses = work / "responses.parquet"
        self.ledger = work / "ledgers" / "shard.json"
        self.attempts = work / "ledgers" / ".attempts" / "shard.jsonl"
        self.store = work / "store"
        write_request_shard(self.requests, list(requests), reply_policy="conformity.rating", max_attempts=3)

    def delete_outputs(self) -> None:
        """What Snakemake does to the declared outputs of a job it counts as failed."""
        self.responses.unlink(missing_ok=True)
        self.ledger.unlink(missing_ok=True)


class AnswerJob:
    """answer_job.py on ``shard`` in its own process, started ahead of its round: imported
    and waiting for the server's URL (``start``), so that several import at once."""

    def __init__(self, shard: ShardFiles, log: Path, api_key: str, *options: str) -> None:
        self.shard = shard
        self.log_path = log
        self.stderr = open(log, "w")  # noqa: SIM115 - closed in close()
        args = [
            sys.executable, str(DRIVER),
            "--requests", str(shard.requests), "--responses", str(shard.responses),
            "--ledger", str(shard.ledger), "--attempts", str(shard.attempts), "--store", str(shard.store),
            *options,
        ]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True,
            env={**os.environ, "OPENAI_API_KEY": api_key, "OMP_NUM_THREADS": "1"},
        )

    def start(self, base_url: str) -> None:
        line = self.proc.stdout.readline()
        assert line.strip() == "ready", self.log()
        self.proc.stdin.write(base_url + "\n")
        self.proc.stdin.flush()

    def log(self) -> str:
        self.stderr.flush()
        return self.log_path.read_text()[-3000:]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.stderr.close()
