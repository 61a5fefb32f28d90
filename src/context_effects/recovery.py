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
    not estimate); AMEL's logit-scale values and, per design cell, the planted logit shift
    and the population mean bias score it implies; Study H's λ, δ_framing and the rest.

``results/synthetic/recovery.csv`` / ``.md`` (rule ``recovery``)
    One row per planted value and estimate: ``study, source, fit_model, model, parameter,
    planted, estimate, ci_low, ci_high, covered, comparable, note``. ``covered`` is
    ``yes``/``no`` when the planted value lies inside/outside the estimate's 95% interval,
    ``n/a`` when there is no interval or the two are not on one scale (``comparable: no``,
    with the reason in ``note``: such rows are listed, never compared). The Markdown file
    starts with the coverage share per study (and per measurement model for Study C).

What is compared with what:

- Study C: each fit's ``summary.csv`` (posterior mean, 2.5% and 97.5% quantiles). The
  simulator and the measurement model share one latent scale — θ = b_t + η_c + σ_θ·ε, the
  judge's μ = α(θ − β) + γ·d, ordered logistic with cutpoints κ, anchors pinned at ±θ_a
  (``config_checks`` refuses a planted θ_a other than ``conformity.fit.theta_anchor``) —
  so η, Asym_total, the increments Δ_content and Δ_pp, α, β, γ and (generator-mean fits)
  μ_g are compared directly. κ is compared only when every synthetic judge plants the same
  cutpoints (the fit shares one set), σ_θ only when every generator plants the same, σ_b
  only when every generator plants the same σ_b and, for the paper's model (which has
  b_t ~ N(0, σ_b)), when every planted generator mean is 0. The paper's model has no μ_g:
  its rows say so, and its η rows carry a note when generator means differ from 0 (the
  shrinkage of b_t toward 0 can move into η). Fits compared: :data:`CONFORMITY_FITS`, one
  entry per fit variant (the paper's ``main`` and ``decomposition`` and this project's
  ``generator-mean`` refits); a new variant is one more entry.
- AMEL: per model and design cell, the mean bias score over the items in
  ``results/amel/bias_scores.parquet`` with its t interval against the planted population
  mean (quadrature over the planted item distribution); the no/yes ratio of those means
  (no interval); the logit-scale values c, A, τ and the k scale are listed as not directly
  estimated.
- Study H: per judge, the scorer's signed pull and anchor-vs-framing means with their
  bootstrap intervals (``results/anchoring/runs/<judge>.json``) against the values λ and
  δ_framing imply for the run's tasks: expected scores under the planted per-task blind
  mean, noise, rounding and clipping, over the tasks the scorer used, with the sign taken
  at the expected reference score (the scorer takes it at the observed one). λ itself is a
  latent slope the scorer does not estimate (listed, not compared).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

Config = Mapping[str, Any]

PLANTED = "results/synthetic/planted.json"
RECOVERY_CSV = "results/synthetic/recovery.csv"
RECOVERY_MD = "results/synthetic/recovery.md"
COLUMNS = ("study", "source", "fit_model", "model", "parameter", "planted", "estimate", "ci_low", "ci_high",
           "covered", "comparable", "note")
STUDY_NAMES = {"conformity": "Study C (conformity)", "amel": "Study A (AMEL)", "anchoring": "Study H (anchoring)"}
#: AMEL settings that decide the design cells (``amel.design.design_cells``).
AMEL_DESIGN_KEYS = ("saturation_share", "history_lengths", "positions", "position_history_length",
                    "position_biased_turns", "framing_swap", "framing_history_lengths")
#: AMEL's logit-scale planted values, listed as not directly estimated.
AMEL_LOGIT_PARAMS = {"conformity": "amel_conformity", "negativity_asymmetry": "amel_negativity_asymmetry",
                     "yes_bias": "amel_yes_bias", "k_scale": "amel_k_scale"}
NOTE = ("SYNTHETIC: values planted in simulated models (context_effects.llm.backends.synthetic); "
        "not a finding about any real model")


@dataclass(frozen=True)
class FitSource:
    """One Study C fit variant whose estimates the recovery table compares."""

    variant: str  # the fit's directory under results/conformity/fits/<dataset>/
    fit_model: str  # the measurement model, as the table names it
    generator_mean: bool  # the model has per-generator baseline means μ_g


