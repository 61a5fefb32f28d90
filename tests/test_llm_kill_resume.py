"""A killed answering job pays for nothing twice (docs/architecture.md, "The response store").

Each round starts tests/provider_server.py, runs one answering job in a subprocess
(tests/faults/answering/answer_job.py: ``answer_shard`` with the OpenAI backend, as
workflow/scripts/answer_requests.py runs it) on a shard of N requests, which is a
single batch of the runner, kills it at a seeded random point inside that batch,
reruns the shard to completion and counts calls at the server.

* SIGTERM (what Slurm sends at a time limit): the job stops sending, waits for the
  calls it had sent, stores every answer and exits with 128 + 15. Every request
  reaches the server exactly once over both runs.
* SIGKILL (nothing runs in the job): the server answers k requests and holds the
  later ones unanswered (a provider that has not generated them yet). As soon as the
  job has received the k answers - journaled, mostly not yet in a store segment, which
  is written by count or time - the job is killed. The rerun moves the journaled
  answers into the store and asks exactly the N - k others: every request is answered
  exactly once.

What a SIGKILL at an arbitrary moment costs - only the calls whose answers had not
reached the runner (in flight, or just read by the SDK) - is checked in the last test.
"""

from __future__ import annotations

import json
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
try:
    import context_effects  # noqa: F401
except ModuleNotFoundError:  # not installed: test the checkout
    sys.path.insert(0, str(REPO / "src"))

pytest.importorskip("openai")

from faults.answering.jobs import AnswerJob, ShardFiles  # noqa: E402
from provider_server import LoggedRequest, ProviderServer  # noqa: E402

from context_effects.llm.backends.openai_api import OpenAIBackend  # noqa: E402
from context_effects.llm.ledger import AttemptLog, Ledger  # noqa: E402
from context_effects.llm.shards import answer_journal_path, answer_shard  # noqa: E402
from context_effects.llm.store.responses import ResponseStore  # noqa: E402
from context_effects.llm.types import LLMRequest, ModelRef, Sampling  # noqa: E402

KEY = "sk-test-kill-resume"
N = 60
# As a hosted model runs by default: 8 calls at once at first, growing towards 64
# (llm/concurrency.py); 64 workers hold a request each while they wait for a slot.
CONCURRENCY = 8
MAX_CONCURRENCY = 64
# Kill points leave at least this many requests unsent even with the calls in
# flight (the limit grows to about 14 over 60 calls).
UNSENT_MARGIN = 24
LATENCY_S = 0.05
# Smaller than the production defaults so that a round takes a second, not five;
# both triggers fire: 16 < N, and k is rarely a multiple of 16.
FLUSH_EVERY = 16
FLUSH_INTERVAL_S = 0.5
ROUNDS = 20
SEED = 20240611


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # for the reruns in this process


def _requests() -> list[LLMRequest]:
    return [
        LLMRequest(ModelRef("openai", "gpt-test"), (("user", f"Rate answer {i}."),), Sampling(max_tokens=50))
        for i in range(N)
    ]


def _prompt(call: LoggedRequest) -> str:
    return call.body["messages"][-1]["content"]


def _wait_for(cond: Callable[[], bool], timeout: float, what: str, every_s: float = 0.005) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"timed out after {timeout:g}s waiting until {what}")
        time.sleep(every_s)


def _quiet(srv: ProviderServer, for_s: float = 0.1) -> None:
    """Wait until no generation request has arrived for ``for_s``: after a kill, one
    the job had already written to its socket may still be read by the server."""
    seen, since = -1, time.monotonic()
    while time.monotonic() - since < for_s:
        n = len(srv.generation_calls())
        if n != seen:
            seen, since = n, time.monotonic()
        time.sleep(0.01)


def _stored(root: Path) -> int:
    return len(ResponseStore(root))


