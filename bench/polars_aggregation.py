"""Benchmark: Study C's model-free tables from the ratings shards, pandas against polars.
Prints figures; not a test.

Paper-scale simulated ratings (``measurement.simulate``: 500 items × 4 generators × 8
answers × 4 judges, blind + informed, with both anchors of every item rated reference-free
and reference-augmented: ~120,000 ratings), split over one Parquet shard per dataset as
the judging rules write them (``results/conformity/ratings/<dataset>.parquet``), with 2%
recorded misses. Each path reads every shard and builds Tables 2 and 5, Krippendorff's α,
the parse-failure table and the rating distribution:

* ``pandas`` — the pandas code these tables ran on before polars (``pd.read_parquet``
  per shard, pandas filters, ``groupby`` and ``pivot_table``; kept below as the reference);
* ``polars-lazy`` — ``descriptive.scan_ratings`` (``pl.scan_parquet`` per shard) into the
  polars aggregations: each table reads only its columns;
* ``polars-from-pandas`` — the registry's reader today (``pd.read_parquet`` per shard)
  into the polars aggregations (``pl.from_pandas`` at the boundary).

The read alone is timed for pandas (``pd.concat`` of ``pd.read_parquet``), polars (one
polars frame) and ``metrics.tables.read_shards`` (polars read, pandas frame out).

Every path must give the same tables (checked before timing). Repetitions are interleaved
(the order rotates every round) so drift in the machine's speed hits every path alike;
the median wall time per path is reported, with the read alone timed the same way.
α's own computation (``krippendorff.alpha``) is the same in every path and is timed apart.

Usage::

    POLARS_MAX_THREADS=2 OMP_NUM_THREADS=1 .venv/bin/python bench/polars_aggregation.py [--items 500] [--repeat 7]
"""

from __future__ import annotations

import os

# Polars sizes its thread pool when it is first imported.
os.environ.setdefault("POLARS_MAX_THREADS", "2")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Mapping, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import krippendorff  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from context_effects.conformity.conditions import ANCHOR_CONDITIONS  # noqa: E402

DATASETS = ("truthfulqa", "mmlu_pro", "arc_challenge")
PRIMARY_SEED = 42
MISS_REASONS = ("no_json_object", "rating_out_of_range", "empty_reply")


# ----------------------------------------------------------------------------- data


def simulated_ratings(dataset: str, n_items: int, seed: int, missing_rate: float = 0.02) -> pd.DataFrame:
    """One dataset's ratings table in the judging rules' columns, drawn from the measurement model."""
    from context_effects.measurement.simulate import simulate_ratings

    sim, _ = simulate_ratings(n_items=n_items, seed=seed, seed_label=PRIMARY_SEED)
    rng = np.random.default_rng(seed + 1)
    anchor = sim["condition"].isin(ANCHOR_CONDITIONS)
    # Anchors are rated twice, without and with the reference answer.
    df = pd.concat([sim.assign(reference=np.where(anchor, "free", None)),
                    sim[anchor].assign(reference="augmented")], ignore_index=True)
    anchor = df["condition"].isin(ANCHOR_CONDITIONS).to_numpy()
    df["answer_id"] = dataset + "|" + df["answer_id"]
    df["item_id"] = dataset + "|" + df["item_id"]
    df["trial_id"] = np.where(anchor, None, dataset + "|" + df["trial_id"])
    df["dataset"] = dataset
    df["corpus"] = np.where(anchor, "anchor", "main")
    df["seed"] = pd.array(np.where(anchor, pd.NA, PRIMARY_SEED), dtype="Int64")
    df["generator"] = np.where(anchor, None, df["generator"])
    df["authority"] = np.where(df["condition"].str.startswith("peer_"), np.where(rng.random(len(df)) < 0.5,
                                                                                  "present", "absent"), None)
    df["hosted"] = False
    missing = rng.random(len(df)) < missing_rate
    df["rating"] = np.where(missing, np.nan, df["rating"].astype(float))
    df["status"] = np.where(missing, "missing", "ok")
    df["error"] = np.where(missing, rng.choice(MISS_REASONS, len(df)), None)
    df["attempts"] = np.where(missing, 3, 1 + (rng.random(len(df)) < 0.05)).astype(int)
    columns = ["answer_id", "trial_id", "dataset", "corpus", "seed", "generator", "item_id", "condition", "authority",
               "judge", "hosted", "pass", "reference", "d", "rating", "status", "error", "attempts"]
    return df[columns]