#: The compared fits, one entry per variant (``measurement.pipeline``: fit plan and variants).
CONFORMITY_FITS: tuple[FitSource, ...] = (
    FitSource("main", "paper", False),
    FitSource("decomposition", "paper", False),
    FitSource("generator-mean", "generator-mean", True),
    FitSource("decomposition-generator-mean", "generator-mean", True),
)
_FIT_PATH = re.compile(r"results/conformity/fits/(?P<dataset>[^/]+)/(?P<variant>[^/]+)/summary\.csv$")


# ----------------------------------------------------------------------------- which runs


def _used_models(config: Config) -> list[str]:
    from context_effects.dag import used_models

    return used_models(config)


def synthetic_models(config: Config) -> list[str]:
    """The synthetic models the enabled studies call."""
    return [m for m in _used_models(config) if config["models"][m]["backend"] == "synthetic"]


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
        "roles": r,
        "models": {m: jsonable(dict(config["models"][m].get("synthetic") or {})) for m in models},
        "resolved": {m: jsonable(effective_params(m, config["models"][m].get("synthetic") or {})[0]) for m in models},
    }
    if "conformity" in r:
        gens = list(config["conformity"]["generators"])
        out["conformity"] = {
            "fit_theta_anchor": float(config["conformity"]["fit"]["theta_anchor"]),
            "anchor_generator": gens[0] if gens and gens[0] in r["conformity"]["generators"] else None,
        }
    if "amel" in r:
        out["amel"] = {k: jsonable(config["amel"][k]) for k in AMEL_DESIGN_KEYS}
    return out


# ----------------------------------------------------------------------------- planted.json


def _amel_cells(design: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every saturated cell of the design with the (k, n_biased) its requests give the simulator."""
    from context_effects.amel.design import design_cells
    from context_effects.amel.requests import cell_meta

    cells = []
    for cell in design_cells(design):
        if cell.condition == "baseline":
            continue
        meta = cell_meta(cell, {"item_id": "", "domain": "", "answer": "Yes"}, "", "", 0)
        cells.append({"cell": cell.label, "framing": cell.framing, "condition": cell.condition, "k": cell.k,
                      "position": cell.position, "n_biased": cell.n_biased, "n_simulated": meta["n_biased"]})
    return cells


def _amel_planted(eff: Mapping[str, Any], design: Mapping[str, Any]) -> dict[str, Any]:
    from context_effects.amel.synthetic import cell_targets, planted

    p = planted(eff)
    out = {k: p[k] for k in ("yes_bias", "conformity", "negativity_asymmetry", "token_asymmetry", "semantic_asymmetry",
                             "asymmetry_ratio_logit", "k_scale", "position_weights", "deterministic_share")}
    out["deterministic_logit"] = list(eff["amel_deterministic_logit"])
    out["uncertain_logit_sd"] = eff["amel_uncertain_logit_sd"]
    cells = []
    for c in _amel_cells(design):
        cells.append({**c, **cell_targets(eff, c["condition"], c["n_simulated"], c["position"], c["framing"])})
    out["cells"] = cells
    return out


def planted_values(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``planted.json``: the resolved planted values by study and model (see the module docstring)."""
    from context_effects.llm.backends.synthetic import BACKEND_SEED, effective_params, jsonable, simulator

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
        "backend_seed": BACKEND_SEED,
        "models": models,
    }
    if "conformity" in roles_:
        sim = simulator("conformity")
        gens, judges = {}, {}
        for g in roles_["conformity"]["generators"]:
            p = sim.planted(resolved[g])
            gens[g] = {k: v for k, v in p.items() if k != "judge"}
        for j in roles_["conformity"]["judges"]:
            judges[j] = sim.planted(resolved[j])["judge"]
        out["conformity"] = {**inputs["conformity"], "generators": gens, "judges": judges}
    if "amel" in roles_:
        out["amel"] = {"design": dict(inputs["amel"]),
                       "models": {m: _amel_planted(resolved[m], inputs["amel"]) for m in roles_["amel"]["models"]}}
    if "anchoring" in roles_:
        sim = simulator("anchoring")
        out["anchoring"] = {"judges": {j: sim.planted(resolved[j]) for j in roles_["anchoring"]["judges"]}}
    return jsonable(out)