def _journaled(job: "Job") -> int:
    """Answers the job received and journaled that are not yet in a store segment."""
    journal = answer_journal_path(job.attempts)
    try:
        lines = journal.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return 0
    keys = set()
    for line in lines:
        try:
            keys.add(json.loads(line)["key"])
        except (ValueError, KeyError):
            continue  # a line cut short by the kill
    return len(keys - set(ResponseStore(job.store).keys()))


class Job(AnswerJob):
    """One answering job in a subprocess, started ahead of its round: imported, waiting for a URL."""

    def __init__(self, work: Path) -> None:
        shard = ShardFiles(work, _requests())
        super().__init__(
            shard, work / "stderr.txt", KEY,
            "--concurrency", str(CONCURRENCY), "--max-concurrency", str(MAX_CONCURRENCY),
            "--flush-every", str(FLUSH_EVERY), "--flush-interval", str(FLUSH_INTERVAL_S),
        )
        self.requests, self.responses, self.ledger = shard.requests, shard.responses, shard.ledger
        self.attempts, self.store = shard.attempts, shard.store


def _rerun(job: Job, srv: ProviderServer) -> int:
    """Answer the shard again, in this process; return the calls the server saw."""
    before = len(srv.generation_calls())
    backend = OpenAIBackend(
        base_url=srv.base_url, concurrency=CONCURRENCY, max_concurrency=MAX_CONCURRENCY, request_timeout_s=10.0
    )
    with backend:
        answer_shard(
            job.requests, job.responses, job.ledger, backend, ResponseStore(job.store),
            progress=False, attempts_log=job.attempts,
        )
    return len(srv.generation_calls()) - before


def _check_complete(job: Job) -> None:
    table = pq.read_table(job.responses).to_pandas()
    assert len(table) == N and table["ok"].all()
    assert list(table["key"]) == [r.key for r in _requests()]
    assert _stored(job.store) == N


def _round(job: Job, kind: signal.Signals, k: int) -> dict:
    with ProviderServer(openai_key=KEY, latency_s=LATENCY_S, hold_after=k if kind == signal.SIGKILL else None) as srv:
        job.start(srv.base_url)
        _wait_for(lambda: len(srv.answered_calls()) >= k, 60, f"the server answered {k} calls\n{job.log()}")
        if kind == signal.SIGTERM:
            job.proc.send_signal(signal.SIGTERM)
            rc = job.proc.wait(timeout=30)
            assert rc == 128 + signal.SIGTERM, job.log()
            first = len(srv.generation_calls())
            # Drained: every call the job had sent came back and is in the store;
            # requests its workers held while waiting for a slot were not sent.
            assert len(srv.answered_calls()) == first == _stored(job.store) < N, job.log()
            held = 0
        else:
            # Killed once the k answers reached the job: in the journal (or, if a write by
            # count or time came first, in the store). Polled gently: the job's two
            # cores need the time.
            _wait_for(lambda: _stored(job.store) + _journaled(job) >= k, 10,
                      f"the job held the {k} answers\n{job.log()}", 0.02)
            job.proc.kill()
            assert job.proc.wait(timeout=30) == -signal.SIGKILL
            _quiet(srv)
            srv.release_held()
            srv.hold_after = None
            first = len(srv.generation_calls())
            held = len(srv.held_calls())
            assert len(srv.answered_calls()) == k and first == k + held and held <= MAX_CONCURRENCY
        answered_first = len(srv.answered_calls())
        attempt_log = [json.loads(line) for line in job.attempts.read_text().splitlines()]
        # The killed attempt's paid calls: its last checkpoint, plus the answers it
        # journaled after that checkpoint.
        assert attempt_log and attempt_log[-1]["calls"] + _journaled(job) == answered_first, job.log()

        rerun = _rerun(job, srv)
        answered = Counter(_prompt(c) for c in srv.answered_calls())
        sent = Counter(_prompt(c) for c in srv.generation_calls())

    # Zero calls paid twice: every request answered once over both runs; the rerun
    # sent nothing the first run had been answered.
    assert answered_first + rerun == N
    assert len(answered) == N and set(answered.values()) == {1}
    if kind == signal.SIGTERM:
        assert first + rerun == N and set(sent.values()) == {1}
    _check_complete(job)

    ledger = Ledger.load(job.ledger)
    assert ledger.calls == N, "the ledger counts the calls paid over both attempts"
    assert ledger.runs == 2 and [a["calls"] for a in ledger.attempts] == [answered_first, rerun]
    assert ledger.attempts[-1]["outcome"] == "completed"
    assert ("SIGTERM" if kind == signal.SIGTERM else "killed") in ledger.attempts[0]["outcome"]
    # Kept for the next attempt's ledger (Snakemake may still delete this one), one line per attempt.
    assert [rec["calls"] for rec in AttemptLog(job.attempts).previous()] == [answered_first, rerun]
    assert len(job.attempts.read_text().splitlines()) == 2
    duplicates = sum(answered.values()) - len(answered)
    return {"kind": kind.name, "k": k, "first_sent": first, "held": held, "rerun": rerun, "duplicates": duplicates}


