"""Study H outputs: the result file of a model run, the summary tables' rows and the pull figure.

The result file is the artefact seed 001 requires before any finding: model,
version, provider, date, settings, raw judgments, scorer output and the
limitations fixed in advance. Its date comes from the recorded response
timestamps (never the clock at scoring time), so rescoring the same responses
writes the same bytes. ``context_effects.anchoring.outputs`` registers the tables
and the figure (captions, inputs, notes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from context_effects.anchoring.judging import SCORE_SCHEMA
from context_effects.anchoring.prompts import CONDITIONS, templates
from context_effects.anchoring.requests import STUDY, order_seed
from context_effects.anchoring.scoring import (
    check_one_version,
    check_run,
    dumps,
    judgments_frame,
    read_responses,
    served_versions,
    summarise,
    task_metrics,
)
from context_effects.anchoring.tasks import GOLD_RULE, PRIOR_DESIGN, prior_gold_correlation, read_tasks
from context_effects.llm.factory import model_ref

RESULT_VERSION = 1

PROTOCOL = {
    "name": "Does Evaluation History Change an AI Judge's Verdict? (history-anchoring benchmark)",
    "preregistered": "2026-09-05",
    "primary_metric": "sign(priorScore - blindScore) * (historyAnchorScore - blindScore), on repetition means",
}

#: seed 001, "Limits fixed in advance", verbatim.
LIMITATIONS = (
    "A benchmark is not a diagnosis of a model.",
    "Constructed short tasks are easier to score than many real production evaluations.",
    "A five-point rubric compresses richer judgments into a small ordinal scale.",
    "The benchmark tests behavioural sensitivity to context; it does not establish that an LLM has the same "
    "psychological mechanism as human anchoring.",
    "Model updates can change results, so exact model names, versions, dates and settings are part of the result.",
    "Prompt formatting itself can interact with model behaviour; the protocol therefore fixes prompt templates "
    "within a version.",
    "Results from one provider or model family must not be generalized to all AI judges.",
)

TIE_RULE = (
    "Primary: the seed's formula as written; a task whose prior score equals its blind mean has sign 0, so its "
    "pull is 0 and it stays in the mean and median (counted as a tie). Sensitivity analysis: the same with ties "
    "left out. Likewise against the framing mean for the signed anchor - framing difference."
)

TASK_SAMPLING = (
    "per benchmark, a seeded draw stratified by source category (proportional quotas, largest remainder) with "
    "gold levels (answer kinds) balanced overall and within each category; task files taken whole"
)

REPETITION_RULE = (
    "repetition r is its own request (sample_index r); every judgment has its own sampling seed, sha256 of the "
    "run seed, judge, task, condition and repetition (31 bits), so no two judgments share a draw; the seed, "
    "temperature and top_p are recorded per judgment"
)


def response_dates(timestamps: Sequence[str]) -> dict[str, Any]:
    stamps = sorted(t for t in timestamps if t)
    if not stamps:
        return {"date": None, "first_response": None, "last_response": None, "source": "no recorded timestamps"}
    return {
        "date": stamps[-1][:10],
        "first_response": stamps[0],
        "last_response": stamps[-1],
        "source": "timestamps recorded with the responses (UTC)",
    }


def result_record(
    tasks_path: str | Path,
    responses_path: str | Path,
    *,
    judge: str,
    model_cfg: Mapping[str, Any],
    settings: Mapping[str, Any],
    run_cfg: Mapping[str, Any],
    notes: Sequence[str] = (),
    requests_path: str | Path | None = None,
) -> dict[str, Any]:
    """Score one model run and assemble its result file (a JSON-able dict).

    ``requests_path`` is the run's request shard: the responses must answer it one
    to one (the rule always passes it)."""
    tasks = read_tasks(tasks_path)
    requests, rows = read_responses(responses_path, requests_path)
    check_run(requests, tasks, int(settings["repetitions"]))
    judgments = judgments_frame(requests, rows)
    version = check_one_version(judgments)
    per_task = task_metrics(judgments, tasks, int(settings["verdict_threshold"]))
    boot_seed = int(settings["seed"])
    summary = summarise(
        per_task,
        judgments,
        n_resamples=int(settings["bootstrap_resamples"]),
        seed=boot_seed,
        confidence=float(settings["confidence_level"]),
        method=str(settings["bootstrap_method"]),
    )
    ref = model_ref(judge, model_cfg)
    first = requests[0]
    notes = list(notes)
    if first.sampling.temperature == 0 and int(settings["repetitions"]) > 1:
        notes.append(
            "Temperature 0: on a deterministic engine the repetitions repeat one draw, so the dispersion across "
            "repetitions is not sampling variation."
        )
    return {
        "result_version": RESULT_VERSION,
        "study": STUDY,
        "protocol": PROTOCOL,
        "run": {"label": run_cfg["label"], "kind": run_cfg["kind"], "notes": notes},
        "model": {
            "name": judge,
            "display_name": model_cfg["display_name"],
            "provider": ref.provider,
            "model_id": ref.model_id,
            # The pinned revision of a local model, else the one snapshot the provider served.
            "version": ref.revision or version,
            "served_versions": served_versions(judgments),
            "base_url": ref.base_url,
            "family": model_cfg["family"],
            "params_b": model_cfg["params_b"],
            "engine_versions": sorted(set(judgments["engine_version"]) - {""}),
            "backends": sorted(set(judgments["backend"]) - {""}),
            "engine": dict(model_cfg["engine"]),
            "system_role": model_cfg["system_role"],
        },
        "date": response_dates(judgments["timestamp"].tolist()),
        "settings": {
            "conditions": list(CONDITIONS),
            "templates": templates(),
            "system_prompt": first.messages[0][1],
            "temperature": first.sampling.temperature,
            "top_p": first.sampling.top_p,
            "max_tokens": first.sampling.max_tokens,
            "sampling_seed": f"{int(settings['seed'])} + repetition (same in every condition)",
            "repetition_rule": REPETITION_RULE,
            "repetitions": int(settings["repetitions"]),
            "max_attempts": int(settings["max_attempts"]),
            "output_schema": SCORE_SCHEMA,
            "verdict_threshold": int(settings["verdict_threshold"]),
            "order": {
                "rule": "random permutation of all task x condition x repetition judgments per model run",
                "numpy_seed_sequence": order_seed(int(settings["seed"]), judge),
            },
            "design_seed": int(settings["seed"]),
            "bootstrap": {
                "function": "scipy.stats.bootstrap",
                "method": settings["bootstrap_method"],
                "n_resamples": int(settings["bootstrap_resamples"]),
                "confidence_level": float(settings["confidence_level"]),
                "seed": boot_seed,
            },
            "invariants_checked": [
                "every judgment is a fresh system + user context",
                "model, system prompt, decoding settings and output schema identical across conditions",
                "each task x condition x repetition judged exactly once",
            ],
        },
        "design": {
            "gold_rule": GOLD_RULE,
            "task_sampling": TASK_SAMPLING,
            "tie_rule": TIE_RULE,
            "prior_design": PRIOR_DESIGN,
            "n_prior_high": int((tasks["prior_side"] == "high").sum()),
            "n_prior_low": int((tasks["prior_side"] == "low").sum()),
            "n_above": int((tasks["prior_direction"] == "above").sum()),
            "n_equal": int((tasks["prior_direction"] == "equal").sum()),
            "n_below": int((tasks["prior_direction"] == "below").sum()),
            "prior_gold_correlation": prior_gold_correlation(tasks),
            # The full task texts: with the templates they give every prompt exactly.
            "tasks": tasks.to_dict("records"),
        },
        "judgments": judgments.to_dict("records"),
        "scorer": {"summary": summary, "per_task": per_task.to_dict("records")},
        "limitations": list(LIMITATIONS),
    }


def write_result(record: Mapping[str, Any], path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(dumps(record), encoding="utf-8")


def read_result(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


# ----------------------------------------------------------------------------- tables


def _model_label(rec: Mapping[str, Any]) -> str:
    return rec["model"]["display_name"] or rec["model"]["name"]


def pull_table(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Two rows per judge: the primary estimand (ties scored 0) and the tie-excluded sensitivity analysis."""
    rows = []
    for rec in records:
        s = rec["scorer"]["summary"]
        af = s["anchor_vs_framing"]
        for key, signed in (("pull", "signed_mean"), ("pull_ties_excluded", "signed_mean_ties_excluded")):
            p = s[key]
            rows.append(
                {
                    "Model": _model_label(rec),
                    "Tie handling": p["tie_handling"],
                    "Tasks": s["n_tasks"],
                    "Used": p["n_used"],
                    "Ties": p["n_ties"],
                    "Missing": p["n_missing"],
                    "Mean pull": p["mean"]["estimate"],
                    "Mean CI low": p["mean"]["ci_low"],
                    "Mean CI high": p["mean"]["ci_high"],
                    "Median pull": p["median"]["estimate"],
                    "Median CI low": p["median"]["ci_low"],
                    "Median CI high": p["median"]["ci_high"],
                    "Anchor-framing (signed)": af[signed]["estimate"],
                    "Framing-blind": af["framing_minus_blind"],
                }
            )
    return _floats(pd.DataFrame(rows))


