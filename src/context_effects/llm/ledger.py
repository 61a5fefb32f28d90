"""Per-job accounting: what a job asked for, what it paid for, what failed.

The runner checkpoints the ledger whenever it writes answers to the store
(atomically), and ``Ledger.merge`` over all job ledgers gives the run's totals for
the report. Only counts and short reason labels are recorded, never request or
reply text, so nothing secret or bulky can end up here.

A job's ledger is a declared output of its rule, which Snakemake deletes when the
job fails (also when it is killed after it finished) and before a forced rerun, so
what every attempt paid for is kept in an :class:`AttemptLog` instead, outside the
declared outputs and never emptied; the attempt that finishes folds all the earlier
ones into its ledger (:meth:`Ledger.folded`), which then counts every call paid for
the shard and lists each attempt in ``attempts``.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from context_effects.utc import utc_now_iso

LEDGER_VERSION = 1

_COUNTERS = (
    "requests",
    "calls",
    "cache_hits",
    "failures",
    "invalid",
    "reasks",
    "tokens_in",
    "tokens_out",
    "cost_unknown_calls",
    "batches",
    "runs",
)
#: What each entry of ``Ledger.attempts`` says an attempt paid and got.
_ATTEMPT_COUNTERS = (
    "calls",
    "cache_hits",
    "failures",
    "invalid",
    "reasks",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "cost_unknown_calls",
    "wall_s",
)
#: The outcome an attempt records at its checkpoints while it runs; an attempt
#: whose last record still says so was killed (SIGKILL, node failure, out of memory).
RUNNING = "running"


@dataclass
class Ledger:
    path: Path | None = None
    job: str = ""
    backend: str = ""
    engine_version: str = ""
    #: Unique requests handed to the runner (re-asks not included).
    requests: int = 0
    #: Requests actually sent to the backend (paid for), re-asks included.
    calls: int = 0
    cache_hits: int = 0
    #: Backend errors (not cached; a rerun tries again).
    failures: int = 0
    #: Items whose reply still failed validation after the last attempt.
    invalid: int = 0
    reasks: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    #: Sum over calls with a known price; see ``cost_unknown_calls``.
    cost_usd: float = 0.0
    #: Calls with no price: when > 0, ``cost_usd`` is a lower bound.
    cost_unknown_calls: int = 0
    wall_s: float = 0.0
    batches: int = 0
    #: How many runner invocations this ledger covers (reruns of one job add up).
    runs: int = 0
    failure_reasons: dict[str, int] = field(default_factory=dict)
    invalid_reasons: dict[str, int] = field(default_factory=dict)
    #: One entry per answering attempt of this job, oldest first (see ``folded``):
    #: ``attempt``, ``started``, ``ended``, ``outcome`` and what it paid.
    attempts: list[dict[str, Any]] = field(default_factory=list)

    # ------------------------------------------------------------------ io

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("path")
        d["version"] = LEDGER_VERSION
        d["cost_usd"] = round(d["cost_usd"], 8)
        d["wall_s"] = round(d["wall_s"], 3)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: Path | None = None) -> "Ledger":
        names = {f.name for f in fields(cls)} - {"path"}
        return cls(path=path, **{k: v for k, v in d.items() if k in names})

    def save(self, path: str | os.PathLike[str] | None = None) -> None:
        target = Path(path) if path is not None else self.path
        if target is None:
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".tmp-{os.getpid()}-{target.name}")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Ledger":
        p = Path(path)
        return cls.from_dict(json.loads(p.read_text(encoding="utf-8")), path=p)

    @classmethod
    def open(cls, path: str | os.PathLike[str], **defaults: Any) -> "Ledger":
        """Continue the ledger at ``path`` if a previous (interrupted) run left one."""
        p = Path(path)
        if p.exists():
            led = cls.load(p)
            for k, v in defaults.items():
                if not getattr(led, k):
                    setattr(led, k, v)
            return led
        return cls(path=p, **defaults)

    # ------------------------------------------------------------------ counting

    def count_reason(self, kind: str, reason: str) -> None:
        bucket = self.failure_reasons if kind == "failure" else self.invalid_reasons
        bucket[reason] = bucket.get(reason, 0) + 1

    def folded(
        self, previous: Sequence[Mapping[str, Any]], *, attempt: str, outcome: str, started: str = ""
    ) -> "Ledger":
        """This attempt's ledger with the earlier attempts of the same job added in.

        ``previous`` are the last records of the earlier attempts
        (:meth:`AttemptLog.previous`). Every counter is summed, so ``calls`` and
        ``cost_usd`` are what the job paid across attempts; ``attempts`` lists each
        one, a killed attempt as far as its last checkpoint knew.
        """
        earlier = [Ledger.from_dict(rec) for rec in previous]
        total = Ledger.merge([*earlier, self])
        total.path, total.job = self.path, self.job
        entries = []
        for rec in previous:
            ended = rec.get("outcome") or RUNNING
            if ended == RUNNING:
                ended = f"killed: no end recorded (last checkpoint {rec.get('at', '?')})"
            entries.append(_attempt_entry(rec, ended))
        entries.append(
            _attempt_entry({**self.to_dict(), "attempt": attempt, "started": started, "at": utc_now_iso()}, outcome)
        )
        total.attempts = entries
        # One runner invocation per attempt, also for one killed before it began.
        total.runs = len(entries)
        return total

    @classmethod
    def merge(cls, paths: Iterable[str | os.PathLike[str] | "Ledger"]) -> "Ledger":
        """Sum ledgers (paths or objects) into one for the report."""
        total = cls()
        backends: set[str] = set()
        engines: set[str] = set()
        fail: Counter[str] = Counter()
        inval: Counter[str] = Counter()
        for item in paths:
            led = item if isinstance(item, Ledger) else cls.load(item)
            for name in _COUNTERS:
                setattr(total, name, getattr(total, name) + getattr(led, name))
            total.cost_usd += led.cost_usd
            total.wall_s += led.wall_s
            fail.update(led.failure_reasons)
            inval.update(led.invalid_reasons)
            if led.backend:
                backends.update(led.backend.split(","))
            if led.engine_version:
                engines.update(led.engine_version.split("; "))
        total.backend = ",".join(sorted(backends))
        total.engine_version = "; ".join(sorted(engines))
        total.job = "merged"
        total.failure_reasons = dict(fail)
        total.invalid_reasons = dict(inval)
        return total


def _attempt_entry(rec: Mapping[str, Any], outcome: str) -> dict[str, Any]:
    entry = {"attempt": rec.get("attempt", ""), "started": rec.get("started", ""), "ended": rec.get("at", "")}
    entry["outcome"] = outcome
    entry.update({k: rec.get(k, 0) for k in _ATTEMPT_COUNTERS})
    return entry


class AttemptLog:
    """Append-only record of a job's answering attempts, kept outside its declared outputs.

    Every checkpoint of an attempt appends one line: a snapshot of that attempt's
    ledger, its id and how it stands (``running``, or how it ended), written with
    one ``write`` and fsynced. The attempt that finishes the job folds the last line
    of every earlier attempt into its ledger (:meth:`Ledger.folded`), records itself
    as ``completed`` and compacts the log to one line per attempt. The log is not
    removed: a ledger can be lost after it was written (Snakemake deletes the outputs
    of a job killed at its very end, and before a forced rerun), and the next ledger
    must still count what was paid. A line cut short by ``kill -9`` is skipped.
    Counts only, like the ledger: no request or reply text.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def append(
        self, ledger: Ledger, *, attempt: str, outcome: str = RUNNING, started: str = "", at: str | None = None
    ) -> None:
        """``at``: when the counts were taken (now, unless a later attempt corrects an
        earlier one's record)."""
        record = {k: v for k, v in ledger.to_dict().items() if k != "attempts"}
        record.update(attempt=attempt, started=started, at=at or utc_now_iso(), outcome=outcome)
        line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def previous(self) -> list[dict[str, Any]]:
        """The last record of each attempt in the log, oldest attempt first."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        last: dict[str, dict[str, Any]] = {}
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("attempt"):
                last[rec["attempt"]] = rec  # dicts keep first-insertion order: attempts stay in order
        return list(last.values())

    def compact(self) -> None:
        """Keep only each attempt's last record (all :meth:`previous` reads), replacing
        the file atomically: killed half-way, the log is the old one or the new one."""
        records = self.previous()
        if not records:
            return
        data = "".join(json.dumps(rec, sort_keys=True) + "\n" for rec in records).encode("utf-8")
        tmp = self.path.with_name(f".tmp-{os.getpid()}-{self.path.name}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


class RunBudget:
    """``run.budget_usd``: what the answering jobs of a run may pay together (USD).

    What was paid is read from the attempts logs of every shard under ``attempts_root``
    (``results/ledgers/.attempts``), the last record of each attempt: they hold every
    attempt's spending, finished, failed, killed or still running (a running attempt
    logs at each checkpoint), and, unlike the ledgers, Snakemake never deletes them. The
    attempt asking (``exclude_attempt``) counts with its live ledger instead of its last
    checkpoint. Other jobs' spending is read again at most every ``refresh_s`` seconds, so
    parallel jobs each see the others' spending up to their last checkpoint and
    ``refresh_s`` late: the run can pass the budget by what is in flight meanwhile (at
    most each job's concurrency in calls), never by a new batch.

    Calls of a model without a known price add nothing: the run's start refuses a budget
    whose estimate has an unpriced hosted model (``context_effects.costs``), and the shipped price
    table (``llm/costs.yaml``) prices the paper config's hosted models.
    """

    def __init__(
        self,
        limit_usd: float,
        attempts_root: str | os.PathLike[str],
        *,
        exclude_attempt: str | None = None,
        refresh_s: float = 5.0,
    ) -> None:
        if limit_usd < 0:
            raise ValueError(f"budget must be >= 0 USD, got {limit_usd}")
        self.limit_usd = float(limit_usd)
        self.root = Path(attempts_root)
        self.exclude_attempt = exclude_attempt
        self.refresh_s = refresh_s
        self._elsewhere: float | None = None
        self._read_at = 0.0

    def for_attempt(self, attempt: str) -> "RunBudget":
        """The same budget, seen from one answering attempt (its live ledger counts)."""
        return RunBudget(self.limit_usd, self.root, exclude_attempt=attempt, refresh_s=self.refresh_s)

    def spent_elsewhere(self) -> float:
        """USD every other attempt in the run has paid, as its attempts log says."""
        now = time.monotonic()
        if self._elsewhere is None or now - self._read_at >= self.refresh_s:
            self._elsewhere = paid_in_logs(self.root, exclude_attempt=self.exclude_attempt)
            self._read_at = now
        return self._elsewhere

    def spent(self, live: Ledger | None = None) -> float:
        return self.spent_elsewhere() + (live.cost_usd if live is not None else 0.0)

    def reached(self, live: Ledger | None = None) -> bool:
        return self.spent(live) >= self.limit_usd


def paid_in_logs(root: str | os.PathLike[str], *, exclude_attempt: str | None = None) -> float:
    """USD paid by every attempt recorded in the attempts logs under ``root`` (the last
    record of each attempt; ``exclude_attempt`` left out)."""
    total = 0.0
    base = Path(root)
    if not base.is_dir():
        return 0.0
    for path in sorted(base.rglob("*.jsonl")):
        if path.name.endswith(".answers.jsonl"):
            continue  # an answer journal beside its log, not an attempts log
        for rec in AttemptLog(path).previous():
            if rec.get("attempt") != exclude_attempt:
                total += float(rec.get("cost_usd") or 0.0)
    return total