def test_killed_job_pays_nothing_twice(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    plan = [
        (signal.SIGTERM if i % 2 == 0 else signal.SIGKILL, rng.randint(1, N - UNSENT_MARGIN)) for i in range(ROUNDS)
    ]
    t0 = time.monotonic()
    figures = []
    jobs: list[Job] = []
    try:
        nxt = Job(tmp_path / "round-00")
        jobs.append(nxt)
        for i, (kind, k) in enumerate(plan):
            job = nxt
            if i + 1 < ROUNDS:  # imports while this round runs
                nxt = Job(tmp_path / f"round-{i + 1:02d}")
                jobs.append(nxt)
            figures.append(_round(job, kind, k))
            job.close()
    finally:
        for job in jobs:
            job.close()
    elapsed = time.monotonic() - t0
    print(f"\n{ROUNDS} rounds in {elapsed:.1f}s")
    for f in figures:
        print(f)
    assert {f["kind"] for f in figures} == {"SIGTERM", "SIGKILL"}


def test_sigkill_at_any_moment_costs_at_most_what_was_in_flight(tmp_path: Path) -> None:
    """No waiting for anything: the calls paid twice are exactly those the killed job
    sent whose answers had not reached its runner. Every answer the runner received is
    in the store or its journal, and the rerun asks for none of them."""
    rng = random.Random(SEED + 1)
    for i in range(3):
        k = rng.randint(1, N - UNSENT_MARGIN)
        job = Job(tmp_path / f"round-{i}")
        try:
            with ProviderServer(openai_key=KEY, latency_s=LATENCY_S) as srv:
                job.start(srv.base_url)
                _wait_for(lambda: len(srv.answered_calls()) >= k, 60, f"{k} answers\n{job.log()}")
                job.proc.kill()
                assert job.proc.wait(timeout=30) == -signal.SIGKILL
                _quiet(srv)
                first = len(srv.generation_calls())
                stored = _stored(job.store) + _journaled(job)
                in_flight = srv.max_in_flight
                rerun = _rerun(job, srv)
        finally:
            job.close()
        duplicates = first + rerun - N
        print(f"\nSIGKILL after {k} answers: sent {first}, stored {stored}, rerun {rerun}, paid twice {duplicates}")
        assert rerun == N - stored, "the rerun never asks for an answer the job received"
        # Paid twice: exactly the calls whose answers had not reached the runner - in
        # flight at the server (at most `in_flight` at once) or just read by the SDK and
        # not yet handed over (their slot already reused) - never more than the client
        # ever has outstanding.
        assert 0 <= duplicates == first - stored <= MAX_CONCURRENCY
        assert in_flight <= MAX_CONCURRENCY
        _check_complete(job)
        ledger = Ledger.load(job.ledger)
        # A SIGKILLed attempt's paid calls: every answer it received (checkpointed or
        # journaled); calls whose answers never reached it cannot be known.
        assert ledger.attempts[0]["calls"] == stored <= first
