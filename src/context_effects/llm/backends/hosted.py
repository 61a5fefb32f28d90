"""The driver the hosted-API backends share (openai, openai_compatible, anthropic).

:class:`HostedAPIBackend` owns everything about *when* to call: the API key from
the environment, deduplication of identical requests, a worker pool under the
adaptive concurrency limit (:mod:`context_effects.llm.concurrency`), the retry
policy (:mod:`context_effects.llm.retry`), and the Batch-API skeleton with
batch ids persisted under ``state_dir``. Subclasses supply the SDK-specific
parts: building clients, one call, and the provider's batch protocol.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import os
import random
import tempfile
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from context_effects.llm.async_bridge import iterate_async
from context_effects.llm.backends.base import Backend
from context_effects.llm.concurrency import AdaptiveLimiter, AIMDController
from context_effects.llm.retry import RetryPolicy, SDKErrors, call_with_retries
from context_effects.llm.secrets import read_api_key
from context_effects.llm.types import LLMRequest, LLMResult
from context_effects.utc import utc_now_iso

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Withheld(Exception):
    """A call not sent because the job is stopping (see ``request_stop``)."""


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
    # Each call's result is handed out as it completes (iterate_async).
    incremental = True
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
        # Set by request_stop() (from a signal handler, in the main thread); read by
        # the workers on the event loop's thread before each new call.
        self._stop_requested = False

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
            timestamp=utc_now_iso(),
        )
        base.update(fields)
        if base.get("notes"):
            base["notes"] = self._scrub(base["notes"])
        if base.get("error"):
            base["error"] = self._scrub(base["error"])
        return LLMResult(**base)

    def _failed(self, request: LLMRequest, error: str, notes: str = "") -> LLMResult:
        # Provider error texts can echo a key back: scrubbed like every result field.
        return LLMResult.failure(
            request, self._scrub(error), backend=self.name, engine_version=self.engine_version(),
            notes=self._scrub(notes) if notes else "",
        )

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

    def request_stop(self) -> None:
        self._stop_requested = True

    def run(self, requests: Sequence[LLMRequest]) -> Iterator[LLMResult]:
        return self._iterate(requests, None)  # type: ignore[return-value] - no heartbeats, no Nones

    def stream(self, requests: Sequence[LLMRequest], *, heartbeat_s: float | None = None) -> Iterator[LLMResult | None]:
        return self._iterate(requests, heartbeat_s)

    def _iterate(self, requests: Sequence[LLMRequest], heartbeat_s: float | None) -> Iterator[LLMResult | None]:
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
            if self._stop_requested:
                # Requests never sent after a stop get no result: nothing was paid,
                # and a failure here would be counted as a call.
                return
            for request in unique:
                if request.key not in delivered:
                    deliver(self._failed(request, f"{self.name}: no result was produced for this request"))

        return iterate_async(produce, heartbeat_s=heartbeat_s)

    async def _run_direct(
        self, ctx: RunContext, requests: list[LLMRequest], deliver: Callable[[LLMResult], None]
    ) -> None:
        pending = iter(requests)

        # A fixed pool of workers (no more than the concurrency cap) rather than one
        # task per request: 150k tasks parked on one Condition would make every
        # release wake 150k waiters.
        async def worker() -> None:
            # After a stop, no new call starts; those in flight finish and are delivered.
            while not self._stop_requested:
                request = next(pending, None)
                if request is None:
                    return
                try:
                    result = await self._answer(ctx, request)
                except Exception as exc:  # noqa: BLE001
                    result = self._failed(request, f"{type(exc).__name__}: {exc}")
                if result is not None:
                    deliver(result)

        n = min(len(requests), self.controller.maximum)
        await asyncio.gather(*(worker() for _ in range(n)))

    async def _answer(self, ctx: RunContext, request: LLMRequest) -> LLMResult | None:
        """One request with retries; ``None`` if it was never sent because of a stop."""
        client = self._client(ctx, request)
        withheld = False

        async def attempt(timeout: float) -> LLMResult:
            nonlocal withheld
            # Checked once a concurrency slot is held, right before sending: a
            # worker takes its request before it waits for a slot (or for a retry),
            # and after a stop such a request must not go out.
            if self._stop_requested:
                withheld = True
                raise _Withheld  # not retried: classified as an internal error
            return await self._call(client, request, timeout)

        outcome = await call_with_retries(
            attempt,
            limiter=ctx.limiter,
            policy=self.retry_policy,
            errors=self.sdk_errors,
            rng=self._rng,
            describe=f"{self.name} {request.model.model_id}",
            scrub=self._scrub,
        )
        if withheld:
            return None
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
                if self._stop_requested:
                    return
                state = await self._batch_submit(ctx, client, requests, digest)
                state.update(provider=self.name, keys_sha256=digest, n_requests=len(requests), submitted_at=utc_now_iso())
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
                if self._stop_requested:
                    # The batch id is kept: the rerun polls this batch instead of paying again.
                    return
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
