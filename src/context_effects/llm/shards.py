"""Request shards: the unit of work of one Snakemake job (one model load).

Study rules write their requests to a shard file; the generic `answer_requests_*`
rules answer a shard through the runner and write one response row per request,
in order. The shard file also names its reply policy (``llm.replies``) and how
many asks a reply gets, so the rule stays the same for every study and stage.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import shutil

import pyarrow as pa
import pyarrow.parquet as pq

from context_effects.llm.ledger import RUNNING, AttemptLog, Ledger, RunBudget
from context_effects.llm.replies import resolve_policy
from context_effects.llm.runner import (
    FLUSH_EVERY,
    FLUSH_INTERVAL_S,
    AnswerJournal,
    BudgetReached,
    OutputBudgetExhausted,
    StopRequested,
    WriteFailed,
    invalid_reason,
    run_requests,
    write_failed_message,
)
from context_effects.llm.store.responses import ResponseStore
from context_effects.llm.store.rows import request_from_json, request_json, result_to_row
from context_effects.llm.types import LLMRequest
from context_effects.utc import utc_now_iso

META_KEY = b"context_effects.shard"

log = logging.getLogger(__name__)


class ShardIncomplete(RuntimeError):
    """Some requests of a shard failed; rerunning the job retries only those."""


#: How long an answering job that got SIGTERM/SIGINT waits for the calls it had
#: already sent. Slurm follows SIGTERM with SIGKILL after KillWait (30 s unless
#: the cluster sets it otherwise); 20 s leaves time to write what came back.
STOP_GRACE_S = 20.0


class JobInterrupted(BaseException):
    """The answering job got SIGTERM or SIGINT and stopped.

    Every answer received is in the store and the attempt is in the job's
    attempts log. A ``BaseException``, like ``KeyboardInterrupt``, so that no
    ``except Exception`` on the way out swallows it; the job script exits with
    128 + ``signum``, the status of a process killed by that signal.
    """

    def __init__(self, signum: int, message: str) -> None:
        super().__init__(f"{signal.Signals(signum).name}: {message}")
        self.signum = int(signum)


class _StopOnSignal:
    """SIGTERM/SIGINT handling of one answering job; only in the main thread.

    The first signal stops sending (``stop`` and ``backend.request_stop()``) and
    lets the calls in flight come back - they are paid for whether or not the job
    waits - for up to ``grace_s``; the runner stores them and stops. A second
    signal, or the grace running out (SIGALRM), raises :class:`JobInterrupted` at
    once; the runner's ``finally`` still writes what was received. The handlers
    only set flags or raise: the store and the ledger are written by the runner,
    never from inside a handler.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, stop: threading.Event, backend: Any, grace_s: float, enabled: bool = True) -> None:
        self.stop = stop
        self.backend = backend
        self.grace_s = float(grace_s)
        self.enabled = enabled
        self.signum: int | None = None
        self.previous: dict[int, Any] = {}

    def __enter__(self) -> "_StopOnSignal":
        # Python delivers signals to the main thread only; a library caller on
        # another thread keeps its own handling.
        if self.enabled and threading.current_thread() is threading.main_thread():
            for sig in (*self.SIGNALS, signal.SIGALRM):
                old = signal.getsignal(sig)
                self.previous[sig] = signal.SIG_DFL if old is None else old
            for sig in self.SIGNALS:
                signal.signal(sig, self._on_signal)
            signal.signal(signal.SIGALRM, self._on_alarm)
        return self

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise JobInterrupted(signum, "second signal: stopped without waiting for the calls in flight")
        self.signum = signum
        if self.grace_s <= 0:
            raise JobInterrupted(signum, "no grace period: stopped without waiting for the calls in flight")
        self.stop.set()
        self.backend.request_stop()
        signal.setitimer(signal.ITIMER_REAL, self.grace_s)

    def _on_alarm(self, signum: int, frame: Any) -> None:
        raise JobInterrupted(
            self.signum or signal.SIGTERM, f"the calls in flight did not come back within {self.grace_s:g}s"
        )

    def __exit__(self, *exc: object) -> None:
        if self.previous:
            signal.setitimer(signal.ITIMER_REAL, 0)
            for sig, handler in self.previous.items():
                signal.signal(sig, handler)

    @property
    def name(self) -> str:
        return signal.Signals(self.signum or signal.SIGTERM).name


