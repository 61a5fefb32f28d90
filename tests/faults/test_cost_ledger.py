"""The cost ledger says exactly what the provider was paid (docs/faults.md, "Faults, on purpose").

tests/provider_server.py keeps its own log of generation calls: that log is the bill,
and each case compares the shard's ledger with it.

* A job killed at each step of its shard's end, and one that finished, with its outputs
  then deleted as Snakemake deletes them (after a failed job; after a finished one whose
  ``snakemake`` was stopped before it recorded the job as done): the rerun's ledger
  still counts what the first attempt paid.
* Two processes started on one shard: the second waits for the first's lock, says whom
  it waits for, and pays nothing; it never takes the live first for a killed attempt.
  A lock whose holder died is free at once; a bounded wait ends in an error naming the
  holder.
* A reasoning model whose output budget is below its reasoning tokens: every reply
  comes back empty with finish reason ``length``. It is recorded ``budget_exhausted``,
  never re-asked at the same budget, and the job stops after a bounded number of calls
  naming the model, the budget and the setting to raise.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq
import pytest

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
sys.path.insert(0, str(TESTS))
try:
    import context_effects  # noqa: F401
except ModuleNotFoundError:  # not installed: test the checkout
    sys.path.insert(0, str(REPO / "src"))

pytest.importorskip("openai")

from faults.answering.jobs import AnswerJob, ShardFiles  # noqa: E402
from provider_server import LoggedRequest, ProviderServer, default_reply  # noqa: E402

from context_effects.conformity.replies import REMINDER  # noqa: E402
from context_effects.llm.backends.openai_api import OpenAIBackend  # noqa: E402
from context_effects.llm.ledger import AttemptLog, Ledger  # noqa: E402
from context_effects.llm.runner import BUDGET_STOP_AFTER, OutputBudgetExhausted  # noqa: E402
from context_effects.llm.shards import (  # noqa: E402
    END_STEPS,
    ShardBusy,
    ShardLock,
    answer_shard,
    shard_lock_path,
    write_request_shard,
)
from context_effects.llm.store.responses import ResponseStore  # noqa: E402
from context_effects.llm.types import LLMRequest, ModelRef, Sampling  # noqa: E402

KEY = "sk-test-cost-ledger"
N = 12
CONCURRENCY = 4


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)  # for the answering done in this process


def _requests(n: int = N) -> list[LLMRequest]:
    return [
        LLMRequest(ModelRef("openai", "gpt-test"), (("user", f"Rate answer {i}."),), Sampling(max_tokens=50))
        for i in range(n)
    ]


def _prompt(call: LoggedRequest) -> str:
    return call.body["messages"][-1]["content"]


def _wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            pytest.fail(f"timed out after {timeout:g}s waiting until {what}")
        time.sleep(0.02)


class Shard(ShardFiles):
    """A shard of this module's requests (or ``requests``), answered here or by a job."""

    def __init__(self, work: Path, requests: list[LLMRequest] | None = None) -> None:
        super().__init__(work, _requests() if requests is None else requests)

    def answer(self, backend: OpenAIBackend, **kwargs) -> Ledger:
        with backend:
            return answer_shard(
                self.requests, self.responses, self.ledger, backend, ResponseStore(self.store),
                progress=False, attempts_log=self.attempts, handle_signals=False, **kwargs,
            )


def _backend(srv: ProviderServer, concurrency: int = CONCURRENCY) -> OpenAIBackend:
    return OpenAIBackend(
        base_url=srv.base_url, concurrency=concurrency, max_concurrency=concurrency, request_timeout_s=10.0,
        backoff_base_s=0.02, backoff_max_s=0.1,
    )


def Job(shard: Shard, log: Path, signal_at: str | None = None) -> AnswerJob:  # noqa: N802 - reads as a class
    """answer_job.py on ``shard`` at this module's concurrency, killed at ``signal_at``."""
    options = ["--concurrency", str(CONCURRENCY), "--max-concurrency", str(CONCURRENCY)]
    return AnswerJob(shard, log, KEY, *options, *(["--signal-at", signal_at] if signal_at is not None else []))


# --------------------------------------------------------------------------- a kill at a shard's end

#: Each step of a shard's end after which the job is killed, and ``None``: it finished
#: and exited 0, and its outputs are deleted all the same.
END_CASES = (*END_STEPS, None)


