# Study C measurement model (seed 002 §2.3, App. C): input functions and targets of
# workflow/rules/conformity_fit.smk. Which fits exist is decided once, from the
# config, by context_effects.measurement.pipeline.fit_plan (its docstring lists the
# variants and the tables each one feeds).

from context_effects.measurement.pipeline import (
    family_of,
    find_spec,
    fit_dir,
    fit_plan,
)
from context_effects.measurement.report import TABLES, table_fits

FIT_PLAN = fit_plan(config)
FIT_VARIANTS = sorted({spec.variant for spec in FIT_PLAN})
FIT_FILES = ("posterior.nc", "summary.csv", "diagnostics.json", "quality.parquet")


def fit_spec(wildcards):
    return find_spec(config, wildcards.dataset, wildcards.variant).as_dict()


def fit_families(wildcards):
    """Model family of the fit's judges and generators (self-rating exclusion, Table 17)."""
    names = set(find_spec(config, wildcards.dataset, wildcards.variant).judges)
    names |= set(config["conformity"]["generators"])
    return {name: family_of(config, name) for name in sorted(names)}


def fit_settings():
    """The sampler settings alone: a changed diagnostic threshold or sensitivity list
    reruns the tables, not the fits."""
    plan_keys = ("theta_anchor_sensitivity", "theta_anchor_datasets")
    checks = ("max_rhat", "min_ess_bulk", "min_ess_tail", "max_divergences")
    f = config["conformity"]["fit"]
    return {k: v for k, v in f.items() if k not in plan_keys + checks}


def fit_threads():
    """One core per chain when the chains run in parallel (one JAX host device each)."""
    f = config["conformity"]["fit"]
    if f["method"] == "nuts" and f["chain_method"] == "parallel":
        return f["chains"]
    return 1


def fit_table_inputs(wildcards):
    """Summaries and diagnostics (never draws) of the fits a table reports."""
    return [
        f"{fit_dir(spec)}/{name}"
        for spec in table_fits(config, wildcards.table)
        for name in ("summary.csv", "diagnostics.json")
    ]


def fit_targets():
    if not config["conformity"]["enabled"]:
        return []
    tables = expand(
        "results/tables/conformity/table{table}.{ext}", table=TABLES, ext=("csv", "tex")
    )
    quality = [
        f"results/conformity/quality/{spec.dataset}.parquet"
        for spec in FIT_PLAN
        if spec.kind == "main"
    ]
    return tables + quality
