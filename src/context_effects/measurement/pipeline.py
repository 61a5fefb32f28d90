"""Which measurement-model fits a configuration asks for, and one fit as a file-to-file job.

Every table of seed 002 that reports a model quantity comes from one of these fits
(one per dataset and variant; the directory ``results/conformity/fits/{dataset}/{variant}/``):

================================  =========================================================  ===============
variant                           data and model                                             tables
================================  =========================================================  ===============
``main``                          main corpus of the primary seed, open-weight judge panel   3, 4, 9, 17
                                  (``conformity.judges``), θ_a = ``fit.theta_anchor``        table4_by_dataset
``decomposition``                 decomposition corpus, same panel; shifts built from the    9, 10-12, 20
                                  increments Δ_sp, Δ_content,k, Δ_pp,c (App. C.1 priors on
                                  η_regen, η_content and η)
``self-excluded``                 ``main`` without every rating a judge gave to an answer    9, 17
                                  of its own model family (anchors kept)
``theta-<θ>``                     ``decomposition`` with anchors pinned at ±θ, for every θ   9, 20
                                  in ``fit.theta_anchor_sensitivity`` other than θ_a (that
                                  one is ``decomposition`` itself), on
                                  ``fit.theta_anchor_datasets``
``hosted-<judge>``                ``main`` with the panel plus one hosted judge (the         4 (API rows), 9,
                                  five-judge refits), on ``hosted_judge_datasets``           table4_by_dataset
``reference-free``                ``main`` with the anchors scored reference-free instead    9,
                                  of reference-augmented (§3.4's "reference-free             table3_reference_free
                                  intermediate fit"); on when
                                  ``fit.reference_free_sensitivity``
``generator-mean``                ``main`` with per-generator baseline means: b_t ~ N(μ_g,   9,
                                  σ_b), μ_g ~ N(0, 1) (``ModelOptions.generator_mean``);     table3_generator_mean
                                  this project's sensitivity variant, on when
                                  ``fit.generator_mean_sensitivity``
``decomposition-generator-mean``  ``decomposition`` with the same baseline means             9,
                                                                                             table3_generator_mean
``blind-quality``                 blind ratings alone of the main corpus of every execution  9, 15,
                                  (``conformity.seeds``), same panel and model: the "blind   conformity_quality
                                  latent quality" θ̂ that Table 15 correlates with the
                                  external metrics
================================  =========================================================  ===============

The anchor-scale refits are refits of the decomposition fit: seed 002's Table 20 row at
θ_a = 1.5 is the TruthfulQA decomposition corpus's Asym_total (−Δ_total,AW − Δ_total,AC of
its Table 10: Gemma 0.06 + 0.02 and Llama 0.32 + 0.02, i.e. 0.07-0.09 and 0.33-0.35 at that
rounding, against Table 20's +0.07 and +0.35), not the main fit's (Table 3: +0.061 and
+0.327, i.e. +0.06 and +0.33), and its Table 9 lists the anchor-scale fits beside the
decomposition fit's diagnostics (docs/deviations.yaml#anchor-scale-refits).

The paper's model (every variant but the two generator-mean ones) has b_t ~ N(0, σ_b): when
generators differ in mean quality, the shrinkage of b_t toward 0 is absorbed into each
generator's shifts η. The generator-mean fits measure how much that moves the reported
estimates; they never replace the primary ones.

The seed-43/44 executions enter no fit that estimates a condition effect: seed 002 (§2.2)
keeps them out of "the primary hierarchical fit". They enter the ``blind-quality`` fit only,
whose per-answer θ̂ Table 15 needs for "non-anchor answers (n = 48,000 per dataset)", i.e.
500 × 4 × 8 answers of each of the three executions; its shifts and loadings are printed by
no table (its γ_j meets no informed rating and stays at its prior). Each execution's
(item, generator) is a trial of its own (the ratings table's trial_id holds the seed);
docs/deviations.yaml#table15-answer-scope.

A variant that cannot be fitted under a configuration is left out of the plan with a
reason (``omitted_fits``) that the tables print instead of a number: hosted refits with no
hosted judge, a self-rating exclusion that would remove every rating, a decomposition fit
with the decomposition corpus disabled, the generator-mean refits when
``fit.generator_mean_sensitivity`` is false (or their base fit is left out), the
reference-free refits when ``fit.reference_free_sensitivity`` is false.

Anchor ratings: seed 002 §3.4 — "All primary estimates therefore use reference-augmented
anchor scoring, while experimental answers remain reference-free." Every fit therefore
keeps only the reference-augmented anchor ratings (``FitSpec.anchor_reference``), except the
``reference-free`` refit, which keeps only the reference-free ones: the seed reports that such
an intermediate fit "changed the direction of the estimated asymmetry despite satisfactory
sampling diagnostics", and table3_reference_free sets it beside Table 3.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects.measurement.data import RatingsError, model_family

KINDS = ("main", "decomposition", "self-excluded", "theta", "hosted", "generator-mean", "decomposition-generator-mean",
         "reference-free", "blind-quality")
REFERENCE_FREE = "reference-free"
#: Variant name (= kind) of Table 15's blind-only fit over every execution.
BLIND_QUALITY = "blind-quality"
#: ``reference`` value of the anchor ratings each anchor scoring keeps (judge stage).
ANCHOR_REFERENCES = ("augmented", "free")
#: Variant name (= kind) of the generator-mean refit of each base kind.
GENERATOR_MEAN_VARIANTS = {"main": "generator-mean", "decomposition": "decomposition-generator-mean"}
#: Columns of the judge stage's ratings table that selecting a fit's rows needs
#: (on top of the measurement contract of ``measurement.data``).
SELECTION_COLUMNS = ("corpus", "seed", "reference", "pass")
QUALITY_COLUMNS = ("answer_id", "theta_mean", "theta_sd", "dataset", "corpus", "seed", "generator", "item_id",
                   "condition")
DECOMPOSITION_TABLES = {"truthfulqa": 10, "mmlu_pro": 11, "arc_challenge": 12}


def without_added_defaults(settings: Mapping[str, Any], added: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` without the keys of ``added`` that hold its default value.

    ``added`` lists options that arrived after fits had been run: a fit's settings dict is
    its rule's params, so carrying an added option at its default would rerun every existing
    fit (and all its tables) for nothing. Only fits that use a non-default value carry it."""
    return {k: v for k, v in settings.items() if not (k in added and v == added[k])}


