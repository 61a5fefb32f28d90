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

import errno
import fcntl
import json
import os
import socket
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from context_effects.utc import utc_now_iso


def append_line(path: Path, text: str, *, fsync: bool = False) -> None:
    """Append ``text`` and a newline to ``path`` with one ``write`` (a kill leaves the line
    whole or cut short, and readers skip a line cut short); an error names ``path``, and a
    short write (a disk filling up) is one."""
    line = (text + "\n").encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            written = os.write(fd, line)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise named(exc, path) from None
    if written != len(line):
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} (a line was written only in part)", str(path))


def named(exc: OSError, path: str | os.PathLike[str]) -> OSError:
    """``exc`` naming ``path`` when the call that raised it had none to give (``os.write``
    on a full disk), so a message says where space ran out."""
    if exc.filename is None:
        exc.filename = str(path)
    return exc

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
    "cost_bounded_calls",
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
    "cost_bounded_calls",
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
    #: Answers whose reply reported no token usage, counted in ``cost_usd`` at the
    #: estimate's upper bound for their request (``pricing.call_cost_bound``).
    cost_bounded_calls: int = 0
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
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(self.to_dict(), fh, indent=2, sort_keys=True)
                fh.write("\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            tmp.unlink(missing_ok=True)  # a half-written temporary only takes space
            raise named(exc, target) from None

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
        self,
        ledger: Ledger,
        *,
        attempt: str,
        outcome: str = RUNNING,
        started: str = "",
        at: str | None = None,
        detail: str = "",
    ) -> None:
        """``at``: when the counts were taken (now, unless a later attempt corrects an
        earlier one's record). ``detail``: why an attempt stopped on purpose, as its
        message said it (no request or reply text), for the run's closing summary."""
        record = {k: v for k, v in ledger.to_dict().items() if k != "attempts"}
        record.update(attempt=attempt, started=started, at=at or utc_now_iso(), outcome=outcome)
        if detail:
            record["detail"] = detail
        append_line(self.path, json.dumps(record, sort_keys=True), fsync=True)

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
    logs at each checkpoint), and, unlike the ledgers, Snakemake never deletes them.

    Jobs running at once share the budget through reservations (:meth:`reserve`): before
    it sends a batch, a job takes the run's budget lock, counts what every other attempt
    has paid or holds reserved, and reserves for the calls it is about to send their upper
    bound (``pricing.call_cost_bound``: the estimate's prompt tokens, ``max_tokens`` of
    output), as many calls as fit in what is left. So jobs never send together more than
    the budget holds: the run passes it only by what calls cost above their bound (none,
    while the bound holds) — the slack docs/costs.md states. A call whose reply reports no
    token usage is counted at that bound. A reservation is settled to what was actually
    paid after each batch and dropped when the attempt ends; one left by a killed job
    counts until its process is gone (checked on the same host) or, elsewhere, until the
    attempt's shard is answered again.

    ``prices`` (``model_id -> price``) and ``factor`` (a Batch API's discount) price the
    bounds; a model without a price reserves nothing (the run's start refuses a budget
    whose estimate has an unpriced hosted model, ``context_effects.costs``). A budget of 0
    allows no paid call and stops nothing that costs nothing.
    """

    #: Beside the attempts logs: the lock every reservation is made under, and the
    #: reservations of the attempts running now.
    LOCK = "budget.lock"
    RESERVATIONS = "budget-reservations.json"

    def __init__(
        self,
        limit_usd: float,
        attempts_root: str | os.PathLike[str],
        *,
        prices: Mapping[str, Mapping[str, float]] | None = None,
        factor: float = 1.0,
        exclude_attempt: str | None = None,
        shard: str | None = None,
        refresh_s: float = 5.0,
    ) -> None:
        if limit_usd < 0:
            raise ValueError(f"budget must be >= 0 USD, got {limit_usd}")
        self.limit_usd = float(limit_usd)
        self.root = Path(attempts_root)
        self.prices = {k: dict(v) for k, v in (prices or {}).items()}
        self.factor = float(factor)
        self.exclude_attempt = exclude_attempt
        self.shard = shard
        self.refresh_s = refresh_s
        self._elsewhere: float | None = None
        self._read_at = 0.0

    def for_attempt(self, attempt: str, shard: str | None = None) -> "RunBudget":
        """The same budget, seen from one answering attempt (its live ledger counts) at
        ``shard`` (its attempts log)."""
        return RunBudget(self.limit_usd, self.root, prices=self.prices, factor=self.factor,
                         exclude_attempt=attempt, shard=shard, refresh_s=self.refresh_s)

    def bound(self, request: Any) -> float | None:
        """The most one call of ``request`` costs (``pricing.call_cost_bound``), or ``None``
        for a model without a price."""
        from context_effects.llm.pricing import call_cost_bound

        price = self.prices.get(request.model.model_id)
        return None if price is None else call_cost_bound(request, price, self.factor)

    def spent_elsewhere(self, fresh: bool = False) -> float:
        """USD every other attempt in the run has paid or holds reserved."""
        now = time.monotonic()
        if fresh or self._elsewhere is None or now - self._read_at >= self.refresh_s:
            self._elsewhere = self._committed_elsewhere(self._reservations())
            self._read_at = now
        return self._elsewhere

    def spent(self, live: Ledger | None = None, fresh: bool = False) -> float:
        return self.spent_elsewhere(fresh) + (live.cost_usd if live is not None else 0.0)

    def paid_and_held(self, live: Ledger | None = None) -> tuple[float, float]:
        """``spent`` in its two parts, from one read of the logs and reservations: USD the
        run's attempts have paid (their attempts logs, this attempt's ``live`` ledger), and
        what other attempts hold reserved beyond that for their calls in flight."""
        paid, committed = self._paid_and_committed_elsewhere(self._reservations())
        own = live.cost_usd if live is not None else 0.0
        return paid + own, committed - paid

    def reached(self, live: Ledger | None = None) -> bool:
        # Nothing paid reaches nothing: a budget of 0 stops paid calls, not free ones.
        spent = self.spent(live)
        return spent > 0 and spent >= self.limit_usd

    # ------------------------------------------------------------ reservations

    def reserve(self, live: Ledger, requests: Sequence[Any]) -> tuple[int, bool]:
        """``(n, wait)``: this attempt may send the first ``n`` of ``requests`` now. Under the
        run's budget lock, as many as fit at their bound in what neither this attempt
        (``live``) nor any other has paid or reserved; those are reserved for it. With
        ``n == 0``, ``wait`` says whether other attempts' reservations (not their payments)
        hold what the next call needs: they are settled after each of their batches, so
        the caller waits and asks again; otherwise the budget is spent."""
        with self._locked():
            held = self._reservations()
            committed = self._committed_elsewhere(held)
            left = self.limit_usd - committed - live.cost_usd
            n, total = 0, 0.0
            for req in requests:
                cost = self.bound(req) or 0.0
                if total + cost > left + 1e-12:
                    break
                total += cost
                n += 1
            if self.exclude_attempt is not None:
                if self.shard is not None:
                    # One process answers a shard at a time (its lock): an earlier attempt
                    # at it, killed on another host, holds nothing any more.
                    held = {a: e for a, e in held.items() if a == self.exclude_attempt or e.get("shard") != self.shard}
                held[self.exclude_attempt] = {"reserved_usd": live.cost_usd + total, "shard": self.shard,
                                              "host": socket.gethostname(), "pid": os.getpid()}
                self._write_reservations(held)
            wait = False
            if n == 0 and requests:
                paid_only = self.limit_usd - self._committed_elsewhere({}) - live.cost_usd
                wait = paid_only >= (self.bound(requests[0]) or 0.0)
        self._elsewhere = None
        return n, wait

    def settle(self, live: Ledger) -> None:
        """This attempt's reservation is what it has paid: the unused rest is freed."""
        self._update(live.cost_usd)

    def release(self) -> None:
        """The attempt has ended (its attempts log holds what it paid): no reservation."""
        self._update(None)

    def _update(self, reserved: float | None) -> None:
        if self.exclude_attempt is None or not self.root.is_dir():
            return
        with self._locked():
            held = self._reservations()
            if reserved is None:
                if held.pop(self.exclude_attempt, None) is None:
                    return
            elif self.exclude_attempt in held:
                held[self.exclude_attempt]["reserved_usd"] = reserved
            else:
                return
            self._write_reservations(held)

    def _committed_elsewhere(self, held: Mapping[str, Mapping[str, Any]]) -> float:
        return self._paid_and_committed_elsewhere(held)[1]

    def _paid_and_committed_elsewhere(self, held: Mapping[str, Mapping[str, Any]]) -> tuple[float, float]:
        """What every other attempt has paid, and has paid or holds reserved (``held``)."""
        paid = paid_by_attempt(self.root)
        paid_total = committed = 0.0
        for attempt in set(paid) | set(held):
            if attempt == self.exclude_attempt:
                continue
            entry = held.get(attempt)
            reserved = float(entry.get("reserved_usd") or 0.0) if entry and _holder_alive(entry) else 0.0
            paid_total += paid.get(attempt, 0.0)
            committed += max(paid.get(attempt, 0.0), reserved)
        return paid_total, committed

    def _reservations(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads((self.root / self.RESERVATIONS).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return {}
        return {str(k): dict(v) for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}

    def _write_reservations(self, held: Mapping[str, Any]) -> None:
        path = self.root / self.RESERVATIONS
        tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
        try:
            tmp.write_text(json.dumps(held, sort_keys=True, indent=1) + "\n", encoding="utf-8")
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise named(exc, path) from None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / self.LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock


def _holder_alive(entry: Mapping[str, Any]) -> bool:
    """A reservation counts while its process may still send: always, unless it was made
    on this host by a process that is gone."""
    if entry.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(entry.get("pid") or 0), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, OverflowError):
        return True
    return True


def paid_by_attempt(root: str | os.PathLike[str]) -> dict[str, float]:
    """USD paid by each attempt recorded in the attempts logs under ``root`` (the last
    record of each attempt)."""
    paid: dict[str, float] = {}
    base = Path(root)
    if not base.is_dir():
        return paid
    for path in sorted(base.rglob("*.jsonl")):
        if path.name.endswith(".answers.jsonl"):
            continue  # an answer journal beside its log, not an attempts log
        for rec in AttemptLog(path).previous():
            paid[str(rec["attempt"])] = float(rec.get("cost_usd") or 0.0)
    return paid


def paid_in_logs(root: str | os.PathLike[str], *, exclude_attempt: str | None = None) -> float:
    """USD paid by every attempt recorded in the attempts logs under ``root`` (the last
    record of each attempt; ``exclude_attempt`` left out)."""
    return sum(usd for attempt, usd in paid_by_attempt(root).items() if attempt != exclude_attempt)
