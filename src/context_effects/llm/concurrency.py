"""Bounded adaptive concurrency (AIMD) for the hosted-API backends.

- :class:`AIMDController` — the loop-agnostic numeric state of the concurrency
  limit, so a limit learned in one ``run`` carries over to the next.
- :class:`AdaptiveLimiter` — the per-event-loop gate built on a controller.

The retry loop that feeds them (429s, 5xx) is :mod:`context_effects.llm.retry`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any


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
    rate limit, so every request (not just the one that got the 429) waits it out,
    unless the pause outlasts what that request may wait (see :meth:`acquire`).
    """

    def __init__(self, controller: AIMDController) -> None:
        self.controller = controller
        self._cond = asyncio.Condition()
        self._in_flight = 0
        self._paused_until = 0.0
        # The provider's answer that set the pause, for the errors of the requests it stops.
        self.pause_cause = ""
        self.max_in_flight = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def paused_until(self) -> float:
        """``time.monotonic()`` at which the shared pause ends (in the past when none)."""
        return self._paused_until

    def pause(self, seconds: float, cause: str = "") -> None:
        until = time.monotonic() + seconds
        if until > self._paused_until:
            self._paused_until, self.pause_cause = until, cause

    async def acquire(self, deadline: float | None = None, *, max_pause_s: float | None = None) -> int | None:
        """Wait for a slot; returns the dispatch epoch, or None if ``deadline`` passed first.

        Also None, at once, while a shared pause lasts until ``deadline`` or later (a
        caller without a deadline yet: more than ``max_pause_s`` from now): such a
        caller cannot be dispatched in time, and waiting would hold its job for as long
        as the provider asked, a Retry-After of years included.
        """
        async with self._cond:
            while True:
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return None
                wake = deadline
                if self._paused_until > now:
                    limit = deadline if deadline is not None else (
                        now + max_pause_s if max_pause_s is not None else None)
                    if limit is not None and self._paused_until >= limit:
                        return None
                    wake = self._paused_until
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

