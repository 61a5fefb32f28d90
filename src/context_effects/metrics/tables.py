"""Rows and notes of Tables 6-8, 13-16, 18, 19 (seed 002's external validation, text
metrics, models, budget and packages), for Study C's registry
(``context_effects.conformity.outputs``), which holds their captions and formats.

Each builder takes the entry's named inputs and its settings and returns ``Built``;
notes say which models produced the neural columns and carry the demo/synthetic
caveat (``run_notes``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects.metrics import budget, summaries
from context_effects.metrics.answers import DATASET_LABELS
from context_effects.outputs import Built
from context_effects.provenance import package_versions
from context_effects.tables import run_notes


def read_shards(paths: Sequence[str | Path]) -> pd.DataFrame:
    """The rows of every Parquet shard, in order, as ``pd.concat`` of ``pd.read_parquet``
    gives them (same columns, dtypes and values, a fresh RangeIndex).

    Polars reads the shards (in parallel, without a pandas frame per shard); the
    shards' own Arrow schema and pandas metadata then restore the pandas dtypes (nullable
    integers, booleans) that a plain polars-to-pandas conversion would lose.
    """
    import json

    import polars as pl
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not paths:
        raise ValueError("no shards to read")
    schemas = [pq.read_schema(p) for p in paths]
    metas = [json.loads(s.metadata[b"pandas"]) for s in schemas if s.metadata and b"pandas" in s.metadata]
    # A shard's index is not the frame's: pd.concat(ignore_index=True) drops it and numbers rows afresh.
    index = {c for m in metas for c in m.get("index_columns", []) if isinstance(c, str)}
    schema = pa.unify_schemas(schemas, promote_options="permissive")
    schema = pa.schema([f.remove_metadata() for f in schema if f.name not in index])
    table = pl.concat([pl.scan_parquet(p) for p in paths], how="diagonal_relaxed").collect().to_arrow()
    table = table.select(schema.names).cast(schema)
    if metas:
        pandas_meta = {**metas[0], "index_columns": [],
                       "columns": [c for c in metas[0]["columns"] if c.get("field_name") not in index]}
        table = table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})
    return table.to_pandas()


def read_metric_rows(paths: Sequence[str | Path]) -> pd.DataFrame:
    return read_shards(paths)


def read_infos(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    return [json.loads(Path(p).read_text()) for p in paths]


def table13(inputs: Mapping[str, Any], s: Mapping[str, Any]) -> Built:
    df = summaries.lexical_table(read_metric_rows(inputs["metrics"]))
    return Built(df, [f"ROUGE-L with Porter stemming (rouge-score); METEOR (NLTK, alpha={s['meteor_alpha']}, "
                      f"beta={s['meteor_beta']}, gamma={s['meteor_gamma']}, WordNet 3.0); sacreBLEU with "
                      "exponential smoothing. Main corpus, all executions, generators and authority variants "
                      "pooled.", *run_notes(s["run_kind"])])


def _neural_note(infos: list[dict[str, Any]]) -> str:
    info = next((i for i in infos if "sbert" in i), None)
    if info is None:
        return "No neural metric was computed."
    b = info["bertscore"]
    return (f"SBERT: {info['sbert']['name']} ({info['sbert']['source']}); BERTScore: {b['name']} "
            f"({b['source']}), layer {b['num_layers']}, baseline rescaling "
            f"{'on' if b['rescale_with_baseline'] else 'off'}. sim_peer compares with the block the "
            "generator saw; a no-peer answer saw none and is compared with an empty block, as seed 002's "
            "near-zero No-Peer cells are (docs/deviations.yaml#similarity-to-shown-block).")


def table14(inputs: Mapping[str, Any], s: Mapping[str, Any]) -> Built:
    df = summaries.semantic_table(read_metric_rows(inputs["metrics"]))
    return Built(df, [_neural_note(read_infos(inputs["infos"])), *run_notes(s["run_kind"])])


#: Table 15's last row: the answers each dataset's correlations cover (seed 002 prints
#: "n = 48,000 per dataset" in the caption).
N_ROW = "Answers (n)"


def _checked_quality(inputs: Mapping[str, Any], s: Mapping[str, Any]) -> dict[str, pd.DataFrame]:
    """Each dataset's quality table (``s["quality_fits"]``: the fit each comes from, in the
    order of ``inputs["quality"]``), refused unless made with the config's settings."""
    from context_effects.measurement.records import check_quality, expected_for

    quality = {}
    for name, path in zip(s["quality_fits"], inputs["quality"], strict=True):
        dataset, variant = name.split("/")
        check_quality(path, expected_for(s["made_with"], {"dataset": dataset, "variant": variant}))
        quality[dataset] = pd.read_parquet(path)
    return quality


def _convergent(inputs: Mapping[str, Any], s: Mapping[str, Any]) -> pd.DataFrame:
    """Table 15's correlations (``summaries.convergent_validity``) and, last, the n row."""
    df, n = summaries.convergent_validity(read_metric_rows(inputs["metrics"]), _checked_quality(inputs, s))
    # object columns: the n row keeps integers beside the correlations (CSV and LaTeX)
    df = df.astype(object)
    df.loc[len(df)] = {"Metric": N_ROW, **{label: int(k) for label, k in n.items()}}
    return df