#: FitSpec fields added after fits existed, with their defaults (see without_added_defaults).
SPEC_ADDED_DEFAULTS = {"generator_mean": False, "anchor_reference": "augmented", "seeds": [], "blind_only": False}


@dataclass(frozen=True)
class FitSpec:
    """One fit: which ratings (corpus, seed, judges, self-exclusion) and which model (θ_a, shift
    prior, per-generator baseline means)."""

    dataset: str
    variant: str
    kind: str
    corpus: str
    seed: int
    judges: tuple[str, ...]
    theta_anchor: float
    exclude_self: bool = False
    shift_prior: str = "cell"
    hosted_judge: str | None = None
    generator_mean: bool = False
    anchor_reference: str = "augmented"
    #: Executions whose experimental answers enter (empty: ``seed`` alone).
    seeds: tuple[int, ...] = ()
    #: Blind ratings only: no informed pass, so γ_j meets no data and keeps its prior.
    blind_only: bool = False

    def __post_init__(self):
        # Spec dicts (rule params, table settings, JSON) hold lists; a spec holds tuples.
        object.__setattr__(self, "judges", tuple(self.judges))
        object.__setattr__(self, "seeds", tuple(int(x) for x in self.seeds))

    @property
    def executions(self) -> tuple[int, ...]:
        """The seeds whose experimental ratings the fit selects."""
        return self.seeds or (self.seed,)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["judges"] = list(self.judges)
        d["seeds"] = list(self.seeds)
        return without_added_defaults(d, SPEC_ADDED_DEFAULTS)


def theta_variant(theta: float) -> str:
    return f"theta-{float(theta)!r}"


def hosted_variant(judge: str) -> str:
    return f"hosted-{judge}"


def family_of(config: Mapping[str, Any], model: str) -> str:
    """The model's configured ``family``, else one inferred from its name."""
    m = config.get("models", {}).get(model) or {}
    return m.get("family") or model_family(model)


