"""Planted values of a synthetic run and how well the run's analyses recover them.

A synthetic model (``context_effects.llm.backends.synthetic``) plants known values; a run
on synthetic models is a validation of the whole pipeline only if its estimates land on
them. Two files, written by ``workflow/rules/recovery.smk`` for runs with synthetic models
(``run.kind: synthetic`` or any synthetic model a study calls):

``results/synthetic/planted.json`` (rule ``synthetic_planted``, from the config alone)
    Every value the simulators resolve for each synthetic model (defaults ⊕ a named
    profile ⊕ the config's ``synthetic:`` keys), by study and model: Study C generators'
    mean quality μ_g, σ_b, σ_θ, θ_a, shifts η per condition, their decomposition
    increments and Asym_total; Study C judges' α, β, γ, κ (and the rates the analyses do
    not estimate); AMEL's logit-scale values, per design cell (saturated and balanced) the
    planted logit shift, the population mean bias score (a balanced history's shift of P(Yes))
    and mean |BS| it implies, and each model's and the roster's headline values by
    measurement method (mean BS and d, the no/yes ratios, the slope on k, the balanced
    contrasts, the framing ratios); Study H's λ, δ_framing and the rest.

``results/synthetic/recovery.csv`` / ``.md`` (rule ``recovery``)
    One row per planted value and estimate: ``study, source, fit_model, model, parameter,
    planted, estimate, ci_low, ci_high, covered, comparable, note``. ``covered`` is
    ``yes``/``no`` when the planted value lies inside/outside the estimate's 95% interval,
    ``n/a`` when there is no interval or the two are not on one scale (``comparable: no``,
    with the reason in ``note``: such rows are listed, never compared). The Markdown file
    starts with the coverage share per study (and per measurement model for Study C).

What is compared with what is each study's part, in its package: Study C's fits in
``context_effects.conformity.recovery``, AMEL's analysis tables and bias scores (every
method, the primary ``single_call`` first) in ``context_effects.amel.recovery``, every
statistic of Study H's pull table in ``context_effects.anchoring.recovery``.
This module decides which runs have planted values, gathers each study's part of
``planted.json`` and of the table, and writes both; the row format the studies share is
``context_effects.recovery_rows``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects.amel import recovery as amel_recovery
from context_effects.anchoring import recovery as anchoring_recovery
from context_effects.anchoring.dag import result_path
from context_effects.conformity import recovery as conformity_recovery
from context_effects.dag import used_models
from context_effects.recovery_rows import COLUMNS

Config = Mapping[str, Any]

PLANTED = "results/synthetic/planted.json"
RECOVERY_CSV = "results/synthetic/recovery.csv"
RECOVERY_MD = "results/synthetic/recovery.md"
STUDY_NAMES = {"conformity": "Study C (conformity)", "amel": "Study A (AMEL)", "anchoring": "Study H (anchoring)"}
NOTE = ("SYNTHETIC: values planted in simulated models (context_effects.llm.backends.synthetic); "
        "not a finding about any real model")


# ----------------------------------------------------------------------------- which runs


def synthetic_models(config: Config) -> list[str]:
    """The synthetic models the enabled studies call."""
    return [m for m in used_models(config) if config["models"][m]["backend"] == "synthetic"]


def enabled(config: Config) -> bool:
    """Planted values and their recovery are written for ``run.kind: synthetic`` and for any run
    with a synthetic model."""
    return config["run"]["kind"] == "synthetic" or bool(synthetic_models(config))


def targets(config: Config) -> list[str]:
    return [PLANTED, RECOVERY_CSV, RECOVERY_MD] if enabled(config) else []


def report_input(config: Config) -> list[str]:
    """The recovery table the run report summarises (none for a run without synthetic models)."""
    return [RECOVERY_CSV] if enabled(config) else []


def roles(config: Config) -> dict[str, dict[str, list[str]]]:
    """The synthetic models of each enabled study, by role."""
    syn = set(synthetic_models(config))
    out: dict[str, dict[str, list[str]]] = {}
    c = config["conformity"]
    if c["enabled"]:
        gens = [g for g in c["generators"] if g in syn]
        judges = [j for j in list(c["judges"]) + list(c["hosted_judges"]) if j in syn]
        if gens or judges:
            out["conformity"] = {"generators": gens, "judges": judges}
    if config["amel"]["enabled"]:
        models = [m for m in config["amel"]["models"] if m in syn]
        if models:
            out["amel"] = {"models": models}
    if config["anchoring"]["enabled"]:
        judges = [j for j in config["anchoring"]["judges"] if j in syn]
        if judges:
            out["anchoring"] = {"judges": judges}
    return out


def planted_inputs(config: Config) -> dict[str, Any]:
    """Everything ``planted.json`` is computed from (the ``synthetic_planted`` rule's params: plain
    data, so a changed planted value or simulator default reruns the rule)."""
    from context_effects.llm.backends.synthetic import ENGINE_VERSION, effective_params, jsonable

    r = roles(config)
    models = sorted({m for study in r.values() for names in study.values() for m in names})
    out: dict[str, Any] = {
        "run": {"label": config["run"]["label"], "kind": config["run"]["kind"]},
        "engine_version": ENGINE_VERSION,
        "backend_seed": int(config["sampling"]["synthetic_seed"]),
        "roles": r,
        "models": {m: jsonable(dict(config["models"][m].get("synthetic") or {})) for m in models},
        "resolved": {m: jsonable(effective_params(m, config["models"][m].get("synthetic") or {})[0]) for m in models},
    }
    if "conformity" in r:
        out["conformity"] = conformity_recovery.planted_inputs(config, r["conformity"]["generators"])
    if "amel" in r:
        out["amel"] = amel_recovery.planted_inputs(config)
    return out


# ----------------------------------------------------------------------------- planted.json


def planted_values(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``planted.json``: the resolved planted values by study and model (see the module docstring)."""
    from context_effects.llm.backends.synthetic import effective_params, jsonable

    roles_ = inputs["roles"]
    resolved: dict[str, dict[str, Any]] = {}
    models: dict[str, Any] = {}
    for m, params in inputs["models"].items():
        eff, fam = effective_params(m, params)
        resolved[m] = eff
        models[m] = {"profile": fam, "config": params, "resolved": eff}
    out: dict[str, Any] = {
        "note": NOTE,
        "run": dict(inputs["run"]),
        "engine_version": inputs["engine_version"],
        "backend_seed": inputs["backend_seed"],
        "models": models,
    }
    if "conformity" in roles_:
        out["conformity"] = conformity_recovery.planted_values(inputs["conformity"], roles_["conformity"], resolved)
    if "amel" in roles_:
        out["amel"] = amel_recovery.planted_values(inputs["amel"], roles_["amel"]["models"], resolved)
    if "anchoring" in roles_:
        out["anchoring"] = anchoring_recovery.planted_values(roles_["anchoring"]["judges"], resolved)
    return jsonable(out)