def table15(inputs: Mapping[str, Any], s: Mapping[str, Any]) -> Built:
    """Seed 002's Table 15: θ̂ of the blind-only fit over every execution (``blind-quality``),
    over every non-anchor answer of every execution (docs/deviations.yaml#table15-answer-scope)."""
    seeds = ", ".join(str(x) for x in s["seeds"])
    return Built(_convergent(inputs, s), [
        f"theta-hat: posterior mean of each answer's latent quality in a fit of the blind ratings alone of the "
        f"main corpus of every execution (seeds {seeds}; fit blind-quality, Table 9), the open-weight panel and "
        f"the measurement model of Table 3. Rows: Spearman rho over the non-anchor answers of every execution "
        f"in both the quality and the metric tables; the last row counts them. table15_main_fit has the same "
        f"correlations with the main fit's theta-hat (primary execution, blind and informed ratings).",
        *run_notes(s["run_kind"])])


def table15_main_fit(inputs: Mapping[str, Any], s: Mapping[str, Any]) -> Built:
    """Table 15 with each dataset's main-fit θ̂ (primary execution; blind and informed ratings)."""
    return Built(_convergent(inputs, s), [
        f"theta-hat: posterior mean of each answer's latent quality in the main fit (primary execution, seed "
        f"{s['primary_seed']}; blind and informed ratings, Table 3's fit); Spearman rho over its non-anchor "
        f"answers in the metric tables, counted in the last row. A sensitivity of Table 15, whose theta-hat "
        f"comes from the blind ratings of every execution (docs/deviations.yaml#table15-answer-scope).",
        *run_notes(s["run_kind"])])


def table16(inputs: Mapping[str, Any], s: Mapping[str, Any]) -> Built:
    df = summaries.classifier_table(read_metric_rows(inputs["metrics"]))
    return Built(df, [f"NLI: {s['nli_model'] or 'none configured'}; truth judge: {s['truth_judge'] or 'none'}; "
                      f"info judge: {s['info_judge'] or 'none'} (scored on "
                      f"{', '.join(DATASET_LABELS[d] for d in s['truth_judge_datasets'])} only).",
                      *run_notes(s["run_kind"])])


def table18(inputs: Mapping[str, Any], s: Mapping[str, Any]) -> Built:
    return Built(summaries.readability_table(read_metric_rows(inputs["metrics"])), run_notes(s["run_kind"]))


def table19(inputs: Mapping[str, Any], s: Mapping[str, Any]) -> Built:
    from context_effects.conformity.descriptive import POOLED, execution_label

    ratings = read_shards(inputs["ratings"])
    df = summaries.difficulty_table(ratings, s["bootstrap_resamples"], s["bootstrap_seed"], s["confidence_level"],
                                    primary_seed=s["primary_seed"])
    return Built(df, ["|Delta AW| - Delta AC is the mean over a stratum's questions of each question's "
                      "|Delta AW| - Delta AC (docs/deviations.yaml#difficulty-terciles). Percentile bootstrap, "
                      f"{s['bootstrap_resamples']} resamples of questions, level {s['confidence_level']}; blind "
                      f"ratings of the judge panel (hosted judges excluded), main corpus. Rows '{POOLED}' pool every "
                      f"execution, as Table 2 does; rows '{execution_label(s['primary_seed'])}' are the primary "
                      "execution alone, a sensitivity (docs/deviations.yaml#model-free-scope).",
                      *run_notes(s["run_kind"])])


def table6(inputs: Mapping[str, Any], s: Mapping[str, Any]) -> Built:
    df = budget.models_table(s["roles"], s["models"], read_infos(inputs["infos"]), s["validation"])
    return Built(df, run_notes(s["run_kind"]))


def table7(inputs: Mapping[str, Any], s: Mapping[str, Any]) -> Built:
    df = budget.budget_table(budget.read_benchmarks(s["benchmark_root"]), s["model_gpus"], s["stage_gpus"])
    return Built(df, ["Every benchmark file present when this table was built; GPU hours = wall time x GPUs "
                      "the job held (from config). Hosted-API calls are not metered in GPU hours.",
                      *run_notes(s["run_kind"])])


def table8(inputs: Mapping[str, Any], s: Mapping[str, Any]) -> Built:
    ledgers = sorted(Path(s["ledger_root"]).rglob("*.json"))
    [sent_csv] = inputs["sent"]
    sent = pd.read_csv(sent_csv, dtype=str, keep_default_na=False)
    df = budget.packages_table(s["packages_config"], read_infos(inputs["infos"]), budget.engine_versions(ledgers),
                               package_versions(("numpyro", "jax")), sent=sent)
    return Built(df, ["Versions as recorded by the jobs that used them (engine versions from the response "
                      "ledgers). Generation and judging settings are those each model's requests carried as sent, "
                      "read from the request shards (table8_requests): a hosted model is sent only what its API "
                      "takes (docs/llm-layer.md, \"Capability profiles\"); the other settings are the run's "
                      "configuration.", *run_notes(s["run_kind"])])


def table8_requests(inputs: Mapping[str, Any], s: Mapping[str, Any]) -> Built:
    df = budget.sent_settings(inputs["requests"], s["models"])
    return Built(df, ["The settings each model's first asks carried, read from every request shard of the "
                      f"run ({budget.NOT_SENT!r}: the model's API does not take it, so the provider's default "
                      "applied); Asks and Re-ask are each shard's retry loop.", *run_notes(s["run_kind"])])
