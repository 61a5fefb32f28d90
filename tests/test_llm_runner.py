"""Runner: cache hits, batching, kill -9 resume, failures, re-asks, replay, ledger, pricing."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from context_effects.llm.backends.base import Backend  # noqa: E402
from context_effects.llm.backends.replay import ReplayBackend, ReplayMiss  # noqa: E402
from context_effects.conformity.replies import parse_rating, rating_policy  # noqa: E402
from context_effects.conformity.replies import RATING_SCHEMA  # noqa: E402
from context_effects.llm.ledger import AttemptLog, Ledger  # noqa: E402
from context_effects.llm.pricing import estimate_cost, price_table_from_models  # noqa: E402
from context_effects.llm.replies import ReplyPolicy  # noqa: E402
from context_effects.llm.runner import (  # noqa: E402
    INVALID_PREFIX,
    OutputBudgetExhausted,
    StopRequested,
    invalid_reason,
    run_requests,
)
from context_effects.llm.store import transfer  # noqa: E402
from context_effects.llm.store.responses import ResponseStore  # noqa: E402
from context_effects.llm.types import LLMRequest, LLMResult, ModelRef, Sampling  # noqa: E402

MODEL = ModelRef(provider="fake", model_id="fake/model-1")
#: Rating replies, re-asked as the same request with the next attempt number.
RATING = ReplyPolicy("rating", parse_rating)


def make_requests(n: int, *, prefix: str = "q", schema: dict | None = None) -> list[LLMRequest]:
    return [
        LLMRequest(
            model=MODEL,
            messages=(("system", "Be brief."), ("user", f"{prefix} question {i}")),
            sampling=Sampling(max_tokens=16),
            output_schema=schema,
            meta={"item": i},
        )
        for i in range(n)
    ]


class CountingBackend(Backend):
    """In-test backend: records every request it is sent; can fail or misbehave on demand.

    ``fail(req) -> bool`` makes a request come back as an error;
    ``reply(req) -> str`` chooses the text (default: an echo of the last message).
    """

    name = "counting"

    def __init__(
        self,
        *,
        fail: Callable[[LLMRequest], bool] | None = None,
        reply: Callable[[LLMRequest], str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        super().__init__()
        self.fail = fail or (lambda r: False)
        self.reply = reply or (lambda r: f"answer to: {r.messages[-1][1]}")
        self.log_path = log_path
        self.calls: list[str] = []
        self.batch_sizes: list[int] = []

    @property
    def batches(self) -> int:
        return len(self.batch_sizes)

    def engine_version(self) -> str:
        return "counting-1.0"

    def run(self, requests: Sequence[LLMRequest]) -> Iterator[LLMResult]:
        self.batch_sizes.append(len(requests))
        self.calls.extend(r.key for r in requests)
        if self.log_path is not None:
            with open(self.log_path, "a") as fh:
                fh.write("".join(f"{r.key}\n" for r in requests))
        # Reverse order: the contract allows any order and the runner must cope.
        for r in reversed(list(requests)):
            if self.fail(r):
                yield LLMResult(key=r.key, text=None, finish_reason=None, error="ServerError: 503 overloaded")
            else:
                text = self.reply(r)
                yield LLMResult(
                    key=r.key,
                    text=text,
                    finish_reason="stop",
                    tokens_in=10,
                    tokens_out=len(text.split()),
                    latency_s=0.01,
                )


@pytest.fixture
def store(tmp_path: Path) -> ResponseStore:
    return ResponseStore(tmp_path / "store")


def test_second_run_makes_no_backend_calls(store: ResponseStore, tmp_path: Path) -> None:
    reqs = make_requests(23)
    backend = CountingBackend()
    led1 = Ledger(tmp_path / "l1.json")
    first = run_requests(reqs, backend, store, batch_size=5, ledger=led1, progress=False)
    assert len(backend.calls) == 23
    assert backend.batch_sizes == [5, 5, 5, 5, 3]
    # One segment per completed batch.
    assert len(list(store.seg_dir.glob("seg-*.parquet"))) == 5

    fresh_store = ResponseStore(store.root)
    backend2 = CountingBackend()
    led2 = Ledger(tmp_path / "l2.json")
    second = run_requests(reqs, backend2, fresh_store, batch_size=5, ledger=led2, progress=False)
    assert backend2.calls == []
    assert [r.text for r in second] == [r.text for r in first]
    assert [r.key for r in second] == [q.key for q in reqs]
    assert Ledger.load(tmp_path / "l2.json").calls == 0
    assert Ledger.load(tmp_path / "l2.json").cache_hits == 23
    d1 = json.loads((tmp_path / "l1.json").read_text())
    assert d1["calls"] == 23 and d1["tokens_in"] == 230 and d1["backend"] == "counting"
    assert d1["engine_version"] == "counting-1.0"


def test_results_in_request_order_and_duplicates_share_one_call(store: ResponseStore) -> None:
    reqs = make_requests(6)
    mixed = [reqs[3], reqs[0], reqs[3], reqs[5], reqs[0]]
    backend = CountingBackend()
    out = run_requests(mixed, backend, store, batch_size=2, progress=False)
    assert [r.key for r in out] == [r.key for r in mixed]
    assert sorted(backend.calls) == sorted({reqs[0].key, reqs[3].key, reqs[5].key})
    assert out[0].text == "answer to: q question 3"
    assert out[0].backend == "counting" and out[0].timestamp


def test_results_record_metadata_and_store_round_trips_them(store: ResponseStore) -> None:
    req = make_requests(1)[0]
    out = run_requests([req], CountingBackend(), store, progress=False)[0]
    assert out.ok and out.attempt == 0 and out.engine_version == "counting-1.0"
    row = ResponseStore(store.root).get_row(req.key)
    stored = json.loads(row["request_json"])
    assert stored["meta"] == {"item": 0}
    assert stored["request"] == req.canonical()


def test_failures_are_returned_but_not_cached(store: ResponseStore, tmp_path: Path) -> None:
    reqs = make_requests(10)
    bad = {reqs[2].key, reqs[7].key}
    backend = CountingBackend(fail=lambda r: r.key in bad)
    led = Ledger(tmp_path / "l.json")
    out = run_requests(reqs, backend, store, batch_size=4, ledger=led, progress=False)
    assert [r.ok for r in out] == [k.key not in bad for k in reqs]
    assert out[2].error == "ServerError: 503 overloaded"
    assert invalid_reason(out[2]) is None  # a backend error is not a validation miss
    assert len(store) == 8 and all(k not in store for k in bad)
    assert led.failures == 2 and led.failure_reasons == {"ServerError": 2}

    # Next run: only the two failures go back to the backend.
    backend2 = CountingBackend()
    out2 = run_requests(reqs, backend2, ResponseStore(store.root), batch_size=4, progress=False)
    assert sorted(backend2.calls) == sorted(bad)
    assert all(r.ok for r in out2)


def test_backend_dropping_a_result_is_a_recorded_failure(store: ResponseStore) -> None:
    reqs = make_requests(3)

    class Dropping(CountingBackend):
        def run(self, requests):
            for res in super().run(requests):
                if res.key != reqs[1].key:
                    yield res

    out = run_requests(reqs, Dropping(), store, progress=False)
    assert out[0].ok and out[2].ok
    assert not out[1].ok and "no result" in out[1].error
    assert reqs[1].key not in store


def test_backend_crash_mid_batch_keeps_what_was_answered(store: ResponseStore) -> None:
    reqs = make_requests(6)

    class Crashing(CountingBackend):
        def run(self, requests):
            for i, res in enumerate(super().run(requests)):
                if i == 2:
                    raise RuntimeError("engine died")
                yield res

    with pytest.raises(RuntimeError, match="engine died"):
        run_requests(reqs, Crashing(), store, batch_size=6, progress=False)
    # The two replies received before the crash were paid for: they are stored.
    assert len(ResponseStore(store.root)) == 2


def _judge_reply_for(bad_forever: set[int], bad_once: set[int]) -> Callable[[LLMRequest], str]:
    def reply(r: LLMRequest) -> str:
        i = int(r.messages[-1][1].split()[2])
        if i in bad_forever:
            return "I would rate this a four out of five."
        if i in bad_once and r.attempt == 0:
            return '{"rating": 4.5}'
        return f'{{"rating": {i % 5 + 1}}}'

    return reply


def test_reask_uses_new_keys_and_final_miss_carries_reason(store: ResponseStore, tmp_path: Path) -> None:
    reqs = make_requests(6, prefix="judge", schema=RATING_SCHEMA)
    backend = CountingBackend(reply=_judge_reply_for(bad_forever={4}, bad_once={1, 2}))
    led = Ledger(tmp_path / "l.json")
    out = run_requests(
        reqs, backend, store, batch_size=3, ledger=led, progress=False, reply_policy=RATING, max_attempts=3
    )

    # Item 1: re-asked once with attempt=1, a different key; the final result says which attempt.
    assert out[1].ok and parse_rating(out[1].text) == (2, None) and out[1].attempt == 1
    assert out[1].key != reqs[1].key
    assert out[0].ok and out[0].attempt == 0 and out[0].key == reqs[0].key
    # Item 4: three attempts, three distinct keys, then a miss with its reason and no score.
    assert not out[4].ok and out[4].attempt == 2
    assert out[4].error == INVALID_PREFIX + "no_json_object"
    assert invalid_reason(out[4]) == "no_json_object"
    keys_item4 = [k for k in backend.calls if k in {dataclass_key(reqs[4], a) for a in range(3)}]
    assert len(set(keys_item4)) == 3
    assert len(backend.calls) == 6 + 2 + 2  # first asks + re-asks of items 1, 2, 4 + second re-ask of 4
    assert len(set(backend.calls)) == len(backend.calls)
    assert led.reasks == 4 and led.invalid == 1 and led.invalid_reasons == {"no_json_object": 1}
    # The paid-for invalid replies are stored (not re-bought on rerun) ...
    assert reqs[4].key in store and dataclass_key(reqs[4], 2) in store

    # ... so a rerun reaches the same outcome with zero calls.
    backend2 = CountingBackend(reply=lambda r: pytest.fail("backend must not be called"))
    out2 = run_requests(
        reqs, backend2, ResponseStore(store.root), batch_size=3, progress=False, reply_policy=RATING, max_attempts=3
    )
    assert [(r.key, r.text, r.error, r.attempt) for r in out2] == [(r.key, r.text, r.error, r.attempt) for r in out]


def dataclass_key(req: LLMRequest, attempt: int) -> str:
    import dataclasses

    return dataclasses.replace(req, attempt=attempt).key


def test_reask_with_reminder_changes_prompt_and_key(store: ResponseStore) -> None:
    reqs = make_requests(2, prefix="judge")

    def reply(r: LLMRequest) -> str:
        # A greedy judge: only the reminder changes what it says.
        return '{"rating": 3}' if "exactly one JSON object" in r.messages[-1][1] else "Rating: 3"

    backend = CountingBackend(reply=reply)
    out = run_requests(
        reqs, backend, store, reply_policy=rating_policy(), max_attempts=2, progress=False
    )
    assert all(r.ok for r in out) and all(r.attempt == 1 for r in out)
    assert len(backend.calls) == 4
    row = store.get_row(out[0].key)
    meta = json.loads(row["request_json"])["meta"]
    assert meta["reask_reason"] == "no_json_object" and meta["reask_of"] == reqs[0].key


def test_max_attempts_one_means_no_reask(store: ResponseStore) -> None:
    backend = CountingBackend(reply=lambda r: '{"rating": 9}')
    out = run_requests(make_requests(2), backend, store, reply_policy=RATING, max_attempts=1, progress=False)
    assert len(backend.calls) == 2
    assert [invalid_reason(r) for r in out] == ["rating_out_of_range"] * 2


def test_progress_bar_goes_to_stderr(store: ResponseStore, capsys: pytest.CaptureFixture[str]) -> None:
    run_requests(make_requests(4), CountingBackend(), store, batch_size=2, progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "4/4" in captured.err and "tok/s" in captured.err


class FakeClock:
    """Stands in for the runner's ``time`` module, so a rate is exact arithmetic
    rather than a race against a loaded CI machine."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