def test_a_kill_at_each_step_of_a_shards_end_leaves_the_bill_in_the_ledger(tmp_path: Path) -> None:
    shards = {case: Shard(tmp_path / (case or "exited")) for case in END_CASES}
    jobs = {case: Job(shards[case], tmp_path / f"{case or 'exited'}.log", signal_at=case) for case in END_CASES}
    try:
        for case, job in jobs.items():
            shard = shards[case]
            with ProviderServer(openai_key=KEY) as srv:
                job.start(srv.base_url)
                rc = job.proc.wait(timeout=60)
                assert rc == (0 if case is None else -signal.SIGTERM), f"{case}: {job.log()}"
                first = len(srv.answered_calls())
                assert first == N, f"{case}: every request was asked before the end"
                shard.delete_outputs()
                shard.answer(_backend(srv))
                bill = len(srv.answered_calls())
            ledger = Ledger.load(shard.ledger)
            assert bill == N, f"{case}: the rerun asked nothing again"
            assert ledger.calls == bill, f"killed after {case!r}: the ledger says {ledger.calls} calls, the bill {bill}"
            assert [a["calls"] for a in ledger.attempts] == [N, 0], (case, ledger.attempts)
            assert ledger.attempts[-1]["outcome"] == "completed"
            # The attempts log outlives the ledger, one line per attempt.
            assert [r["calls"] for r in AttemptLog(shard.attempts).previous()] == [N, 0]
            assert len(shard.attempts.read_text().splitlines()) == 2
    finally:
        for job in jobs.values():
            job.close()


# --------------------------------------------------------------------------- two processes on one shard


def test_two_processes_on_one_shard_pay_for_each_call_once(tmp_path: Path) -> None:
    """The provider holds every reply until the second process is waiting: the first is
    then alive, holds the lock and has calls in flight and none answered."""
    shard = Shard(tmp_path / "shard")
    first, second = Job(shard, tmp_path / "first.log"), Job(shard, tmp_path / "second.log")
    gate = threading.Event()

    def slow_reply(prompt: str):
        gate.wait(30)
        return default_reply(prompt)

    try:
        with ProviderServer(openai_key=KEY, reply=slow_reply) as srv:
            first.start(srv.base_url)
            _wait_for(lambda: len(srv.generation_calls()) >= CONCURRENCY, 30, f"the first job sent\n{first.log()}")
            second.start(srv.base_url)
            _wait_for(lambda: "waiting for it to finish" in second.log(), 30, f"the second job waits\n{second.log()}")
            assert f"pid {first.proc.pid} on host {socket.gethostname()}" in second.log()
            assert len(srv.generation_calls()) == CONCURRENCY, "the waiting process sends nothing"
            gate.set()
            assert first.proc.wait(timeout=60) == 0, first.log()
            assert second.proc.wait(timeout=60) == 0, second.log()
            answered = Counter(_prompt(c) for c in srv.answered_calls())
            sent = len(srv.generation_calls())
    finally:
        gate.set()
        first.close()
        second.close()
    assert len(answered) == N and set(answered.values()) == {1} and sent == N, "no call paid twice"
    ledger = Ledger.load(shard.ledger)  # the second process wrote it last
    assert ledger.calls == sum(answered.values()) == N
    assert [(a["calls"], a["outcome"]) for a in ledger.attempts] == [(N, "completed"), (0, "completed")]
    assert len(ResponseStore(shard.store)) == N


HOLD_LOCK = """
import sys, time
sys.path[:0] = [{src!r}]
from context_effects.llm.shards import ShardLock
ShardLock(sys.argv[1], "shard").acquire({{"host": "elsewhere", "pid": 1}})
print("held", flush=True)
time.sleep(120)
"""


def test_a_live_holder_is_named_and_a_dead_ones_lock_is_free(tmp_path: Path) -> None:
    shard = Shard(tmp_path / "shard")
    path = shard_lock_path(shard.attempts)
    # A second descriptor of the file is a second holder to flock, in this process too.
    live = ShardLock(path, shard.requests)
    live.acquire({"host": socket.gethostname(), "pid": os.getpid()})
    with ProviderServer(openai_key=KEY) as srv:
        try:
            with pytest.raises(ShardBusy, match=rf"pid {os.getpid()} on host {socket.gethostname()}"):
                shard.answer(_backend(srv), lock_wait_s=0.3)
        finally:
            live.release()
        assert srv.generation_calls() == [] and not shard.attempts.exists(), "a waiting process touches nothing"

        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_LOCK.format(src=str(REPO / "src")), str(path)],
            stdout=subprocess.PIPE, text=True,
        )
        try:
            assert holder.stdout.readline().strip() == "held"
            holder.kill()
            assert holder.wait(timeout=30) == -signal.SIGKILL
        finally:
            if holder.poll() is None:
                holder.kill()
            holder.stdout.close()
        ledger = shard.answer(_backend(srv), lock_wait_s=5.0)  # the kernel dropped the dead holder's lock
        assert ledger.calls == len(srv.answered_calls()) == N
    assert path.read_text() == "", "an idle lock names nobody"


