"""Study C's registry: every table and figure of the study (seed 002), with the files
each reads, the settings its builder uses, its caption, label and formats.

Stages (one wildcard rule each, workflow/rules/conformity_*.smk):

* ``descriptive`` — the model-free results from the ratings and answers tables
  (Tables 1, 2, 5, Krippendorff's alpha, the flip share, parse failures, the
  rating-distribution figure): ``context_effects.conformity.descriptive``; the
  reproducibility of the executions: ``context_effects.conformity.reproducibility``;
* ``fit`` — the measurement model's tables (3, 4, 9, 10-12, 17, 20, and the additions
  table3_generator_mean, table3_reference_free, table4_by_dataset) from fit summaries:
  ``context_effects.measurement.report``; the forest plots of Tables 3 and 4
  (``eta_forest``, ``gamma_forest``): ``context_effects.measurement.figures``;
* ``metrics`` — external validation, text metrics, models, budget and packages
  (Tables 6-8, 13-16, 18, 19): ``context_effects.metrics.tables``.

Builders import their modules inside the function: the Snakefile lists this registry
while it builds the DAG, which must stay fast.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from typing import Any

import pandas as pd

from context_effects.conformity import dag
from context_effects.conformity.conditions import DATASET_LABELS, dataset_label
from context_effects.measurement.pipeline import DECOMPOSITION_TABLES
from context_effects.outputs import Built, FigureSpec, Registry, TableSpec

Config = Mapping[str, Any]
log = logging.getLogger("context_effects")


# --- descriptive stage -------------------------------------------------------------------


def _ratings(config: Config) -> dict[str, list[str]]:
    return {"ratings": dag.ratings_tables(config)}


def _revisions(config: Config) -> dict[str, list[str]]:
    return {"revisions": dag.revisions_tables(config)}


def _panel_settings(config: Config) -> dict[str, Any]:
    c = config["conformity"]
    return {"datasets": list(c["datasets"]), "primary_seed": int(c["primary_seed"]), "run_kind": config["run"]["kind"]}


def _dataset_settings(config: Config) -> dict[str, Any]:
    return {"datasets": list(config["conformity"]["datasets"]), "run_kind": config["run"]["kind"]}


def _per_dataset(paths: list[str], settings: Mapping[str, Any]) -> dict[str, pd.DataFrame]:
    return {d: pd.read_parquet(p) for d, p in zip(settings["datasets"], paths, strict=True)}


def _scanned(paths: list[str], settings: Mapping[str, Any]):
    """Each dataset's ratings as a lazy polars scan: the descriptive tables read only the
    columns they aggregate (bench/polars_aggregation.py)."""
    from context_effects.conformity import descriptive as D

    return D.scan_ratings(paths, settings["datasets"])


def _executions_note(s: Mapping[str, Any]) -> str:
    from context_effects.conformity import descriptive as D

    return (f"Open judge panel, blind pass, main corpus; missing ratings excluded. Rows '{D.POOLED}' pool every "
            f"execution ({', '.join(str(x) for x in s['seeds'])}), as Table 19 does; rows "
            f"'{D.execution_label(s['primary_seed'])}' are the primary execution alone, a sensitivity "
            "(docs/deviations.yaml#model-free-scope).")


def _table2_settings(config: Config) -> dict[str, Any]:
    return {**_panel_settings(config), "seeds": [int(x) for x in config["conformity"]["seeds"]]}


def _notes(s: Mapping[str, Any]) -> list[str]:
    from context_effects.tables import run_notes

    return run_notes(s["run_kind"])


def _labelled(table: pd.DataFrame) -> pd.DataFrame:
    """The table with its datasets named as in every other Study C table (``DATASET_LABELS``)."""
    return table.assign(Dataset=table["Dataset"].map(dataset_label)) if "Dataset" in table else table


def build_table2(inputs, s) -> Built:
    from context_effects.conformity import descriptive as D

    table = D.table2(_scanned(inputs["ratings"], s), s["primary_seed"])
    return Built(_labelled(table), [_executions_note(s), *_notes(s)])


def build_table2_injection_excluded(inputs, s) -> Built:
    from context_effects.conformity.injection import table2_injection_excluded

    table = table2_injection_excluded(_per_dataset(inputs["ratings"], s), s["primary_seed"])
    return Built(_labelled(table), [
        _executions_note(s) + " Ratings of answers flagged as addressing the judge (possible prompt injection; "
        "docs/deviations.yaml#answer-injection-flags) are left out; excluded_answers and excluded_ratings count "
        "them among Table 2's ratings.", *_notes(s)])


def build_table5(inputs, s) -> Built:
    from context_effects.conformity import descriptive as D

    return Built(_labelled(D.anchor_audit(_scanned(inputs["ratings"], s))),
                 [f"'{D.RANKED_PER_QUESTION}': share of questions whose correct anchor has a strictly higher mean "
                  "panel rating than the incorrect anchor; this is the row compared with seed 002's 73.3% and 97.5% "
                  "(its Table 5 counts questions). "
                  f"'{D.RANKED_PER_PAIR}': share of (item, judge) pairs with the correct anchor rated strictly "
                  "above the incorrect anchor. Both over pairs with both anchors rated; open judge panel "
                  "(docs/deviations.yaml#anchor-audit-definition).", *_notes(s)])


def _published_tables(config: Config) -> dict[str, list[str]]:
    """The seed's printed tables the posterior-predictive check reads, from the repository
    whose library the Snakefile imported (its ``src/`` sits beside ``paper/``)."""
    from pathlib import Path

    from context_effects.conformity.predictive import PUBLISHED_TABLES

    root = Path(__file__).resolve().parents[3] / "paper" / "published" / "conformity"
    return {"published": [str(root / f"{name}.csv") for name in PUBLISHED_TABLES]}


def build_posterior_predictive(inputs, s) -> Built:
    from context_effects.conformity.predictive import predictive_note, predictive_table, published_dir

    published = published_dir(inputs["published"])
    return Built(predictive_table(published), [predictive_note(published)])


def build_agreement(inputs, s) -> Built:
    from context_effects.conformity import descriptive as D

    return Built(_labelled(D.agreement_table(_scanned(inputs["ratings"], s), s["primary_seed"])),
                 [_executions_note(s) + " Units are answers (each execution's its own), coders are judges.",
                  *_notes(s)])


def build_parse_failures(inputs, s) -> Built:
    from context_effects.conformity import descriptive as D

    return Built(D.parse_failures(_scanned(inputs["ratings"], s)),
                 ["A missing rating is left out of every analysis, never imputed.", *_notes(s)])


def build_flip_share(inputs, s) -> Built:
    from context_effects.conformity import descriptive as D

    return Built(_labelled(D.flip_share(_per_dataset(inputs["revisions"], s), s["primary_seed"])),
                 ["Flip indicator: the answer's side is the candidate set (gold and other correct answers vs "
                  "attractor and other incorrect answers) with the highest token F1; mean blind panel ratings; "
                  "a revision is compared with the Round-1 answer of its own execution.", _executions_note(s),
                  *_notes(s)])


def _reproducibility_inputs(config: Config) -> dict[str, list[str]]:
    return {"answers": dag.answers_tables(config), "ratings": dag.ratings_tables(config)}


def _reproducibility_settings(config: Config) -> dict[str, Any]:
    c = config["conformity"]
    models = dict.fromkeys([*c["generators"], *c["judges"], *c["hosted_judges"]])
    return {"datasets": list(c["datasets"]), "seeds": [int(x) for x in c["seeds"]],
            "decomposition_seed": int(c["decomposition"]["seed"]) if c["decomposition"]["enabled"] else None,
            "display_names": {m: (config.get("models", {}).get(m) or {}).get("display_name") or m for m in models},
            "run_kind": config["run"]["kind"]}


_ANSWER_COLUMNS = ["corpus", "seed", "generator", "item_id", "condition", "text"]
_RATING_COLUMNS = ["corpus", "pass", "status", "seed", "rating", "judge", "item_id", "generator", "condition",
                   "authority"]


def build_reproducibility(inputs, s) -> Built:
    from context_effects.conformity.reproducibility import reproducibility_table

    decomposition = s.get("decomposition_seed")
    answers, ratings = {}, {}
    if len(s["seeds"]) >= 2 or decomposition is not None:
        answers = {d: pd.read_parquet(p, columns=_ANSWER_COLUMNS)
                   for d, p in zip(s["datasets"], inputs["answers"], strict=True)}
    if len(s["seeds"]) >= 2:
        ratings = {d: pd.read_parquet(p, columns=_RATING_COLUMNS)
                   for d, p in zip(s["datasets"], inputs["ratings"], strict=True)}
    table = reproducibility_table(answers, ratings, s["seeds"], s["display_names"], DATASET_LABELS, decomposition)
    return Built(table, [
        f"Executions: main corpus at seeds {s['seeds']} (conformity.seeds). A trial is one (dataset, item, "
        "generator). All executions: share of trials with a Round-1 answer in every execution whose texts are "
        "identical strings (95% Wilson interval over trials). Pairwise: per trial the share of execution pairs "
        "with identical text, averaged over trials (95% normal interval over trials).",
        f"Main vs decomposition: per trial, whether the main corpus's Round-1 text at seed {decomposition} is the "
        "same string as the decomposition corpus's Round-1 text, generated from the identical prompt and seed in a "
        "run of its own (95% Wilson interval over trials); seed 002's 54% ('Round 1 answers matched across "
        "nominally identical runs', the reason for its self-contained decomposition corpora) is compared with "
        "the pooled row." if decomposition is not None else
        "Main vs decomposition: no decomposition corpus configured (conformity.decomposition.enabled).",
        "Blind ratings (main corpus, valid ratings only): a unit is one answer slot (item, generator, condition, "
        "authority) a judge rated in at least two executions. Identical: share of execution pairs with the same "
        "rating, averaged over units. Alpha: Krippendorff's ordinal alpha with executions as coders. Definitions: "
        "docs/deviations.yaml#reproducibility-match-rate.",
        *_notes(s)])


def build_table1(inputs, s) -> Built:
    from context_effects.conformity import descriptive as D

    revisions = _per_dataset(inputs["revisions"], s)[s["datasets"][0]]
    table, branch = D.example_table(revisions)
    log.info("example: %s", branch)
    return Built(table, [D.TABLE1_RULE, *_notes(s)])


def draw_rating_distributions(inputs, s):
    from context_effects.conformity import descriptive as D

    dist = D.rating_distribution(_scanned(inputs["ratings"], s), s["primary_seed"])
    return D.plot_rating_distribution(dist, s["datasets"], _notes(s)), dist


# --- fit stage ---------------------------------------------------------------------------


def _fit_inputs(number: str, config: Config) -> dict[str, list[str]]:
    from context_effects.measurement.report import table_inputs

    return {"fits": table_inputs(config, number)}


def _fit_settings(number: str, config: Config) -> dict[str, Any]:
    from context_effects.measurement.report import table_settings

    return table_settings(config, number)


def _build_fit_table(number: str, inputs, s) -> Built:
    from context_effects.measurement.report import build_table

    return build_table(number, s)


def _fit_table(number: str, caption: str, label: str, formats: Mapping[str, str] | None = None) -> TableSpec:
    return TableSpec(
        name=f"table{number}",
        stage="fit",
        caption=caption,
        label=label,
        inputs=partial(_fit_inputs, number),
        settings=partial(_fit_settings, number),
        build=partial(_build_fit_table, number),
        formats=dict(formats or {}),
    )


def _draw_fit_figure(name: str, inputs, s):
    from context_effects.measurement import figures

    return getattr(figures, name)(inputs["fits"], s)


def _fit_figure(name: str, number: str, caption: str) -> FigureSpec:
    """A forest plot of one model-based table's estimates: the same fits and settings as
    Table ``number``, drawn by ``context_effects.measurement.figures.<name>``."""
    return FigureSpec(
        name=name,
        stage="fit",
        caption=caption,
        inputs=partial(_fit_inputs, number),
        settings=partial(_fit_settings, number),
        draw=partial(_draw_fit_figure, name),
        formats=("csv", "pdf", "png"),
    )


def _decomposition_table(dataset: str, number: int) -> TableSpec:
    return _fit_table(
        str(number),
        f"{DATASET_LABELS[dataset]} decomposition of the total Round 2 shift into second-pass revision (Delta_sp), "
        "content exposure (Delta_content,k) and the peer-presentation residual (Delta_pp,c). Entries are posterior "
        "means with 95% credible intervals.",
        f"tab:conformity-decomposition-{dataset.replace('_', '-')}",
    )


# --- metrics stage -------------------------------------------------------------------------


def _metrics(config: Config) -> dict[str, list[str]]:
    return {"metrics": dag.merged_metrics(config)}


def _run_only(config: Config) -> dict[str, Any]:
    return {"run_kind": config["run"]["kind"]}


def _validation(config: Config, *keys: str) -> dict[str, Any]:
    v = config["conformity"]["validation"]
    return {**{k: v[k] for k in keys}, "run_kind": config["run"]["kind"]}


def _used_models(config: Config) -> list[str]:
    c = config["conformity"]
    return list(dict.fromkeys(c["generators"] + c["judges"] + c["hosted_judges"]))


def _table6_settings(config: Config) -> dict[str, Any]:
    c = config["conformity"]
    return {
        "roles": {k: list(c[k]) for k in ("generators", "judges", "hosted_judges")},
        "models": {m: dict(config["models"][m]) for m in _used_models(config)},
        "validation": {k: c["validation"][k]
                       for k in ("nli_model", "bertscore_model", "sbert_model", "truth_judge", "info_judge")},
        "run_kind": config["run"]["kind"],
    }


def _table7_inputs(config: Config) -> dict[str, list[str]]:
    """Table 7 is a late rule: it runs after the outputs whose jobs it measures (answers,
    ratings, metric and quality tables, this stage's other tables), so the benchmark files
    of everything the run did are on disk when it reads them."""
    own = ("table6", "table7", "table8", "table8_requests")
    late = [f for t in REGISTRY.tables("metrics") if t.name not in own
            for f in (f"results/tables/conformity/{t.name}.csv", f"results/tables/conformity/{t.name}.tex")]
    return {"late": dag.answers_tables(config) + late}


def _table7_settings(config: Config) -> dict[str, Any]:
    from context_effects.dag import model_gpus, vllm_models

    n = config["conformity"]["validation"]["gpu"]["count"]
    return {
        "benchmark_root": "benchmarks",
        "model_gpus": {m: model_gpus(config, m) for m in vllm_models(config)},
        "stage_gpus": {"conformity_metrics/neural": n, "conformity_metrics/classifiers": n},
        "run_kind": config["run"]["kind"],
    }


_TABLE8_FIT_KEYS = ("method", "chains", "warmup", "samples", "target_accept", "max_tree_depth", "precision",
                    "theta_anchor")


def _table8_settings(config: Config) -> dict[str, Any]:
    # Generation and judging settings are not here: Table 8 reads what was sent.
    c = config["conformity"]
    return {
        "packages_config": {
            "conformity": {
                "fit": {k: c["fit"][k] for k in _TABLE8_FIT_KEYS},
                "validation": dict(c["validation"]),
            },
        },
        "ledger_root": "results/ledgers/conformity",
        "run_kind": config["run"]["kind"],
    }


def _request_shards(config: Config) -> dict[str, list[str]]:
    """Every generation and judge request shard of the run (packed shards listed once)."""
    paths = [p for d in dag.datasets(config) for p in (*dag.request_shards(config, d),
                                                        *dag.judge_request_shards(config, d))]
    return {"requests": list(dict.fromkeys(paths))}


def _table8_requests_settings(config: Config) -> dict[str, Any]:
    return {
        "models": {m: {k: config["models"][m][k] for k in ("display_name", "backend")} for m in _used_models(config)},
        "run_kind": config["run"]["kind"],
    }


def _quality_specs(config: Config, kind: str):
    from context_effects.measurement.pipeline import fit_plan

    return [spec for spec in fit_plan(config) if spec.kind == kind]


def _table15_inputs(config: Config, kind: str) -> dict[str, list[str]]:
    """The metric rows, and per dataset the quality table of its ``kind`` fit: the quality
    rule's copy for the blind-only fit (Table 15), the fit's own file otherwise."""
    from context_effects.measurement.pipeline import BLIND_QUALITY, fit_dir

    quality = (dag.quality_tables(config) if kind == BLIND_QUALITY
               else [f"{fit_dir(spec)}/quality.parquet" for spec in _quality_specs(config, kind)])
    return {**_metrics(config), "quality": quality}


def _table15_settings(config: Config, kind: str) -> dict[str, Any]:
    """Which fit each quality table comes from and the settings it must have been made with
    (``measurement.records``), the executions and the run kind."""
    from context_effects.measurement.records import fit_keys, fit_name

    specs = _quality_specs(config, kind)
    c = config["conformity"]
    return {"quality_fits": [fit_name(spec) for spec in specs], "made_with": fit_keys(config, specs),
            "seeds": [int(x) for x in c["seeds"]], "primary_seed": int(c["primary_seed"]),
            "run_kind": config["run"]["kind"]}


def _label_then_numbers(df: pd.DataFrame) -> str:
    return "l" + "r" * (len(df.columns) - 1)


def _metrics_builder(name: str):
    def build(inputs, s) -> Built:
        from context_effects.metrics import tables

        return getattr(tables, name)(inputs, s)

    build.__name__ = f"build_{name}"
    return build


REGISTRY = Registry("conformity", [
    # descriptive
    TableSpec("table1", "descriptive",
              "An example of quality change without a simple answer flip ({datasets[0]}).", "tab:example",
              inputs=_revisions, settings=_dataset_settings, build=build_table1, align="lp{0.75\\linewidth}"),
    TableSpec("table2", "descriptive",
              "Mean blind ratings by peer condition; the last column is AllCorrect minus AllWrong. Rows 'pooled' "
              "pool every execution; the rows of the primary execution alone follow as a sensitivity.",
              "tab:mean-blind-ratings", inputs=_ratings, settings=_table2_settings, build=build_table2,
              formats={"n_ratings": "d"}),
    TableSpec("table2_injection_excluded", "descriptive",
              "Sensitivity of Table 2: mean blind ratings by peer condition without the answers flagged as "
              "addressing the judge, with the number of answers and ratings excluded per dataset.",
              "tab:mean-blind-ratings-injection-excluded", inputs=_ratings, settings=_table2_settings,
              build=build_table2_injection_excluded,
              formats={"n_ratings": "d", "excluded_answers": "d", "excluded_ratings": "d"}),
    TableSpec("table5", "descriptive",
              "Anchor-recognition audit under reference-free and reference-augmented scoring.", "tab:anchor-audit",
              inputs=_ratings, settings=_dataset_settings, build=build_table5),
    TableSpec("agreement", "descriptive",
              "Krippendorff's alpha of the blind judge panel. Rows 'pooled' pool every execution; the rows of the "
              "primary execution alone follow as a sensitivity.", "tab:blind-agreement",
              inputs=_ratings, settings=_table2_settings, build=build_agreement),
    TableSpec("flip_share", "descriptive",
              "All-wrong revisions a binary flip indicator scores as unchanged that still lost at least one blind "
              "rating point. Rows 'pooled' pool every execution; the rows of the primary execution alone follow "
              "as a sensitivity.", "tab:flip-share", inputs=_revisions, settings=_table2_settings,
              build=build_flip_share),
    TableSpec("parse_failures", "descriptive",
              "Judge replies without a valid rating after every re-ask, by judge, pass and condition.",
              "tab:parse-failures", inputs=_ratings, settings=_dataset_settings, build=build_parse_failures,
              formats={"missing_rate": ".3f"}),
    TableSpec("reproducibility", "descriptive",
              "Reproducibility of the main corpus across executions: Round-1 answers with identical text, and the "
              "agreement of each judge's blind ratings of the same answer slot.", "tab:conformity-reproducibility",
              inputs=_reproducibility_inputs, settings=_reproducibility_settings, build=build_reproducibility,
              formats={"Value": ".3f", "CI low": ".3f", "CI high": ".3f"}),
    TableSpec("posterior_predictive", "descriptive",
              "Posterior-predictive check of seed 002: with its published estimates planted, the expected mean "
              "blind ratings (Table 2) and anchor ratings (Table 5) of its own model beside the printed values, "
              "at the judging values that come closest.", "tab:posterior-predictive",
              inputs=_published_tables, build=build_posterior_predictive,
              formats={"Published": ".3f", "Predicted": ".3f", "Difference": "+.3f"}),
    FigureSpec("rating_distributions", "descriptive",
               "Distribution of blind ratings (1-5) by dataset and condition: open judge panel, main corpus at "
               "the primary seed.", inputs=_ratings, settings=_panel_settings, draw=draw_rating_distributions,
               formats=("csv", "pdf", "png")),
    # fit
    _fit_table("3",
               "Recalibrated total Round 2 condition shifts and harmful-beneficial asymmetry Asym_total (Eq. 5) by "
               "generator and dataset. Cells report posterior means with 95% credible intervals. Estimates come "
               "from the pooled per-dataset fits; convergence diagnostics are in Table 9.",
               "tab:conformity-total-shifts"),
    _fit_table("4",
               "Evaluator-side peer-context sensitivity by judge. Each loading gamma_j is identified from blind and "
               "informed ratings of the same generated answers. gamma_j > 0: the judge shifts toward the "
               "peer-endorsed position; gamma_j < 0: away from it. Open-weight panel from the primary dataset's "
               "main fit; each frontier API judge from its own five-judge refit on that dataset.",
               "tab:conformity-gamma", {"gamma_j": "+.3f", "Pr(gamma_j > 0)": ".2f"}),
    _fit_table("4_by_dataset",
               "Evaluator-side peer-context loadings gamma_j of every judge in every dataset's main fit, and of "
               "each hosted judge in its own five-judge refit (Table 4 prints the primary dataset's rows).",
               "tab:conformity-gamma-by-dataset", {"gamma_j": "+.3f", "Pr(gamma_j > 0)": ".2f"}),
    _fit_table("9", "Convergence diagnostics of every measurement-model fit.", "tab:conformity-diagnostics",
               {"R-hat": ".3f", "ESS bulk": ".0f", "ESS tail": ".0f"}),
    *(_decomposition_table(ds, n) for ds, n in DECOMPOSITION_TABLES.items()),
    _fit_table("17",
               "Self-preference robustness of the harmful-beneficial contrast Asym_total: the refit removes every "
               "rating a judge assigned to answers of its own model family, keeping anchors.",
               "tab:conformity-self-exclusion"),
    _fit_table("20",
               "Anchor-scale sensitivity of the differential-harm contrast Asym_total of the decomposition corpus "
               "as the pinned anchor magnitude theta_a varies (the row at the main theta_a is the decomposition "
               "fit). Entries are posterior means with 95% credible intervals; the magnitude should rescale with "
               "theta_a while signs and generator ordering stay.",
               "tab:conformity-anchor-scale", {"theta_a": ".1f"}),
    _fit_table("3_generator_mean",
               "Sensitivity of the total Round 2 condition shifts and Asym_total (Table 3; Tables 10-12 for the "
               "decomposition corpus) to the trial-baseline prior: seed 002's model (b_t ~ N(0, sigma_b)) beside "
               "this project's variant with one baseline mean per generator (b_t ~ N(mu_g, sigma_b)). With "
               "generators of different ability the paper's prior shrinks baselines toward 0 and the shortfall "
               "moves into the shifts. Posterior means with 95% credible intervals; the last columns flag cells "
               "whose sign or exclusion of zero changes.",
               "tab:conformity-generator-mean", {"Difference": "+.3f"}),
    _fit_table("3_reference_free",
               "Anchor-scoring sensitivity of the total Round 2 condition shifts and Asym_total (Table 3): the "
               "primary fit with reference-augmented anchors beside the refit with the same anchors scored "
               "reference-free. Posterior means with 95% credible intervals; the last columns flag cells whose "
               "sign (or exclusion of zero) changes.",
               "tab:conformity-reference-free", {"Difference": "+.3f"}),
    _fit_figure("eta_forest", "3",
                "Total Round 2 condition shifts (All-Correct, All-Wrong, Mixed) and the harmful-beneficial "
                "asymmetry Asym_total by generator, one panel per dataset: posterior means with 95% credible "
                "intervals from the pooled per-dataset fits (Table 3). Hollow markers: the fit failed its "
                "convergence diagnostics (Table 9)."),
    _fit_figure("gamma_forest", "4_by_dataset",
                "Evaluator-side peer-context loadings gamma_j by judge, one panel per dataset: posterior means with "
                "95% credible intervals (Table 4 and its appendix table by dataset). Open-weight judges come from the main fit, each hosted judge "
                "from its own five-judge refit. Hollow markers: the fit failed its convergence diagnostics."),
    # metrics
    TableSpec("table6", "metrics", "Models used in the study and their parameter counts.", "tab:models",
              inputs=lambda config: {"infos": dag.metric_infos(config)}, settings=_table6_settings,
              build=_metrics_builder("table6")),
    TableSpec("table7", "metrics",
              "Computational budget per stage, measured from the Snakemake benchmark files.", "tab:budget",
              inputs=_table7_inputs, settings=_table7_settings, build=_metrics_builder("table7"),
              formats={"Wall h": ".3f", "CPU h": ".3f", "GPU h": ".3f", "Max RSS (MB)": ".0f"}),
    TableSpec("table8", "metrics",
              "External packages, model checkpoints and principal configuration settings; generation and "
              "judging settings as each model's requests carried them.", "tab:packages",
              inputs=lambda config: {"infos": dag.metric_infos(config), "answers": dag.answers_tables(config),
                                     "sent": ["results/tables/conformity/table8_requests.csv"]},
              settings=_table8_settings, build=_metrics_builder("table8"), align="llll"),
    TableSpec("table8_requests", "metrics",
              "Generation and judging settings as each model's requests carried them, read from the request "
              "shards.", "tab:sent-settings", inputs=_request_shards, settings=_table8_requests_settings,
              build=_metrics_builder("table8_requests")),
    TableSpec("table13", "metrics",
              "Reference-based lexical metrics for Round 2 answers by dataset and condition (against the gold "
              "answer; BLEU = mean sentence BLEU, 0-100).", "tab:lexical", inputs=_metrics,
              settings=lambda config: _validation(config, "meteor_alpha", "meteor_beta", "meteor_gamma"),
              build=_metrics_builder("table13"), formats={"BLEU": ".2f", "Corpus BLEU": ".2f"}),
    TableSpec("table14", "metrics",
              "Semantic similarity to the gold answer and to the peer block, and BERTScore F1 against gold, for "
              "Round 2 answers.", "tab:semantic",
              inputs=lambda config: {**_metrics(config), "infos": dag.metric_infos(config, ("neural",))},
              settings=_run_only, build=_metrics_builder("table14")),
    TableSpec("table15", "metrics",
              "Convergent validity: Spearman rho between blind latent quality and external metrics over "
              "non-anchor answers of every execution.", "tab:convergent",
              inputs=partial(_table15_inputs, kind="blind-quality"),
              settings=partial(_table15_settings, kind="blind-quality"), build=_metrics_builder("table15"),
              align=_label_then_numbers),
    TableSpec("table15_main_fit", "metrics",
              "Sensitivity of Table 15: Spearman rho between the main fit's latent quality (primary execution, "
              "blind and informed ratings) and external metrics over its non-anchor answers.",
              "tab:convergent-main-fit", inputs=partial(_table15_inputs, kind="main"),
              settings=partial(_table15_settings, kind="main"), build=_metrics_builder("table15_main_fit"),
              align=_label_then_numbers),
    TableSpec("table16", "metrics",
              "Fixed-classifier validation by benchmark and Round 2 condition. False endorsement is NLI "
              "entailment of the wrong attractor (lower is better); truth and info judge scores are "
              "higher-is-better.", "tab:classifiers", inputs=_metrics,
              settings=lambda config: _validation(config, "nli_model", "truth_judge", "info_judge",
                                                  "truth_judge_datasets"),
              build=_metrics_builder("table16"), align="llrrrr"),
    TableSpec("table18", "metrics",
              "Readability of Round 2 answers by dataset and peer condition (textstat).", "tab:readability",
              inputs=_metrics, settings=_run_only, build=_metrics_builder("table18"),
              formats={"Flesch RE": ".1f", "FK Grade": ".2f", "Fog": ".2f"}),
    TableSpec("table19", "metrics",
              "Model-free Round 2 rating shifts by benchmark and question-difficulty tercile (difficulty = mean "
              "blind Round 1 rating), with the mean over questions of |Delta All-Wrong| - Delta All-Correct and "
              "its question-level bootstrap CI.", "tab:difficulty", inputs=_ratings,
              settings=lambda config: {**_validation(config, "bootstrap_resamples", "bootstrap_seed",
                                                     "confidence_level"),
                                       "primary_seed": int(config["conformity"]["primary_seed"])},
              build=_metrics_builder("table19"), formats={"questions": "d"}),
])


def targets(config: Config) -> list[str]:
    """Every file Study C produces: answers and ratings tables, per-answer quality, and
    every table and figure of its registry."""
    if not config["conformity"]["enabled"]:
        return []
    return dag.answers_tables(config) + dag.ratings_tables(config) + dag.quality_tables(config) + REGISTRY.files(config)