def write_planted(inputs: Mapping[str, Any], path: str | Path) -> dict[str, Any]:
    values = planted_values(inputs)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(values, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return values


# ----------------------------------------------------------------------------- recovery inputs


def recovery_inputs(config: Config) -> dict[str, Any]:
    """The ``recovery`` rule's inputs: planted.json and the result files holding the estimates."""
    r = roles(config)
    return {
        "planted": PLANTED,
        "fits": conformity_recovery.fit_summaries(config) if "conformity" in r else [],
        "amel": amel_recovery.inputs() if "amel" in r else [],
        "anchoring": [result_path(j) for j in r.get("anchoring", {}).get("judges", [])],
    }


def recovery_fit_keys(config: Config) -> dict[str, dict[str, Any]]:
    """What each fit the recovery table reads must have been made with (rule ``recovery``'s
    param; ``measurement.records``); none without Study C's synthetic models."""
    return conformity_recovery.fit_keys(config) if "conformity" in roles(config) else {}


# ----------------------------------------------------------------------------- the table


def recovery_table(planted: Mapping[str, Any], fits: Mapping[tuple[str, str], pd.DataFrame] | None = None,
                   bias_scores: pd.DataFrame | None = None,
                   anchoring_runs: Mapping[str, Mapping[str, Any]] | None = None,
                   amel_tables: Mapping[str, pd.DataFrame] | None = None) -> pd.DataFrame:
    """Every planted-vs-estimate row of the run; ``fits`` maps (dataset, variant) to a fit's summary,
    ``amel_tables`` an AMEL analysis table's name to the table as written (built from ``bias_scores``
    where missing)."""
    rows: list[dict] = []
    if "conformity" in planted:
        for (dataset, variant), summary in (fits or {}).items():
            rows += conformity_recovery.fit_rows(planted, dataset, variant, summary)
    if "amel" in planted and bias_scores is not None:
        rows += amel_recovery.bias_score_rows(planted, bias_scores, amel_tables)
    if "anchoring" in planted:
        rows += anchoring_recovery.pull_rows(planted, anchoring_runs or {})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def coverage(table: pd.DataFrame) -> pd.DataFrame:
    """Per study (and Study C measurement model): planted values compared against a 95% interval,
    how many it covers, and the share."""
    cols = ["study", "fit_model", "compared", "covered", "share", "not_compared"]
    if table.empty:
        return pd.DataFrame(columns=cols)
    out = []
    table = table.assign(fit_model=table["fit_model"].fillna(""), covered=table["covered"].fillna("n/a"))
    for (study, fit_model), part in table.groupby(["study", "fit_model"], sort=False):
        judged = part["covered"].isin(["yes", "no"])
        n, k = int(judged.sum()), int((part["covered"] == "yes").sum())
        out.append({"study": study, "fit_model": fit_model, "compared": n, "covered": k,
                    "share": k / n if n else math.nan, "not_compared": int(len(part) - n)})
    return pd.DataFrame(out, columns=cols)


def coverage_lines(table: pd.DataFrame) -> list[str]:
    """One Markdown bullet per study (and Study C measurement model)."""
    lines = []
    for r in coverage(table).to_dict("records"):
        what = STUDY_NAMES.get(r["study"], r["study"])
        if r["fit_model"]:
            what += f", {r['fit_model']} model"
        share = f" ({100 * r['share']:.0f}%)" if r["compared"] else ""
        lines.append(f"- {what}: {r['covered']} of {r['compared']} planted values inside their 95% interval{share}"
                     f"; {r['not_compared']} listed without a comparison")
    return lines


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "" if math.isnan(v) else f"{v:+.3f}"
    return str(v)


def _md_table(df: pd.DataFrame) -> str:
    """A pipe table (no tabulate: the rule's environment need not carry it)."""
    cells = [[str(c) for c in df.columns]] + [[str(v).replace("|", "\\|") for v in r] for r in df.itertuples(index=False)]
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + "|".join("---" for _ in df.columns) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in cells[1:]])