def condition_table(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    rows = []
    for rec in records:
        for cond, c in rec["scorer"]["summary"]["by_condition"].items():
            rows.append(
                {
                    "Model": _model_label(rec),
                    "Condition": cond,
                    "Judgments": c["n_judgments"],
                    "Missing": c["n_missing"],
                    "Missing rate": c["missing_rate"],
                    "Mean score": c["mean_score"],
                    "Abs. error vs gold": c["mean_abs_error"],
                    "Rep. SD": c["mean_rep_sd"],
                    "Reps disagree": c["share_reps_disagree"],
                }
            )
    return _floats(pd.DataFrame(rows))


def checks_table(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    rows = []
    for rec in records:
        s = rec["scorer"]["summary"]
        h, f = s["correction_harm"], s["verdict_flip"]
        rows.append(
            {
                "Model": _model_label(rec),
                "Blind at least as close": h["n_blind_at_least_as_close"],
                "Harmed": h["n_harmed"],
                "Correction-harm rate": h["rate"],
                "Tasks (both)": f["n_tasks"],
                "Verdict flips": f["n_flips"],
                "Flip rate": f["rate"],
                "Flips toward prior": f["n_toward_prior_verdict"],
                "Rep. SD (all)": s["dispersion"]["mean_rep_sd"],
            }
        )
    return _floats(pd.DataFrame(rows))


def _floats(df: pd.DataFrame) -> pd.DataFrame:
    # None (JSON null for NaN) back to NaN so numeric columns stay numeric.
    for col in df.columns:
        if df[col].dtype == object and df[col].map(lambda v: v is None or isinstance(v, (int, float))).all():
            df[col] = df[col].astype(float)
    return df


# ----------------------------------------------------------------------------- figure


def pull_figure(records: Sequence[Mapping[str, Any]], notes: Sequence[str] = ()):
    """Per-task signed pulls per model (points), box, and the mean with its bootstrap CI."""
    import seaborn as sns

    from context_effects import style

    labels = [_model_label(r) for r in records]
    pulls = pd.DataFrame(
        [{"pos": i, "pull": float(t["pull"])}
         for i, rec in enumerate(records)
         for t in rec["scorer"]["per_task"] if t["pull_status"] in ("ok", "tie") and t["pull"] is not None],
        columns=["pos", "pull"],
    )
    fig, ax = style.figure(style.width_for(len(records), per_group=0.9), style.PANEL_HEIGHT + 0.4)
    colors = style.palette(4)
    # Boxes by Matplotlib: seaborn 0.13's boxplot passes an argument Matplotlib 3.11 deprecates.
    for i, part in pulls.groupby("pos"):
        ax.boxplot(part["pull"].to_numpy(), positions=[i], widths=0.5, showfliers=False,
                   medianprops={"color": colors[1], "linewidth": 1.4},
                   boxprops={"color": "0.35", "linewidth": 0.8}, whiskerprops={"color": "0.35", "linewidth": 0.8},
                   capprops={"color": "0.35", "linewidth": 0.8})
    if len(pulls):
        # Jitter from a fixed seed: seaborn's stripplot draws it from the global RNG, and a
        # rerun must give the same file.
        jitter = np.random.default_rng(0).uniform(-0.18, 0.18, len(pulls))
        sns.scatterplot(x=pulls["pos"].to_numpy() + jitter, y=pulls["pull"].to_numpy(), s=9, alpha=0.5,
                        color=colors[0], linewidth=0, zorder=3, ax=ax)
    for i, rec in enumerate(records):
        m = rec["scorer"]["summary"]["pull"]["mean"]
        if m["estimate"] is not None:
            lo, hi = m["ci_low"], m["ci_high"]
            err = None if lo is None else [[m["estimate"] - lo], [hi - m["estimate"]]]
            level = rec["settings"]["bootstrap"]["confidence_level"]
            ax.errorbar(i + 0.36, m["estimate"], yerr=err, fmt="D", color="0.1", ms=4, capsize=2, zorder=4,
                        label=f"mean, {level:.0%} bootstrap CI" if i == 0 else None)
    ax.axhline(0.0, color="0.5", lw=0.8, ls="--", zorder=1)
    ax.plot([], [], color=colors[1], lw=1.4, label="median (box: quartiles)")
    ax.scatter([], [], s=9, color=colors[0], alpha=0.5, label="task")
    ax.legend(loc="best")
    rotate = len(records) > 3
    ax.set_xticks(range(len(records)), labels, rotation=20 if rotate else 0, ha="right" if rotate else "center",
                  rotation_mode="anchor" if rotate else "default")
    ax.set_xlim(-0.6, len(records) - 0.4)
    ax.set_xlabel("")
    ax.set_ylabel("signed prior-score pull\n(score points)")
    ax.set_title("Pull toward the displayed prior score, per task")
    style.despine(fig)
    style.place_caveat(fig, notes)
    return fig