class ShardBusy(RuntimeError):
    """Another live process is answering the same shard (see :class:`ShardLock`)."""


#: How often a job waiting for a shard's lock says again who holds it.
LOCK_REPORT_EVERY_S = 60.0


class ShardLock:
    """One answering attempt at a time per shard, across processes and hosts.

    Two processes answering one shard (two ``snakemake`` runs in one project, a job
    resubmitted while the first still runs) would pay for its requests twice, and
    the second would take the first's journal for a killed attempt's and move it
    into the store under its own account. The attempt holds an exclusive ``flock``
    on a file beside its attempts log, with its holder (host, pid, since when)
    written into it. The kernel drops the lock when its holder dies, however it
    dies, so a lock that is held is held by a live process: a second process waits
    for it (saying whom it waits for), and only once it holds the lock does it
    credit a killed attempt and recover its journal. Over NFS ``flock`` is a POSIX
    lock kept by the server, released when the holder's client lease lapses.
    """

    def __init__(
        self,
        path: str | Path,
        shard: str | Path,
        *,
        wait_s: float | None = None,
        poll_s: float = 0.2,
        report_every_s: float = LOCK_REPORT_EVERY_S,
    ) -> None:
        self.path = Path(path)
        self.shard = str(shard)
        self.wait_s = wait_s
        self.poll_s = poll_s
        self.report_every_s = report_every_s
        self._fd: int | None = None

    def acquire(self, holder: Mapping[str, Any]) -> None:
        """Take the lock, waiting while a live process holds it; write ``holder`` (with
        ``since``, when it was taken) into it.

        Raises :class:`ShardBusy` naming the holder when ``wait_s`` passes first.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        t0 = time.monotonic()
        reported = None
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    pass
                except OSError as exc:
                    if exc.errno not in _NO_LOCKS:
                        raise
                    # Some cluster filesystems (Lustre mounted without -o flock) have no
                    # locks at all: answering unlocked is what every job did before.
                    log.warning(
                        "shard %s: %s has no file locks (%s); two processes on this shard would not be kept apart",
                        self.shard, self.path.parent, exc.strerror,
                    )
                    os.close(fd)
                    return
                waited = time.monotonic() - t0
                if self.wait_s is not None and waited >= self.wait_s:
                    raise ShardBusy(
                        f"shard {self.shard} is being answered by {self.describe_holder()}, still after "
                        f"{waited:.0f}s; not answering it a second time. Let that process finish (or stop it) "
                        f"and rerun; its lock is {self.path}"
                    )
                if reported is None or time.monotonic() - reported >= self.report_every_s:
                    reported = time.monotonic()
                    log.warning(
                        "shard %s is being answered by %s; waiting for it to finish (waited %.0fs; lock %s)",
                        self.shard, self.describe_holder(), waited, self.path,
                    )
                time.sleep(self.poll_s)
            data = (json.dumps({**holder, "since": utc_now_iso()}, sort_keys=True) + "\n").encode("utf-8")
            os.ftruncate(fd, 0)
            os.pwrite(fd, data, 0)
        except BaseException:
            os.close(fd)  # releases the lock if it was taken
            raise
        if reported is not None:
            log.warning("shard %s: the other process is done; answering it now", self.shard)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)  # an idle lock names nobody
            # Unlocked explicitly: an engine process forked while it was held shares the
            # descriptor, and closing ours alone would leave the lock held until it exits.
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None

    def holder(self) -> dict[str, Any] | None:
        """What the lock file says about its holder (``None`` if it says nothing readable)."""
        try:
            rec = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) else None

    def describe_holder(self) -> str:
        rec = self.holder()
        if rec is None:
            # Taken a moment ago, not yet written: the holder is alive all the same.
            return "another process (it has not yet written its name into the lock)"
        text = f"pid {rec.get('pid')} on host {rec.get('host')} (since {rec.get('since')})"
        if rec.get("host") == socket.gethostname() and not _pid_alive(rec.get("pid")):
            # flock is shared with children forked while it was held; one of them
            # outliving the process that named itself keeps the lock.
            text += "; that process is gone, so a child of it still holds the lock"
        return text


#: What ``flock`` fails with on a filesystem that has no locks.
_NO_LOCKS = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK})


def _pid_alive(pid: Any) -> bool:
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def default_attempts_log(ledger_path: str | Path) -> Path:
    """``.attempts/<ledger name>.jsonl`` beside the ledger (the rules pass one under results/ledgers/.attempts/)."""
    path = Path(ledger_path)
    return path.parent / ".attempts" / f"{path.stem}.jsonl"


def write_request_shard(
    path: str | Path,
    requests: Sequence[LLMRequest],
    *,
    reply_policy: str = "none",
    policy_params: Mapping[str, Any] | None = None,
    max_attempts: int = 1,
) -> None:
    """Write requests (with their meta) and how their replies are validated.

    ``reply_policy`` names an entry of ``llm.replies.POLICIES``, built with
    ``policy_params``; ``max_attempts`` counts the first ask. Both are checked
    here, so a wrong name fails the study rule, not the answering job.
    """
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1:
        raise ValueError(f"max_attempts must be an integer >= 1, got {max_attempts!r}")
    params = dict(policy_params or {})
    resolve_policy(reply_policy, params)
    policy = {"reply_policy": reply_policy, "policy_params": params, "max_attempts": max_attempts}
    table = pa.table({"request_json": [request_json(r) for r in requests]})
    table = table.replace_schema_metadata({META_KEY: json.dumps(policy).encode()})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def read_request_shard(path: str | Path) -> tuple[list[LLMRequest], dict[str, Any]]:
    """The requests of a shard and its policy (``reply_policy``, ``policy_params``, ``max_attempts``)."""
    table = pq.read_table(path)
    meta = table.schema.metadata or {}
    policy = json.loads(meta.get(META_KEY, b"{}"))
    if "validator" in policy:
        raise ValueError(f"{path}: request shard from before reply policies; write it again")
    policy.setdefault("reply_policy", "none")
    policy.setdefault("policy_params", {})
    policy.setdefault("max_attempts", 1)
    return [request_from_json(b) for b in table.column("request_json").to_pylist()], policy


class ShardMismatch(ValueError):
    """A response shard does not answer its request shard one to one (or lacks a column)."""


#: How many keys an error message lists of each kind (missing, extra, duplicated).
_SHOWN_KEYS = 5


def _key_list(keys: Sequence[str]) -> str:
    shown = ", ".join(keys[:_SHOWN_KEYS])
    return shown + (f", ... ({len(keys) - _SHOWN_KEYS} more)" if len(keys) > _SHOWN_KEYS else "")


def check_response_coverage(
    responses_path: str | Path, requests_path: str | Path, responses: Sequence[LLMRequest]
) -> None:
    """Fail unless ``responses`` (the requests a response shard answered) cover the
    requests of ``requests_path`` one to one, compared by ``LLMRequest.key``.

    A response shard carries its own copy of each request, so a truncated or
    hand-edited file would otherwise be read as complete and its lost requests
    would simply vanish from every table built from it. Keys are compared as
    multisets: a request shard may hold the same question twice (e.g. two
    corpora producing byte-identical answers for one judge), and each copy needs
    its own response row.
    """
    wanted: dict[str, int] = {}
    for req in read_request_shard(requests_path)[0]:
        wanted[req.key] = wanted.get(req.key, 0) + 1
    got: dict[str, int] = {}
    for req in responses:
        got[req.key] = got.get(req.key, 0) + 1
    missing = [k for k, n in wanted.items() if got.get(k, 0) < n]
    extra = [k for k in got if k not in wanted]
    duplicated = [k for k, n in got.items() if k in wanted and n > wanted[k]]
    if not (missing or extra or duplicated):
        return
    parts = []
    if missing:
        parts.append(f"{len(missing)} missing key(s): {_key_list(missing)}")
    if extra:
        parts.append(f"{len(extra)} extra key(s) not in the request shard: {_key_list(extra)}")
    if duplicated:
        parts.append(f"{len(duplicated)} duplicated key(s): {_key_list(duplicated)}")
    raise ShardMismatch(
        f"response shard {responses_path} does not answer request shard {requests_path} one to one "
        f"({len(responses)} response rows for {sum(wanted.values())} requests): {'; '.join(parts)}. "
        "Delete the response shard and rerun its answering job (answers already paid for are in the store)."
    )


def read_response_shard(
    path: str | Path,
    columns: Sequence[str] | None = None,
    *,
    requests_path: str | Path | None = None,
) -> tuple[list[LLMRequest], Any]:
    """The requests of an answered shard and its response rows (a DataFrame), read once.

    ``columns`` limits the rows to those columns (``request_json`` is always read);
    ``None`` reads all of them. A requested column the file lacks fails naming the
    file and the column(s). With ``requests_path`` (the request shard the file
    answers) the responses must cover its requests one to one by key
    (``check_response_coverage``); every study collector passes it.
    """
    cols = None if columns is None else ["request_json", *[c for c in columns if c != "request_json"]]
    have = set(pq.read_schema(path).names)
    lacking = [c for c in (cols or ["request_json"]) if c not in have]
    if lacking:
        raise ShardMismatch(f"response shard {path} lacks column(s) {lacking}; it is not a complete response shard")
    table = pq.read_table(path, columns=cols).to_pandas()
    requests = [request_from_json(b) for b in table["request_json"]]
    if requests_path is not None:
        check_response_coverage(path, requests_path, requests)
    return requests, table


#: Free space an answering job needs where it writes (the store, the ledgers, the
#: attempts log, the responses) before it sends a batch: answers of a batch, its journal
#: and its account are far smaller, so a job below it stops before paying for answers it
#: might not be able to keep.
MIN_FREE_BYTES = 64 * 2**20
#: Space an answering attempt holds beside its attempts log (a file of this size) and
#: gives up when a write there fails for lack of space, to record what it paid: the
#: next attempt must count those calls.
RESERVE_BYTES = 2**20


def check_free_space(paths: Sequence[str | Path], min_free_bytes: int) -> None:
    """Raise :class:`~context_effects.llm.runner.WriteFailed` naming the first of ``paths``
    (or its nearest existing parent) with less than ``min_free_bytes`` free."""
    for path in paths:
        where = Path(path)
        while not where.exists() and where != where.parent:
            where = where.parent
        free = shutil.disk_usage(where).free
        if free < min_free_bytes:
            raise WriteFailed(
                f"{where} has {free / 2**20:,.1f} MiB free; an answering job needs at least "
                f"{min_free_bytes / 2**20:,.1f} MiB where it writes before it sends a batch. Nothing more was "
                "sent; every answer received is in the response store. Free space there (or move results/ to a "
                "larger disk) and rerun: stored answers are not paid again.",
                where,
            )


class _Reserve:
    """``RESERVE_BYTES`` held in a file beside the attempts log while an attempt runs."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size

    def take(self) -> None:
        if self.size <= 0:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                try:
                    os.posix_fallocate(fd, 0, self.size)
                except OSError as exc:
                    if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
                        raise
                    # A filesystem without fallocate: the same blocks, written.
                    os.write(fd, bytes(self.size))
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self.give_up()
            raise WriteFailed(write_failed_message(self.path, exc, 0), self.path) from None

    def give_up(self) -> None:
        self.path.unlink(missing_ok=True)