# --------------------------------------------------------------------------- an exhausted output budget

REASONING_MODEL = "gpt-5-mini"
#: Reasoning tokens the server's reasoning model spends before it writes anything.
REASONING_TOKENS = 200


def _reasoning_requests(n: int, max_tokens: int, long_every: int | None = None) -> list[LLMRequest]:
    """Built as capabilities.conform_sampling builds them for a GPT-5-family judge."""
    sampling = Sampling(temperature=None, top_p=None, max_tokens=max_tokens, reasoning_effort="low")
    return [
        LLMRequest(
            ModelRef("openai", REASONING_MODEL),
            (("user", f"Rate answer {i}{' (long)' if long_every and i % long_every == long_every - 1 else ''}."),),
            sampling,
        )
        for i in range(n)
    ]


def test_an_output_budget_below_the_reasoning_stops_after_a_few_calls_naming_the_fix(tmp_path: Path) -> None:
    n = 24
    shard = Shard(tmp_path / "shard", _reasoning_requests(n, 64))
    with ProviderServer(
        openai_key=KEY, reasoning_models=(REASONING_MODEL,), reasoning_tokens=REASONING_TOKENS, latency_s=0.05
    ) as srv:
        with pytest.raises(OutputBudgetExhausted) as err:
            shard.answer(_backend(srv, concurrency=2), model_name="judge-gpt5")
        message = str(err.value)
        paid = len(srv.answered_calls())
        prompts = [_prompt(c) for c in srv.answered_calls()]

        # Same budget again: the stored replies already say it, nothing is sent.
        with pytest.raises(OutputBudgetExhausted):
            shard.answer(_backend(srv, concurrency=2), model_name="judge-gpt5")
        assert len(srv.answered_calls()) == paid

        # The fix the message names: a budget above the reasoning (the study writes the
        # shard again with it, under new keys).
        write_request_shard(shard.requests, _reasoning_requests(n, 512), reply_policy="conformity.rating",
                            max_attempts=3)
        ledger = shard.answer(_backend(srv, concurrency=2), model_name="judge-gpt5")
        bill = len(srv.answered_calls())

    for part in ("judge-gpt5", REASONING_MODEL, "max_tokens=64", "models.judge-gpt5.capabilities.min_output_tokens"):
        assert part in message, message
    # Bounded: the replies that decided it, plus the calls in flight or already started
    # when the stop came (two at a time here), never the whole shard.
    assert BUDGET_STOP_AFTER <= paid <= BUDGET_STOP_AFTER + 2 * 2 < n, paid
    # Never re-asked at the same budget: each prompt once, without the format reminder.
    assert len(set(prompts)) == len(prompts) and not any(REMINDER in p for p in prompts)
    assert len(ResponseStore(shard.store)) == n + paid, "the empty replies were paid for and are stored"

    assert ledger.calls == bill == paid + n
    assert [a["calls"] for a in ledger.attempts] == [paid, 0, n]
    assert [a["outcome"] for a in ledger.attempts][:2] == ["stopped: replies empty at the output budget"] * 2
    assert ledger.attempts[0]["invalid"] == paid, "each empty reply missing at once"
    rows = pq.read_table(shard.responses).to_pandas()
    assert rows["ok"].all() and rows["invalid_reason"].isna().all()


def test_a_few_replies_out_of_budget_among_answers_are_missing_not_reasked(tmp_path: Path) -> None:
    """A rare long reasoning does not stop the job: those replies are recorded missing
    as ``budget_exhausted`` after one ask each, the rest are answered."""
    n, long_every = 20, 5
    shard = Shard(tmp_path / "shard", _reasoning_requests(n, 100, long_every=long_every))
    with ProviderServer(
        openai_key=KEY, reasoning_models=(REASONING_MODEL,),
        reasoning_tokens=lambda prompt: 300 if "(long)" in prompt else 20,
    ) as srv:
        ledger = shard.answer(_backend(srv, concurrency=2))
        asked = Counter(_prompt(c) for c in srv.answered_calls())
    long = n // long_every
    assert long >= BUDGET_STOP_AFTER, "as many as would stop the job were they the rule"
    assert len(asked) == n and set(asked.values()) == {1}, "nothing re-asked"
    assert ledger.calls == sum(asked.values()) == n
    rows = pq.read_table(shard.responses).to_pandas()
    assert list(rows["invalid_reason"]) == [
        "budget_exhausted" if i % long_every == long_every - 1 else None for i in range(n)
    ]
    assert ledger.invalid_reasons == {"budget_exhausted": long} and ledger.reasks == 0


# --------------------------------------------------------------------------- a full disk


