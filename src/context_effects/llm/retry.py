"""The retry policy of the hosted-API backends: when a failed call is repeated.

The SDKs' own retry loops are switched off (``max_retries=0``) so that this module
is the only place deciding whether, when and how often a call is repeated. Two
independent retry layers multiply: 2 SDK retries inside 5 of ours is 18 calls,
and the SDK's sleeps are invisible to the total-time bound below.

- :class:`RetryPolicy` — how many retries, how long in total, backoff shape.
- :func:`classify` — turns an exception from an SDK call into a :class:`Failure`
  (retriable or not, rate-limited or not, Retry-After).
- :func:`call_with_retries` — one request's retry loop, under the adaptive
  concurrency limit of :mod:`context_effects.llm.concurrency`.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timezone
from typing import Any, Generic, TypeVar

from context_effects.llm.concurrency import AdaptiveLimiter

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


_RAISE_BUDGET = (
    "To wait that long, raise the model's retry time budget (`models.<name>.max_retry_time_s`); "
    "else run again once the provider's limit has passed."
)


def _seconds(value: float) -> str:
    # Whole seconds past 100 s: a Retry-After of 1000000000 reads as asked, not as 1e+09.
    return f"{value:.0f}" if value >= 100 else f"{value:.3g}"


def _provider_answer(failure: Failure) -> str:
    return f"HTTP {failure.status} with Retry-After: {_seconds(failure.retry_after_s or 0.0)}s"


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
        epoch = await limiter.acquire(deadline, max_pause_s=policy.max_retry_time_s)
        if epoch is None:
            now = time.monotonic()
            if limiter.paused_until > now:
                # Another request's Retry-After outlasts this one's budget: not sent.
                left = max(0.0, deadline - now) if deadline is not None else policy.max_retry_time_s
                return fail(
                    f"{describe}: not sent{' again' if start is not None else ''}: the provider answered "
                    f"another request {limiter.pause_cause}; "
                    f"the {_seconds(limiter.paused_until - now)}s still to wait are more than the "
                    f"{_seconds(left)}s left of the retry time budget of {policy.max_retry_time_s:g}s. "
                    f"{_RAISE_BUDGET}"
                )
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
            limiter.pause(failure.retry_after_s, _provider_answer(failure))
        await limiter.wake()

        if not failure.retriable:
            return fail(f"{describe}: {failure.message} (not retried)")
        retries.append(failure.short)
        if len(retries) > policy.max_retries:
            return fail(f"{describe}: gave up, last error {failure.message}")
        delay = failure.retry_after_s if failure.retry_after_s is not None else policy.backoff(len(retries), rng)
        left = deadline - time.monotonic()
        if delay >= left:
            if failure.retry_after_s is not None:
                return fail(
                    f"{describe}: the provider answered {_provider_answer(failure)}, longer than the "
                    f"{_seconds(max(0.0, left))}s left of the retry time budget of {policy.max_retry_time_s:g}s; "
                    f"not waiting. {_RAISE_BUDGET} Last error {failure.message}"
                )
            return fail(
                f"{describe}: retry time budget of {policy.max_retry_time_s:g}s exhausted "
                f"(next wait {delay:.2f}s), last error {failure.message}"
            )
        log.debug("%s: %s, retry %d in %.2fs", describe, failure.short, len(retries), delay)
        await asyncio.sleep(delay)

