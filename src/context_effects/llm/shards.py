"""Request shards: the unit of work of one Snakemake job (one model load).

Study rules write their requests to a shard file; the generic `answer_requests_*`
rules answer a shard through the runner and write one response row per request,
in order. The shard file also says how replies are validated, so the rule stays
the same for generation and judging.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from context_effects.llm.judging import parse_rating, reask_with_reminder
from context_effects.llm.ledger import Ledger
from context_effects.llm.runner import invalid_reason, run_requests
from context_effects.llm.store import ResponseStore, request_from_json, request_json, result_to_row
from context_effects.llm.types import LLMRequest

META_KEY = b"context_effects.shard"


class ShardIncomplete(RuntimeError):
    """Some requests of a shard failed; rerunning the job retries only those."""


def _nonempty(text: str) -> tuple[str | None, str | None]:
    stripped = (text or "").strip()
    return (stripped, None) if stripped else (None, "empty_completion")


def generation_reask(step: float, cap: float):
    """seed 002 App. A.6: each retry bumps temperature by `step` (capped) and the seed by one."""

    def reask(req: LLMRequest, attempt: int, reason: str) -> LLMRequest:
        s = req.sampling
        sampling = dataclasses.replace(
            s,
            temperature=min(cap, s.temperature + step),
            seed=None if s.seed is None else s.seed + 1,
        )
        meta = {**req.meta, "reask_reason": reason, "reask_of": req.key}
        return dataclasses.replace(req, sampling=sampling, attempt=attempt, meta=meta)

    return reask


def _hook(path: str) -> Any:
    """A study's own reply validator or re-ask function, named ``context_effects.<module>:<function>``.

    Lets a study with its own reply format (Study H's ``{"score": n}``) plug into the
    generic answering rules; only this package's modules may be named.
    """
    module, _, name = path.partition(":")
    if not module.startswith("context_effects.") or not name:
        raise ValueError(f"hook {path!r} must look like 'context_effects.<module>:<function>'")
    fn = getattr(importlib.import_module(module), name, None)
    if not callable(fn):
        raise ValueError(f"hook {path!r}: {module} has no function {name!r}")
    return fn


def write_request_shard(
    path: str | Path,
    requests: Sequence[LLMRequest],
    *,
    validator: str = "none",
    max_attempts: int = 1,
    retry_temperature_step: float = 0.1,
    retry_temperature_cap: float = 1.0,
    reask: str | None = None,
) -> None:
    """Write requests (with their meta) and the validation policy of the shard.

    ``validator`` is 'none', 'nonempty', 'rating' or a hook path
    ('context_effects.<module>:<function>', returning ``(value, reason)``);
    ``reask`` optionally names the re-ask hook for a hook validator.
    """
    if validator not in ("none", "nonempty", "rating") and ":" not in validator:
        raise ValueError(
            f"unknown validator {validator!r}; use 'none', 'nonempty', 'rating' or 'context_effects.<module>:<function>'"
        )
    for hook in (validator if ":" in validator else None, reask):
        if hook is not None:
            _hook(hook)  # fail when the shard is written, not when it is answered
    policy = {
        "validator": validator,
        "max_attempts": max_attempts,
        "retry_temperature_step": retry_temperature_step,
        "retry_temperature_cap": retry_temperature_cap,
    }
    if reask is not None:
        policy["reask"] = reask
    table = pa.table({"request_json": [request_json(r) for r in requests]})
    table = table.replace_schema_metadata({META_KEY: json.dumps(policy).encode()})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


def read_request_shard(path: str | Path) -> tuple[list[LLMRequest], dict[str, Any]]:
    table = pq.read_table(path)
    meta = table.schema.metadata or {}
    policy = json.loads(meta.get(META_KEY, b"{}"))
    policy.setdefault("validator", "none")
    policy.setdefault("max_attempts", 1)
    return [request_from_json(b) for b in table.column("request_json").to_pylist()], policy


def read_response_shard(path: str | Path, columns: Sequence[str] | None = None) -> tuple[list[LLMRequest], Any]:
    """The requests of an answered shard and its response rows (a DataFrame), read once.

    ``columns`` limits the rows to those columns (``request_json`` is always read);
    ``None`` reads all of them.
    """
    cols = None if columns is None else ["request_json", *[c for c in columns if c != "request_json"]]
    table = pq.read_table(path, columns=cols).to_pandas()
    return [request_from_json(b) for b in table["request_json"]], table


def answer_shard(
    requests_path: str | Path,
    responses_path: str | Path,
    ledger_path: str | Path,
    backend,
    store: ResponseStore,
    *,
    batch_size: int = 256,
    progress: bool = True,
) -> Ledger:
    """Answer one shard; every completed batch is in the store before the next starts."""
    requests, policy = read_request_shard(requests_path)
    validator = reask = None
    if policy["validator"] == "rating":
        validator, reask = parse_rating, reask_with_reminder
    elif policy["validator"] == "nonempty":
        validator = _nonempty
        reask = generation_reask(policy.get("retry_temperature_step", 0.1), policy.get("retry_temperature_cap", 1.0))
    elif ":" in policy["validator"]:
        validator = _hook(policy["validator"])
        reask = _hook(policy["reask"]) if policy.get("reask") else None
    ledger = Ledger.open(ledger_path, job=str(requests_path), backend=backend.name)
    results = run_requests(
        requests,
        backend,
        store,
        batch_size=batch_size,
        ledger=ledger,
        progress=progress,
        validator=validator,
        max_attempts=policy["max_attempts"],
        reask=reask,
    )
    ledger.save(ledger_path)
    # A failed call (not an invalid reply) must not become a finished output:
    # fail the job so Snakemake reruns it; answers already paid for are in the
    # store, so the rerun sends only the failures.
    failed = [(req, res) for req, res in zip(requests, results) if res.error and invalid_reason(res) is None]
    if failed:
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
    return ledger