def write_planted(inputs: Mapping[str, Any], path: str | Path) -> dict[str, Any]:
    values = planted_values(inputs)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(values, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return values


# ----------------------------------------------------------------------------- recovery inputs


def conformity_fit_summaries(config: Config) -> list[str]:
    """``summary.csv`` of every fit in the plan whose variant is in :data:`CONFORMITY_FITS`."""
    if "conformity" not in roles(config):
        return []
    from context_effects.measurement.pipeline import fit_plan

    variants = {f.variant for f in CONFORMITY_FITS}
    return [f"results/conformity/fits/{s.dataset}/{s.variant}/summary.csv"
            for s in fit_plan(config) if s.variant in variants]


def recovery_inputs(config: Config) -> dict[str, Any]:
    """The ``recovery`` rule's inputs: planted.json and the result files holding the estimates."""
    from context_effects.amel.dag import BIAS_SCORES
    from context_effects.anchoring.dag import result_path

    r = roles(config)
    return {
        "planted": PLANTED,
        "fits": conformity_fit_summaries(config),
        "amel": [BIAS_SCORES] if "amel" in r else [],
        "anchoring": [result_path(j) for j in r.get("anchoring", {}).get("judges", [])],
    }


def fit_of_path(path: str | Path) -> tuple[str, str]:
    """(dataset, variant) of a fit's ``summary.csv`` path."""
    m = _FIT_PATH.search(Path(path).as_posix())
    if not m:
        raise ValueError(f"{path}: not a fit summary (results/conformity/fits/<dataset>/<variant>/summary.csv)")
    return m["dataset"], m["variant"]


# ----------------------------------------------------------------------------- rows


def covered(planted: float, lo: float, hi: float) -> str:
    """``yes`` when ``planted`` lies in [lo, hi], ``no`` outside, ``n/a`` without an interval."""
    vals = (planted, lo, hi)
    if any(v is None or not math.isfinite(float(v)) for v in vals):
        return "n/a"
    return "yes" if float(lo) <= float(planted) <= float(hi) else "no"


def row(study: str, source: str, model: str, parameter: str, planted: float, estimate: float = math.nan,
        ci_low: float = math.nan, ci_high: float = math.nan, *, fit_model: str = "", comparable: bool = True,
        note: str = "") -> dict[str, Any]:
    """One row of the recovery table; ``covered`` follows from the values (``n/a`` if not comparable)."""
    return {
        "study": study, "source": source, "fit_model": fit_model, "model": model, "parameter": parameter,
        "planted": float(planted), "estimate": float(estimate), "ci_low": float(ci_low), "ci_high": float(ci_high),
        "covered": covered(planted, ci_low, ci_high) if comparable else "n/a",
        "comparable": "yes" if comparable else "no", "note": note,
    }


def _all_equal(values: Iterable[Any]) -> bool:
    vals = [json.dumps(v) for v in values]
    return len(set(vals)) <= 1


def conformity_rows(planted: Mapping[str, Any], dataset: str, variant: str, summary: pd.DataFrame) -> list[dict]:
    """Study C rows of one fit (``summary.csv`` of ``results/conformity/fits/<dataset>/<variant>/``)."""
    source = next((f for f in CONFORMITY_FITS if f.variant == variant), None)
    if source is None:
        raise ValueError(f"fit variant {variant!r} is not compared (recovery.CONFORMITY_FITS)")
    pc = planted["conformity"]
    gens, judges = pc["generators"], pc["judges"]
    where = f"conformity/fits/{dataset}/{variant}"
    fit_gens = sorted(set(summary["generator"].dropna()))
    fit_judges = sorted(set(summary["judge"].dropna()))
    foreign = sorted((set(fit_gens) - set(gens)) | (set(fit_judges) - set(judges)))
    means = {g: gens[g]["quality_mean"] for g in gens}
    nonzero = {g: m for g, m in means.items() if m != 0}
    self_pref = {j: judges[j]["self_preference"] for j in judges if judges[j]["self_preference"] != 0 and j in gens}

    def mk(model: str, parameter: str, planted_value: float, r: Any = None, *, comparable: bool = True,
           note: str = "") -> dict:
        if foreign:
            comparable = False
            note = f"the fit includes models without planted values ({', '.join(foreign)})"
        est = (r["mean"], r["q2.5"], r["q97.5"]) if r is not None else (math.nan,) * 3
        return row("conformity", where, model, parameter, planted_value, *est, fit_model=source.fit_model,
                   comparable=comparable, note=note)

    def eta_note() -> str:
        notes = []
        if not source.generator_mean and nonzero:
            notes.append("generator means planted (" + ", ".join(f"{k} {v:+.2f}" for k, v in means.items())
                         + ") but the paper's model has b_t ~ N(0, σ_b): the shifts can absorb them")
        if self_pref:
            notes.append("self-preference planted but not modelled: " + ", ".join(f"{k} {v:+.2f}"
                                                                                   for k, v in self_pref.items()))
        return "; ".join(notes)

    rows: list[dict] = []
    for r in summary.to_dict("records"):
        block = r["block"]
        g, j, cond = r.get("generator"), r.get("judge"), r.get("condition")
        g = g if isinstance(g, str) else None
        j = j if isinstance(j, str) else None
        cond = cond if isinstance(cond, str) else None
        if block == "eta" and g in gens:
            rows.append(mk(g, f"eta[{cond}]", gens[g]["eta"][cond], r, note=eta_note()))
        elif block == "asym_total" and g in gens:
            rows.append(mk(g, "asym_total", gens[g]["asym_total"], r, note=eta_note()))
        elif block == "delta_content" and g in gens:
            k = cond.removeprefix("content_")
            rows.append(mk(g, f"delta_content[{k}]", gens[g]["decomposition"]["delta_content"][k], r,
                           note=eta_note()))
        elif block == "delta_pp" and g in gens:
            k = cond.removeprefix("peer_")
            rows.append(mk(g, f"delta_pp[{k}]", gens[g]["decomposition"]["delta_pp"][k], r, note=eta_note()))
        elif block in ("alpha", "beta", "gamma") and j in judges:
            note = (f"self-preference {judges[j]['self_preference']:+.2f} planted but not modelled"
                    if j in self_pref else "")
            rows.append(mk(j, block, judges[j][block], r, note=note))
        elif block == "mu_gen" and g in gens:
            rows.append(mk(g, "mu_g (generator mean)", gens[g]["quality_mean"], r))
        elif block == "kappa":
            k = int(re.search(r"\[(\d+)\]", r["parameter"])[1])
            kappas = [judges[x]["kappa"] for x in judges]
            same = bool(kappas) and _all_equal(kappas)
            rows.append(mk("", f"kappa[{k}]", kappas[0][k - 1] if kappas else math.nan, r, comparable=same,
                           note="" if same else "judges plant different cutpoints; the fit shares one set"))
        elif block == "sigma_theta":
            vals = [gens[x]["sigma_theta"] for x in gens]
            same = bool(vals) and _all_equal(vals)
            rows.append(mk("", "sigma_theta", vals[0] if vals else math.nan, r, comparable=same,
                           note="" if same else "generators plant different σ_θ; the fit pools one"))
        elif block == "sigma_b":
            vals = [gens[x]["sigma_b"] for x in gens]
            same = bool(vals) and _all_equal(vals)
            note = "" if same else "generators plant different σ_b; the fit pools one"
            if same and not source.generator_mean and nonzero:
                same, note = False, ("planted generator means differ from 0; the paper's model (b_t ~ N(0, σ_b)) "
                                     "puts their spread into σ_b")
            rows.append(mk("", "sigma_b", vals[0] if vals else math.nan, r, comparable=same, note=note))
    if not source.generator_mean:
        for g in fit_gens:
            if g in gens:
                rows.append(mk(g, "mu_g (generator mean)", gens[g]["quality_mean"], comparable=False,
                               note="not a parameter of the paper's model (b_t ~ N(0, σ_b)); "
                                    "see the generator-mean fit"))
    return rows


def amel_rows(planted: Mapping[str, Any], bias_scores: pd.DataFrame) -> list[dict]:
    """AMEL rows: per model and cell the mean bias score (t interval) against the planted population mean."""
    from context_effects.amel.stats import mean_ci

    rows: list[dict] = []
    source = "amel/bias_scores"
    for model, pm in planted["amel"]["models"].items():
        part = bias_scores[bias_scores["model"] == model]
        if "method" in part.columns:
            # The primary measurement only: averaging over methods would mix two estimands.
            from context_effects.amel.requests import PRIMARY_METHOD

            part = part[part["method"] == PRIMARY_METHOD]
        means: dict[tuple[str, str, int, Any], float] = {}
        expected: dict[tuple[str, str, int, Any], float] = {}
        for c in pm["cells"]:
            cell = part[part["cell"] == c["cell"]]
            # A balanced history has no prevailing verdict and so no bias score: its
            # planted effect is a zero shift of P(Yes).
            balanced = c["condition"] == "balanced"
            values = cell["shift"] if balanced else cell["bs"]
            m, lo, hi = mean_ci(values.to_numpy(float))
            key = (c["framing"], c["condition"], c["k"], c["position"])
            means[key], expected[key] = m, c["expected_bias_score"]
            note = (f"mean over {int(np.isfinite(values.to_numpy(float)).sum())} items; planted = population mean "
                    "over the item distribution; P(Yes) from sampled replies")
            name = f"shift[{c['cell']}]" if balanced else f"bias_score[{c['cell']}]"
            planted_value = 0.0 if balanced else c["expected_bias_score"]
            rows.append(row("amel", source, model, name, planted_value, m, lo, hi, note=note))
        for (framing, cond, k, pos), v in sorted(expected.items(), key=lambda kv: str(kv[0])):
            if cond != "no_saturated" or pos is not None:
                continue
            yes = (framing, "yes_saturated", k, None)
            if yes not in expected or expected[yes] == 0:
                continue
            est = abs(means[(framing, cond, k, pos)]) / abs(means[yes]) if means[yes] else math.nan
            rows.append(row("amel", source, model, f"bias_score_ratio[{framing}:k{k}]", abs(v) / abs(expected[yes]),
                            est, note="|mean BS no-saturated| / |mean BS yes-saturated|; no interval"))
        for name, key in AMEL_LOGIT_PARAMS.items():
            rows.append(row("amel", source, model, key, pm[name], comparable=False,
                            note="logit-scale planted value; the analyses estimate bias scores on the probability "
                                 "scale (the bias_score rows hold what it implies)"))
    return rows


def expected_score(mu: float | np.ndarray, sd: float) -> np.ndarray:
    """E[clip(round_half_up(x), 1, 5)] for x ~ N(mu, sd): the synthetic judge's reply rule (Study H)."""
    from scipy.stats import norm

    mu = np.asarray(mu, dtype=float)
    cut = np.arange(1, 5) + 0.5
    if sd <= 0:
        return 1.0 + (mu[..., None] >= cut).sum(axis=-1)
    cdf = norm.cdf((cut - mu[..., None]) / sd)
    return 5.0 - cdf.sum(axis=-1)


def anchoring_rows(planted: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]) -> list[dict]:
    """Study H rows: the scorer's pull estimates against what λ and δ_framing imply for the run's tasks."""
    from context_effects.anchoring.synthetic import anchoring_blind_mean, expected_pull
    from context_effects.llm.backends.synthetic import SyntheticBackend

    rows: list[dict] = []
    for judge, ph in planted["anchoring"]["judges"].items():
        run = runs.get(judge)
        if run is None:
            continue
        backend = SyntheticBackend(model_name=judge, params=planted["models"][judge]["config"],
                                   seed=int(planted.get("backend_seed", 0)))
        per_task = pd.DataFrame(run["scorer"]["per_task"])
        summary = run["scorer"]["summary"]
        lam, delta, sd = ph["lambda"], ph["framing_shift"], ph["noise_sd"]
        e_blind = np.array([anchoring_blind_mean(backend, t, g) for t, g in zip(per_task["task_id"],
                                                                                per_task["gold_score"])])
        prior = per_task["prior_score"].to_numpy(float)
        blind = expected_score(e_blind, sd)
        framing = expected_score(e_blind + delta, sd)
        anchor = expected_score(e_blind + (delta if ph["framing_in_anchor"] else 0.0) + lam * (prior - e_blind), sd)
        src = f"anchoring/runs/{judge}"
        # The primary estimand keeps ties (scored 0): its expectation is taken over the
        # distribution of each task's blind mean, with as many repetitions as were valid.
        used = per_task["pull_status"].isin(["ok", "tie"]).to_numpy()
        pulls = [expected_pull(backend, t, g, p, int(n)) for t, g, p, n, u in zip(
            per_task["task_id"], per_task["gold_score"], per_task["prior_score"], per_task["n_blind"], used) if u]
        pull = float(np.mean(pulls)) if pulls else math.nan
        est = summary["pull"]["mean"]
        rows.append(row("anchoring", src, judge, "pull (mean, implied by λ)", pull, est["estimate"], est["ci_low"],
                        est["ci_high"], note=f"over the {int(used.sum())} tasks with a pull (ties scored 0); "
                                             "score scale"))
        used_f = (per_task["pull_vs_framing_status"] == "ok").to_numpy()
        pvf = np.mean((np.sign(prior - framing) * (anchor - framing))[used_f]) if used_f.any() else math.nan
        est = summary["anchor_vs_framing"]["signed_mean"]
        rows.append(row("anchoring", src, judge, "anchor vs framing (signed mean, implied by λ)", pvf,
                        est["estimate"], est["ci_low"], est["ci_high"],
                        note=f"over the {int(used_f.sum())} tasks with a direction; score scale"))
        both = per_task[["mean_blind", "mean_framing"]].notna().all(axis=1).to_numpy()
        fmb = float(np.mean((framing - blind)[both])) if both.any() else math.nan
        rows.append(row("anchoring", src, judge, "framing - blind (mean, implied by δ_framing)", fmb,
                        summary["anchor_vs_framing"]["framing_minus_blind"], note="no interval; score scale"))
        for name, key in (("lambda", "anchoring_lambda"), ("framing_shift", "anchoring_framing_shift")):
            rows.append(row("anchoring", src, judge, key, ph[name], comparable=False,
                            note="latent-scale planted value, not estimated by the scorer (the rows above hold "
                                 "what it implies on the score scale)"))
    return rows


