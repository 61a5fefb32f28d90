"""The polars aggregations behind Study C's model-free tables and the polars shard reader
give exactly what the pandas code they replace gave (kept in bench/polars_aggregation.py
as the benchmark's reference), whatever form the ratings come in."""

from __future__ import annotations

import importlib.util
import math

import krippendorff
import numpy as np
import pandas as pd
import polars as pl
import pytest

from conftest import REPO
from context_effects.conformity import descriptive as D
from context_effects.metrics.tables import read_metric_rows, read_shards


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("polars_aggregation", REPO / "bench" / "polars_aggregation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def shards(bench, tmp_path_factory):
    """Two datasets' ratings as the judging rules write them, with what the tables must leave
    out: a hosted judge, another seed, a decomposition corpus, misses with tied reasons."""
    root = tmp_path_factory.mktemp("ratings")
    paths = []
    for i, dataset in enumerate(("truthfulqa", "mmlu_pro")):
        df = bench.simulated_ratings(dataset, 12, seed=i, missing_rate=0.1)
        hosted = df[df["judge"] == "judge_a"].assign(judge="hosted_x", hosted=True)
        other_seed = df[df["corpus"] == "main"].head(40).assign(seed=pd.array([43] * 40, dtype="Int64"),
                                                                answer_id=lambda x: x["answer_id"] + "|s43")
        decomposition = df[df["corpus"] == "main"].head(30).assign(corpus="decomposition",
                                                                   answer_id=lambda x: x["answer_id"] + "|dec")
        df = pd.concat([df, hosted, other_seed, decomposition], ignore_index=True)
        path = root / f"{dataset}.parquet"
        df.to_parquet(path, index=False)
        paths.append(path)
    return ("truthfulqa", "mmlu_pro"), paths


def _inputs(kind: str, datasets, paths):
    if kind == "pandas":
        return {d: pd.read_parquet(p) for d, p in zip(datasets, paths)}
    if kind == "polars":
        return {d: pl.read_parquet(p) for d, p in zip(datasets, paths)}
    return D.scan_ratings([str(p) for p in paths], datasets)


@pytest.mark.parametrize("kind", ["pandas", "polars", "lazy"])
def test_descriptive_tables_equal_the_pandas_reference(bench, shards, kind):
    datasets, paths = shards
    ref = {d: pd.read_parquet(p) for d, p in zip(datasets, paths)}
    ratings = _inputs(kind, datasets, paths)
    pairs = [
        (D.mean_blind_ratings(ratings, 42), bench.pandas_mean_blind_ratings(ref, 42)),
        (D.anchor_audit(ratings), bench.pandas_anchor_audit(ref)),
        (D.parse_failures(ratings), bench.pandas_parse_failures(ref)),
        (D.rating_distribution(ratings, 42), bench.pandas_rating_distribution(ref, 42)),
    ]
    for got, want in pairs:
        pd.testing.assert_frame_equal(got, want, check_exact=True)
    agreement = D.blind_agreement(ratings, 42).set_index("Dataset")
    matrices = bench.pandas_agreement_matrices(ref, 42)
    for dataset, m in matrices.items():
        for level in ("ordinal", "interval"):
            want = krippendorff.alpha(reliability_data=m, level_of_measurement=level,
                                     value_domain=[1, 2, 3, 4, 5] if level == "ordinal" else None)
            assert agreement.at[dataset, f"alpha_{level}"] == want, (dataset, level)
        assert (agreement.at[dataset, "judges"], agreement.at[dataset, "answers"]) == m.shape


def test_pandas_nan_rating_and_missing_hosted_flag_read_as_pandas_did():
    r = pd.DataFrame({
        "answer_id": ["a", "b", "c"], "item_id": "i", "condition": "peer_wrong", "judge": "j", "dataset": "d",
        "corpus": "main", "seed": [42.0, 42.0, np.nan], "hosted": [None, False, False], "pass": "blind",
        "status": ["ok", "missing", "ok"], "rating": [2.0, np.nan, 5.0],
    })
    t = D.mean_blind_ratings({"d": r}, 42).iloc[0]
    assert t["AllWrong"] == 2.0 and t["n_ratings"] == 1 and math.isnan(t["NoPeer"])


def test_read_shards_equals_pandas_concat(bench, tmp_path):
    paths = []
    for i in range(3):
        df = bench.simulated_ratings(f"d{i}", 3, seed=i)
        df["flag"] = pd.array([True, None, False] * (len(df) // 3) + [None] * (len(df) % 3), dtype="boolean")
        df["label"] = pd.Categorical(np.where(df["pass"] == "blind", "x", "y"))
        df["empty"] = None
        if i == 1:
            df.index = pd.Index([f"r{k}" for k in range(len(df))])  # written as a column, dropped by pd.concat
        if i == 2:
            df = df.drop(columns=["flag"]).set_index(pd.RangeIndex(7, 7 + len(df)))  # a column and an index differ
        path = tmp_path / f"d{i}.parquet"
        df.to_parquet(path)
        paths.append(path)
    want = pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)
    for got in (read_shards(paths), read_metric_rows(paths)):
        pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert str(want["seed"].dtype) == "Int64"  # the nullable integer survives the polars read
