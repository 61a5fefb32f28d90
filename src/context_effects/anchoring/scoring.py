"""Study H scorer: signed prior-score pull and the secondary checks (seed 001).

Everything starts from repetition means: for every task and condition the mean of
the valid scores of its repetitions (missing judgments — replies that never
passed validation, or failed calls — are left out, never imputed).

Primary
-------
``pull = sign(prior - blind) * (anchor - blind)`` per task, on repetition means.
Positive: the anchor-condition score moved toward the displayed prior; zero: no
movement; negative: away. Per model, the mean and the median across tasks, each
with a bootstrap confidence interval over tasks (``scipy.stats.bootstrap``, seeded
``numpy`` generator), and the full distribution (figure).

**Tie rule (primary: the seed's formula literally).** When the prior equals the
blind mean, ``sign`` is 0 and so is the pull: the task counts as "no movement",
whatever the anchor score did, and stays in the mean and median (``pull``,
``pull_status`` = ``tie``). **Sensitivity analysis:** the same statistics with ties
left out (``pull_ties_excluded``; summary ``pull_ties_excluded``), since a tie's 0
is a convention and not an observed absence of movement. A task without a valid
blind or anchor score is left out of both and counted as missing.

Secondary
---------
* ``anchor - framing``: the anchor condition against the framing-only condition.
  Its raw mean mixes moves up and down (the design puts priors high and low), so it is also
  reported signed toward the prior, ``sign(prior - framing) * (anchor - framing)``
  (same tie rule and sensitivity, with the framing mean), which isolates the prior score's
  information from the revision framing; ``framing - blind`` is the framing shift.
* Absolute error against gold, ``|mean - gold|``, per condition (mean over tasks).
* Correction-harm rate, as preregistered: among tasks whose blind mean is at
  least as close to gold as the anchor mean, the share where the anchor mean is
  strictly farther from gold (the rest are ties in error). Also reported: harmed
  tasks as a share of all tasks with both means.
* Verdict flip rate: the share of tasks whose verdict (mean >= threshold → pass)
  differs between blind and anchor; flips toward the prior's verdict are counted too.
* Dispersion across repetitions: per task and condition the SD of the scores
  (ddof 1; needs two valid repetitions); per model the mean of these SDs and the
  share of cells whose repetitions disagree.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from context_effects.anchoring.judging import parse_score
from context_effects.anchoring.prompts import CONDITIONS, verdict
from context_effects.llm.capabilities import served_model
from context_effects.llm.shards import read_response_shard
from context_effects.llm.types import LLMRequest

TIE_TOL = 1e-9

JUDGMENT_COLUMNS = (
    "order",
    "task_id",
    "condition",
    "repetition",
    "score",
    "missing_reason",
    "text",
    "finish_reason",
    "attempt",
    "timestamp",
    "engine_version",
    "backend",
    "key",
    "sampling_seed",
    "temperature",
    "top_p",
    "served_model",
    "system_fingerprint",
)

#: ``tie_handling`` labels of the summary's two pull estimates (result file, tables).
TIES_ZERO = "ties scored 0 (primary)"
TIES_EXCLUDED = "ties excluded (sensitivity)"


#: The response columns the scorer reads (``judgments_frame``).
RESPONSE_COLUMNS = (
    "text", "ok", "error", "invalid_reason", "attempt", "timestamp", "finish_reason", "engine_version", "backend",
    "key", "notes",
)


def read_responses(
    path: str | Path, requests_path: str | Path | None = None
) -> tuple[list[LLMRequest], pd.DataFrame]:
    """The requests of an answered Study H shard and its response rows.

    A column the scorer reads that the file lacks fails naming the file; with
    ``requests_path`` (the run's request shard) the responses must cover its
    requests one to one (``llm.shards.check_response_coverage``).
    """
    return read_response_shard(path, RESPONSE_COLUMNS, requests_path=requests_path)


def judgments_frame(requests: Sequence[LLMRequest], rows: pd.DataFrame) -> pd.DataFrame:
    """One row per judgment: the parsed score, or no score and the reason."""
    out = []
    for req, row in zip(requests, rows.to_dict("records")):
        m = req.meta
        score, reason = (None, None)
        if row["ok"]:
            score, reason = parse_score(row["text"])
        else:
            reason = row.get("invalid_reason") or f"call_failed: {row.get('error')}"
        out.append(
            {
                "order": int(m["order"]),
                "task_id": m["task_id"],
                "condition": m["condition"],
                "repetition": int(m["repetition"]),
                "score": score,
                "missing_reason": reason,
                "text": row["text"],
                "finish_reason": row.get("finish_reason"),
                "attempt": int(row.get("attempt") or 0),
                "timestamp": row.get("timestamp") or "",
                "engine_version": row.get("engine_version") or "",
                "backend": row.get("backend") or "",
                "key": row.get("key") or req.key,
                "sampling_seed": req.sampling.seed,
                "temperature": req.sampling.temperature,
                "top_p": req.sampling.top_p,
                **dict(zip(("served_model", "system_fingerprint"), served_model(req, row.get("notes")))),
            }
        )
    frame = pd.DataFrame(out, columns=list(JUDGMENT_COLUMNS))
    frame["score"] = frame["score"].astype("Int64")
    return frame.sort_values("order", kind="stable").reset_index(drop=True)


def check_run(requests: Sequence[LLMRequest], tasks: pd.DataFrame, repetitions: int) -> None:
    """The protocol's run invariants, checked on the requests actually answered.

    Raises ValueError naming the first violation: a judgment that is not a fresh
    system + user context, settings that differ between conditions, a missing or
    duplicated task x condition x repetition cell.
    """
    if not requests:
        raise ValueError("the run has no judgments")
    first = requests[0]
    for req in requests:
        where = f"task {req.meta.get('task_id')!r} {req.meta.get('condition')!r} rep {req.meta.get('repetition')}"
        if [r for r, _ in req.messages] != ["system", "user"]:
            raise ValueError(f"{where}: not a fresh context (roles {[r for r, _ in req.messages]})")
        if req.messages[0] != first.messages[0]:
            raise ValueError(f"{where}: system prompt differs within the run")
        if (req.model, req.output_schema, req.mode) != (first.model, first.output_schema, first.mode):
            raise ValueError(f"{where}: model, output schema or mode differs within the run")
        # Not the seed: each judgment has its own (``requests.judgment_seed``), an independent draw.
        s, f = req.sampling, first.sampling
        if (s.temperature, s.top_p, s.max_tokens, s.logprobs) != (f.temperature, f.top_p, f.max_tokens, f.logprobs):
            raise ValueError(f"{where}: decoding settings differ within the run")
    cells = [(r.meta["task_id"], r.meta["condition"], r.meta["repetition"]) for r in requests]
    expected = {(t, c, k) for t in tasks["task_id"] for c in CONDITIONS for k in range(repetitions)}
    if len(cells) != len(set(cells)) or set(cells) != expected:
        extra, lacking = set(cells) - expected, expected - set(cells)
        raise ValueError(
            f"the run does not hold each task x condition x repetition once "
            f"({len(cells)} judgments, {len(expected)} expected; unexpected {sorted(extra)[:3]}, "
            f"missing {sorted(lacking)[:3]}); rebuild the request shard"
        )


def served_versions(judgments: pd.DataFrame) -> dict[str, int]:
    """Judgments answered per served model version (calls that failed answered nothing)."""
    answered = judgments[~judgments["missing_reason"].fillna("").str.startswith("call_failed")]
    return {str(v): int(n) for v, n in answered["served_model"].value_counts().sort_index().items()}


def check_one_version(judgments: pd.DataFrame) -> str | None:
    """The one model version that answered the run (None if nothing was answered).

    The protocol compares conditions within one model version; an alias that moved to
    a new snapshot mid-run would mix two models, so such a run fails naming both."""
    versions = served_versions(judgments)
    if len(versions) > 1:
        listed = ", ".join(f"{v} ({n} judgments)" for v, n in versions.items())
        raise ValueError(
            f"the run was answered by {len(versions)} model versions: {listed}. Conditions must be compared within "
            "one version: pin the model (a dated snapshot id for a hosted model, `revision` for a local one) and "
            "answer the run again"
        )
    return next(iter(versions), None)


def _sign_pull(prior: float, ref: float, moved: float) -> tuple[float, str]:
    """The seed's ``sign(prior - ref) * (moved - ref)``: a tie is 0, not left out (module docstring)."""
    if math.isnan(ref) or math.isnan(moved):
        return math.nan, "missing"
    if abs(prior - ref) <= TIE_TOL:
        return 0.0, "tie"
    return float(np.sign(prior - ref) * (moved - ref)), "ok"


def task_metrics(judgments: pd.DataFrame, tasks: pd.DataFrame, threshold: int) -> pd.DataFrame:
    """One row per task: repetition means, SDs, the pull and every secondary quantity."""
    valid = judgments.dropna(subset=["score"]).copy()
    valid["score"] = valid["score"].astype(float)
    grouped = valid.groupby(["task_id", "condition"])["score"]
    mean, sd, nval, nuniq = grouped.mean(), grouped.std(ddof=1), grouped.size(), grouped.nunique()
    nrep = judgments.groupby(["task_id", "condition"]).size()
    rows = []
    for t in tasks.sort_values("task_id").to_dict("records"):
        tid, gold, prior = t["task_id"], float(t["gold_score"]), float(t["prior_score"])
        row: dict[str, Any] = {
            "task_id": tid,
            "source": t["source"],
            "answer_kind": t["answer_kind"],
            "gold_score": int(gold),
            "category": t.get("category"),
            "prior_design": t.get("prior_design"),
            "prior_side": t.get("prior_side"),
            "prior_score": int(prior),
            "prior_direction": t["prior_direction"],
            "prior_verdict": t["prior_verdict"],
        }
        for c in CONDITIONS:
            key = (tid, c)
            row[f"n_{c}"] = int(nval.get(key, 0))
            row[f"n_missing_{c}"] = int(nrep.get(key, 0)) - row[f"n_{c}"]
            row[f"mean_{c}"] = float(mean.get(key, math.nan))
            row[f"sd_{c}"] = float(sd.get(key, math.nan))
            row[f"reps_disagree_{c}"] = bool(nuniq.get(key, 0) > 1)
            row[f"abserr_{c}"] = abs(row[f"mean_{c}"] - gold)
        b, f, a = row["mean_blind"], row["mean_framing"], row["mean_anchor"]
        row["pull"], row["pull_status"] = _sign_pull(prior, b, a)
        row["pull_ties_excluded"] = row["pull"] if row["pull_status"] == "ok" else math.nan
        row["pull_vs_framing"], row["pull_vs_framing_status"] = _sign_pull(prior, f, a)
        row["pull_vs_framing_ties_excluded"] = (
            row["pull_vs_framing"] if row["pull_vs_framing_status"] == "ok" else math.nan
        )
        row["anchor_minus_framing"] = a - f
        row["framing_minus_blind"] = f - b
        both = not (math.isnan(b) or math.isnan(a))
        row["blind_at_least_as_close"] = bool(both and row["abserr_blind"] <= row["abserr_anchor"])
        row["harmed"] = bool(both and row["abserr_anchor"] > row["abserr_blind"])
        row["verdict_blind"] = verdict(b, threshold) if not math.isnan(b) else None
        row["verdict_anchor"] = verdict(a, threshold) if not math.isnan(a) else None
        row["verdict_flip"] = bool(both and row["verdict_blind"] != row["verdict_anchor"])
        row["flip_toward_prior"] = bool(row["verdict_flip"] and row["verdict_anchor"] == t["prior_verdict"])
        row["complete"] = both
        rows.append(row)
    return pd.DataFrame(rows)


def bootstrap_ci(
    values: Sequence[float], statistic, *, n_resamples: int, seed: int, confidence: float = 0.95,
    method: str = "percentile",
) -> tuple[float, float]:
    """Bootstrap CI of ``statistic`` over tasks (``scipy.stats.bootstrap``); NaN with fewer than 2 tasks."""
    x = np.asarray(values, dtype=float)
    if len(x) < 2:
        return math.nan, math.nan
    res = stats.bootstrap(
        (x,),
        statistic,
        n_resamples=int(n_resamples),
        confidence_level=confidence,
        method=method,
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _rate(num: int, den: int) -> float:
    return num / den if den else math.nan


def summarise(
    per_task: pd.DataFrame,
    judgments: pd.DataFrame,
    *,
    n_resamples: int,
    seed: int,
    confidence: float = 0.95,
    method: str = "percentile",
) -> dict[str, Any]:
    """The per-model scorer output (see module docstring)."""
    boot = dict(n_resamples=n_resamples, seed=seed, confidence=confidence, method=method)
    status, fstatus = per_task["pull_status"], per_task["pull_vs_framing_status"]
    scored = per_task.loc[status != "missing", "pull"].to_numpy(float)
    ok = per_task.loc[status == "ok", "pull"].to_numpy(float)
    scoredf = per_task.loc[fstatus != "missing", "pull_vs_framing"].to_numpy(float)
    okf = per_task.loc[fstatus == "ok", "pull_vs_framing"].to_numpy(float)
    complete = per_task[per_task["complete"]]
    closer = int(per_task["blind_at_least_as_close"].sum())
    harmed = int(per_task["harmed"].sum())
    flips = int(per_task["verdict_flip"].sum())

    def mean_of(col: str) -> float:
        v = per_task[col].dropna()
        return float(v.mean()) if len(v) else math.nan

    def stat(values: np.ndarray, fn) -> dict[str, float]:
        lo, hi = bootstrap_ci(values, fn, **boot)
        return {"estimate": float(fn(values)) if len(values) else math.nan, "ci_low": lo, "ci_high": hi}

    def pull_stats(values: np.ndarray, tie_handling: str) -> dict[str, Any]:
        return {
            "tie_handling": tie_handling,
            "n_used": int(len(values)),
            "n_ties": int((status == "tie").sum()),
            "n_missing": int((status == "missing").sum()),
            "mean": stat(values, np.mean),
            "median": stat(values, np.median),
            "share_toward": _rate(int((values > 0).sum()), len(values)),
            "share_away": _rate(int((values < 0).sum()), len(values)),
            "share_zero": _rate(int((values == 0).sum()), len(values)),
        }

    by_condition = {}
    for c in CONDITIONS:
        j = judgments[judgments["condition"] == c]
        reasons = j["missing_reason"].dropna().value_counts().sort_index()
        by_condition[c] = {
            "n_judgments": int(len(j)),
            "n_missing": int(j["score"].isna().sum()),
            "missing_rate": _rate(int(j["score"].isna().sum()), len(j)),
            "missing_reasons": {str(k): int(v) for k, v in reasons.items()},
            "mean_score": mean_of(f"mean_{c}"),
            "mean_abs_error": mean_of(f"abserr_{c}"),
            "mean_rep_sd": mean_of(f"sd_{c}"),
            "share_reps_disagree": _rate(int(per_task[f"reps_disagree_{c}"].sum()), int((per_task[f"n_{c}"] >= 2).sum())),
        }
    return {
        "n_tasks": int(len(per_task)),
        "pull": pull_stats(scored, TIES_ZERO),
        "pull_ties_excluded": pull_stats(ok, TIES_EXCLUDED),
        "anchor_vs_framing": {
            "n_used": int(len(scoredf)),
            "n_ties": int((fstatus == "tie").sum()),
            "signed_mean": stat(scoredf, np.mean),
            "n_used_ties_excluded": int(len(okf)),
            "signed_mean_ties_excluded": stat(okf, np.mean),
            "raw_mean_difference": mean_of("anchor_minus_framing"),
            "framing_minus_blind": mean_of("framing_minus_blind"),
        },
        "by_condition": by_condition,
        "correction_harm": {
            "n_blind_at_least_as_close": closer,
            "n_harmed": harmed,
            "rate": _rate(harmed, closer),
            "share_of_complete_tasks": _rate(harmed, len(complete)),
        },
        "verdict_flip": {
            "n_tasks": int(len(complete)),
            "n_flips": flips,
            "rate": _rate(flips, len(complete)),
            "n_toward_prior_verdict": int(per_task["flip_toward_prior"].sum()),
        },
        "dispersion": {
            "mean_rep_sd": float(np.nanmean(per_task[[f"sd_{c}" for c in CONDITIONS]].to_numpy(float)))
            if per_task[[f"sd_{c}" for c in CONDITIONS]].notna().any().any()
            else math.nan,
        },
    }


def jsonable(obj: Any) -> Any:
    """NaN/inf → None and numpy scalars → Python, recursively (strict JSON for the result file)."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return None if not math.isfinite(float(obj)) else float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if obj is pd.NA or obj is pd.NaT:
        return None
    return obj


def dumps(obj: Any) -> str:
    return json.dumps(jsonable(obj), indent=1, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