def display_name(config: Mapping[str, Any], model: str) -> str:
    m = config.get("models", {}).get(model) or {}
    return m.get("display_name") or model


def _has_non_self_pair(config: Mapping[str, Any]) -> bool:
    c = config["conformity"]
    return any(family_of(config, j) != family_of(config, g) for j in c["judges"] for g in c["generators"])


def fit_plan(config: Mapping[str, Any]) -> list[FitSpec]:
    """Every fit the configuration asks for, in table order."""
    return _plan(config)[0]


def omitted_fits(config: Mapping[str, Any]) -> dict[str, str]:
    """Variant kind → why no fit of that kind is in the plan (only kinds left out)."""
    return _plan(config)[1]


def _plan(config: Mapping[str, Any]) -> tuple[list[FitSpec], dict[str, str]]:
    c = config["conformity"]
    f = c["fit"]
    if not c.get("enabled", True):
        return [], {k: "Study C is disabled in this configuration" for k in KINDS}
    judges = tuple(c["judges"])
    if not judges or not c["generators"]:
        return [], {k: "no judges or no generators are configured" for k in KINDS}
    datasets = list(c["datasets"])
    theta_a = float(f["theta_anchor"])
    plan: list[FitSpec] = []
    omitted: dict[str, str] = {}
    base = {"corpus": "main", "seed": int(c["primary_seed"]), "judges": judges, "theta_anchor": theta_a}
    for ds in datasets:
        plan.append(FitSpec(ds, "main", "main", **base))
    if c["decomposition"]["enabled"]:
        for ds in datasets:
            plan.append(
                FitSpec(ds, "decomposition", "decomposition", corpus="decomposition",
                        seed=int(c["decomposition"]["seed"]), judges=judges, theta_anchor=theta_a,
                        shift_prior="increment")
            )
    else:
        omitted["decomposition"] = "the decomposition corpus is disabled (conformity.decomposition.enabled)"
    if _has_non_self_pair(config):
        for ds in datasets:
            plan.append(FitSpec(ds, "self-excluded", "self-excluded", exclude_self=True, **base))
    else:
        omitted["self-excluded"] = (
            "every judge shares its model family with every generator: excluding self-ratings would "
            "remove every experimental rating"
        )
    thetas = [float(t) for t in f["theta_anchor_sensitivity"] if float(t) != theta_a]
    theta_ds = [d for d in f["theta_anchor_datasets"] if d in datasets]
    decompositions = {s.dataset: s for s in plan if s.kind == "decomposition"}
    if thetas and theta_ds and decompositions:
        # Refits of the decomposition fit (module docstring: seed 002 Tables 9, 10, 20).
        for ds in theta_ds:
            for t in thetas:
                plan.append(replace(decompositions[ds], variant=theta_variant(t), kind="theta", theta_anchor=t))
    else:
        omitted["theta"] = (
            "no anchor scale other than fit.theta_anchor is configured" if not thetas
            else "none of fit.theta_anchor_datasets is among conformity.datasets" if not theta_ds
            else "the anchor-scale refits are refits of the decomposition fit, and the decomposition corpus is "
                 "disabled (conformity.decomposition.enabled)"
        )
    hosted = list(c["hosted_judges"])
    hosted_ds = [d for d in c["hosted_judge_datasets"] if d in datasets]
    if hosted and hosted_ds:
        for ds in hosted_ds:
            for h in hosted:
                plan.append(FitSpec(ds, hosted_variant(h), "hosted", corpus="main", seed=int(c["primary_seed"]),
                                    judges=judges + (h,), theta_anchor=theta_a, hosted_judge=h))
    else:
        omitted["hosted"] = (
            "no hosted judges are configured (conformity.hosted_judges)" if not hosted
            else "none of conformity.hosted_judge_datasets is among conformity.datasets"
        )
    gm_bases = list(plan)
    if f.get("reference_free_sensitivity", True):
        plan.extend(FitSpec(ds, REFERENCE_FREE, REFERENCE_FREE, anchor_reference="free", **base) for ds in datasets)
    else:
        omitted[REFERENCE_FREE] = ("the reference-free anchor refits are switched off "
                                   "(fit.reference_free_sensitivity)")
    # Table 15's θ̂ (module docstring): the main corpus of every execution, blind ratings only.
    executions = tuple(int(x) for x in c["seeds"])
    plan.extend(FitSpec(ds, BLIND_QUALITY, BLIND_QUALITY, seeds=executions, blind_only=True, **base)
                for ds in datasets)
    for base_kind, variant in GENERATOR_MEAN_VARIANTS.items():
        bases = [s for s in gm_bases if s.kind == base_kind]
        if not f["generator_mean_sensitivity"]:
            omitted[variant] = "the generator-mean sensitivity fits are switched off (fit.generator_mean_sensitivity)"
        elif not bases:
            omitted[variant] = omitted.get(base_kind, f"no {base_kind} fit in the plan")
        else:
            plan.extend(replace(s, variant=variant, kind=variant, generator_mean=True) for s in bases)
    return plan, omitted


