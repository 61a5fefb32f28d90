"""Study C's planted values against the measurement-model fits (``context_effects.recovery``
gathers every study's rows into ``results/synthetic/recovery.csv``).

Each fit's ``summary.csv`` (posterior mean, 2.5% and 97.5% quantiles) is compared. The
simulator and the measurement model share one latent scale — θ = b_t + η_c + σ_θ·ε, the
judge's μ = α(θ − β) + γ·d, ordered logistic with cutpoints κ, anchors pinned at ±θ_a
(``config_checks`` refuses a planted θ_a other than ``conformity.fit.theta_anchor``) —
so η, Asym_total, the increments Δ_content and Δ_pp, α, β, γ and (generator-mean fits)
μ_g are compared directly. κ is compared only when every synthetic judge plants the same
cutpoints (the fit shares one set), σ_θ only when every generator plants the same, σ_b
only when every generator plants the same σ_b and, for the paper's model (which has
b_t ~ N(0, σ_b)), when every planted generator mean is 0. The paper's model has no μ_g:
its rows say so, and its η rows carry a note when generator means differ from 0 (the
shrinkage of b_t toward 0 can move into η). Fits compared: :data:`FITS`, one entry per
fit variant (the paper's ``main`` and ``decomposition`` and this project's
``generator-mean`` refits); a new variant is one more entry.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects.recovery_rows import row

Config = Mapping[str, Any]


@dataclass(frozen=True)
class FitSource:
    """One Study C fit variant whose estimates the recovery table compares."""

    variant: str  # the fit's directory under results/conformity/fits/<dataset>/
    fit_model: str  # the measurement model, as the table names it
    generator_mean: bool  # the model has per-generator baseline means μ_g


#: The compared fits, one entry per variant (``measurement.pipeline``: fit plan and variants).
FITS: tuple[FitSource, ...] = (
    FitSource("main", "paper", False),
    FitSource("decomposition", "paper", False),
    FitSource("generator-mean", "generator-mean", True),
    FitSource("decomposition-generator-mean", "generator-mean", True),
)
_FIT_PATH = re.compile(r"results/conformity/fits/(?P<dataset>[^/]+)/(?P<variant>[^/]+)/summary\.csv$")


def planted_inputs(config: Config, generators: Sequence[str]) -> dict[str, Any]:
    """What Study C's part of ``planted.json`` needs beyond the models' values: the fit's
    anchor scale and the generator that writes synthetic anchors (``generators``: the
    study's synthetic generators)."""
    gens = list(config["conformity"]["generators"])
    return {
        "fit_theta_anchor": float(config["conformity"]["fit"]["theta_anchor"]),
        "anchor_generator": gens[0] if gens and gens[0] in generators else None,
    }


def planted_values(inputs: Mapping[str, Any], roles: Mapping[str, Sequence[str]],
                   resolved: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Study C's part of ``planted.json``: each generator's and each judge's planted values."""
    from context_effects.llm.backends.synthetic import simulator

    sim = simulator("conformity")
    gens, judges = {}, {}
    for g in roles["generators"]:
        p = sim.planted(resolved[g])
        gens[g] = _drop_judge(p) | {"by_dataset": {d: _drop_judge(v) for d, v in p["by_dataset"].items()}}
    for j in roles["judges"]:
        p = sim.planted(resolved[j])
        judges[j] = p["judge"] | {"by_dataset": {d: v["judge"] for d, v in p["by_dataset"].items()}}
    return {**inputs, "generators": gens, "judges": judges}


def _drop_judge(section: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in section.items() if k not in ("judge", "by_dataset")}


def _on_dataset(values: Mapping[str, Mapping[str, Any]], dataset: str) -> dict[str, Mapping[str, Any]]:
    """Each model's planted values on ``dataset`` (its ``by_dataset`` section where it has one)."""
    return {name: v.get("by_dataset", {}).get(dataset, v) for name, v in values.items()}


def fit_summaries(config: Config) -> list[str]:
    """``summary.csv`` of every fit in the plan whose variant is in :data:`FITS`."""
    from context_effects.measurement.pipeline import fit_plan

    variants = {f.variant for f in FITS}
    return [f"results/conformity/fits/{s.dataset}/{s.variant}/summary.csv"
            for s in fit_plan(config) if s.variant in variants]


def fit_keys(config: Config) -> dict[str, dict[str, Any]]:
    """What each compared fit's files must record (``measurement.records``): the recovery
    rule's param, so the table refuses a fit made with other settings than the config's."""
    from context_effects.measurement.pipeline import fit_plan
    from context_effects.measurement.records import fit_keys as keys

    variants = {f.variant for f in FITS}
    return keys(config, [s for s in fit_plan(config) if s.variant in variants])


def fit_of_path(path: str | Path) -> tuple[str, str]:
    """(dataset, variant) of a fit's ``summary.csv`` path."""
    m = _FIT_PATH.search(Path(path).as_posix())
    if not m:
        raise ValueError(f"{path}: not a fit summary (results/conformity/fits/<dataset>/<variant>/summary.csv)")
    return m["dataset"], m["variant"]


def _all_equal(values: Iterable[Any]) -> bool:
    vals = [json.dumps(v) for v in values]
    return len(set(vals)) <= 1


def fit_rows(planted: Mapping[str, Any], dataset: str, variant: str, summary: pd.DataFrame) -> list[dict]:
    """Study C rows of one fit (``summary.csv`` of ``results/conformity/fits/<dataset>/<variant>/``)."""
    source = next((f for f in FITS if f.variant == variant), None)
    if source is None:
        raise ValueError(f"fit variant {variant!r} is not compared (conformity.recovery.FITS)")
    pc = planted["conformity"]
    gens, judges = _on_dataset(pc["generators"], dataset), _on_dataset(pc["judges"], dataset)
    # The decomposition corpus is a run of its own with shifts of its own (its fits compare those).
    eta_key = "decomposition_eta" if variant.startswith("decomposition") else "eta"
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
            rows.append(mk(g, f"eta[{cond}]", gens[g][eta_key][cond], r, note=eta_note()))
        elif block == "asym_total" and g in gens:
            eta = gens[g][eta_key]
            rows.append(mk(g, "asym_total", -eta["peer_wrong"] - eta["peer_correct"], r, note=eta_note()))
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