def answer_journal_path(attempts_log: str | Path) -> Path:
    """Where an answering attempt journals each answer as it arrives (beside its
    attempts log, so also outside the job's declared outputs): see
    ``runner.AnswerJournal``."""
    path = Path(attempts_log)
    return path.with_name(f"{path.stem}.answers.jsonl")


def shard_lock_path(attempts_log: str | Path) -> Path:
    """The lock an answering attempt holds (:class:`ShardLock`), beside its attempts log."""
    path = Path(attempts_log)
    return path.with_name(f"{path.stem}.lock")


#: The steps of a shard's end, in order, as ``answer_shard`` reports them to
#: ``on_step``: every answer stored and checkpointed; the response shard written; the
#: ledger written; the attempt recorded as completed; the journal removed. A kill
#: after any of them leaves the shard's account whole (tests/faults/test_cost_ledger.py).
END_STEPS = ("answered", "responses", "ledger", "completed", "done")


def answer_shard(
    requests_path: str | Path,
    responses_path: str | Path,
    ledger_path: str | Path,
    backend,
    store: ResponseStore,
    *,
    batch_size: int = 256,
    progress: bool = True,
    attempts_log: str | Path | None = None,
    flush_every: int | None = FLUSH_EVERY,
    flush_interval_s: float | None = FLUSH_INTERVAL_S,
    stop_grace_s: float = STOP_GRACE_S,
    handle_signals: bool = True,
    model_name: str | None = None,
    lock_wait_s: float | None = None,
    on_step: Callable[[str], None] | None = None,
    budget: RunBudget | None = None,
    min_free_bytes: int = MIN_FREE_BYTES,
    reserve_bytes: int = RESERVE_BYTES,
) -> Ledger:
    """Answer one shard; answers are in the store as they arrive, and a killed job's spending is kept.

    Answers are written while the shard runs (``run_requests``: ``flush_every``,
    ``flush_interval_s``). On SIGTERM/SIGINT (handled when called in the main
    thread, unless ``handle_signals`` is False) no new call is sent, the calls in
    flight come back for up to ``stop_grace_s``, everything received is stored and
    :class:`JobInterrupted` is raised. Every attempt appends its ledger to ``attempts_log`` (default
    :func:`default_attempts_log`), which is no declared output and so survives a
    failed job, and is never emptied: the attempt that finishes writes the ledger at
    ``ledger_path`` with every earlier attempt at the shard folded in, completed ones
    included (calls paid across attempts, and each attempt listed). Snakemake deletes
    the outputs of a job killed even after it finished, and of a forced rerun, so the
    ledger of whichever attempt writes it last counts every call paid for the shard.
    Returns that ledger.

    Only one process answers a shard at a time (:class:`ShardLock`): another waits
    for it, for at most ``lock_wait_s`` (``None``: as long as it holds it), then
    raises :class:`ShardBusy`. Replies that come back empty at the output budget as
    a rule raise :class:`~context_effects.llm.runner.OutputBudgetExhausted`, whose
    message names ``model_name`` (the model's name under ``models:``) and the setting
    to raise. ``on_step(name)`` is called after each step of the shard's end
    (:data:`END_STEPS`). ``budget`` (``run.budget_usd``) stops sending once the whole
    run has paid it, raising :class:`~context_effects.llm.runner.BudgetReached`.

    Before each batch, each place the job writes must have ``min_free_bytes`` free; a
    write that fails on the way (a disk filling up) stops the sending, stores the answers
    of the calls in flight first, then gives up the ``reserve_bytes`` the attempt holds
    beside its attempts log to record what it paid, and raises
    :class:`~context_effects.llm.runner.WriteFailed` naming the path.
    """
    requests, policy = read_request_shard(requests_path)
    reply_policy = resolve_policy(policy["reply_policy"], policy["policy_params"])
    log = AttemptLog(attempts_log if attempts_log is not None else default_attempts_log(ledger_path))
    journal = AnswerJournal(answer_journal_path(log.path))
    lock = ShardLock(shard_lock_path(log.path), requests_path, wait_s=lock_wait_s)
    written = [store.root, log.path.parent, Path(ledger_path).parent, Path(responses_path).parent]
    check_free_space(written, min_free_bytes)
    lock.acquire({"host": socket.gethostname(), "pid": os.getpid(), "shard": str(requests_path)})
    reserve = _Reserve(log.path.with_name(f"{log.path.stem}.reserve"), reserve_bytes)
    try:
        reserve.take()
        return _answer_locked(
            requests, policy, reply_policy, requests_path, responses_path, ledger_path, backend, store, log, journal,
            batch_size=batch_size, progress=progress, flush_every=flush_every,
            flush_interval_s=flush_interval_s, stop_grace_s=stop_grace_s, handle_signals=handle_signals,
            model_name=model_name, on_step=on_step or (lambda step: None), budget=budget,
            check_space=lambda: check_free_space(written, min_free_bytes), reserve=reserve,
        )
    finally:
        reserve.give_up()
        lock.release()


