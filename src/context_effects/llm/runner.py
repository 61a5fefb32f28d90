"""Run requests through a backend with the response store in front of it.

The runner, not the backends, owns caching, batching, re-asking and
accounting, so never-pay-twice and resume are implemented once:

* every key is looked up in the store first; only misses reach the backend;
* misses go out in batches of ``batch_size`` and each completed batch is
  written to the store (its own segment) and the ledger saved *before* the
  next batch starts, so a job killed mid-shard resumes from its last completed
  batch and pays for nothing twice;
* failures are returned and counted but never stored, so a rerun retries them;
* with a reply policy (``llm.replies``), a reply that fails validation is kept
  in the store (it was paid for) and re-asked under a new key (``attempt + 1``);
  after ``max_attempts`` the item is returned as a miss carrying its reason in
  ``error`` (prefixed ``INVALID_PREFIX``), never as a score.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from context_effects.llm.backends.base import Backend
from context_effects.llm.ledger import Ledger
from context_effects.llm.pricing import estimate_cost
from context_effects.llm.replies import ReplyPolicy
from context_effects.llm.secrets import redact
from context_effects.llm.store import ResponseStore, utc_now_iso
from context_effects.llm.types import LLMRequest, LLMResult

#: ``error`` prefix of an item whose reply never passed validation.
INVALID_PREFIX = "invalid_reply: "
NO_RESULT = "backend returned no result for this request"

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


class _Progress:
    """tqdm bar on stderr, or nothing when disabled or tqdm is missing."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.bar = None
        self.t0 = time.monotonic()
        if enabled:
            try:
                from tqdm import tqdm
            except ImportError:  # pragma: no cover - tqdm ships with the venv
                return
            self.bar = tqdm(
                total=total, desc=desc, unit="req", file=sys.stderr, mininterval=0.5, dynamic_ncols=True, leave=True
            )

    def update(self, n: int, led: Ledger, tokens_out: int) -> None:
        if self.bar is None:
            return
        rate = tokens_out / max(time.monotonic() - self.t0, 1e-9)
        self.bar.set_postfix(
            {"tok/s": f"{rate:.1f}", "hit": led.cache_hits, "fail": led.failures + led.invalid, "reask": led.reasks},
            refresh=False,
        )
        self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _batches(items: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


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
) -> list[LLMResult]:
    """Answer ``requests`` (results in the same order), calling ``backend`` only for store misses.

    ``reply_policy.validate(text) -> (value, reason)`` marks a reply invalid when
    ``reason`` is not None, and ``reply_policy.reask`` builds the next ask;
    without a policy every reply is used as it is. ``max_attempts`` counts the
    first ask. ``price_table`` fills ``cost_usd`` for results the backend did
    not price.
    """
    requests = list(requests)
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    if max_attempts < 1:
        raise ValueError("max_attempts must be >= 1")
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
    tries: dict[str, int] = {k: 0 for k in items}
    final: dict[str, LLMResult] = {}

    store.refresh()
    bar = _Progress(len(items), backend.name or type(backend).__name__, progress)
    tokens_out_this_run = 0

    def checkpoint() -> None:
        led.wall_s = wall_at_start + (time.monotonic() - started)
        led.save()

    def settle(item: str, req: LLMRequest, res: LLMResult, follow_up: list[str]) -> None:
        tries[item] += 1
        if res.ok and reply_policy is not None:
            _, reason = reply_policy.validate(res.text)  # type: ignore[arg-type]
            if reason is not None:
                if tries[item] < max_attempts:
                    current[item] = reply_policy.reask(req, req.attempt + 1, reason)
                    led.reasks += 1
                    follow_up.append(item)
                    return
                res = dataclasses.replace(res, error=f"{INVALID_PREFIX}{reason}")
                led.invalid += 1
                led.count_reason("invalid", reason)
        final[item] = res
        bar.update(1, led, tokens_out_this_run)

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

            miss_keys = list(misses)
            for chunk in _batches(miss_keys, batch_size):
                batch = [current[misses[k][0]] for k in chunk]
                wanted = {r.key: r for r in batch}
                got: dict[str, LLMResult] = {}
                try:
                    for res in backend.run(batch):
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
                finally:
                    # Persist whatever was answered even if the backend raised
                    # mid-batch: it has been paid for.
                    store.put_batch(got.values(), batch)
                    led.calls += len(got)
                    led.batches += 1
                    for res in got.values():
                        led.tokens_in += res.tokens_in or 0
                        led.tokens_out += res.tokens_out or 0
                        tokens_out_this_run += res.tokens_out or 0
                        if res.cost_usd is None:
                            led.cost_unknown_calls += 1
                        else:
                            led.cost_usd += res.cost_usd
                        if not res.ok:
                            led.failures += 1
                            led.count_reason("failure", _error_kind(res.error or "no text"))
                    checkpoint()
                for req in batch:
                    res = got.get(req.key)
                    if res is None:
                        res = LLMResult(
                            key=req.key,
                            text=None,
                            finish_reason=None,
                            attempt=req.attempt,
                            backend=backend.name,
                            engine_version=engine,
                            timestamp=utc_now_iso(),
                            error=NO_RESULT,
                        )
                        led.failures += 1
                        led.count_reason("failure", "no_result")
                    for item in misses[req.key]:
                        settle(item, req, res, follow_up)
            pending = follow_up
    finally:
        bar.close()
        checkpoint()

    return [final[req.key] for req in requests]