def write_shards(root: Path, n_items: int, seed: int = 0) -> list[Path]:
    """One ratings shard per dataset, the items split between them."""
    per = np.array_split(np.arange(n_items), len(DATASETS))
    paths = []
    for i, (dataset, items) in enumerate(zip(DATASETS, per)):
        path = root / f"{dataset}.parquet"
        simulated_ratings(dataset, len(items), seed + i).to_parquet(path, index=False)
        paths.append(path)
    return paths


# ----------------------------------------------------------------------------- pandas reference


def pandas_panel_blind(ratings: pd.DataFrame, primary_seed: int) -> pd.DataFrame:
    keep = (
        (~ratings["hosted"].astype(bool))
        & (ratings["pass"] == "blind")
        & (ratings["corpus"] == "main")
        & (ratings["seed"] == primary_seed)
        & (ratings["status"] == "ok")
    )
    return ratings[keep]


def pandas_mean_blind_ratings(ratings_by_dataset: Mapping[str, pd.DataFrame], primary_seed: int) -> pd.DataFrame:
    from context_effects.conformity.descriptive import DELTA_CW, TABLE2_COLUMNS

    rows = []
    for dataset, ratings in ratings_by_dataset.items():
        blind = pandas_panel_blind(ratings, primary_seed)
        means = blind.groupby("condition")["rating"].mean()
        row = {"Dataset": dataset}
        for col, cond in TABLE2_COLUMNS.items():
            row[col] = float(means.get(cond, np.nan))
        row[DELTA_CW] = row["AllCorrect"] - row["AllWrong"]
        row["n_ratings"] = int(blind["condition"].isin(tuple(TABLE2_COLUMNS.values())).sum())
        rows.append(row)
    return pd.DataFrame(rows)