def _answer_locked(
    requests: list[LLMRequest],
    policy: Mapping[str, Any],
    reply_policy: Any,
    requests_path: str | Path,
    responses_path: str | Path,
    ledger_path: str | Path,
    backend: Any,
    store: ResponseStore,
    log: AttemptLog,
    journal: AnswerJournal,
    *,
    batch_size: int,
    progress: bool,
    flush_every: int | None,
    flush_interval_s: float | None,
    stop_grace_s: float,
    handle_signals: bool,
    model_name: str | None,
    on_step: Callable[[str], None],
    budget: RunBudget | None = None,
    check_space: Callable[[], None] | None = None,
    reserve: _Reserve | None = None,
) -> Ledger:
    """``answer_shard`` once this process holds the shard's lock."""
    # Only the lock holder may take a journal for a killed attempt's.
    previous = _credit_journaled_calls(log, journal, store)
    started = utc_now_iso()
    attempt = f"{started}-{socket.gethostname()}-{os.getpid()}"
    ledger = Ledger(job=str(requests_path), backend=backend.name)

    def record(outcome: str, detail: str = "") -> None:
        journal.mark(attempt, ledger.calls)  # before the log line: see _credit_journaled_calls
        log.append(ledger, attempt=attempt, outcome=outcome, started=started, detail=detail)

    # Recorded before the first call, so an attempt killed before its first
    # checkpoint still counts as an attempt.
    record(RUNNING)
    stop = threading.Event()
    run_budget = budget.for_attempt(attempt, shard=str(log.path)) if budget is not None else None
    with _StopOnSignal(stop, backend, stop_grace_s, handle_signals) as signals:
        try:
            results = run_requests(
                requests,
                backend,
                store,
                batch_size=batch_size,
                ledger=ledger,
                progress=progress,
                reply_policy=reply_policy,
                max_attempts=policy["max_attempts"],
                flush_every=flush_every,
                flush_interval_s=flush_interval_s,
                stop=stop,
                on_checkpoint=lambda _: record(RUNNING),
                journal=journal.path,
                model_name=model_name,
                # This attempt counts with its live ledger, not its last checkpoint in the log.
                budget=run_budget,
                check_space=check_space,
            )
        except StopRequested as exc:
            record(f"interrupted by {signals.name} after the calls in flight came back: {exc}")
            raise JobInterrupted(signals.signum or signal.SIGTERM, str(exc)) from None
        except JobInterrupted as exc:
            record(f"interrupted by {exc}")
            raise
        except OutputBudgetExhausted as exc:
            record("stopped: replies empty at the output budget", str(exc))
            raise
        except BudgetReached as exc:
            record("stopped: the run's budget (run.budget_usd) reached", str(exc))
            raise
        except WriteFailed as exc:
            _record_after_write_failure(exc, record, journal, reserve, ledger)
            raise
        except BaseException as exc:
            record(f"failed: {type(exc).__name__}")
            raise
        finally:
            if run_budget is not None:
                run_budget.release()
    on_step("answered")
    final = ledger.folded(previous, attempt=attempt, outcome="completed", started=started)
    # A failed call (not an invalid reply) must not become a finished output:
    # fail the job so Snakemake reruns it; answers already paid for are in the
    # store, so the rerun sends only the failures.
    failed = [(req, res) for req, res in zip(requests, results) if res.error and invalid_reason(res) is None]
    if failed:
        outcome = f"incomplete: {len(failed)} calls failed"
        record(outcome)
        final.attempts[-1]["outcome"] = outcome
        final.save(ledger_path)
        raise ShardIncomplete(
            f"{len(failed)} of {len(requests)} requests in {requests_path} failed "
            f"(first: {failed[0][1].error}); completed answers are stored - rerun to retry only the failures"
        )
    rows = []
    for req, res in zip(requests, results):
        row = result_to_row(res, req)
        row["ok"] = res.ok
        row["error"] = res.error
        row["invalid_reason"] = invalid_reason(res)
        rows.append(row)
    Path(responses_path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), responses_path)
    on_step("responses")
    final.save(ledger_path)
    on_step("ledger")
    # Kept, not cleared: Snakemake deletes this ledger if the job is killed from here
    # on or forced to rerun, and the next attempt's ledger must still count these calls.
    record("completed")
    log.compact()
    on_step("completed")
    journal.path.unlink(missing_ok=True)  # only marks are left in it: every answer is stored
    on_step("done")
    return final