def _namespaces_work() -> bool:
    import shutil

    if shutil.which("unshare") is None:
        return False
    return subprocess.run(["unshare", "-rm", "true"], capture_output=True).returncode == 0


def test_a_full_ledger_disk_stops_the_job_and_the_rerun_pays_nothing_twice(tmp_path: Path) -> None:
    """The ledgers' filesystem (a small tmpfs in a mount namespace of the job's own) fills up
    after 8 answers, while calls are in flight. The job sends nothing more, stores every
    answer it received, records what it paid in the space it held back, and stops naming
    the path; after space is freed the rerun asks only what was not answered, and the
    shard's ledger equals the provider's bill."""
    if not _namespaces_work():
        if os.environ.get("CI"):
            pytest.fail("`unshare -rm` (util-linux) is needed for the full-disk test")
        pytest.skip("`unshare -rm` is not available here")
    n, fill_at = 48, 8
    shard = Shard(tmp_path / "full", _requests(n))
    ledgers, saved = shard.ledger.parent, tmp_path / "saved-ledgers"
    ledgers.mkdir(parents=True)
    proc_holder: dict[str, subprocess.Popen] = {}
    answered = 0
    lock = threading.Lock()

    def fill(prompt: str):
        nonlocal answered
        with lock:
            answered += 1
            if answered == fill_at:
                # Everything the tmpfs has left, written from outside through the job's root.
                filler = Path(f"/proc/{proc_holder['job'].pid}/root") / ledgers.relative_to("/") / "filler"
                with open(filler, "wb") as fh:
                    try:
                        while True:
                            fh.write(b"\0" * 4096)
                            fh.flush()
                    except OSError:
                        pass
        return default_reply(prompt)

    driver = [
        sys.executable, str(TESTS / "faults/answering/answer_job.py"),
        "--requests", str(shard.requests), "--responses", str(shard.responses), "--ledger", str(shard.ledger),
        "--attempts", str(shard.attempts), "--store", str(shard.store), "--concurrency", "4",
        "--max-concurrency", "4", "--min-free-bytes", "0", "--reserve-bytes", str(64 * 1024),
    ]
    script = (
        f'mount -t tmpfs -o size=1m tmpfs "{ledgers}" || exit 90\n'
        + " ".join(f'"{a}"' for a in driver) + "; rc=$?\n"
        + f'rm -f "{ledgers}/filler"; mkdir -p "{saved}" && cp -a "{ledgers}/." "{saved}/"\nexit $rc\n'
    )
    log_path = tmp_path / "job.log"
    with ProviderServer(openai_key=KEY, reply=fill, latency_s=0.02) as srv, open(log_path, "w") as log:
        proc = subprocess.Popen(["unshare", "-rm", "sh", "-c", script], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=log, text=True,
                                env={**os.environ, "OPENAI_API_KEY": KEY, "OMP_NUM_THREADS": "1"})
        proc_holder["job"] = proc
        try:
            assert proc.stdout.readline().strip() == "ready", log_path.read_text()[-3000:]
            proc.stdin.write(srv.base_url + "\n")
            proc.stdin.flush()
            rc = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        first = len(srv.answered_calls())
        said = log_path.read_text()
        # Space freed: the ledgers, as the job left them, on a disk with room.
        os.rmdir(ledgers) if not any(ledgers.iterdir()) else None
        import shutil

        shutil.copytree(saved, ledgers, dirs_exist_ok=True)
        ledger = shard.answer(_backend(srv))
        prompts = [_prompt(c) for c in srv.answered_calls()]
    assert 0 < first < n, f"the job stopped after {first} of {n} calls"
    # Each prompt paid once: every answer the job received was stored before anything else.
    duplicates = [p for p, k in Counter(prompts).items() if k > 1]
    assert not duplicates and len(prompts) == n, duplicates
    # The ledger is the bill: the first attempt recorded its calls in the space it held back.
    assert ledger.calls == len(prompts), (ledger.calls, len(prompts), ledger.attempts)
    assert [a["calls"] for a in ledger.attempts] == [first, n - first], ledger.attempts
    assert ledger.attempts[0]["outcome"].startswith("stopped: cannot write ")
    # It stopped on purpose, naming the path and the cause.
    assert rc == 3, said[-3000:]
    assert "write failed: cannot write" in said and str(ledgers) in said and "No space left on device" in said


def test_too_little_free_space_stops_before_anything_is_sent(tmp_path: Path) -> None:
    from context_effects.llm.runner import WriteFailed

    shard = Shard(tmp_path)
    with ProviderServer(openai_key=KEY) as srv:
        with pytest.raises(WriteFailed, match=r"MiB free; an answering job needs at least .* before it sends a batch"):
            shard.answer(_backend(srv), min_free_bytes=2**62)
        assert not srv.generation_calls()