class OneCallBackend(CountingBackend):
    """Answers a whole batch in one engine-like call, as vLLM does: it loads on first
    use, reports each request finishing through ``on_progress``, and hands out the
    results only when the call ends."""

    def __init__(self, clock: FakeClock, **kwargs) -> None:
        super().__init__(**kwargs)
        self.load_seconds: float | None = None
        self.seen: list[str] = []
        self.clock = clock

    def _spend(self, seconds: float) -> None:
        self.clock.now += seconds

    def run(self, requests):
        if self.load_seconds is None:
            self._spend(0.5)
            self.load_seconds = 0.5
        for _ in requests:
            self._spend(0.02)
            if self.on_progress is not None:
                self.on_progress(1, 10)
        self.seen.append("results")
        results = list(super().run(requests))
        for res in results:
            res.tokens_out = 10
        yield from results


def test_progress_moves_per_finished_request_inside_one_call(
    store: ResponseStore, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from context_effects.llm import runner

    monkeypatch.setattr(runner, "PROGRESS_LOG_INTERVAL_S", 0.0)
    clock = FakeClock()
    monkeypatch.setattr(runner, "time", clock)
    backend = OneCallBackend(clock=clock, fail=lambda r: r.messages[-1][1].endswith("3"))
    caplog.set_level("INFO", logger="context_effects.llm.runner")
    run_requests(make_requests(4), backend, store, batch_size=8, progress=True)
    lines = [r.getMessage() for r in caplog.records if "requests answered" in r.getMessage()]
    # 1/4, 2/4, 3/4 while the one call runs, before any result came back.
    assert [line.split(" ")[1] for line in lines[:4]] == ["1/4", "2/4", "3/4", "4/4"], lines
    assert "ETA" in lines[0] and "ETA" not in lines[-1]
    final = lines[-1]
    assert "4/4" in final and "1 failed so far" in final, final
    # tok/s over the time spent answering: the 0.5 s load is not in it. 40 tokens in
    # 4 x 0.02 s is 500 tok/s; counting the load would give 40 / 0.58 = 69 tok/s.
    rate = float(final.split(", ")[1].split(" ")[0])
    assert rate == pytest.approx(500.0, abs=0.1), final
    assert backend.on_progress is None  # the runner's hook does not outlive the batch


# --------------------------------------------------------------------------- kill -9 resume

KILL_AT_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    sys.path[:0] = [{src!r}, {tests!r}]
    from pathlib import Path
    from test_llm_runner import StreamingBackend, make_requests
    from context_effects.llm import shards
    from context_effects.llm.ledger import AttemptLog
    from context_effects.llm.runner import AnswerJournal
    from context_effects.llm.store.responses import ResponseStore

    work, point = Path(sys.argv[1]), sys.argv[2]
    seen = {{}}

    def die_after(owner, name, when):
        # Run the real method, then SIGKILL (no finally blocks, no flushes) the n-th time `when` holds.
        real = getattr(owner, name)
        def wrapped(*args, **kwargs):
            out = real(*args, **kwargs)
            if when(*args, **kwargs):
                os.kill(os.getpid(), signal.SIGKILL)
            return out
        setattr(owner, name, wrapped)

    def nth(key, n):
        def when(*args, **kwargs):
            seen[key] = seen.get(key, 0) + 1
            return seen[key] == n
        return when

    # The second group write (answers 5-8), step by step: journal mark, attempts-log
    # line, segment, journal emptied; or between two writes; or inside the next
    # attempt's credit for the killed one.
    kill = {{
        "mark": (AnswerJournal, "mark", lambda self, attempt, calls: calls == 8),
        "log": (AttemptLog, "append", lambda self, ledger, **kw: ledger.calls == 8),
        "segment": (ResponseStore, "put_batch", nth("put", 2)),
        "emptied": (AnswerJournal, "clear", nth("clear", 2)),
        "answer": (AnswerJournal, "append", nth("answer", 10)),
        "credit-mark": (AnswerJournal, "mark", lambda self, attempt, calls: attempt != "" and calls > 8),
        "credit-log": (AttemptLog, "append", lambda self, ledger, **kw: kw.get("at") is not None),
    }}
    if point != "none":
        die_after(*kill[point])

    class Logged(StreamingBackend):
        def stream(self, requests, *, heartbeat_s=None):
            for res in super().stream(requests, heartbeat_s=heartbeat_s):
                if res is not None:
                    with open(work / "calls.log", "a") as fh:
                        fh.write(res.key + "\\n")
                yield res

    shards.answer_shard(
        work / "requests.parquet", work / "responses.parquet", work / "ledger.json", Logged(),
        ResponseStore(work / "store"), progress=False, attempts_log=work / ".attempts" / "shard.jsonl",
        flush_every=4, flush_interval_s=600.0, handle_signals=False,
    )
    """)

N_KILL_AT = 12


def _run_kill_at(script: Path, work: Path, point: str) -> int:
    done = subprocess.run([sys.executable, str(script), str(work), point], capture_output=True, text=True, timeout=120)
    assert done.returncode in (0, -signal.SIGKILL), done.stderr
    return done.returncode


@pytest.mark.parametrize("point", ["mark", "log", "segment", "emptied", "answer"])
def test_a_kill_at_any_step_of_a_group_write_is_counted_once(tmp_path: Path, point: str) -> None:
    """The killed attempt is charged exactly the answers it received, whichever step of
    storing them the kill interrupted, and the rerun asks only for the others."""
    from context_effects.llm.shards import write_request_shard

    script = tmp_path / "job.py"
    script.write_text(KILL_AT_SCRIPT.format(src=str(SRC), tests=str(Path(__file__).parent)))
    write_request_shard(tmp_path / "requests.parquet", make_requests(N_KILL_AT))
    assert _run_kill_at(script, tmp_path, point) == -signal.SIGKILL
    received = len((tmp_path / "calls.log").read_text().splitlines())
    assert _run_kill_at(script, tmp_path, "none") == 0
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert len(calls) == len(set(calls)) == N_KILL_AT, "no request is asked twice"
    ledger = Ledger.load(tmp_path / "ledger.json")
    assert [a["calls"] for a in ledger.attempts] == [received, N_KILL_AT - received], ledger.attempts
    assert ledger.calls == N_KILL_AT
    assert len(ResponseStore(tmp_path / "store")) == N_KILL_AT


@pytest.mark.parametrize("point", ["credit-mark", "credit-log"])
def test_a_kill_while_crediting_a_killed_attempt_does_not_credit_it_twice(tmp_path: Path, point: str) -> None:
    from context_effects.llm.shards import write_request_shard

    script = tmp_path / "job.py"
    script.write_text(KILL_AT_SCRIPT.format(src=str(SRC), tests=str(Path(__file__).parent)))
    write_request_shard(tmp_path / "requests.parquet", make_requests(N_KILL_AT))
    assert _run_kill_at(script, tmp_path, "answer") == -signal.SIGKILL  # 8 stored, 2 journaled after the mark
    assert _run_kill_at(script, tmp_path, point) == -signal.SIGKILL  # dies before asking anything
    assert len((tmp_path / "calls.log").read_text().splitlines()) == 10
    assert _run_kill_at(script, tmp_path, "none") == 0
    ledger = Ledger.load(tmp_path / "ledger.json")
    # The attempt killed while crediting never logged a line of its own: it paid nothing.
    assert [a["calls"] for a in ledger.attempts] == [10, 2], ledger.attempts
    assert ledger.calls == N_KILL_AT
    assert "last checkpoint" in ledger.attempts[0]["outcome"]


KILL_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    sys.path[:0] = [{src!r}, {tests!r}]
    from pathlib import Path
    from test_llm_runner import CountingBackend, make_requests
    from context_effects.llm.ledger import Ledger
    from context_effects.llm.runner import run_requests
    from context_effects.llm.store.responses import ResponseStore

    root, ledger_path, log_path, kill_after = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

    class KillingBackend(CountingBackend):
        def run(self, requests):
            if self.batches == kill_after:
                # Die hard at the start of the next batch: no finally blocks, no flushes.
                os.kill(os.getpid(), signal.SIGKILL)
            yield from super().run(requests)

    reqs = make_requests(32)
    reqs = reqs + reqs[:8]  # duplicates must not be paid twice either
    backend = KillingBackend(log_path=Path(log_path))
    out = run_requests(reqs, backend, ResponseStore(root), batch_size=5,
                       ledger=Ledger(Path(ledger_path), job="shard-0"), progress=False)
    assert all(r.ok for r in out)
    """)