def pandas_anchor_audit(ratings_by_dataset: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    frames = dict(ratings_by_dataset)
    frames["All"] = pd.concat(list(ratings_by_dataset.values()), ignore_index=True)
    rows = []
    for dataset, ratings in frames.items():
        anchors = ratings[
            ratings["condition"].isin(ANCHOR_CONDITIONS) & (~ratings["hosted"].astype(bool))
            & (ratings["status"] == "ok")
        ]
        stats = {}
        for ref in ("free", "augmented"):
            a = anchors[anchors["reference"] == ref]
            wide = a.pivot_table(index=["dataset", "item_id", "judge"], columns="condition", values="rating")
            wide = wide.dropna() if set(ANCHOR_CONDITIONS) <= set(wide.columns) else wide.iloc[0:0]
            correct = a.loc[a["condition"] == "anchor_correct", "rating"].mean()
            incorrect = a.loc[a["condition"] == "anchor_incorrect", "rating"].mean()
            ranked = (wide["anchor_correct"] > wide["anchor_incorrect"]).mean() * 100 if len(wide) else np.nan
            diff = (wide["anchor_correct"] - wide["anchor_incorrect"]).groupby(level=["dataset", "item_id"]).sum()
            stats[ref] = {
                "Correct Anchor Ranked Higher (% of questions)": (diff > 0).mean() * 100 if len(diff) else np.nan,
                "Correct Anchor Ranked Higher (% of item x judge pairs)": ranked,
                "Mean Correct-Anchor Rating": correct,
                "Mean Incorrect-Anchor Rating": incorrect,
                "Mean Separation": correct - incorrect,
                "Questions": float(len(diff)),
                "Pairs (item x judge)": float(len(wide)),
            }
        for quantity in stats["free"]:
            rows.append({"Dataset": dataset, "Audit Quantity": quantity,
                         "Reference-Free": float(stats["free"][quantity]),
                         "Reference-Augmented": float(stats["augmented"][quantity])})
    return pd.DataFrame(rows)


def pandas_agreement_matrices(ratings_by_dataset: Mapping[str, pd.DataFrame], primary_seed: int) -> dict:
    frames = dict(ratings_by_dataset)
    frames["All"] = pd.concat(list(ratings_by_dataset.values()), ignore_index=True)
    out = {}
    for dataset, ratings in frames.items():
        blind = pandas_panel_blind(ratings, primary_seed)
        out[dataset] = blind.pivot_table(index="judge", columns="answer_id", values="rating").to_numpy(dtype=float)
    return out


def pandas_parse_failures(ratings_by_dataset: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    from context_effects.conformity.descriptive import DISPLAY_ORDER

    ratings = pd.concat(list(ratings_by_dataset.values()), ignore_index=True)
    order = {c: i for i, c in enumerate(DISPLAY_ORDER)}
    rows = []
    for (judge, pass_, cond), g in ratings.groupby(["judge", "pass", "condition"], sort=False):
        missing = g[g["status"] == "missing"]
        reasons = missing["error"].value_counts()
        rows.append({
            "judge": judge, "pass": pass_, "condition": cond, "requests": int(len(g)),
            "missing": int(len(missing)), "missing_rate": len(missing) / len(g),
            "mean_attempts": float(g["attempts"].mean()),
            "top_reason": f"{reasons.index[0]} ({int(reasons.iloc[0])})" if len(reasons) else "",
        })
    out = pd.DataFrame(rows)
    return out.sort_values(["judge", "pass", "condition"], key=lambda s: s.map(order) if s.name == "condition" else s,
                           ignore_index=True)


def pandas_rating_distribution(ratings_by_dataset: Mapping[str, pd.DataFrame], primary_seed: int) -> pd.DataFrame:
    from context_effects.conformity.descriptive import rating_shares

    counts = {}
    for dataset, ratings in ratings_by_dataset.items():
        blind = pandas_panel_blind(ratings, primary_seed)
        counts[dataset] = blind.groupby(["condition", "rating"]).size().unstack(fill_value=0)
    return rating_shares(counts)


# ----------------------------------------------------------------------------- the paths


def pandas_tables(paths: Sequence[Path], alpha: bool) -> dict:
    ratings = {d: pd.read_parquet(p) for d, p in zip(DATASETS, paths)}
    out = {
        "table2": pandas_mean_blind_ratings(ratings, PRIMARY_SEED),
        "table5": pandas_anchor_audit(ratings),
        "parse_failures": pandas_parse_failures(ratings),
        "distribution": pandas_rating_distribution(ratings, PRIMARY_SEED),
    }
    matrices = pandas_agreement_matrices(ratings, PRIMARY_SEED)
    if alpha:
        out["alpha"] = {d: krippendorff.alpha(reliability_data=m, level_of_measurement="interval")
                        for d, m in matrices.items()}
    return out


def polars_tables(ratings: Mapping, alpha: bool) -> dict:
    from context_effects.conformity import descriptive as D

    out = {
        "table2": D.mean_blind_ratings(ratings, PRIMARY_SEED),
        "table5": D.anchor_audit(ratings),
        "parse_failures": D.parse_failures(ratings),
        "distribution": D.rating_distribution(ratings, PRIMARY_SEED),
    }
    frames = {d: D._panel_blind_pl(r, PRIMARY_SEED, ["judge", "answer_id", "rating"]) for d, r in ratings.items()}
    frames["All"] = D._pooled(frames)
    matrices = {d: D._judge_by_answer(f) for d, f in frames.items()}
    if alpha:
        out["alpha"] = {d: krippendorff.alpha(reliability_data=m, level_of_measurement="interval")
                        for d, m in matrices.items()}
    return out


def polars_lazy(paths: Sequence[Path], alpha: bool) -> dict:
    from context_effects.conformity.descriptive import scan_ratings

    return polars_tables(scan_ratings([str(p) for p in paths], DATASETS), alpha)


def polars_from_pandas(paths: Sequence[Path], alpha: bool) -> dict:
    return polars_tables({d: pd.read_parquet(p) for d, p in zip(DATASETS, paths)}, alpha)


PATHS = {"pandas": pandas_tables, "polars-lazy": polars_lazy, "polars-from-pandas": polars_from_pandas}


def read_pandas(paths: Sequence[Path]):
    return pd.concat([pd.read_parquet(p) for p in paths], ignore_index=True)


def read_polars(paths: Sequence[Path]):
    import polars as pl

    return pl.concat([pl.scan_parquet(p) for p in paths], how="diagonal_relaxed").collect()


def read_shards_pandas(paths: Sequence[Path]):
    from context_effects.metrics.tables import read_shards

    return read_shards(paths)


#: ``read_shards`` is the metric tables' reader: polars reads, the frame handed on is pandas.
READS = {"pandas": read_pandas, "polars": read_polars, "read_shards": read_shards_pandas}


def check_same(paths: Sequence[Path]) -> None:
    """Every path gives the same tables and the same α to the last bit."""
    ref = pandas_tables(paths, alpha=True)
    for name, fn in PATHS.items():
        got = fn(paths, alpha=True)
        for key in ("table2", "table5", "parse_failures", "distribution"):
            pd.testing.assert_frame_equal(got[key], ref[key], check_exact=True, obj=f"{name}:{key}")
        assert got["alpha"] == ref["alpha"], (name, got["alpha"], ref["alpha"])


def interleaved(fns: Mapping[str, callable], repeat: int) -> dict[str, list[float]]:
    times = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeat):
        for name in names[r % len(names):] + names[: r % len(names)]:
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def report(title: str, times: Mapping[str, list[float]], base: str = "pandas") -> None:
    print(title)
    med = {k: statistics.median(v) for k, v in times.items()}
    for name, v in times.items():
        ratio = "" if name == base else f"   pandas/{name} = {med[base] / med[name]:.2f}x"
        print(f"  {name:<20} median {med[name] * 1000:8.1f} ms   min {min(v) * 1000:8.1f} ms{ratio}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    import polars as pl

    with tempfile.TemporaryDirectory() as tmp:
        paths = write_shards(Path(tmp), args.items)
        n = sum(pl.scan_parquet(p).select(pl.len()).collect().item() for p in paths)
        print(f"{n:,} ratings in {len(paths)} shards ({args.items} items × 4 generators × 8 answers × 4 judges, "
              f"blind + informed, anchors free + augmented); polars {pl.__version__}, pandas {pd.__version__}, "
              f"POLARS_MAX_THREADS={os.environ['POLARS_MAX_THREADS']}, {args.repeat} interleaved rounds")
        check_same(paths)
        pd.testing.assert_frame_equal(read_shards_pandas(paths), read_pandas(paths), check_exact=True)
        print("tables identical in every path (exact), alpha identical; read_shards frame identical to pd.concat")
        report("read all shards:", interleaved({k: (lambda f=f: f(paths)) for k, f in READS.items()}, args.repeat))
        report("read all shards + Tables 2, 5, parse failures, distribution, alpha's matrix:",
               interleaved({k: (lambda f=f: f(paths, alpha=False)) for k, f in PATHS.items()}, args.repeat))
        report("the same + Krippendorff's alpha (interval; identical computation in every path):",
               interleaved({k: (lambda f=f: f(paths, alpha=True)) for k, f in PATHS.items()}, max(3, args.repeat // 2)))
    print("command: POLARS_MAX_THREADS=2 OMP_NUM_THREADS=1 .venv/bin/python bench/polars_aggregation.py "
          + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
