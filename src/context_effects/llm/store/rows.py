"""Rows of the response store: their schema, the request each row answers, and the
conversion between a row and an ``LLMResult``.

A row's ``key`` is the hash of its request (``LLMRequest.key``); the request itself is
stored beside it (``request_json``), so a key read back can be recomputed rather than
trusted (``request_from_json``: import and quarantine notes do so).
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from context_effects.llm.types import LLMRequest, LLMResult, ModelRef, Sampling
from context_effects.utc import utc_now_iso

# The store writer's version, in the footer of every segment and export it writes
# (segments.FORMAT_KEY). "2": the file carries the sha256 of its own bytes; "1" was
# written before checksums existed (segments.LEGACY_FORMAT), with the same rows. So a
# file without checksum that says "2" was stripped of it, whatever the store around it says.
STORE_FORMAT = "2"

SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("request_json", pa.string(), nullable=False),
        pa.field("text", pa.string()),
        pa.field("finish_reason", pa.string()),
        pa.field("tokens_in", pa.int64()),
        pa.field("tokens_out", pa.int64()),
        pa.field("first_token_logprobs", pa.string()),
        pa.field("probe_probs", pa.string()),
        pa.field("latency_s", pa.float64()),
        pa.field("attempt", pa.int64()),
        pa.field("backend", pa.string()),
        pa.field("engine_version", pa.string()),
        pa.field("timestamp", pa.string()),
        pa.field("cost_usd", pa.float64()),
        pa.field("notes", pa.string()),
    ],
    metadata={"context_effects.store_format": STORE_FORMAT},  # segments.FORMAT_KEY
)
COLUMNS = tuple(SCHEMA.names)


def request_json(req: LLMRequest) -> str:
    return json.dumps(
        {"request": req.canonical(), "meta": req.meta},
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )


def request_from_json(blob: str) -> LLMRequest:
    """Rebuild the request a row answered (its ``key`` is recomputed, not trusted)."""
    obj = json.loads(blob)
    c = obj["request"]
    sampling = dict(c["sampling"])
    sampling["probe_tokens"] = tuple(sampling.get("probe_tokens") or ())
    return LLMRequest(
        model=ModelRef(**c["model"]),
        messages=tuple((m[0], m[1]) for m in c["messages"]),
        sampling=Sampling(**sampling),
        output_schema=c.get("output_schema"),
        sample_index=c.get("sample_index", 0),
        attempt=c.get("attempt", 0),
        mode=c.get("mode", "chat"),
        namespace=c.get("namespace"),
        meta=obj.get("meta") or {},
    )


def _dump(obj: Any) -> str | None:
    return None if obj is None else json.dumps(obj, sort_keys=True, ensure_ascii=False)


def _load(blob: str | None) -> Any:
    return None if blob is None else json.loads(blob)


def result_to_row(res: LLMResult, req: LLMRequest, *, timestamp: str | None = None) -> dict[str, Any]:
    return {
        "key": res.key,
        "request_json": request_json(req),
        "text": res.text,
        "finish_reason": res.finish_reason,
        "tokens_in": res.tokens_in,
        "tokens_out": res.tokens_out,
        "first_token_logprobs": _dump(res.first_token_logprobs),
        "probe_probs": _dump(res.probe_probs),
        "latency_s": res.latency_s,
        "attempt": res.attempt,
        "backend": res.backend,
        "engine_version": res.engine_version,
        "timestamp": res.timestamp or timestamp or utc_now_iso(),
        "cost_usd": res.cost_usd,
        "notes": res.notes,
    }


def row_to_result(row: dict[str, Any]) -> LLMResult:
    return LLMResult(
        key=row["key"],
        text=row["text"],
        finish_reason=row["finish_reason"],
        tokens_in=row["tokens_in"],
        tokens_out=row["tokens_out"],
        first_token_logprobs=_load(row["first_token_logprobs"]),
        probe_probs=_load(row["probe_probs"]),
        latency_s=row["latency_s"],
        attempt=row["attempt"] or 0,
        backend=row["backend"] or "",
        engine_version=row["engine_version"] or "",
        timestamp=row["timestamp"] or "",
        cost_usd=row["cost_usd"],
        notes=row["notes"] or "",
    )


def conform(table: pa.Table) -> pa.Table:
    """Cast a foreign table (e.g. an import) to the store schema, or fail loudly."""
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(f"not a response-store table: missing columns {missing}")
    return table.select(list(COLUMNS)).cast(SCHEMA)