def _record_after_write_failure(
    exc: WriteFailed, record: Callable[[str], None], journal: AnswerJournal, reserve: _Reserve | None, ledger: Ledger
) -> None:
    """Record what an attempt stopped by a failed write paid, in the space it held for it.

    With every answer in the store the journal is of no use any more, and it alone could
    make the next attempt count answers twice (after a mark it failed to write): it goes
    too, freeing its space. Should the record still fail, the log of the job says what
    was paid, and the next attempt counts at least the calls the last record has."""
    if reserve is not None:
        reserve.give_up()
    if exc.stored:
        journal.close()
        journal.path.unlink(missing_ok=True)
    try:
        record(f"stopped: cannot write {exc.path}", str(exc))
    except OSError as again:
        log.error(
            "could not record this attempt's account either (%s): it paid %d calls, $%.6f; the next attempt "
            "counts at least the calls of its last record", again, ledger.calls, ledger.cost_usd,
        )


def stopped_attempts(attempts_root: str | Path, since: str) -> list[str]:
    """One line per answering attempt under ``attempts_root`` that ended at or after
    ``since`` (UTC ISO) without completing, newest last: the shard (its attempts log,
    relative to the root) and why, as the attempt recorded it. What a run's closing
    summary prints, so that the cause of a stopped job is the line a user sees first,
    not only in its log."""
    root = Path(attempts_root)
    if not root.is_dir():
        return []
    found = []
    for path in root.rglob("*.jsonl"):
        if path.name.endswith(".answers.jsonl"):
            continue
        for rec in AttemptLog(path).previous():
            outcome = str(rec.get("outcome") or "")
            if outcome in ("", RUNNING, "completed") or str(rec.get("at") or "") < since:
                continue
            shard = path.relative_to(root).with_suffix("")
            why = str(rec.get("detail") or outcome)
            found.append((str(rec.get("at")), f"{shard}: {why}"))
    return [line for _, line in sorted(found)]


