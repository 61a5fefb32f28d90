"""Request shards: the unit of work of one Snakemake job (one model load).

Study rules write their requests to a shard file; the generic `answer_requests_*`
rules answer a shard through the runner and write one response row per request,
in order. The shard file also names its reply policy (``llm.replies``) and how
many asks a reply gets, so the rule stays the same for every study and stage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from context_effects.llm.ledger import Ledger
from context_effects.llm.replies import resolve_policy
from context_effects.llm.runner import invalid_reason, run_requests
from context_effects.llm.store import ResponseStore, request_from_json, request_json, result_to_row
from context_effects.llm.types import LLMRequest

META_KEY = b"context_effects.shard"


class ShardIncomplete(RuntimeError):
    """Some requests of a shard failed; rerunning the job retries only those."""


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
    reply_policy = resolve_policy(policy["reply_policy"], policy["policy_params"])
    ledger = Ledger.open(ledger_path, job=str(requests_path), backend=backend.name)
    results = run_requests(
        requests,
        backend,
        store,
        batch_size=batch_size,
        ledger=ledger,
        progress=progress,
        reply_policy=reply_policy,
        max_attempts=policy["max_attempts"],
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
