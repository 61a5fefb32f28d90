"""Write Tables 6-8, 13-16, 18, 19 (CSV + LaTeX via ``context_effects.tables.write_table``).

Each ``write_tableNN`` takes file paths and the run's config, so a Snakemake script
is one call. Captions follow seed 002; notes say which models produced the neural
columns and carry the demo/synthetic caveat (``run_notes``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects.metrics import budget, summaries
from context_effects.metrics.answers import DATASET_LABELS
from context_effects.provenance import package_versions
from context_effects.tables import run_notes, write_table


def read_metric_rows(paths: Sequence[str | Path]) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)


def read_infos(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    return [json.loads(Path(p).read_text()) for p in paths]


def _dataset_of(path: str | Path) -> str:
    return Path(path).stem


def _out(outputs: Mapping[str, str]) -> tuple[str, str]:
    return outputs["csv"], outputs["tex"]


def write_table13(metric_paths, outputs, config) -> pd.DataFrame:
    df = summaries.lexical_table(read_metric_rows(metric_paths))
    write_table(df, *_out(outputs),
                caption="Reference-based lexical metrics for Round 2 answers by dataset and condition "
                        "(against the gold answer; BLEU = mean sentence BLEU, 0-100).",
                label="tab:lexical", formats={"BLEU": ".2f", "Corpus BLEU": ".2f"},
                notes=["ROUGE-L with Porter stemming (rouge-score); METEOR (NLTK, alpha="
                       f"{config['conformity']['validation']['meteor_alpha']}, beta="
                       f"{config['conformity']['validation']['meteor_beta']}, gamma="
                       f"{config['conformity']['validation']['meteor_gamma']}, WordNet 3.0); sacreBLEU with "
                       "exponential smoothing. Main corpus, all executions, generators and authority variants "
                       "pooled.", *run_notes(config["run"])])
    return df


def _neural_note(infos: list[dict[str, Any]]) -> str:
    info = next((i for i in infos if "sbert" in i), None)
    if info is None:
        return "No neural metric was computed."
    b = info["bertscore"]
    return (f"SBERT: {info['sbert']['name']} ({info['sbert']['source']}); BERTScore: {b['name']} "
            f"({b['source']}), layer {b['num_layers']}, baseline rescaling "
            f"{'on' if b['rescale_with_baseline'] else 'off'}. sim_peer compares with the block the "
            "generator saw; no-peer answers saw none (--).")


def write_table14(metric_paths, info_paths, outputs, config) -> pd.DataFrame:
    df = summaries.semantic_table(read_metric_rows(metric_paths))
    write_table(df, *_out(outputs),
                caption="Semantic similarity to the gold answer and to the peer block, and BERTScore F1 "
                        "against gold, for Round 2 answers.",
                label="tab:semantic", notes=[_neural_note(read_infos(info_paths)), *run_notes(config["run"])])
    return df


def write_table15(metric_paths, quality_paths, outputs, config) -> pd.DataFrame:
    rows = read_metric_rows(metric_paths)
    quality = {_dataset_of(p): pd.read_parquet(p) for p in quality_paths}
    df, n = summaries.convergent_validity(rows, quality)
    n_note = "; ".join(f"{d}: n = {k}" for d, k in n.items())
    write_table(df, *_out(outputs),
                caption="Convergent validity: Spearman rho between blind latent quality and external metrics "
                        "over non-anchor answers.",
                label="tab:convergent", align="l" + "r" * (len(df.columns) - 1),
                notes=[f"Answers in both the quality and the metric tables ({n_note}).", *run_notes(config["run"])])
    return df


def write_table16(metric_paths, outputs, config) -> pd.DataFrame:
    df = summaries.classifier_table(read_metric_rows(metric_paths))
    v = config["conformity"]["validation"]
    write_table(df, *_out(outputs),
                caption="Fixed-classifier validation by benchmark and Round 2 condition. False endorsement is "
                        "NLI entailment of the wrong attractor (lower is better); truth and info judge scores "
                        "are higher-is-better.",
                label="tab:classifiers", align="llrrrr",
                notes=[f"NLI: {v['nli_model'] or 'none configured'}; truth judge: {v['truth_judge'] or 'none'}; "
                       f"info judge: {v['info_judge'] or 'none'} (scored on "
                       f"{', '.join(DATASET_LABELS[d] for d in v['truth_judge_datasets'])} only).",
                       *run_notes(config["run"])])
    return df


def write_table18(metric_paths, outputs, config) -> pd.DataFrame:
    df = summaries.readability_table(read_metric_rows(metric_paths))
    write_table(df, *_out(outputs),
                caption="Readability of Round 2 answers by dataset and peer condition (textstat).",
                label="tab:readability", formats={"Flesch RE": ".1f", "FK Grade": ".2f", "Fog": ".2f"},
                notes=run_notes(config["run"]))
    return df


def write_table19(ratings_paths, outputs, config) -> pd.DataFrame:
    ratings = pd.concat([pd.read_parquet(p) for p in ratings_paths], ignore_index=True)
    v = config["conformity"]["validation"]
    df = summaries.difficulty_table(ratings, v["bootstrap_resamples"], v["bootstrap_seed"], v["confidence_level"])
    write_table(df, *_out(outputs),
                caption="Model-free Round 2 rating shifts by benchmark and question-difficulty tercile "
                        "(difficulty = mean blind Round 1 rating), with a question-level bootstrap CI of "
                        "|Delta All-Wrong| - Delta All-Correct.",
                label="tab:difficulty", formats={"questions": "d"},
                notes=[f"Percentile bootstrap, {v['bootstrap_resamples']} resamples of questions, level "
                       f"{v['confidence_level']}; blind ratings of the judge panel (hosted judges excluded).",
                       *run_notes(config["run"])])
    return df


def write_table6(info_paths, outputs, config) -> pd.DataFrame:
    df = budget.models_table(config["conformity"], config["models"], read_infos(info_paths),
                             config["conformity"]["validation"])
    write_table(df, *_out(outputs), caption="Models used in the study and their parameter counts.",
                label="tab:models", notes=run_notes(config["run"]))
    return df


def write_table7(benchmark_root, outputs, config, model_gpus, stage_gpus) -> pd.DataFrame:
    df = budget.budget_table(budget.read_benchmarks(benchmark_root), model_gpus, stage_gpus)
    write_table(df, *_out(outputs),
                caption="Computational budget per stage, measured from the Snakemake benchmark files.",
                label="tab:budget", formats={"Wall h": ".3f", "CPU h": ".3f", "GPU h": ".3f", "Max RSS (MB)": ".0f"},
                notes=["Every benchmark file present when this table was built; GPU hours = wall time x GPUs "
                       "the job held (from config). Hosted-API calls are not metered in GPU hours.",
                       *run_notes(config["run"])])
    return df


def write_table8(info_paths, ledger_paths, outputs, config) -> pd.DataFrame:
    df = budget.packages_table(config, read_infos(info_paths), budget.engine_versions(ledger_paths),
                               package_versions(("numpyro", "jax")))
    write_table(df, *_out(outputs),
                caption="External packages, model checkpoints and principal configuration settings.",
                label="tab:packages", align="llll",
                notes=["Versions as recorded by the jobs that used them (engine versions from the response "
                       "ledgers); settings from the run's configuration.", *run_notes(config["run"])])
    return df
