"""How many requests the run made, per study, stage and model, from its shards.

``results/tables/run/request_counts.csv`` (rule ``request_counts``): one row per study x
stage x model, then per study a total over the seed's roster and a total over every
model. Its counts come from the run's files, not from its design:

* ``requests``: rows of the request shards (``results/requests/<study>/<stage>/<model>/
  <shard>.parquet``), one per question asked; a re-ask is not a new request;
* ``answered``: rows of the response shards (``results/responses/...``, the same path)
  with ``ok`` true; ``failed = requests - answered`` (replies that stayed invalid after
  their last re-ask: a shard with a failed call writes no response shard);
* ``calls``: what the shard's ledger (``results/ledgers/.../<shard>.json``) says was
  sent to the model and paid for, re-asks and every attempt at the shard (interrupted
  or rerun) included; ``cache_hits``: requests the response store served. A replay run
  has requests and answers, and no calls. Empty where a shard has no ledger.

``roster`` says whether the model is one of the seed paper's: for Study A, a model of
``amel.models`` (true) or of ``amel.extra_models`` (false); every model of the other
studies is true. The totals have ``stage = all`` and ``model =`` :data:`ROSTER_TOTAL`
(roster models only, ``roster`` true) or :data:`EVERY_TOTAL` (every model, ``roster``
false). The seed paper's "75,898 API calls to 11 models" is compared with Study A's
roster total of ``requests`` (one request is one call of the seed's design).

The study's registry is ``run`` (``context_effects.outputs.STUDY_PACKAGES``): its one
table is listed with the studies' tables, so the run report, the reproduction report
and the paper read it like any other.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects.outputs import Built, Registry, TableSpec

STUDY = "run"
NAME = "request_counts"
#: ``model`` of a study's total over its roster models, and over every model it asked.
ROSTER_TOTAL = "all (roster)"
EVERY_TOTAL = "all (every model)"
#: ``stage`` of the totals.
ALL_STAGES = "all"
COLUMNS = ["study", "stage", "model", "roster", "shards", "requests", "answered", "failed", "calls", "cache_hits"]
_COUNTS = ["shards", "requests", "answered", "failed", "calls", "cache_hits"]

PathLike = str | Path


class ShardLayoutError(ValueError):
    """A shard path that is not ``.../responses/<study>/<stage>/<model>/<shard>.parquet``."""


def shard_key(response_path: PathLike) -> tuple[str, str, str]:
    """(study, stage, model) of a response shard, from its path under ``responses/``."""
    parts = Path(response_path).parts
    at = [i for i, p in enumerate(parts) if p == "responses"]
    if not at or len(parts) - at[-1] != 5:
        raise ShardLayoutError(
            f"{response_path} is not a response shard results/responses/<study>/<stage>/<model>/<shard>.parquet")
    study, stage, model = parts[at[-1] + 1: at[-1] + 4]
    return study, stage, model


def _rows(path: PathLike) -> int:
    """Rows of a Parquet file, from its footer (no column is read)."""
    import pyarrow.parquet as pq

    return int(pq.read_metadata(path).num_rows)


def _answered(path: PathLike) -> tuple[int, int]:
    """(rows, rows with ``ok`` true) of a response shard; only its ``ok`` column is read."""
    import pyarrow.parquet as pq

    from context_effects.llm.shards import ShardMismatch

    if "ok" not in pq.read_schema(path).names:
        raise ShardMismatch(f"response shard {path} lacks column(s) ['ok']; it is not a complete response shard")
    ok = pq.read_table(path, columns=["ok"]).column("ok").to_pylist()
    return len(ok), sum(1 for v in ok if v is True)


def request_counts(
    response_paths: Sequence[PathLike],
    request_paths: Sequence[PathLike],
    ledger_paths: Sequence[PathLike | None] | None = None,
    rosters: Mapping[str, Collection[str]] | None = None,
) -> pd.DataFrame:
    """The table (module docstring): one row per study x stage x model, then per study
    its roster total and its total over every model.

    ``request_paths`` and ``ledger_paths`` are parallel to ``response_paths`` (a ledger
    path may be ``None`` or a file that does not exist: its ``calls`` stay empty).
    ``rosters`` maps a study to its roster models; a study it does not name has every
    model on its roster. A response shard whose row count differs from its request
    shard's fails, naming both (``llm.shards.ShardMismatch``).
    """
    from context_effects.llm.ledger import Ledger
    from context_effects.llm.shards import ShardMismatch

    if len(request_paths) != len(response_paths):
        raise ValueError(f"{len(response_paths)} response shards but {len(request_paths)} request shards")
    ledgers = list(ledger_paths) if ledger_paths is not None else [None] * len(response_paths)
    if len(ledgers) != len(response_paths):
        raise ValueError(f"{len(response_paths)} response shards but {len(ledgers)} ledgers")
    rosters = rosters or {}
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for response, request, ledger in zip(response_paths, request_paths, ledgers):
        key = shard_key(response)
        if Path(request).parts[-4:] != Path(response).parts[-4:]:
            raise ShardLayoutError(f"request shard {request} is not the one response shard {response} answers")
        requests = _rows(request)
        rows, answered = _answered(response)
        if rows != requests:
            raise ShardMismatch(
                f"response shard {response} has {rows} rows for the {requests} requests of {request}; delete it and "
                "rerun its answering job (answers already paid for are in the store)")
        g = groups.setdefault(key, {c: 0 for c in _COUNTS})
        g["shards"] += 1
        g["requests"] += requests
        g["answered"] += answered
        if ledger is not None and Path(ledger).is_file():
            led = Ledger.load(ledger)
            if g["calls"] is not None:
                g["calls"] += led.calls
                g["cache_hits"] += led.cache_hits
        else:
            g["calls"] = g["cache_hits"] = None  # unknown for the group: not a partial sum
    rows_out = []
    for study in sorted({k[0] for k in groups}):
        keys = sorted(k for k in groups if k[0] == study)
        roster = rosters.get(study)
        on_roster = {k: roster is None or k[2] in roster for k in keys}
        for k in keys:
            rows_out.append(_row(study, k[1], k[2], on_roster[k], [groups[k]]))
        rows_out.append(_row(study, ALL_STAGES, ROSTER_TOTAL, True, [groups[k] for k in keys if on_roster[k]]))
        rows_out.append(_row(study, ALL_STAGES, EVERY_TOTAL, False, [groups[k] for k in keys]))
    df = pd.DataFrame(rows_out, columns=COLUMNS)
    for c in _COUNTS:
        df[c] = df[c].astype("Int64")
    df["roster"] = df["roster"].astype(bool)
    return df


def _row(study: str, stage: str, model: str, roster: bool, groups: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"study": study, "stage": stage, "model": model, "roster": roster}
    for c in ("shards", "requests", "answered"):
        out[c] = sum(g[c] for g in groups)
    out["failed"] = out["requests"] - out["answered"]
    for c in ("calls", "cache_hits"):
        known = [g[c] for g in groups]
        out[c] = None if any(v is None for v in known) else sum(known)
    return out


# --- the registry entry and the rule's inputs --------------------------------------------


def inputs(config: Mapping[str, Any]) -> dict[str, list[str]]:
    """Every response shard of the run (``targets.response_shards``), the request shard
    each answers and the ledger beside it, in the same order."""
    from context_effects import targets
    from context_effects.dag import request_shard_of

    responses = targets.response_shards(config)
    return {"responses": responses, "requests": [request_shard_of(p) for p in responses],
            "ledgers": targets.ledger_files(config)}


def settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The run kind (its caveat) and Study A's roster (``amel.models``)."""
    return {"run_kind": config["run"]["kind"], "rosters": {"amel": list(config["amel"]["models"])}}


def enabled(config: Mapping[str, Any]) -> bool:
    """A run that answers any shard (a study is on and has models)."""
    from context_effects import targets

    return bool(targets.response_shards(config))


def build(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> Built:
    from context_effects.tables import run_notes

    df = request_counts(list(inputs["responses"]), list(inputs["requests"]), list(inputs["ledgers"]),
                        settings["rosters"])
    notes = [
        "requests: rows of the request shards (a re-ask is no new request); answered: responses with a valid "
        "reply; failed = requests - answered; calls: calls sent and paid, re-asks and every attempt included "
        "(from the shard ledgers); cache hits: answers served from the response store.",
        f"roster: a model of the seed paper's roster (Study A: amel.models, not amel.extra_models); "
        f"{ROSTER_TOTAL} sums those, {EVERY_TOTAL} every model.",
        *run_notes(settings["run_kind"]),
    ]
    return Built(df, notes)


REGISTRY = Registry(STUDY, [TableSpec(
    name=NAME,
    stage="run",
    caption="Requests, answers and paid calls per study, stage and model, counted from the run's request and "
            "response shards and their ledgers.",
    label="tab:request-counts",
    inputs=inputs,
    build=build,
    settings=settings,
    enabled=enabled,
)])