def test_kill_minus_9_resumes_without_paying_twice(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text(KILL_SCRIPT.format(src=str(SRC), tests=str(Path(__file__).parent)))
    root, log = tmp_path / "store", tmp_path / "calls.log"
    run1 = subprocess.run(
        [sys.executable, str(script), str(root), str(tmp_path / "l1.json"), str(log), "3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run1.returncode == -signal.SIGKILL, run1.stderr
    led1 = Ledger.load(tmp_path / "l1.json")
    assert led1.calls == 15 and led1.batches == 3
    assert len(ResponseStore(root)) == 15

    run2 = subprocess.run(
        [sys.executable, str(script), str(root), str(tmp_path / "l2.json"), str(log), "-1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run2.returncode == 0, run2.stderr
    led2 = Ledger.load(tmp_path / "l2.json")
    assert led2.cache_hits == 15 and led2.calls == 17

    total = Ledger.merge([tmp_path / "l1.json", tmp_path / "l2.json"])
    unique = len({r.key for r in make_requests(32)})
    assert total.calls == unique == 32  # every unique request paid exactly once across both runs
    assert total.runs == 2
    called = log.read_text().split()
    assert len(called) == 32 and len(set(called)) == 32
    assert len(ResponseStore(root)) == 32


def test_ledger_open_continues_an_interrupted_job(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    store = ResponseStore(tmp_path / "s")
    reqs = make_requests(6)
    run_requests(reqs[:4], CountingBackend(), store, ledger=Ledger.open(path, job="j"), progress=False)
    run_requests(reqs, CountingBackend(), store, ledger=Ledger.open(path, job="j"), progress=False)
    led = Ledger.load(path)
    assert (led.runs, led.requests, led.calls, led.cache_hits) == (2, 10, 6, 4)
    assert led.wall_s > 0


def test_ledger_merge_sums_everything(tmp_path: Path) -> None:
    a = Ledger(
        tmp_path / "a.json",
        backend="vllm",
        calls=3,
        tokens_in=30,
        tokens_out=7,
        cost_usd=0.5,
        failure_reasons={"Timeout": 1},
        invalid_reasons={"no_json_object": 2},
        wall_s=1.5,
    )
    b = Ledger(
        tmp_path / "b.json",
        backend="openai",
        calls=2,
        tokens_in=20,
        tokens_out=3,
        cost_usd=0.25,
        cost_unknown_calls=1,
        failure_reasons={"Timeout": 2, "RateLimit": 1},
        wall_s=2.0,
    )
    a.save()
    b.save()
    m = Ledger.merge([tmp_path / "a.json", tmp_path / "b.json", Ledger(calls=1)])
    assert (m.calls, m.tokens_in, m.tokens_out, m.cost_unknown_calls) == (6, 50, 10, 1)
    assert m.cost_usd == pytest.approx(0.75) and m.wall_s == pytest.approx(3.5)
    assert m.failure_reasons == {"Timeout": 3, "RateLimit": 1}
    assert m.invalid_reasons == {"no_json_object": 2}
    assert m.backend == "openai,vllm"


# --------------------------------------------------------------------------- pricing


def test_estimate_cost_and_unknown_model() -> None:
    table = {"gpt-4o": {"input_per_mtok": 2.5, "output_per_mtok": 10.0}}
    assert estimate_cost("gpt-4o", 1_000_000, 100_000, table) == pytest.approx(3.5)
    assert estimate_cost("gpt-4o", 0, 0, table) == 0.0
    assert estimate_cost("other", 10, 10, table) is None
    assert estimate_cost("gpt-4o", None, 10, table) is None
    assert estimate_cost("gpt-4o", 10, 10, None) is None
    with pytest.raises(ValueError):
        estimate_cost("x", 1, 1, {"x": {"input_per_mtok": 1.0}})


def test_price_table_from_models_config_and_runner_fills_cost(store: ResponseStore, tmp_path: Path) -> None:
    models = {
        "gpt-4o": {"backend": "openai", "model_id": "gpt-4o", "price": {"input_per_mtok": 2.5, "output_per_mtok": 10}},
        "fake": {"backend": "vllm", "model_id": "fake/model-1", "price": {"input_per_mtok": 1e6, "output_per_mtok": 0}},
        "free": {"backend": "vllm", "model_id": "q"},
    }
    table = price_table_from_models(models)
    assert set(table) == {"gpt-4o", "fake/model-1"}
    led = Ledger(tmp_path / "l.json")
    out = run_requests(make_requests(3), CountingBackend(), store, ledger=led, price_table=table, progress=False)
    assert [r.cost_usd for r in out] == [10.0, 10.0, 10.0]  # 10 input tokens at $1/token
    assert led.cost_usd == pytest.approx(30.0) and led.cost_unknown_calls == 0
    led2 = Ledger()
    run_requests(make_requests(2, prefix="x"), CountingBackend(), store, ledger=led2, progress=False)
    assert led2.cost_usd == 0 and led2.cost_unknown_calls == 2  # unpriced, not "free"


# --------------------------------------------------------------------------- export / import / replay


def test_export_import_replay_with_zero_calls(tmp_path: Path) -> None:
    reqs = make_requests(12, prefix="judge", schema=RATING_SCHEMA)
    src = ResponseStore(tmp_path / "run")
    backend = CountingBackend(reply=_judge_reply_for(bad_forever=set(), bad_once={3}))
    original = run_requests(reqs, backend, src, batch_size=5, reply_policy=RATING, progress=False)
    assert len(src) == 13

    export = tmp_path / "release" / "responses.parquet"
    assert transfer.export(src, export) == 13

    reviewer = ResponseStore(tmp_path / "reviewer")
    assert len(reviewer) == 0
    assert transfer.import_file(reviewer, export) == 13

    led = Ledger(tmp_path / "replay.json")
    replayed = run_requests(
        reqs, ReplayBackend(reviewer), reviewer, batch_size=5, ledger=led, reply_policy=RATING, progress=False
    )
    assert led.calls == 0 and led.cache_hits == 13
    assert [(r.key, r.text, r.attempt, r.backend) for r in replayed] == [
        (r.key, r.text, r.attempt, r.backend) for r in original
    ]
    assert replayed[0].backend == "counting"  # provenance of the answer survives the round trip

    extra = make_requests(1, prefix="never asked")[0]
    with pytest.raises(ReplayMiss) as exc:
        run_requests(reqs + [extra], ReplayBackend(reviewer), reviewer, progress=False)
    msg = str(exc.value)
    assert extra.key in msg and "fake:fake/model-1" in msg and "never asked question 0" in msg
    assert exc.value.request == extra


def test_replay_backend_direct(tmp_path: Path) -> None:
    store = ResponseStore(tmp_path / "s")
    reqs = make_requests(3)
    run_requests(reqs, CountingBackend(), store, progress=False)
    replay = ReplayBackend(store)
    assert replay.name == "replay"
    got = {r.key: r.text for r in replay.run(reqs)}
    assert got == {r.key: f"answer to: {r.messages[-1][1]}" for r in reqs}
    long = LLMRequest(model=MODEL, messages=(("user", "x" * 200),), sampling=Sampling(max_tokens=16))
    with pytest.raises(ReplayMiss) as exc:
        list(replay.run([reqs[0], long]))
    assert "'" + "x" * 80 + "'" in str(exc.value) and "x" * 81 not in str(exc.value)


def test_runner_rejects_bad_arguments(store: ResponseStore) -> None:
    with pytest.raises(ValueError):
        run_requests([], CountingBackend(), store, batch_size=0, progress=False)
    with pytest.raises(ValueError):
        run_requests([], CountingBackend(), store, max_attempts=0, progress=False)
    assert run_requests([], CountingBackend(), store, progress=False) == []


# --------------------------------------------------------------------------- answers persisted as they arrive


class StreamingBackend(Backend):
    """In-test backend that delivers answers one by one, as the hosted APIs do.

    ``before_each(i)`` runs before the i-th result is handed out (inspect the store,
    set a stop event); ``heartbeats`` Nones follow each result, ``pause_s`` apart.
    """

    name = "streaming"
    incremental = True

    def __init__(self, *, before_each=None, heartbeats: int = 0, pause_s: float = 0.0) -> None:
        super().__init__()
        self.before_each = before_each or (lambda i: None)
        self.heartbeats = heartbeats
        self.pause_s = pause_s
        self.sent: list[str] = []
        self.stopped = False

    def request_stop(self) -> None:
        self.stopped = True

    def run(self, requests):
        return (r for r in self.stream(requests) if r is not None)

    def stream(self, requests, *, heartbeat_s=None):
        import time as _time

        for i, r in enumerate(requests):
            if self.stopped:
                return  # never sent: no result, as the hosted backends do after request_stop()
            self.sent.append(r.key)
            self.before_each(i)
            yield LLMResult(key=r.key, text=f"answer {i}", finish_reason="stop", tokens_in=3, tokens_out=2)
            for _ in range(self.heartbeats):
                _time.sleep(self.pause_s)
                yield None


def test_streamed_answers_are_stored_in_groups_while_the_batch_runs(store: ResponseStore) -> None:
    seen: list[int] = []
    backend = StreamingBackend(before_each=lambda i: seen.append(len(ResponseStore(store.root))))
    out = run_requests(
        make_requests(10), backend, store, batch_size=64, progress=False, flush_every=4, flush_interval_s=60
    )
    assert all(r.ok for r in out)
    # Every 4 answers a segment, the rest at the end of the batch.
    assert seen == [0, 0, 0, 0, 4, 4, 4, 4, 8, 8]
    assert len(list(store.seg_dir.glob("seg-*.parquet"))) == 3


def test_a_lone_answer_is_stored_after_the_interval_without_another_arriving(store: ResponseStore) -> None:
    seen: list[int] = []
    # One answer, then 0.6 s of nothing but heartbeats: the time trigger must write it.
    backend = StreamingBackend(
        before_each=lambda i: seen.append(len(ResponseStore(store.root))), heartbeats=12, pause_s=0.05
    )
    run_requests(make_requests(2), backend, store, progress=False, flush_every=100, flush_interval_s=0.2)
    assert seen == [0, 1]


def test_a_backend_answering_a_batch_at_once_writes_one_segment_per_batch(store: ResponseStore) -> None:
    # CountingBackend is not incremental (like vLLM): grouping would only split a batch into pieces.
    run_requests(make_requests(12), CountingBackend(), store, batch_size=12, progress=False, flush_every=2)
    assert len(list(store.seg_dir.glob("seg-*.parquet"))) == 1


def test_stop_keeps_what_was_sent_and_sends_nothing_more(store: ResponseStore, tmp_path: Path) -> None:
    stop = threading.Event()

    def before_each(i: int) -> None:
        if i == 5:  # what the answering job's signal handler does
            stop.set()
            backend.request_stop()

    backend = StreamingBackend(before_each=before_each)
    led = Ledger(tmp_path / "l.json")
    with pytest.raises(StopRequested):
        run_requests(make_requests(20), backend, store, ledger=led, progress=False, stop=stop)
    assert len(backend.sent) == 6
    assert len(ResponseStore(store.root)) == 6  # the answer already sent when stop came is kept
    saved = Ledger.load(tmp_path / "l.json")
    assert saved.calls == 6 and saved.failures == 0  # the 14 never sent are neither calls nor failures


# --------------------------------------------------------------------------- refusals and empty replies


class NoAnswerBackend(CountingBackend):
    """Refuses items in ``refuse`` always; replies empty to ``empty`` always and to ``empty_once`` on the first ask."""

    def __init__(self, refuse=(), empty=(), empty_once=(), **kw) -> None:
        super().__init__(**kw)
        self.refuse, self.empty, self.empty_once = set(refuse), set(empty), set(empty_once)

    def run(self, requests):
        for res in super().run(requests):
            r = next(q for q in requests if q.key == res.key)
            i = int(r.messages[-1][1].split()[2])
            if i in self.refuse:
                res.text, res.finish_reason = "", "refusal"
            elif i in self.empty or (i in self.empty_once and r.attempt == 0):
                res.text = "  "
            yield res


def test_refusals_and_empty_replies_are_stored_reasked_and_missing_with_their_reason(
    store: ResponseStore, tmp_path: Path
) -> None:
    reqs = make_requests(5, prefix="judge")
    backend = NoAnswerBackend(refuse={0}, empty={1}, empty_once={2}, reply=lambda r: '{"rating": 3}')
    led = Ledger(tmp_path / "l.json")
    out = run_requests(reqs, backend, store, ledger=led, progress=False, reply_policy=RATING, max_attempts=3)
    assert [invalid_reason(r) for r in out] == ["refusal", "empty", None, None, None]
    assert [r.attempt for r in out] == [2, 2, 1, 0, 0]
    assert out[2].ok and out[3].ok
    assert len(backend.calls) == 3 + 3 + 2 + 1 + 1
    # Paid for, so stored - every attempt of them - and a rerun asks nothing.
    assert len(ResponseStore(store.root)) == len(backend.calls)
    assert ResponseStore(store.root).get(reqs[0].key).finish_reason == "refusal"
    assert led.invalid_reasons == {"refusal": 1, "empty": 1} and led.failures == 0 and led.reasks == 5
    again = run_requests(
        reqs, CountingBackend(reply=lambda r: pytest.fail("no call on rerun")), ResponseStore(store.root),
        progress=False, reply_policy=RATING, max_attempts=3,
    )
    assert [(r.key, r.error) for r in again] == [(r.key, r.error) for r in out]


def test_without_a_policy_a_refusal_is_still_a_miss(store: ResponseStore) -> None:
    out = run_requests(make_requests(2), NoAnswerBackend(refuse={0}), store, progress=False, max_attempts=1)
    assert invalid_reason(out[0]) == "refusal" and out[1].ok


def test_an_empty_text_with_first_token_probabilities_is_an_answer() -> None:
    from context_effects.llm.replies import no_answer_reason

    res = LLMResult(key="k", text="", finish_reason="stop", probe_probs={"Yes": 0.7, "No": 0.3})
    assert no_answer_reason(res) is None
    assert no_answer_reason(dataclasses.replace(res, probe_probs=None)) == "empty"
    assert no_answer_reason(dataclasses.replace(res, finish_reason="content_filter")) == "refusal"
    # Nothing written before the budget ran out is its own reason; a reply cut short is not.
    assert no_answer_reason(dataclasses.replace(res, probe_probs=None, finish_reason="length")) == "budget_exhausted"
    assert no_answer_reason(dataclasses.replace(res, probe_probs=None, text='{"rat', finish_reason="length")) is None
    assert no_answer_reason(dataclasses.replace(res, probe_probs=None, text="\n\n", finish_reason="length")) == "empty"


def test_stored_replies_out_of_budget_stop_a_model_but_not_a_replay(store: ResponseStore) -> None:
    reqs = make_requests(4)
    store.put_batch([LLMResult(key=r.key, text="", finish_reason="length", tokens_out=16) for r in reqs], reqs)
    backend = CountingBackend()
    with pytest.raises(OutputBudgetExhausted):
        run_requests(reqs, backend, ResponseStore(store.root), progress=False, reply_policy=RATING, max_attempts=3)
    assert backend.calls == [], "the stored replies already say it"
    # A replay reproduces the run as it was: those requests are missing, nothing stops.
    out = run_requests(reqs, ReplayBackend(ResponseStore(store.root)), ResponseStore(store.root), progress=False,
                       reply_policy=RATING, max_attempts=3)
    assert [invalid_reason(r) for r in out] == ["budget_exhausted"] * 4


def test_an_engine_out_of_budget_stops_before_its_next_batch(store: ResponseStore, tmp_path: Path) -> None:
    """An engine that answers a batch at once (vLLM) cannot stop inside it: the runner
    stops before the next one, and asks nothing again."""

    class OutOfBudget(CountingBackend):
        def run(self, requests):
            for res in super().run(requests):
                res.text, res.finish_reason = "", "length"
                yield res

    backend = OutOfBudget()
    led = Ledger(tmp_path / "l.json")
    with pytest.raises(OutputBudgetExhausted, match=r"models\.<name>\.capabilities\.min_output_tokens above 16"):
        run_requests(make_requests(12), backend, store, batch_size=4, ledger=led, progress=False,
                     reply_policy=RATING, max_attempts=3)
    assert len(backend.calls) == 4 and backend.batches == 1
    saved = Ledger.load(tmp_path / "l.json")
    assert saved.calls == 4 and saved.reasks == 0 and saved.invalid_reasons == {"budget_exhausted": 4}


# --------------------------------------------------------------------------- attempts log


def test_attempts_log_survives_and_folds_into_the_ledger(tmp_path: Path) -> None:
    log = AttemptLog(tmp_path / ".attempts" / "shard.jsonl")
    first = Ledger(job="j", backend="openai", calls=7, tokens_in=70, cost_usd=0.5, runs=1)
    log.append(first, attempt="a1", outcome="running")
    first.calls = 9
    log.append(first, attempt="a1", outcome="running")
    with open(log.path, "a") as fh:
        fh.write('{"attempt": "a2", "calls": 1')  # a line cut short by kill -9
    previous = log.previous()
    assert [p["attempt"] for p in previous] == ["a1"] and previous[0]["calls"] == 9

    current = Ledger(job="j", backend="openai", calls=3, cache_hits=9, runs=1)
    final = current.folded(previous, attempt="a3", outcome="completed")
    assert (final.calls, final.cache_hits, final.tokens_in, final.runs) == (12, 9, 70, 2)
    assert final.cost_usd == pytest.approx(0.5)
    assert [(a["attempt"], a["calls"]) for a in final.attempts] == [("a1", 9), ("a3", 3)]
    assert "no end recorded" in final.attempts[0]["outcome"]
    assert final.attempts[1]["outcome"] == "completed"
    log.clear()
    assert not log.path.exists() and log.previous() == []