def find_spec(config: Mapping[str, Any], dataset: str, variant: str) -> FitSpec:
    for spec in fit_plan(config):
        if spec.dataset == dataset and spec.variant == variant:
            return spec
    raise KeyError(f"no fit {dataset}/{variant} in this configuration's plan")


# ----------------------------------------------------------------------------- what a fit is made with


#: ``conformity.fit`` keys that decide which fits exist or how tables judge them, not how a
#: fit runs: changing one reruns the tables, never the fits.
PLAN_KEYS = (
    "theta_anchor_sensitivity",
    "theta_anchor_datasets",
    "generator_mean_sensitivity",
    "reference_free_sensitivity",
    "max_rhat",
    "min_ess_bulk",
    "min_ess_tail",
    "max_divergences",
)
#: Sampler settings added after fits existed, with their defaults (``without_added_defaults``).
SAMPLER_ADDED_DEFAULTS = {"init": "median", "split_means": [], "sampler": "numpyro", "warmup_windows": None}
#: Where a fit's files keep the record of what they were made with (``fit_record``): the
#: key of diagnostics.json, the attribute of posterior.nc's posterior group and the
#: schema metadata key of quality.parquet, each holding the record as JSON; summary.csv,
#: which has no place for metadata, holds its SHA-256 in a column of that name.
RECORD_KEY = "made_with"
RECORD_SHA256_COLUMN = "made_with_sha256"


def sampler_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    """The sampler settings alone (``conformity.fit`` without plan and diagnostic keys): the
    fit rule's ``settings`` param."""
    fit = config["conformity"]["fit"]
    return without_added_defaults({k: v for k, v in fit.items() if k not in PLAN_KEYS}, SAMPLER_ADDED_DEFAULTS)


def fit_families(config: Mapping[str, Any], spec: FitSpec) -> dict[str, str]:
    """Model family of the fit's judges and generators (self-rating exclusion, Table 17):
    the fit rule's ``families`` param."""
    names = set(spec.judges) | set(config["conformity"]["generators"])
    return {name: family_of(config, name) for name in sorted(names)}


def fit_record(spec: FitSpec, settings: Mapping[str, Any], families: Mapping[str, str]) -> dict[str, Any]:
    """What a fit is made with: the fit rule's three params (spec, sampler settings, model
    families), as every file of the fit records them and its readers compare them."""
    return json.loads(json.dumps({"spec": spec.as_dict(), "settings": dict(settings), "families": dict(families)}))


def made_with(config: Mapping[str, Any], spec: FitSpec) -> dict[str, Any]:
    """The record a fit of ``spec`` made under ``config`` carries (``fit_record`` of the same
    functions the fit rule's params come from)."""
    return fit_record(spec, sampler_settings(config), fit_families(config, spec))