def markdown(table: pd.DataFrame) -> str:
    lines = ["# Planted values against the run's estimates", "", f"> {NOTE}", "",
             "`covered`: the planted value lies inside the estimate's 95% interval (posterior quantiles for "
             "Study C; for AMEL intervals whose unit is the item: the tables' own where their test takes the "
             "item, item-clustered ones computed here where it takes the row (one call per cell); bootstrap "
             "intervals over tasks for Study H); `n/a`: no interval (an unbounded Fieller set too), or planted "
             "value and estimate are not on one scale (`comparable: no`, reason in `note`). A calibrated "
             "pipeline covers about 95% of the compared values; a short synthetic run varies around that.", "",
             "## Coverage", ""]
    lines += coverage_lines(table) or ["No planted value has an estimate in this run."]
    for study, part in table.groupby("study", sort=False):
        lines += ["", f"## {STUDY_NAMES.get(study, study)}", ""]
        lines.append(_md_table(part.drop(columns="study").map(_fmt)))
    return "\n".join(lines) + "\n"


def write_recovery(planted_path: str | Path, fit_paths: Sequence[str | Path], amel_paths: Sequence[str | Path],
                   anchoring_paths: Sequence[str | Path], csv_path: str | Path, md_path: str | Path,
                   fit_keys: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Read the planted values and the run's result files; write the table (CSV and Markdown).
    Each fit summary is refused unless made with ``fit_keys``' settings (``recovery_fit_keys``)."""
    from context_effects.measurement.records import check_summary

    planted = json.loads(Path(planted_path).read_text())
    fits = {}
    for p in fit_paths:
        dataset, variant = conformity_recovery.fit_of_path(p)
        summary = pd.read_csv(p)
        check_summary(p, fit_keys[f"{dataset}/{variant}"], summary)
        fits[(dataset, variant)] = summary
    scores = [p for p in amel_paths if amel_recovery.table_of_path(p) is None]
    bias = pd.concat([pd.read_parquet(p) for p in scores], ignore_index=True) if scores else None
    amel_tables = {amel_recovery.table_of_path(p): pd.read_csv(p) for p in amel_paths
                   if amel_recovery.table_of_path(p) is not None}
    runs = {}
    for p in anchoring_paths:
        run = json.loads(Path(p).read_text())
        runs[run["model"]["name"]] = run
    table = recovery_table(planted, fits, bias, runs, amel_tables)
    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(csv_path, index=False)
    Path(md_path).write_text(markdown(table), encoding="utf-8")
    return table