def _credit_journaled_calls(log: AttemptLog, journal: AnswerJournal, store: ResponseStore) -> list[dict[str, Any]]:
    """The earlier attempts' last records, a killed attempt's calls after its last
    checkpoint counted in; the journaled answers are moved into the store.

    Each attempt-log line is preceded by a journal mark with the same count, and the
    journal is emptied only after a segment write. So the attempt named by the last
    mark paid max(its last log line, the mark) plus the answers journaled after the
    mark, wherever in a write the kill fell (with no mark: the last attempt, if it
    was killed, plus every answer journaled). The corrected count is marked, then
    logged, and only then is the journal emptied into the store: killed anywhere in
    here, the next attempt computes the same count again, not a second credit.
    """
    previous = log.previous()
    marked, counted, after = journal.uncounted()
    if marked is not None:
        target = next((rec for rec in reversed(previous) if rec.get("attempt") == marked), None)
    else:
        target = previous[-1] if previous and previous[-1].get("outcome") == RUNNING else None
    if target is not None:
        logged = int(target.get("calls") or 0)
        calls = max(logged, counted) + after
        if calls != logged:
            target["calls"] = calls
            journal.mark(target["attempt"], calls)
            log.append(
                Ledger.from_dict(target),
                attempt=target["attempt"],
                outcome=target.get("outcome") or RUNNING,
                started=target.get("started", ""),
                at=target.get("at"),
                detail=str(target.get("detail") or ""),
            )
    journal.recover(store)
    return previous