def record_sha256(record: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()


# ----------------------------------------------------------------------------- data


def select_ratings(table: pd.DataFrame, spec: FitSpec) -> pd.DataFrame:
    """The rows of the judge stage's ratings table that enter ``spec``'s fit.

    Experimental answers of the spec's corpus and executions (``FitSpec.executions``; blind
    ratings only in a ``blind_only`` fit) plus the anchor ratings of the spec's anchor
    scoring (reference-augmented but in the ``reference-free`` refit; module docstring), by
    the spec's judges only — a hosted judge's ratings never reach a four-judge fit.
    """
    missing = [col for col in SELECTION_COLUMNS if col not in table.columns]
    if missing:
        raise RatingsError(
            f"ratings table lacks column(s) {missing} needed to select a fit's rows "
            f"(the judge stage's table has corpus, seed, reference and pass)"
        )
    seed = pd.to_numeric(table["seed"], errors="coerce")
    experimental = (table["corpus"] == spec.corpus) & seed.isin(spec.executions)
    if spec.blind_only:
        experimental &= table["pass"] == "blind"
    anchors = (table["corpus"] == "anchor") & (table["reference"] == spec.anchor_reference)
    rows = table.loc[(experimental | anchors) & table["judge"].isin(spec.judges)].reset_index(drop=True)
    rated = set(pd.to_numeric(rows.loc[rows["corpus"] == spec.corpus, "seed"], errors="coerce"))
    absent_seeds = [s for s in spec.executions if s not in rated]
    if absent_seeds:
        raise RatingsError(
            f"no {spec.corpus}-corpus ratings of seed {', '.join(map(str, absent_seeds))} by judges "
            f"{list(spec.judges)} in the {spec.dataset} ratings table"
        )
    absent = sorted(set(spec.judges) - set(rows["judge"]))
    if absent:
        raise RatingsError(f"judge(s) {absent} have no ratings for {spec.dataset}/{spec.variant}")
    if not anchors.any():
        raise RatingsError(f"no reference-{spec.anchor_reference} anchor ratings in the {spec.dataset} ratings "
                           "table: the anchors fix the latent scale, so no fit is possible")
    return rows


# ----------------------------------------------------------------------------- one fit


def run_fit(
    ratings_path: str | os.PathLike,
    spec: FitSpec,
    settings: Mapping[str, Any],
    families: Mapping[str, str],
    out_dir: str | os.PathLike,
    *,
    chain_method: str = "sequential",
    log=None,
) -> dict[str, Any]:
    """Fit ``spec`` on a ratings table and write posterior.nc, summary.csv, diagnostics.json
    and quality.parquet into ``out_dir``, each with the record of ``spec``, ``settings`` and
    ``families`` (``fit_record``). ``settings`` is ``sampler_settings`` of the config."""
    from context_effects.measurement.data import prepare_data
    from context_effects.measurement.fit import fit_nuts, fit_nutpie, fit_svi, save_fit

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = pd.read_parquet(ratings_path)
    rows = select_ratings(table, spec)
    data = prepare_data(rows, judges=spec.judges, exclude_self=spec.exclude_self, family=dict(families))
    if log:
        log.info("%s/%s: %d ratings, %d answers, %d anchors, %d trials, judges %s; %s",
                 spec.dataset, spec.variant, data.n_ratings, data.n_answers, data.n_anchors, data.n_trials,
                 list(data.judges), data.info)
    common = {"seed": int(settings["seed"]), "precision": settings["precision"],
              "theta_anchor": spec.theta_anchor, "shift_prior": spec.shift_prior,
              "generator_mean": spec.generator_mean}
    if settings["method"] == "nuts" and settings.get("sampler", "numpyro") == "nutpie":
        fit = fit_nutpie(
            data, chains=int(settings["chains"]), warmup=int(settings["warmup"]), samples=int(settings["samples"]),
            target_accept=float(settings["target_accept"]), max_tree_depth=int(settings["max_tree_depth"]),
            cores=int(settings["chains"]) if chain_method == "parallel" else 1,
            split_means=tuple(settings.get("split_means", ())), **common,
        )
    elif settings["method"] == "nuts":
        fit = fit_nuts(
            data, chains=int(settings["chains"]), warmup=int(settings["warmup"]), samples=int(settings["samples"]),
            target_accept=float(settings["target_accept"]), max_tree_depth=int(settings["max_tree_depth"]),
            chain_method=chain_method, init=settings.get("init", "median"),
            split_means=tuple(settings.get("split_means", ())), warmup_windows=settings.get("warmup_windows"),
            **common,
        )
    else:
        fit = fit_svi(data, steps=int(settings["svi_steps"]), guide=settings["svi_guide"],
                      num_draws=int(settings["samples"]), **common)
    record = fit_record(spec, settings, families)
    save_fit(fit, out / "posterior.nc", out / "summary.csv", out / "diagnostics.json",
             attrs={RECORD_KEY: json.dumps(record, sort_keys=True)},
             summary_columns={RECORD_SHA256_COLUMN: record_sha256(record)},
             extra={"fit": spec.as_dict(), RECORD_KEY: record})
    diag = json.loads((out / "diagnostics.json").read_text())
    write_quality(quality_frame(fit, rows), out / "quality.parquet", record)
    if log:
        log.info("%s/%s fitted in %.1f s: %s", spec.dataset, spec.variant, fit.timings.get("total_s", float("nan")),
                 {k: diag.get(k) for k in ("max_rhat", "min_ess_bulk", "min_ess_tail", "divergences")})
    return diag


def quality_frame(fit, rows: pd.DataFrame) -> pd.DataFrame:
    """Posterior mean and SD of θ for every experimental answer of the fit, with its identity
    (anchors are left out: their θ is pinned, not estimated)."""
    from context_effects.measurement.fit import answer_quality

    q = answer_quality(fit)
    q = q.loc[~q["anchor"], ["answer_id", "theta_mean", "theta_sd"]]
    ident = [c for c in QUALITY_COLUMNS[3:] if c in rows.columns]
    meta = rows.drop_duplicates("answer_id").set_index("answer_id")[ident]
    q = q.join(meta, on="answer_id")
    for col in QUALITY_COLUMNS:
        if col not in q.columns:
            q[col] = None
    return q.loc[:, list(QUALITY_COLUMNS)].reset_index(drop=True)


def write_quality(quality: pd.DataFrame, path: str | os.PathLike, record: Mapping[str, Any]) -> None:
    """quality.parquet with the fit's record in its schema metadata (``RECORD_KEY``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(quality, preserve_index=False)
    meta = {**(table.schema.metadata or {}), RECORD_KEY.encode(): json.dumps(record, sort_keys=True).encode()}
    pq.write_table(table.replace_schema_metadata(meta), path)


# ----------------------------------------------------------------------------- checks


def assess(diag: Mapping[str, Any], thresholds: Mapping[str, Any]) -> list[str]:
    """Why a fit's diagnostics fail the configured thresholds (empty list: it passes).

    A fit without MCMC diagnostics (SVI) fails: its intervals are not trustworthy
    (``fit_svi`` docstring) and nothing checks its convergence.
    """
    if diag.get("method") == "svi":
        return ["SVI fit: no MCMC convergence diagnostics (intervals too narrow; use NUTS)"]
    reasons = []
    if not diag["max_rhat"] <= thresholds["max_rhat"]:
        reasons.append(f"R-hat {diag['max_rhat']:.3f} > {thresholds['max_rhat']} ({diag.get('max_rhat_at')})")
    if not diag["min_ess_bulk"] >= thresholds["min_ess_bulk"]:
        reasons.append(f"bulk ESS {diag['min_ess_bulk']:.0f} < {thresholds['min_ess_bulk']:g} "
                       f"({diag.get('min_ess_bulk_at')})")
    if not diag["min_ess_tail"] >= thresholds["min_ess_tail"]:
        reasons.append(f"tail ESS {diag['min_ess_tail']:.0f} < {thresholds['min_ess_tail']:g} "
                       f"({diag.get('min_ess_tail_at')})")
    div = diag.get("divergences") or 0
    if div > thresholds["max_divergences"]:
        reasons.append(f"{div} divergent transitions > {thresholds['max_divergences']}")
    return reasons


def thresholds_of(settings: Mapping[str, Any]) -> dict[str, Any]:
    return {k: settings[k] for k in ("max_rhat", "min_ess_bulk", "min_ess_tail", "max_divergences")}


def fit_dir(spec_or_dataset, variant: str | None = None) -> str:
    if isinstance(spec_or_dataset, FitSpec):
        return f"results/conformity/fits/{spec_or_dataset.dataset}/{spec_or_dataset.variant}"
    return f"results/conformity/fits/{spec_or_dataset}/{variant}"


def specs_for(plan: Sequence[FitSpec], *, kind: str | None = None, dataset: str | None = None) -> list[FitSpec]:
    return [s for s in plan if (kind is None or s.kind == kind) and (dataset is None or s.dataset == dataset)]
