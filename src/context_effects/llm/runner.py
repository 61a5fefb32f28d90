"""Run requests through a backend with the response store in front of it.

The runner, not the backends, owns caching, batching, re-asking and
accounting, so never-pay-twice and resume are implemented once:

* every key is looked up in the store first; only misses reach the backend;
* misses go out in batches of ``batch_size``. Answers are written to the store
  as they arrive, each write one segment, the ledger checkpointed just before it:
  from a backend that hands them out one by one (``Backend.incremental``, the
  hosted APIs) every ``flush_every`` answers or once the oldest unwritten one is
  ``flush_interval_s`` old, whichever comes first; in any case when the batch
  ends. A rerun pays only for what is not in the store;
* with ``stop`` set (the answering job's SIGTERM/SIGINT handler, ``llm.shards``)
  the runner takes what the backend still delivers for the calls it had sent,
  stores it and raises :class:`StopRequested` instead of starting anything new;
* failures are returned and counted but never stored, so a rerun retries them;
* a reply that carries no answer (a refusal or an empty reply,
  ``llm.replies.no_answer_reason``) or fails the reply policy's validation is
  kept in the store (it was paid for) and re-asked under a new key
  (``attempt + 1``) as the policy builds it; after ``max_attempts`` the item is
  returned as a miss carrying its reason in ``error`` (prefixed
  ``INVALID_PREFIX``), never as a score;
* with ``budget`` set (``run.budget_usd``, a ``ledger.RunBudget``) nothing more is
  sent once what the whole run has paid reaches it: checked before every batch and
  as each answer arrives; the calls in flight come back and are stored (they are paid
  for), and :class:`BudgetReached` names the spending, the budget and how to go on;
* an empty reply cut off at the output budget (``replies.BUDGET_EXHAUSTED``) is
  stored and missing at once, never re-asked: the same budget buys the same empty
  reply. Once such replies are the rule (``BUDGET_STOP_AFTER``) the runner sends
  nothing more and raises :class:`OutputBudgetExhausted`, naming the model, the
  budget and the setting that raises it.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from context_effects.llm.backends.base import Backend
from context_effects.llm.ledger import Ledger, RunBudget, append_line, named
from context_effects.llm.pricing import call_cost_bound, estimate_cost
from context_effects.llm.replies import BUDGET_EXHAUSTED, ReplyPolicy, accept_any, no_answer_reason
from context_effects.llm.secrets import redact
from context_effects.llm.store.responses import ResponseStore
from context_effects.llm.store.rows import request_from_json, result_to_row, row_to_result
from context_effects.llm.types import LLMRequest, LLMResult
from context_effects.utc import utc_now_iso

log = logging.getLogger(__name__)

#: ``error`` prefix of an item whose reply never passed validation.
INVALID_PREFIX = "invalid_reply: "
NO_RESULT = "backend returned no result for this request"

#: When answers of an incremental backend (hosted APIs) are written: every
#: FLUSH_EVERY answers, or once the oldest unwritten one is FLUSH_INTERVAL_S old
#: (checked at least every FLUSH_INTERVAL_S / 4). Each write is one immutable
#: segment that every later job's store scan opens, so the two values trade what
#: a SIGKILL costs against how many segments a job leaves:
#: * a SIGKILL pays again for at most FLUSH_EVERY - 1 answers, none older than
#:   about FLUSH_INTERVAL_S, besides the calls in flight, which no client can save
#:   (SIGTERM, what Slurm sends first, costs nothing: the job drains and stores);
#: * a job writes at most one segment per FLUSH_EVERY answers or per
#:   FLUSH_INTERVAL_S: at high rates 4 per batch of 256 (answer_shard's) instead
#:   of 1, at low rates at most 720 an hour. 16 answers or 2 s would mean up to 16
#:   per batch and 1 800 an hour, for a saving of cents per SIGKILL.
FLUSH_EVERY = 64
FLUSH_INTERVAL_S = 5.0


#: How many replies may come back empty at the output budget before the runner
#: stops, provided they are at least as many as the replies that carried text: a
#: model that ran out of budget on every one of the first few prompts will on the
#: rest too, and each further call would buy nothing. A few such replies among
#: many good ones (a rare long reasoning) are only recorded missing.
BUDGET_STOP_AFTER = 3


class OutputBudgetExhausted(RuntimeError):
    """Replies came back empty at the output budget as a rule: the job stopped.

    Everything received is in the store and the ledger is checkpointed. The budget
    has to be raised (the requests change, and so their keys) before the shard is
    answered again.
    """


def budget_message(request: LLMRequest, model_name: str | None, exhausted: int, replies: int, calls: int) -> str:
    """Why the runner stopped and which setting to change, for one model."""
    ref = request.model
    budget = request.sampling.max_tokens
    name = model_name or "<name>"
    who = f"model {ref.model_id} ({ref.provider})"
    if model_name:
        who = f"model {model_name} ({ref.provider} {ref.model_id})"
    return (
        f"{who}: {exhausted} of {replies} replies came back empty, cut off at the output budget of "
        f"max_tokens={budget} (finish reason 'length') before any answer; a reasoning model spends the budget "
        f"on reasoning tokens first. Stopped after {calls} calls this attempt instead of asking the rest at the same "
        f"budget. Raise models.{name}.capabilities.min_output_tokens above {budget} (e.g. {max(4 * budget, 2048)}) "
        "and rerun; the replies paid for are stored, and counted in the next ledger of this shard."
    )


class BudgetReached(RuntimeError):
    """What the run has paid reached ``run.budget_usd``: the job sent nothing more.

    Every answer received is in the store and the ledger is checkpointed, so a rerun
    with a raised budget asks only what is not stored and pays nothing twice.
    """


def run_budget_message(budget: RunBudget, paid: float, held: float, calls: int, model_name: str | None) -> str:
    """Why the runner stopped for the run's budget, and how to go on. ``held`` is what other
    jobs hold reserved for their calls in flight (their upper bounds, settled to what those
    calls cost when they come back): said apart from ``paid``, not as paid."""
    who = f"model {model_name}: " if model_name else ""
    holding = f" (other jobs hold ${held:,.4f} more for their calls in flight)" if held >= 5e-5 else ""
    return (
        f"{who}the run has paid ${paid:,.4f} of its budget run.budget_usd = ${budget.limit_usd:,.2f}{holding} "
        f"(every answering job's attempts log under {budget.root}); stopped sending after {calls} calls "
        "this attempt. Every answer received is stored and counted. To go on, raise run.budget_usd "
        "and rerun: stored answers are not paid again. `snakemake estimate` prints what the whole "
        "run is expected to cost (docs/costs.md)."
    )


class WriteFailed(RuntimeError):
    """A file the job keeps its answers or its account in could not be written (a full
    disk, a quota), or has too little free space to send more (checked before each batch).

    Nothing more was sent; the calls in flight came back and their answers went to the
    store before anything else was tried (``stored`` says whether that write worked), so
    a rerun pays for none of them again. ``path`` is where writing failed.
    """

    def __init__(self, message: str, path: str | os.PathLike[str], stored: bool = True) -> None:
        super().__init__(message)
        self.path = Path(path)
        self.stored = stored


def write_failed_message(path: str | os.PathLike[str], error: OSError | str, calls: int) -> str:
    """Why the job stopped writing, where, and how to go on."""
    return (
        f"cannot write {path}: {error.strerror if isinstance(error, OSError) and error.strerror else error}. "
        f"Stopped sending after {calls} calls this attempt; the calls in flight came back and every answer "
        "received is in the response store. Free space there (or move results/ to a larger disk) and rerun: "
        "stored answers are not paid again, and the next attempt counts this one's calls."
    )


class StopRequested(Exception):
    """``run_requests`` stopped early because its ``stop`` event was set.

    Every answer received before it is in the store and the ledger is
    checkpointed; the requests never sent were neither paid for nor counted.
    """


class AnswerJournal:
    """Answers received but not yet in a store segment, one JSON line each.

    Segments are written in groups (one immutable file per write, so not per
    answer); between two writes an answer lives only in memory, and a SIGKILL
    would make the next run pay for it again. Each answer is therefore also
    appended here the moment it arrives — one ``write`` of one line, which the
    kernel keeps even when the process is killed — and the next attempt at the
    same shard moves the journal's answers into the store (:meth:`recover`)
    before asking anything. After every segment write the journal is emptied.
    The rows are the store's own rows (``result_to_row``), so recovery checks
    each key against its stored request as an import does.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def append(self, res: LLMResult, req: LLMRequest) -> None:
        line = (json.dumps(result_to_row(res, req), sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
        try:
            if self._fd is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            written = os.write(self._fd, line)
        except OSError as exc:
            raise named(exc, self.path) from None
        if written != len(line):
            why = f"{os.strerror(errno.ENOSPC)} (an answer was journaled only in part)"
            raise OSError(errno.ENOSPC, why, str(self.path))

    def clear(self) -> None:
        """Everything journaled is in a segment now."""
        if self._fd is not None:
            os.ftruncate(self._fd, 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def mark(self, attempt: str, calls: int) -> None:
        """Note that ``attempt``'s ledger counts ``calls`` paid calls from here on.

        Written just before each line of the attempts log, so the journal itself says
        which of its answers a checkpoint already counted (see :meth:`uncounted`).
        """
        append_line(self.path, json.dumps({"checkpoint": attempt, "calls": int(calls)}, sort_keys=True))

    def uncounted(self) -> tuple[str | None, int, int]:
        """(the attempt of the last mark or ``None``, the calls that mark counted, the
        answers journaled after it). A line cut short by a kill is not counted.

        The journal is emptied only after a segment write, and a checkpoint marks it
        before it logs, so an answer after the last mark is one no checkpoint counted,
        whichever step of a write the kill interrupted; an answer before it is counted.
        """
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return None, 0, 0
        attempt, calls, after = None, 0, 0
        for line in lines:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "checkpoint" in row:
                attempt, calls, after = str(row["checkpoint"]), int(row.get("calls") or 0), 0
            else:
                after += 1
        return attempt, calls, after

    def recover(self, store: ResponseStore) -> int:
        """Store the answers a killed attempt journaled but never wrote; return how many.

        A last line cut short by the kill is skipped; a row whose key does not match
        its request is skipped with a warning (the journal is a plain file).
        """
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return 0
        results, requests = [], []
        for line in lines:
            try:
                row = json.loads(line)
                # A checkpoint mark has no request: skipped like a line cut short.
                req = request_from_json(row["request_json"])
                res = row_to_result(row)
            except (ValueError, KeyError, TypeError):
                continue
            if req.key != res.key:
                log.warning("answer journal %s: row %s does not match its request; skipped", self.path, res.key)
                continue
            results.append(res)
            requests.append(req)
        n = store.put_batch(results, requests) if results else 0
        self.path.unlink(missing_ok=True)
        if n:
            log.info("answer journal %s: %d answer(s) of an interrupted attempt moved into the store", self.path, n)
        return n


class _Writer:
    """Answers received and not yet in the store; each write is one segment.

    ``checkpoint`` (the ledger) runs before every write, so the ledger never
    knows of fewer paid calls than the store holds answers. With a ``journal``,
    every answer is also journaled as it arrives (see :class:`AnswerJournal`).
    """

    def __init__(
        self,
        store: ResponseStore,
        checkpoint: Callable[[], None],
        every: int | None,
        interval_s: float | None,
        journal: AnswerJournal | None = None,
    ) -> None:
        self.store = store
        self.checkpoint = checkpoint
        self.every = every
        self.interval_s = interval_s
        self.journal = journal
        self.pending: list[tuple[LLMResult, LLMRequest]] = []
        self.since: float | None = None
        #: The first write that failed (ledger, attempts log, journal): from then on the
        #: runner sends nothing more and stores what comes back.
        self.failed: OSError | None = None

    def fail(self, exc: OSError) -> None:
        if self.failed is None:
            self.failed = exc
            log.error("%s; sending nothing more, storing the answers of the calls in flight", exc)

    def add(self, res: LLMResult, req: LLMRequest) -> None:
        # Held in memory first: whatever fails to write next, a paid answer reaches the store.
        self.pending.append((res, req))
        if self.since is None:
            self.since = time.monotonic()
        if self.journal is not None and self.failed is None:
            try:
                self.journal.append(res, req)
            except OSError as exc:
                self.fail(exc)
        self.due()

    def due(self) -> None:
        """Write if a group is full or its oldest answer has waited long enough."""
        if not self.pending:
            return
        full = self.every is not None and len(self.pending) >= self.every
        late = self.interval_s is not None and time.monotonic() - (self.since or 0.0) >= self.interval_s
        if full or late:
            self.flush()

    def flush(self) -> None:
        try:
            self.checkpoint()
        except OSError as exc:
            # The account could not be written: the answers still go to the store (they
            # are paid for), and the job stops (``failed``) and records its calls later.
            self.fail(exc)
        if self.pending:
            try:
                self.store.put_batch([res for res, _ in self.pending], [req for _, req in self.pending])
            except OSError as exc:
                self.fail(exc)
                kept = f"the journal {self.journal.path}" if self.journal is not None else "no file"
                raise WriteFailed(
                    f"cannot write the response store ({exc}): {len(self.pending)} answers received are not "
                    f"stored; {kept} holds those it could write, and the next attempt stores them before it "
                    "asks anything. Free space where the store is and rerun.",
                    exc.filename or getattr(self.store, "root", "?"), stored=False,
                ) from None
            # Cleared only once written: a write cut short is tried again by the caller's finally.
            self.pending.clear()
            self.since = None
            if self.journal is not None and self.failed is None:
                try:
                    self.journal.clear()
                except OSError as exc:
                    self.fail(exc)

def invalid_reason(result: LLMResult) -> str | None:
    """The validation reason of a final miss, or ``None`` for anything else."""
    if result.error and result.error.startswith(INVALID_PREFIX):
        return result.error[len(INVALID_PREFIX) :]
    return None


def _error_kind(error: str) -> str:
    # Short, redacted label for the ledger: full provider messages can be long
    # and may echo request text or (part of) a key.
    first = (redact(error) or "").strip().splitlines()[0] if error.strip() else "error"
    return first.split(":")[0][:60] or "error"


#: How often the answering progress also goes to the log (a job's log file keeps
#: no progress bar).
PROGRESS_LOG_INTERVAL_S = 30.0


class _Progress:
    """Requests answered so far, on a tqdm bar on stderr and every
    ``PROGRESS_LOG_INTERVAL_S`` in the log.

    The bar moves as each request is settled and, for a backend that answers a
    batch in one call (vLLM), as each request finishes inside that call
    (``Backend.on_progress``): those count as ``inflight`` until their results
    arrive. tok/s is output tokens over the time spent answering: a model load
    during the run (``backend.load_seconds``) is taken out of it, and of the bar's
    elapsed time and so its ETA.
    """

    def __init__(self, total: int, desc: str, enabled: bool, backend: Backend) -> None:
        self.bar = None
        self.total = total
        self.desc = desc
        self.enabled = enabled
        self.backend = backend
        self.t0 = time.monotonic()
        self.loaded_before = getattr(backend, "load_seconds", None) is not None
        self.load_s = 0.0
        self.settled = 0
        self.inflight = 0
        self.inflight_tokens = 0
        self.tokens_out = 0
        self.failures = 0
        self.logged_at = self.t0
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # pragma: no cover - tqdm ships with the venv
                return
            self.bar = tqdm(
                total=total, desc=desc, unit="req", file=sys.stderr, mininterval=0.5, dynamic_ncols=True, leave=True
            )

    def _take_out_load(self) -> None:
        if self.loaded_before or self.load_s:
            return
        load = getattr(self.backend, "load_seconds", None)
        if load:
            self.load_s = float(load)
            if self.bar is not None:
                self.bar.start_t += self.load_s
                self.bar.last_print_t = max(self.bar.last_print_t, time.monotonic() - 1e-3)

    def rate(self) -> float:
        busy = time.monotonic() - self.t0 - self.load_s
        return (self.tokens_out + self.inflight_tokens) / max(busy, 1e-9)

    def _show(self, led: Ledger) -> None:
        self._take_out_load()
        done = min(self.settled + self.inflight, self.total)
        self.failures = led.failures + led.invalid
        if self.bar is not None:
            self.bar.set_postfix(
                {"tok/s": f"{self.rate():.1f}", "hit": led.cache_hits, "fail": self.failures, "reask": led.reasks},
                refresh=False,
            )
            self.bar.update(done - self.bar.n)
        now = time.monotonic()
        if self.enabled and now - self.logged_at >= PROGRESS_LOG_INTERVAL_S:
            self.logged_at = now
            self.log_line()

    def log_line(self) -> None:
        done = min(self.settled + self.inflight, self.total)
        busy = time.monotonic() - self.t0 - self.load_s
        eta = ""
        if 0 < done < self.total and busy > 0:
            eta = f", ETA {_duration((self.total - done) * busy / done)}"
        log.info(
            "%s: %d/%d requests answered, %.1f output tok/s, %d failed so far%s",
            self.desc, done, self.total, self.rate(), self.failures, eta,
        )

    def settle(self, led: Ledger, tokens_out: int) -> None:
        """One item is final (answered, failed for good, or served from the store)."""
        self.settled += 1
        self.tokens_out = tokens_out
        self._show(led)

    def arrived(self, led: Ledger, tokens_out: int) -> None:
        """A backend result came back (an item may still be re-asked)."""
        self.inflight = max(self.inflight - 1, 0)
        self.tokens_out = tokens_out
        self.inflight_tokens = 0 if not self.inflight else self.inflight_tokens

    def engine(self, n: int, tokens: int | None, led: Ledger) -> None:
        """``n`` requests finished inside the backend's running call."""
        self.inflight += n
        self.inflight_tokens += tokens or 0
        self._show(led)

    def batch_done(self, led: Ledger) -> None:
        self.inflight = 0
        self.inflight_tokens = 0
        self._show(led)

    def close(self) -> None:
        if self.enabled and self.total:
            self.log_line()
        if self.bar is not None:
            self.bar.close()


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}"


#: How long a job waits before it asks again for budget that other jobs hold reserved.
BUDGET_WAIT_S = 0.25
#: ... and for how long at most: a reservation of a job killed on another host is held
#: until that shard is answered again.
BUDGET_WAIT_MAX_S = 600.0


def run_requests(
    requests: Iterable[LLMRequest],
    backend: Backend,
    store: ResponseStore,
    *,
    batch_size: int = 64,
    ledger: Ledger | None = None,
    progress: bool = True,
    reply_policy: ReplyPolicy | None = None,
    max_attempts: int = 3,
    price_table: Mapping[str, Mapping[str, float]] | None = None,
    flush_every: int | None = FLUSH_EVERY,
    flush_interval_s: float | None = FLUSH_INTERVAL_S,
    stop: threading.Event | None = None,
    on_checkpoint: Callable[[Ledger], None] | None = None,
    journal: str | os.PathLike[str] | None = None,
    model_name: str | None = None,
    budget: RunBudget | None = None,
    check_space: Callable[[], None] | None = None,
) -> list[LLMResult]:
    """Answer ``requests`` (results in the same order), calling ``backend`` only for store misses.

    ``reply_policy.validate(text) -> (value, reason)`` marks a reply invalid when
    ``reason`` is not None, and ``reply_policy.reask`` builds the next ask;
    without a policy every reply that carries an answer is used as it is (a
    refusal or an empty reply is re-asked like an invalid one either way).
    ``max_attempts`` counts the first ask. ``price_table`` fills ``cost_usd`` for
    results the backend did not price. ``flush_every``/``flush_interval_s``: when
    answers of an incremental backend are written (``None`` turns a trigger off);
    ``stop``: see :class:`StopRequested`; ``on_checkpoint(ledger)`` runs at every
    ledger checkpoint (the answering job appends it to its attempts log).
    ``journal``: a file where each answer of an incremental backend is appended as it
    arrives; answers an earlier, killed run journaled are stored before anything is
    asked (:class:`AnswerJournal`). ``model_name``: the model's name under ``models:``,
    for the message of :class:`OutputBudgetExhausted`. ``budget``: the run's spending
    limit (:class:`BudgetReached`); this call's ``ledger`` counts as live spending, and
    every batch is reserved from it before it is sent (``RunBudget.reserve``).
    ``check_space()``: raises :class:`WriteFailed` when too little space is left where the
    job writes; called before each batch is sent. A write that fails while answers arrive
    (the ledger, ``on_checkpoint``'s log, the journal) stops the sending too: the calls in
    flight come back, their answers are stored, and :class:`WriteFailed` is raised.

    A reply that reports no token usage is counted in the ledger at its request's upper
    bound (``pricing.call_cost_bound``, from ``price_table`` or the backend's ``prices``)
    and in ``Ledger.cost_bounded_calls``; the log says so once.
    """
    requests = list(requests)
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if max_attempts < 1:
        raise ValueError("max_attempts must be >= 1")
    if flush_every is not None and flush_every < 1:
        raise ValueError("flush_every must be >= 1 or None")
    if flush_interval_s is not None and flush_interval_s <= 0:
        raise ValueError("flush_interval_s must be > 0 or None")
    policy = reply_policy if reply_policy is not None else accept_any()
    led = ledger if ledger is not None else Ledger()
    started = time.monotonic()
    wall_at_start = led.wall_s
    engine = backend.engine_version()
    led.backend = led.backend or backend.name
    led.engine_version = led.engine_version or engine
    led.runs += 1

    # Items are unique original keys; duplicates in ``requests`` share one answer.
    items: list[str] = []
    current: dict[str, LLMRequest] = {}
    for req in requests:
        if req.key not in current:
            items.append(req.key)
            current[req.key] = req
    led.requests += len(items)
    calls_before = led.calls
    tries: dict[str, int] = {k: 0 for k in items}
    final: dict[str, LLMResult] = {}

    store.refresh()
    answer_journal = AnswerJournal(journal) if journal is not None else None
    if answer_journal is not None:
        answer_journal.recover(store)
    bar = _Progress(len(items), backend.name or type(backend).__name__, progress, backend)
    tokens_out_this_run = 0
    prices = price_table if price_table is not None else getattr(backend, "prices", None) or {}
    # A Batch API bills at its discount; its answers' bounds are priced the same way.
    price_factor = float(getattr(backend, "batch_discount", 1.0)) if getattr(backend, "use_batch_api", False) else 1.0
    bounded_warned = False

    def checkpoint() -> None:
        led.wall_s = wall_at_start + (time.monotonic() - started)
        led.save()
        if on_checkpoint is not None:
            on_checkpoint(led)

    # Grouped writes only where answers arrive one by one; a batch answered at
    # once is written as one segment when it ends.
    incremental = bool(getattr(backend, "incremental", False))
    writer = _Writer(
        store,
        checkpoint,
        flush_every if incremental else None,
        flush_interval_s if incremental else None,
        answer_journal if incremental else None,
    )
    # Heartbeats let the time trigger fire while no answer arrives.
    heartbeat_s = None
    if incremental and flush_interval_s is not None:
        heartbeat_s = min(max(flush_interval_s / 4, 0.01), 1.0)

    def account(res: LLMResult, req: LLMRequest) -> None:
        nonlocal tokens_out_this_run, bounded_warned
        led.calls += 1
        led.tokens_in += res.tokens_in or 0
        led.tokens_out += res.tokens_out or 0
        tokens_out_this_run += res.tokens_out or 0
        price = prices.get(req.model.model_id)
        if res.cost_usd is None and res.ok and price is not None:
            # Paid, at a known price, but the reply did not say for how many tokens: counted
            # at the most it can have cost, never at 0 (a budget would not see it).
            bound = call_cost_bound(req, price, price_factor)
            led.cost_usd += bound
            led.cost_bounded_calls += 1
            if not bounded_warned:
                bounded_warned = True
                log.warning(
                    "%s: a reply reported no token usage; each such call is counted at its upper bound "
                    "(prompt characters / 4 tokens, max_tokens of output; $%.6f for this one) in the ledger "
                    "(cost_bounded_calls) and against run.budget_usd", model_name or req.model.model_id, bound,
                )
        elif res.cost_usd is None:
            led.cost_unknown_calls += 1
        else:
            led.cost_usd += res.cost_usd
        if not res.ok:
            led.failures += 1
            led.count_reason("failure", _error_kind(res.error or "no text"))

    def stopping() -> bool:
        return stop is not None and stop.is_set()

    # The run's budget: once reached, the calls in flight come back (paid) and nothing new is sent.
    run_budget_stop = False

    def over_budget() -> bool:
        return budget is not None and budget.reached(led)

    def stop_for_run_budget() -> BudgetReached:
        assert budget is not None
        return BudgetReached(
            run_budget_message(budget, *budget.paid_and_held(led), led.calls - calls_before, model_name)
        )

    def stop_for_write() -> WriteFailed:
        assert writer.failed is not None
        where = writer.failed.filename or "?"
        return WriteFailed(write_failed_message(where, writer.failed, led.calls - calls_before), where)

    write_stop = False

    # Replies empty at the output budget, and the other replies that came back.
    exhausted: list[LLMRequest] = []
    replied = 0
    budget_stop = False
    stops_for_budget = bool(getattr(backend, "asks_models", True))

    def budget_spent() -> bool:
        return stops_for_budget and len(exhausted) >= BUDGET_STOP_AFTER and len(exhausted) >= replied

    def stop_for_budget() -> OutputBudgetExhausted:
        # The largest budget that still ran out: the one the setting must exceed.
        worst = max(exhausted, key=lambda r: r.sampling.max_tokens)
        return OutputBudgetExhausted(
            budget_message(worst, model_name, len(exhausted), len(exhausted) + replied, led.calls - calls_before)
        )

    def settle(item: str, req: LLMRequest, res: LLMResult, follow_up: list[str]) -> None:
        nonlocal replied
        tries[item] += 1
        if res.ok:
            # A refusal or an empty reply carries no answer, whatever the study.
            reason = no_answer_reason(res)
            if reason == BUDGET_EXHAUSTED:
                exhausted.append(req)
            else:
                replied += 1
            if reason is None:
                _, reason = policy.validate(res.text)  # type: ignore[arg-type]
            if reason is not None:
                if tries[item] < max_attempts and reason != BUDGET_EXHAUSTED:
                    current[item] = policy.reask(req, req.attempt + 1, reason)
                    led.reasks += 1
                    follow_up.append(item)
                    return
                res = dataclasses.replace(res, error=f"{INVALID_PREFIX}{reason}")
                led.invalid += 1
                led.count_reason("invalid", reason)
        final[item] = res
        bar.settle(led, tokens_out_this_run)

    try:
        pending = list(items)
        while pending:
            follow_up: list[str] = []
            hits = store.get_many(current[i].key for i in pending)
            # Misses grouped by their current key: two items can converge on one request.
            misses: dict[str, list[str]] = {}
            for item in pending:
                req = current[item]
                hit = hits.get(req.key)
                if hit is not None:
                    led.cache_hits += 1
                    settle(item, req, hit, follow_up)
                else:
                    misses.setdefault(req.key, []).append(item)
            if budget_spent():
                # Stored replies already show it: asking the misses would buy the same.
                raise stop_for_budget()

            miss_keys = list(misses)
            sent_upto = 0
            while sent_upto < len(miss_keys):
                if stopping():
                    raise StopRequested("stopped before sending the next batch; every answer received is stored")
                if writer.failed is not None:
                    raise stop_for_write()
                if check_space is not None:
                    check_space()
                if over_budget():
                    raise stop_for_run_budget()
                size = batch_size
                if budget is not None:
                    ahead = [current[misses[k][0]] for k in miss_keys[sent_upto : sent_upto + batch_size]]
                    size, wait = budget.reserve(led, ahead)
                    waited_from = time.monotonic()
                    while size == 0 and wait and not stopping() and time.monotonic() - waited_from < BUDGET_WAIT_MAX_S:
                        # Other jobs hold what is left for calls in flight: it comes back
                        # (settled to what they paid) when their batches end.
                        time.sleep(BUDGET_WAIT_S)
                        size, wait = budget.reserve(led, ahead)
                    if stopping():
                        raise StopRequested(
                            "stopped while waiting for the run's budget; every answer received is stored"
                        )
                    if size == 0:
                        raise stop_for_run_budget()
                chunk = miss_keys[sent_upto : sent_upto + size]
                sent_upto += len(chunk)
                batch = [current[misses[k][0]] for k in chunk]
                wanted = {r.key: r for r in batch}
                got: dict[str, LLMResult] = {}
                backend.on_progress = lambda n, tokens: bar.engine(n, tokens, led)
                results = backend.stream(batch, heartbeat_s=heartbeat_s) if incremental else backend.run(batch)
                try:
                    for res in results:
                        if res is None:  # a heartbeat: nothing new, but maybe time to write
                            writer.due()
                            continue
                        if res.key not in wanted or res.key in got:
                            continue
                        req = wanted[res.key]
                        res.attempt = req.attempt
                        res.backend = res.backend or backend.name
                        res.engine_version = res.engine_version or engine
                        res.timestamp = res.timestamp or utc_now_iso()
                        if res.error is not None:
                            res.error = redact(res.error)
                        if res.cost_usd is None and price_table is not None and res.ok:
                            res.cost_usd = estimate_cost(req.model.model_id, res.tokens_in, res.tokens_out, price_table)
                        got[res.key] = res
                        account(res, req)
                        if res.ok:
                            writer.add(res, req)
                        bar.arrived(led, tokens_out_this_run)
                        # Settled on arrival, so progress moves per answer, not per batch.
                        for item in misses[req.key]:
                            settle(item, req, res, follow_up)
                        if not budget_stop and budget_spent():
                            # The calls in flight still come back (paid); nothing new is sent.
                            budget_stop = True
                            backend.request_stop()
                        if not run_budget_stop and over_budget():
                            run_budget_stop = True
                            backend.request_stop()
                        if not write_stop and writer.failed is not None:
                            write_stop = True
                            backend.request_stop()
                finally:
                    # Also when the backend raised or the job is being interrupted:
                    # cancel what is still running, then store whatever was
                    # answered - it has been paid for.
                    close = getattr(results, "close", None)
                    if close is not None:
                        close()
                    backend.on_progress = None
                    led.batches += 1
                    writer.flush()
                    if budget is not None:
                        budget.settle(led)
                    bar.batch_done(led)
                if writer.failed is not None:
                    raise stop_for_write()
                if budget_stop:
                    raise stop_for_budget()
                if run_budget_stop:
                    raise stop_for_run_budget()
                if stopping() and len(got) < len(batch):
                    raise StopRequested(
                        f"stopped with {len(batch) - len(got)} of {len(batch)} requests of a batch not sent; "
                        "every answer received is stored"
                    )
                for req in batch:
                    if req.key in got:
                        continue
                    res = LLMResult.failure(req, NO_RESULT, backend=backend.name, engine_version=engine)
                    led.failures += 1
                    led.count_reason("failure", "no_result")
                    for item in misses[req.key]:
                        settle(item, req, res, follow_up)
            pending = follow_up
            if pending and stopping():
                raise StopRequested("stopped before the re-asks; every answer received is stored")
            if pending and over_budget():
                raise stop_for_run_budget()
    finally:
        bar.close()
        try:
            checkpoint()
        except OSError as exc:
            writer.fail(exc)
        if answer_journal is not None:
            answer_journal.close()
    if writer.failed is not None:
        raise stop_for_write()

    return [final[req.key] for req in requests]
