"""Bounded adaptive concurrency (AIMD) and the retry policy for hosted-API backends.

The SDKs' own retry loops are switched off (``max_retries=0``) so that this module
is the only place deciding whether, when and how often a call is repeated. Two
independent retry layers multiply: 2 SDK retries inside 5 of ours is 18 calls,
and the SDK's sleeps are invisible to the total-time bound below.

Pieces:

- :class:`RetryPolicy` — how many retries, how long in total, backoff shape.
- :func:`classify` — turns an exception from an SDK call into a :class:`Failure`
  (retriable or not, rate-limited or not, Retry-After).
- :class:`AIMDController` — the loop-agnostic numeric state of the concurrency
  limit, so a limit learned in one ``run`` carries over to the next.
- :class:`AdaptiveLimiter` — the per-event-loop gate built on a controller.
- :func:`call_with_retries` — one request's retry loop.
- :func:`iterate_async` — runs an async producer on its own event loop in a
  worker thread and exposes its results as a plain iterator, which is how the
  synchronous ``Backend.run`` contract is met while results still stream out as
  they arrive (the runner writes each one immediately; resume depends on it).
- :class:`HostedAPIBackend` — the driver the openai/openai_compatible/anthropic
  backends share: key from the environment, deduplication, the worker pool, and
  the Batch-API skeleton with batch ids persisted under ``state_dir``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import hashlib
import json
import logging
import math
import os
import queue
import random
import tempfile
import threading
import time
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Generic, TypeVar

from context_effects.llm.backends.base import Backend
from context_effects.llm.types import LLMRequest, LLMResult

log = logging.getLogger(__name__)

T = TypeVar("T")

# Statuses worth repeating. 408/409 are what both SDKs retry themselves; 425 is
# "too early"; 529 is Anthropic's "overloaded". Everything else in 4xx means the
# request itself is wrong and repeating it only burns quota.
RETRIABLE_STATUS = frozenset({408, 409, 425, 429})


@dataclass(frozen=True)
class RetryPolicy:
    # Paper setting: 5 retries, i.e. at most 6 attempts per request.
    max_retries: int = 5
    # Bound on the wall time from a request's first dispatch to its final answer,
    # including backoff sleeps and waits for a free slot. Without it a long
    # Retry-After or a flapping endpoint can hold a Snakemake job for hours.
    max_retry_time_s: float = 600.0
    # Per-attempt client timeout; each attempt is also capped at the time left.
    request_timeout_s: float = 120.0
    backoff_base_s: float = 1.0
    backoff_max_s: float = 60.0

    def backoff(self, retry_number: int, rng: random.Random) -> float:
        """Exponential backoff with 'equal jitter' for retry ``retry_number`` (1-based).

        Half the delay is fixed so retries never collapse to zero wait (full jitter
        can), the other half is random so many requests failing together don't
        come back together.
        """
        ceiling = min(self.backoff_max_s, self.backoff_base_s * (2 ** max(0, retry_number - 1)))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


@dataclass(frozen=True)
class Failure:
    kind: str  # "rate_limited" | "server_error" | "timeout" | "connection" | "malformed" | "client_error" | "internal"
    retriable: bool
    message: str
    status: int | None = None
    retry_after_s: float | None = None

    @property
    def short(self) -> str:
        return f"{self.status}" if self.status is not None else self.kind


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    now = time.time() if now is None else now
    return max(0.0, when.timestamp() - now)


def retry_after_from_headers(headers: Any) -> float | None:
    if headers is None:
        return None
    # OpenAI sends a millisecond variant alongside the standard header; it is
    # more precise, so it wins when present.
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if math.isfinite(value):
                return max(0.0, value)
        except ValueError:
            pass
    return parse_retry_after(headers.get("retry-after"))


@dataclass(frozen=True)
class SDKErrors:
    """The exception classes of one SDK, so :func:`classify` needs no SDK import."""

    status: type[BaseException]
    timeout: type[BaseException]
    connection: type[BaseException]
    validation: type[BaseException]


def _status_message(exc: BaseException) -> str:
    body = getattr(exc, "body", None)
    detail = None
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            detail = err.get("message")
            kind = err.get("type")
            if kind and detail:
                detail = f"{kind}: {detail}"
    return str(detail or getattr(exc, "message", None) or exc)


def classify(exc: BaseException, errors: SDKErrors) -> Failure:
    # Order matters: the SDKs' timeout error subclasses their connection error,
    # and their validation error carries a (2xx) status code.
    if isinstance(exc, errors.validation):
        return Failure("malformed", True, f"malformed response body: {exc}")
    if isinstance(exc, errors.status):
        status = int(getattr(exc, "status_code", 0) or 0)
        response = getattr(exc, "response", None)
        retry_after = retry_after_from_headers(getattr(response, "headers", None))
        message = f"HTTP {status}: {_status_message(exc)}"
        if status == 429:
            return Failure("rate_limited", True, message, status, retry_after)
        if status >= 500:
            return Failure("server_error", True, message, status, retry_after)
        if status in RETRIABLE_STATUS:
            return Failure("client_error", True, message, status, retry_after)
        return Failure("client_error", False, message, status)
    if isinstance(exc, (errors.timeout, asyncio.TimeoutError, TimeoutError)):
        return Failure("timeout", True, f"request timed out: {exc}")
    if isinstance(exc, errors.connection):
        cause = exc.__cause__ or exc.__context__
        detail = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        return Failure("connection", True, f"connection error ({detail})")
    if isinstance(exc, (json.JSONDecodeError, UnicodeDecodeError)):
        # A 200 whose body is cut or garbled: the SDK hands us the raw decoder error.
        return Failure("malformed", True, f"malformed response body: {type(exc).__name__}: {exc}")
    if isinstance(exc, (ConnectionError, OSError)):
        return Failure("connection", True, f"connection error ({type(exc).__name__}: {exc})")
    return Failure("internal", False, f"{type(exc).__name__}: {exc}")


@dataclass
class AIMDController:
    """Additive-increase / multiplicative-decrease concurrency limit.

    Only 429s shrink the limit: a 5xx says the server is unwell, not that we are
    too many, so it only pauses growth (inspect_ai's design). A burst of 429s
    from requests that were all in flight under the same limit is one congestion
    signal, not N: each request remembers the *epoch* it was dispatched in and
    only a 429 from the current epoch cuts, so eight simultaneous 429s halve the
    limit once instead of dividing it by 256.
    """

    initial: int = 8
    maximum: int = 64
    minimum: int = 1
    decrease_factor: float = 0.5
    # Limit gained per window of `limit` successes (classic AIMD: +1 per RTT).
    increase_step: float = 1.0
    limit: float = field(init=False)
    epoch: int = field(init=False, default=0)
    min_seen: float = field(init=False)
    history: list[tuple[str, float]] = field(init=False, default_factory=list)
    _hold: int = field(init=False, default=0)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if not (1 <= self.minimum <= self.initial <= self.maximum):
            raise ValueError(
                f"concurrency must satisfy 1 <= min ({self.minimum}) <= initial ({self.initial}) <= max ({self.maximum})"
            )
        if not (0 < self.decrease_factor < 1):
            raise ValueError("decrease_factor must be in (0, 1)")
        self.limit = float(self.initial)
        self.min_seen = self.limit

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def current(self) -> int:
        return max(self.minimum, int(self.limit))

    def on_success(self) -> None:
        with self._lock:
            if self._hold > 0:
                self._hold -= 1
                return
            new = min(float(self.maximum), self.limit + self.increase_step / max(self.limit, 1.0))
            if int(new) != int(self.limit):
                self.history.append(("increase", new))
            self.limit = new

    def on_rate_limited(self, dispatch_epoch: int) -> bool:
        """Cut the limit if this 429 is news; returns whether it cut."""
        with self._lock:
            if dispatch_epoch != self.epoch:
                return False
            self.limit = max(float(self.minimum), self.limit * self.decrease_factor)
            self.epoch += 1
            self.min_seen = min(self.min_seen, self.limit)
            self.history.append(("decrease", self.limit))
            # Don't regrow on the successes of requests that were already in flight.
            self._hold = self.current
            return True

    def on_server_error(self) -> None:
        with self._lock:
            self._hold = max(self._hold, self.current)


class AdaptiveLimiter:
    """Async gate enforcing an :class:`AIMDController`'s limit on one event loop.

    Also holds a shared pause: a Retry-After on a 429 describes the account's
    rate limit, so every request (not just the one that got the 429) waits it out.
    """

    def __init__(self, controller: AIMDController) -> None:
        self.controller = controller
        self._cond = asyncio.Condition()
        self._in_flight = 0
        self._paused_until = 0.0
        self.max_in_flight = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def pause(self, seconds: float) -> None:
        self._paused_until = max(self._paused_until, time.monotonic() + seconds)

    async def acquire(self, deadline: float | None = None) -> int | None:
        """Wait for a slot; returns the dispatch epoch, or None if ``deadline`` passed first."""
        async with self._cond:
            while True:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return None
                wake = deadline
                if self._paused_until > now:
                    wake = self._paused_until if wake is None else min(wake, self._paused_until)
                elif self._in_flight < self.controller.current:
                    self._in_flight += 1
                    self.max_in_flight = max(self.max_in_flight, self._in_flight)
                    return self.controller.epoch
                try:
                    if wake is None:
                        await self._cond.wait()
                    else:
                        await asyncio.wait_for(self._cond.wait(), max(0.0, wake - now))
                except asyncio.TimeoutError:
                    pass

    async def release(self) -> None:
        async with self._cond:
            self._in_flight -= 1
            self._cond.notify_all()

    async def wake(self) -> None:
        async with self._cond:
            self._cond.notify_all()


@dataclass
class Outcome(Generic[T]):
    value: T | None
    error: str | None
    latency_s: float | None
    retries: list[str]
    elapsed_s: float
    last_failure: Failure | None = None


async def call_with_retries(
    op: Callable[[float], Awaitable[T]],
    *,
    limiter: AdaptiveLimiter,
    policy: RetryPolicy,
    errors: SDKErrors,
    rng: random.Random,
    describe: str = "request",
    scrub: Callable[[str], str] = lambda s: s,
) -> Outcome[T]:
    """Run ``op(timeout_s)`` under the limiter until it succeeds or the policy gives up.

    Never raises for a failed request: the failure comes back in ``Outcome.error``.
    """
    retries: list[str] = []
    start: float | None = None
    deadline: float | None = None

    failure: Failure | None = None

    def fail(message: str) -> Outcome[T]:
        elapsed = time.monotonic() - start if start is not None else 0.0
        if retries:
            message = f"{message} [after {len(retries)} retr{'y' if len(retries) == 1 else 'ies'}: {', '.join(retries)}; {elapsed:.1f}s]"
        return Outcome(None, scrub(message), None, retries, elapsed, failure)

    while True:
        epoch = await limiter.acquire(deadline)
        if epoch is None:
            return fail(f"{describe}: retry time budget of {policy.max_retry_time_s:g}s exhausted waiting for a slot")
        t0 = time.monotonic()
        if start is None:
            start, deadline = t0, t0 + policy.max_retry_time_s
        assert deadline is not None
        timeout = max(0.001, min(policy.request_timeout_s, deadline - t0))
        try:
            # The SDK's timeout bounds each socket read, not the whole call (a server
            # trickling bytes never trips it); this is the hard per-attempt bound.
            value = await asyncio.wait_for(op(timeout), timeout + 0.5)
        except asyncio.CancelledError:
            await limiter.release()
            raise
        except Exception as exc:  # noqa: BLE001 - every failure becomes a result
            await limiter.release()
            failure = classify(exc, errors)
        else:
            await limiter.release()
            limiter.controller.on_success()
            now = time.monotonic()
            return Outcome(value, None, now - t0, retries, now - start)

        if failure.kind == "rate_limited":
            if limiter.controller.on_rate_limited(epoch):
                log.info("%s: 429, concurrency limit now %d", describe, limiter.controller.current)
        elif failure.kind in ("server_error", "timeout", "connection", "malformed"):
            limiter.controller.on_server_error()
        if failure.retry_after_s and failure.status in (429, 503):
            # A Retry-After on 429/503 describes the account or the service, not this
            # one request: hold every new dispatch, not just this request's retry.
            limiter.pause(failure.retry_after_s)
        await limiter.wake()

        if not failure.retriable:
            return fail(f"{describe}: {failure.message} (not retried)")
        retries.append(failure.short)
        if len(retries) > policy.max_retries:
            return fail(f"{describe}: gave up, last error {failure.message}")
        delay = failure.retry_after_s if failure.retry_after_s is not None else policy.backoff(len(retries), rng)
        if time.monotonic() + delay >= deadline:
            return fail(
                f"{describe}: retry time budget of {policy.max_retry_time_s:g}s exhausted "
                f"(next wait {delay:.2f}s), last error {failure.message}"
            )
        log.debug("%s: %s, retry %d in %.2fs", describe, failure.short, len(retries), delay)
        await asyncio.sleep(delay)


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class _Raised:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_DONE = object()


def iterate_async(produce: Callable[[Callable[[T], None]], Awaitable[None]]) -> Iterator[T]:
    """Run ``produce(emit)`` on a fresh event loop in a worker thread; yield what it emits.

    A dedicated thread keeps this usable from callers that already run an event
    loop (notebooks, async runners), and lets results stream out while later
    requests are still in flight. Closing the iterator early cancels the work.
    """
    out: queue.Queue[Any] = queue.Queue()
    started = threading.Event()
    handle: dict[str, Any] = {}

    async def main() -> None:
        handle["loop"] = asyncio.get_running_loop()
        handle["task"] = asyncio.current_task()
        started.set()
        await produce(out.put)

    def worker() -> None:
        try:
            asyncio.run(main())
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer thread
            out.put(_Raised(exc))
        finally:
            started.set()
            out.put(_DONE)

    thread = threading.Thread(target=worker, name="llm-api-loop", daemon=True)
    thread.start()
    try:
        while True:
            item = out.get()
            if item is _DONE:
                break
            if isinstance(item, _Raised):
                raise item.exc
            yield item
    finally:
        if thread.is_alive():
            started.wait()
            loop, task = handle.get("loop"), handle.get("task")
            if loop is not None and task is not None and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(task.cancel)
                except RuntimeError:
                    pass  # loop finished between the check and the call
            thread.join()


# ---------------------------------------------------------------------------
# The shared driver of the hosted-API backends (openai, openai_compatible, anthropic)
# ---------------------------------------------------------------------------


class MissingAPIKeyError(RuntimeError):
    """The environment variable that should hold an API key is unset or empty."""


def read_api_key(env_var: str, backend: str) -> str:
    value = os.environ.get(env_var, "").strip()
    if not value:
        raise MissingAPIKeyError(
            f"the {backend} backend needs an API key in the environment variable {env_var}, which is not set"
        )
    return value


class BatchFailed(Exception):
    """A batch control call (upload, create, poll, download) failed for good."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class RunContext:
    """What one ``run`` call owns: its event loop's limiter and SDK clients."""

    limiter: AdaptiveLimiter
    clients: dict[str | None, Any] = field(default_factory=dict)


class HostedAPIBackend(Backend):
    """Async, rate-adaptive, retrying driver shared by the hosted-API backends.

    Subclasses supply the SDK-specific parts: building clients, one call, and the
    provider's batch protocol. Everything about *when* to call — concurrency,
    retries, deduplication, batch-id persistence — lives here once.
    """

    name = ""
    default_key_env: str | None = None
    #: Provider limit on requests per batch (OpenAI 50k per file, Anthropic 100k).
    batch_limit: int = 50_000
    #: Batch APIs bill half the synchronous price at both providers.
    batch_discount: float = 0.5

    def __init__(
        self,
        *,
        state_dir: Path | str | None = None,
        api_key_env: str | None = None,
        base_url: str | None = None,
        concurrency: int = 8,
        max_concurrency: int = 64,
        min_concurrency: int = 1,
        max_retries: int = 5,
        max_retry_time_s: float = 600.0,
        request_timeout_s: float = 120.0,
        backoff_base_s: float = 1.0,
        backoff_max_s: float = 60.0,
        use_batch_api: bool = False,
        batch_poll_interval_s: float = 30.0,
        batch_max_wait_s: float | None = None,
        batch_max_requests: int | None = None,
        prices: Mapping[str, Mapping[str, float]] | None = None,
    ) -> None:
        super().__init__(state_dir=state_dir)
        env_var = api_key_env if api_key_env is not None else self.default_key_env
        self.api_key_env = env_var
        # Name-mangled and excluded from repr: the key must not end up in a log
        # line, a pickled config or an exception message by accident.
        self.__api_key = read_api_key(env_var, self.name) if env_var else None
        self.base_url = base_url
        self.retry_policy = RetryPolicy(
            max_retries=int(max_retries),
            max_retry_time_s=float(max_retry_time_s),
            request_timeout_s=float(request_timeout_s),
            backoff_base_s=float(backoff_base_s),
            backoff_max_s=float(backoff_max_s),
        )
        self.controller = AIMDController(
            initial=int(concurrency), maximum=int(max_concurrency), minimum=int(min_concurrency)
        )
        self.use_batch_api = bool(use_batch_api)
        self.batch_poll_interval_s = float(batch_poll_interval_s)
        self.batch_max_wait_s = None if batch_max_wait_s is None else float(batch_max_wait_s)
        self.batch_max_requests = int(batch_max_requests or self.batch_limit)
        if not 1 <= self.batch_max_requests <= self.batch_limit:
            raise ValueError(f"batch_max_requests must be in 1..{self.batch_limit}")
        if self.use_batch_api and self.state_dir is None:
            raise ValueError(
                f"{self.name}: use_batch_api needs a state_dir, where batch ids are kept so a restarted job "
                "polls its batch instead of paying for it twice"
            )
        self.prices = {k: dict(v) for k, v in (prices or {}).items()}
        self._rng = random.Random()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(base_url={self.base_url!r}, key_env={self.api_key_env!r})"

    # A pickled backend (multiprocessing, a cached config object) must not carry
    # the key to disk; it is read from the environment again on unpickling.
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_HostedAPIBackend__api_key"] = None
        state.pop("_rng", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._rng = random.Random()
        if self.api_key_env:
            self.__api_key = read_api_key(self.api_key_env, self.name)

    # -- secrets ---------------------------------------------------------------

    @property
    def _api_key(self) -> str | None:
        return self.__api_key

    def _scrub(self, text: str) -> str:
        key = self.__api_key
        if key and text and key in text:
            text = text.replace(key, f"<${self.api_key_env}>")
        return text

    # -- subclass hooks --------------------------------------------------------

    @property
    @abstractmethod
    def sdk_errors(self) -> SDKErrors: ...

    @abstractmethod
    def _new_client(self, base_url: str | None) -> Any:
        """A fresh async SDK client (created inside the run's event loop)."""

    def _base_url_for(self, request: LLMRequest) -> str | None:
        return self.base_url

    @abstractmethod
    async def _call(self, client: Any, request: LLMRequest, timeout: float) -> LLMResult:
        """One attempt; raise the SDK's exception on failure, return the parsed result."""

    def _unsupported(self, request: LLMRequest) -> str | None:
        """Why this request cannot be sent at all (fails it without a call), or None."""
        return None

    def _batch_group(self, request: LLMRequest) -> Any:
        return None

    @abstractmethod
    async def _batch_submit(
        self, ctx: RunContext, client: Any, requests: list[LLMRequest], digest: str
    ) -> dict[str, Any]:
        """Upload and create a batch; return the JSON-able state to persist (must hold ``batch_id``)."""

    @abstractmethod
    async def _batch_poll(self, ctx: RunContext, client: Any, state: dict[str, Any]) -> tuple[bool, str, Any]:
        """One poll: (ended?, status text, provider batch object)."""

    @abstractmethod
    async def _batch_collect(
        self, ctx: RunContext, client: Any, state: dict[str, Any], batch: Any, requests: list[LLMRequest]
    ) -> dict[str, LLMResult]:
        """Results of an ended batch by custom_id (= request key); missing ones are filled in by the caller."""

    # -- helpers for subclasses ------------------------------------------------

    def _result(self, request: LLMRequest, **fields: Any) -> LLMResult:
        base: dict[str, Any] = dict(
            key=request.key,
            text=None,
            finish_reason=None,
            attempt=request.attempt,
            backend=self.name,
            engine_version=self.engine_version(),
            timestamp=utc_now(),
        )
        base.update(fields)
        if base.get("notes"):
            base["notes"] = self._scrub(base["notes"])
        if base.get("error"):
            base["error"] = self._scrub(base["error"])
        return LLMResult(**base)

    def _failed(self, request: LLMRequest, error: str, notes: str = "") -> LLMResult:
        return self._result(request, error=error, notes=notes)

    def _cost(self, model_id: str, tokens_in: int | None, tokens_out: int | None, batch: bool) -> float | None:
        price = self.prices.get(model_id)
        if not price or tokens_in is None or tokens_out is None:
            return None
        usd = (
            tokens_in * float(price.get("input_per_mtok", 0.0)) + tokens_out * float(price.get("output_per_mtok", 0.0))
        ) / 1e6
        return usd * (self.batch_discount if batch else 1.0)

    async def _control(self, ctx: RunContext, fn: Callable[[float], Awaitable[T]], describe: str) -> T:
        """A batch control call under the same retry policy; raises BatchFailed when it gives up."""
        outcome = await call_with_retries(
            fn,
            limiter=ctx.limiter,
            policy=self.retry_policy,
            errors=self.sdk_errors,
            rng=self._rng,
            describe=describe,
            scrub=self._scrub,
        )
        if outcome.error is not None:
            raise BatchFailed(outcome.error, outcome.last_failure.status if outcome.last_failure else None)
        return outcome.value  # type: ignore[return-value]

    def _client(self, ctx: RunContext, request: LLMRequest) -> Any:
        url = self._base_url_for(request)
        if url not in ctx.clients:
            ctx.clients[url] = self._new_client(url)
        return ctx.clients[url]

    # -- the Backend contract --------------------------------------------------

    def run(self, requests: Sequence[LLMRequest]) -> Iterator[LLMResult]:
        # Identical requests (same key) are answered by one call: never pay twice.
        by_key: dict[str, list[LLMRequest]] = {}
        for request in requests:
            by_key.setdefault(request.key, []).append(request)
        if not by_key:
            return iter(())
        unique = [group[0] for group in by_key.values()]

        async def produce(emit: Callable[[LLMResult], None]) -> None:
            delivered: set[str] = set()

            def deliver(result: LLMResult) -> None:
                if result.key in delivered:
                    return
                delivered.add(result.key)
                for i, _ in enumerate(by_key[result.key]):
                    emit(result if i == 0 else dataclasses.replace(result))

            ctx = RunContext(AdaptiveLimiter(self.controller))
            try:
                todo = []
                for request in unique:
                    reason = self._unsupported(request)
                    if reason:
                        deliver(self._failed(request, reason))
                    else:
                        todo.append(request)
                if self.use_batch_api:
                    await self._run_batches(ctx, todo, deliver)
                else:
                    await self._run_direct(ctx, todo, deliver)
            except Exception as exc:  # noqa: BLE001 - contract: one result per request, never raise
                log.exception("%s backend failed", self.name)
                message = self._scrub(f"{self.name} backend error: {type(exc).__name__}: {exc}")
                for request in unique:
                    if request.key not in delivered:
                        deliver(self._failed(request, message))
            finally:
                for client in ctx.clients.values():
                    try:
                        await client.close()
                    except Exception:  # noqa: BLE001 - closing is best effort
                        pass
            for request in unique:
                if request.key not in delivered:
                    deliver(self._failed(request, f"{self.name}: no result was produced for this request"))

        return iterate_async(produce)

    async def _run_direct(
        self, ctx: RunContext, requests: list[LLMRequest], deliver: Callable[[LLMResult], None]
    ) -> None:
        pending = iter(requests)

        # A fixed pool of workers (no more than the concurrency cap) rather than one
        # task per request: 150k tasks parked on one Condition would make every
        # release wake 150k waiters.
        async def worker() -> None:
            for request in pending:
                try:
                    result = await self._answer(ctx, request)
                except Exception as exc:  # noqa: BLE001
                    result = self._failed(request, f"{type(exc).__name__}: {exc}")
                deliver(result)

        n = min(len(requests), self.controller.maximum)
        await asyncio.gather(*(worker() for _ in range(n)))

    async def _answer(self, ctx: RunContext, request: LLMRequest) -> LLMResult:
        client = self._client(ctx, request)
        outcome = await call_with_retries(
            lambda timeout: self._call(client, request, timeout),
            limiter=ctx.limiter,
            policy=self.retry_policy,
            errors=self.sdk_errors,
            rng=self._rng,
            describe=f"{self.name} {request.model.model_id}",
            scrub=self._scrub,
        )
        if outcome.error is not None:
            return self._failed(request, outcome.error)
        result = outcome.value
        assert result is not None
        result.latency_s = outcome.latency_s
        if outcome.retries:
            extra = f"retried {len(outcome.retries)}x ({', '.join(outcome.retries)}), {outcome.elapsed_s:.2f}s in total"
            result.notes = f"{result.notes}; {extra}" if result.notes else extra
        return result

    # -- batch APIs ------------------------------------------------------------

    def _batch_state_path(self, requests: list[LLMRequest]) -> tuple[Path, str]:
        digest = hashlib.sha256("\n".join(sorted(r.key for r in requests)).encode()).hexdigest()
        assert self.state_dir is not None
        return self.state_dir / f"{self.name}-batch-{digest[:40]}.json", digest

    @staticmethod
    def _write_state(path: Path, state: Mapping[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(state, fh, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    async def _run_batches(
        self, ctx: RunContext, requests: list[LLMRequest], deliver: Callable[[LLMResult], None]
    ) -> None:
        # Sorting makes the shards (and so their state files) independent of the
        # order the caller happened to list the requests in.
        groups: dict[Any, list[LLMRequest]] = {}
        for request in sorted(requests, key=lambda r: r.key):
            groups.setdefault(self._batch_group(request), []).append(request)
        shards = [
            group[i : i + self.batch_max_requests]
            for group in groups.values()
            for i in range(0, len(group), self.batch_max_requests)
        ]
        await asyncio.gather(*(self._run_one_batch(ctx, shard, deliver) for shard in shards))

    async def _run_one_batch(
        self, ctx: RunContext, requests: list[LLMRequest], deliver: Callable[[LLMResult], None]
    ) -> None:
        path, digest = self._batch_state_path(requests)
        client = self._client(ctx, requests[0])
        try:
            state = self._load_state(path)
            if state is None:
                state = await self._batch_submit(ctx, client, requests, digest)
                state.update(provider=self.name, keys_sha256=digest, n_requests=len(requests), submitted_at=utc_now())
                # Persisted before the first poll: from here on a crash costs a poll, not a resubmission.
                self._write_state(path, state)
                log.info(
                    "%s: submitted batch %s (%d requests), state in %s",
                    self.name,
                    state["batch_id"],
                    len(requests),
                    path,
                )
            else:
                log.info("%s: resuming batch %s from %s", self.name, state.get("batch_id"), path)
            batch_id = state["batch_id"]

            waited = 0.0
            while True:
                ended, status, batch = await self._batch_poll(ctx, client, state)
                if ended:
                    break
                if self.batch_max_wait_s is not None and waited >= self.batch_max_wait_s:
                    message = (
                        f"batch {batch_id} still {status} after waiting {waited:.1f}s; "
                        f"rerun to resume polling (state kept in {path.name})"
                    )
                    for request in requests:
                        deliver(self._failed(request, message))
                    return
                await asyncio.sleep(self.batch_poll_interval_s)
                waited += self.batch_poll_interval_s

            results = await self._batch_collect(ctx, client, state, batch, requests)
        except BatchFailed as exc:
            if exc.status == 404:
                # The provider no longer knows this batch (deleted, or results past
                # retention): forget it so the next run submits afresh instead of
                # failing on the same stale id forever.
                path.unlink(missing_ok=True)
            for request in requests:
                deliver(self._failed(request, f"batch API: {exc}"))
            return

        any_failed = False
        for request in requests:
            result = results.get(request.key)
            if result is None:
                result = self._failed(request, f"batch {batch_id} ended ({status}) without a result for this request")
            any_failed = any_failed or result.error is not None
            deliver(result)
        # A fully answered batch keeps its state, so a job that dies before the
        # runner stores the answers re-reads them instead of paying again. One
        # with failures forgets it, so rerunning the same requests resubmits.
        if any_failed:
            path.unlink(missing_ok=True)

    def _load_state(self, path: Path) -> dict[str, Any] | None:
        if not path.exists():
            return None
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            log.warning("%s: unreadable batch state %s (%s); submitting anew", self.name, path, exc)
            return None
        if not isinstance(state, dict) or not state.get("batch_id") or state.get("provider") != self.name:
            return None
        return state

    def _forget_batch(self, requests: list[LLMRequest]) -> None:
        self._batch_state_path(requests)[0].unlink(missing_ok=True)