def recovery_table(planted: Mapping[str, Any], fits: Mapping[tuple[str, str], pd.DataFrame] | None = None,
                   bias_scores: pd.DataFrame | None = None,
                   anchoring_runs: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """Every planted-vs-estimate row of the run; ``fits`` maps (dataset, variant) to a fit's summary."""
    rows: list[dict] = []
    if "conformity" in planted:
        for (dataset, variant), summary in (fits or {}).items():
            rows += conformity_rows(planted, dataset, variant, summary)
    if "amel" in planted and bias_scores is not None:
        rows += amel_rows(planted, bias_scores)
    if "anchoring" in planted:
        rows += anchoring_rows(planted, anchoring_runs or {})
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
             "Study C, t intervals for AMEL, bootstrap intervals for Study H); `n/a`: no interval, or planted "
             "value and estimate are not on one scale (`comparable: no`, reason in `note`). A calibrated "
             "pipeline covers about 95% of the compared values; a short synthetic run varies around that.", "",
             "## Coverage", ""]
    lines += coverage_lines(table) or ["No planted value has an estimate in this run."]
    for study, part in table.groupby("study", sort=False):
        lines += ["", f"## {STUDY_NAMES.get(study, study)}", ""]
        lines.append(_md_table(part.drop(columns="study").map(_fmt)))
    return "\n".join(lines) + "\n"


def write_recovery(planted_path: str | Path, fit_paths: Sequence[str | Path], amel_paths: Sequence[str | Path],
                   anchoring_paths: Sequence[str | Path], csv_path: str | Path, md_path: str | Path) -> pd.DataFrame:
    """Read the planted values and the run's result files; write the table (CSV and Markdown)."""
    planted = json.loads(Path(planted_path).read_text())
    fits = {fit_of_path(p): pd.read_csv(p) for p in fit_paths}
    bias = pd.concat([pd.read_parquet(p) for p in amel_paths], ignore_index=True) if amel_paths else None
    runs = {}
    for p in anchoring_paths:
        run = json.loads(Path(p).read_text())
        runs[run["model"]["name"]] = run
    table = recovery_table(planted, fits, bias, runs)
    Path(csv_path).parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(csv_path, index=False)
    Path(md_path).write_text(markdown(table), encoding="utf-8")
    return table
