"""Tables 13-16, 18 and 19 of seed 002 from the per-answer metric rows and ratings.

Cells of Tables 13, 14, 16, 18: main corpus, every execution (seed label), generator
and authority variant pooled, Round 2 arms no-peer / all-correct / mixed / all-wrong
(the paper's n = 12,000 per peer cell and 6,000 for no-peer at full scale).

Table 15: Spearman ρ (``scipy.stats.spearmanr``) between each answer's blind latent
quality θ̂ (``theta_mean`` of a measurement fit: the blind-quality fit of every execution
for Table 15, the main fit for table15_main_fit) and each external metric over the
non-anchor answers both tables hold; false endorsement enters negated (higher = better).

Table 19 (model-free, blind ratings of the judge panel, hosted judges excluded, main
corpus; every execution pooled, with the primary execution alone as a sensitivity row):
* an answer's rating = mean of its ok blind ratings over judges;
* its shift = its rating − the rating of the Round-1 answer of its trial;
* a question's Δ_c = mean shift of its condition-c answers (generators, executions,
  authority variants pooled);
* difficulty = the question's mean blind Round-1 rating; terciles by rank within the
  dataset (ties broken by item id), lowest third = hard;
* per tercile, Δ_c = mean over its questions, and the mean over its questions of
  |Δ_AW,q| − Δ_AC,q with a percentile bootstrap CI resampling questions with
  replacement (``question_bootstrap``). The absolute value is taken per question, not of
  the tercile mean: seed 002's TruthfulQA hard tercile prints Δ_AC = +0.116 and
  Δ_AW = −0.083, so |mean Δ_AW| − mean Δ_AC would be −0.033, yet it prints +0.151
  [+0.069, +0.238] (docs/deviations.yaml#difficulty-terciles).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy import stats

from context_effects.metrics.answers import DATASET_LABELS, TABLE_CONDITIONS
from context_effects.metrics.classifiers import NOT_COMPUTED


def round2_cells(rows: pd.DataFrame) -> pd.DataFrame:
    """Main-corpus Round 2 answers of the table conditions, with ordered labels."""
    df = rows[(rows["corpus"] == "main") & rows["condition"].isin(list(TABLE_CONDITIONS))].copy()
    df["Condition"] = pd.Categorical(
        df["condition"].map(TABLE_CONDITIONS), categories=list(TABLE_CONDITIONS.values()), ordered=True
    )
    order = [d for d in DATASET_LABELS if d in set(df["dataset"])]
    df["Dataset"] = pd.Categorical(df["dataset"].map(DATASET_LABELS), [DATASET_LABELS[d] for d in order], ordered=True)
    return df


def _cell_means(rows: pd.DataFrame, columns: Mapping[str, str]) -> pd.DataFrame:
    df = round2_cells(rows)
    g = df.groupby(["Dataset", "Condition"], observed=True)
    out = g.size().rename("n").to_frame()
    for src, label in columns.items():
        out[label] = g[src].mean()
    return out.reset_index()


def lexical_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Table 13: ROUGE-L recall/F1, METEOR, mean sentence BLEU and corpus BLEU per cell."""
    # here, not at the top: lexical.py imports NLTK (and NLTK scikit-learn), 0.3 CPU-s that
    # every other table of the metrics stage would pay
    from context_effects.metrics.lexical import corpus_bleu

    out = _cell_means(rows, {"rougeL_recall": "ROUGE-L Recall", "rougeL_f1": "ROUGE-L F1",
                             "meteor": "METEOR", "bleu": "BLEU"})
    df = round2_cells(rows)
    cb = df.groupby(["Dataset", "Condition"], observed=True).apply(
        lambda g: corpus_bleu(g["text"].tolist(), g["gold_answer"].tolist()), include_groups=False
    )
    out["Corpus BLEU"] = [cb.get((d, c), np.nan) for d, c in zip(out["Dataset"], out["Condition"])]
    return out


def semantic_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Table 14: SBERT similarity to gold and to the peer block, BERTScore F1."""
    return _cell_means(rows, {"sim_gold": "sim_gold", "sim_peer": "sim_peer", "bertscore_f1": "BERTScore F1"})


def readability_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Table 18: Flesch reading ease, Flesch-Kincaid grade, Gunning fog."""
    return _cell_means(rows, {"flesch_reading_ease": "Flesch RE", "flesch_kincaid_grade": "FK Grade",
                              "gunning_fog": "Fog"})


def _status_or_mean(values: pd.Series, status: pd.Series) -> object:
    ok = status == "ok"
    if not ok.any():
        # A judge trained on TruthfulQA has no score on other datasets: a blank cell, as in the paper.
        if len(status) and str(status.iloc[0]).startswith("not applicable"):
            return np.nan
        return status.iloc[0] if len(status) else NOT_COMPUTED
    return float(values[ok].mean())


def classifier_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Table 16: false endorsement (lower is better), truth and info judge (higher)."""
    df = round2_cells(rows)
    records = []
    for (dataset, condition), g in df.groupby(["Dataset", "Condition"], observed=True):
        records.append({
            "Dataset": dataset, "Condition": condition, "n": len(g),
            "False Endorsement": _status_or_mean(g["false_endorsement"], g["nli_status"]),
            "Truth Judge": _status_or_mean(g["truth_judge"], g["truth_judge_status"]),
            "Info Judge": _status_or_mean(g["info_judge"], g["info_judge_status"]),
        })
    return pd.DataFrame(records)


#: Table 15 rows: (label, metric column, sign, status column or None).
VALIDITY_METRICS = (
    ("ROUGE-L Recall", "rougeL_recall", 1, None),
    ("METEOR", "meteor", 1, None),
    ("BERTScore F1", "bertscore_f1", 1, None),
    ("sim_gold (SBERT)", "sim_gold", 1, None),
    ("NLI entailment", "nli_gold_entailment", 1, "nli_status"),
    ("-False Endorsement", "false_endorsement", -1, "nli_status"),
)


def convergent_validity(rows: pd.DataFrame, quality: Mapping[str, pd.DataFrame]) -> tuple[pd.DataFrame, dict]:
    """Table 15: Spearman ρ per metric (rows) and dataset (columns); returns (table, n per dataset)."""
    table: dict[str, dict[str, object]] = {label: {} for label, *_ in VALIDITY_METRICS}
    n_by_dataset: dict[str, int] = {}
    for dataset, q in quality.items():
        if missing := {"answer_id", "theta_mean"} - set(q.columns):
            raise ValueError(f"quality table of {dataset} lacks columns {sorted(missing)}")
        m = rows[(rows["dataset"] == dataset) & ~rows["is_anchor"]].merge(
            q[["answer_id", "theta_mean"]], on="answer_id", how="inner")
        label_ds = DATASET_LABELS.get(dataset, dataset)
        n_by_dataset[label_ds] = len(m)
        for label, col, sign, status in VALIDITY_METRICS:
            if status is not None and not (m[status] == "ok").any():
                table[label][label_ds] = m[status].iloc[0] if len(m) else NOT_COMPUTED
                continue
            ok = m[[col, "theta_mean"]].dropna()
            if len(ok) < 3 or ok[col].nunique() < 2 or ok["theta_mean"].nunique() < 2:
                table[label][label_ds] = np.nan
                continue
            table[label][label_ds] = float(stats.spearmanr(ok["theta_mean"], sign * ok[col]).statistic)
    out = pd.DataFrame([{"Metric": label, **vals} for label, vals in table.items()])
    return out, n_by_dataset


# ------------------------------------------------------------------ Table 19


def question_bootstrap(
    delta_wrong: np.ndarray, delta_correct: np.ndarray, n_resamples: int, seed: int, level: float = 0.95
) -> tuple[float, float, float]:
    """mean over questions of |Δ_AW,q| − Δ_AC,q and its percentile CI, resampling questions
    (pairs) with replacement; every replicate is the same per-question mean of its resample.

    The magnitude is per question (seed 002 App. F.2, Table 19: "the difference between the
    magnitude of the all-wrong shift and the all-correct shift"; only the per-question
    reading fits its printed numbers, module docstring)."""
    aw, ac = np.asarray(delta_wrong, float), np.asarray(delta_correct, float)
    if aw.shape != ac.shape or aw.ndim != 1:
        raise ValueError("delta_wrong and delta_correct must be 1-d arrays, one value per question")
    n = len(aw)
    diff = np.abs(aw) - ac
    estimate = diff.mean() if n else np.nan
    if n < 2:
        return float(estimate), np.nan, np.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_resamples, n))
    boot = diff[idx].mean(axis=1)
    alpha = (1 - level) / 2
    lo, hi = np.quantile(boot, [alpha, 1 - alpha])
    return float(estimate), float(lo), float(hi)


def question_shifts(ratings: pd.DataFrame, execution: int | None = None) -> pd.DataFrame:
    """Per (dataset, item): mean blind Round-1 rating and Δ of each peer condition, over the
    main-corpus ratings of execution ``execution`` (None: every execution pooled)."""
    need = {"answer_id", "dataset", "corpus", "seed", "generator", "item_id", "condition",
            "pass", "rating", "status", "hosted"}
    if missing := need - set(ratings.columns):
        raise ValueError(f"ratings table lacks columns {sorted(missing)}")
    r = ratings[(ratings["pass"] == "blind") & (ratings["status"] == "ok") & ~ratings["hosted"].astype(bool)
                & (ratings["corpus"] == "main")]
    if execution is not None:
        r = r[pd.to_numeric(r["seed"], errors="coerce") == execution]
    per_answer = r.groupby(["dataset", "seed", "generator", "item_id", "condition", "answer_id"],
                           dropna=False)["rating"].mean().reset_index()
    r1 = per_answer[per_answer["condition"] == "round1"].set_index(["dataset", "seed", "generator", "item_id"])["rating"]
    peer = per_answer[per_answer["condition"].isin(["peer_correct", "peer_mixed", "peer_wrong"])].copy()
    key = pd.MultiIndex.from_frame(peer[["dataset", "seed", "generator", "item_id"]])
    peer["shift"] = peer["rating"].to_numpy() - r1.reindex(key).to_numpy()
    shifts = peer.dropna(subset=["shift"]).pivot_table(
        index=["dataset", "item_id"], columns="condition", values="shift", aggfunc="mean")
    difficulty = r1.groupby(["dataset", "item_id"]).mean().rename("round1_rating")
    out = shifts.join(difficulty, how="inner").reset_index()
    for c in ("peer_correct", "peer_mixed", "peer_wrong"):
        if c not in out:
            out[c] = np.nan
    return out


def assign_terciles(q: pd.DataFrame) -> pd.Series:
    """hard / mid / easy by rank of the mean Round-1 rating within each dataset."""
    labels = pd.Series(index=q.index, dtype=object)
    for _, g in q.groupby("dataset"):
        order = g.sort_values(["round1_rating", "item_id"]).index
        for name, part in zip(("hard", "mid", "easy"), np.array_split(np.asarray(order), 3)):
            labels.loc[part] = name
    return labels


def difficulty_table(ratings: pd.DataFrame, n_resamples: int, seed: int, level: float = 0.95,
                     primary_seed: int | None = None) -> pd.DataFrame:
    """Table 19: every execution pooled (the rows compared with seed 002, the scope of
    Table 2); with ``primary_seed``, the same rows over that execution alone follow as a
    sensitivity (``Executions`` column; docs/deviations.yaml#model-free-scope). Terciles
    are formed within each scope from its own Round-1 ratings."""
    from context_effects.conformity.descriptive import by_executions

    if primary_seed is None:
        return _difficulty_rows(ratings, None, n_resamples, seed, level)
    return by_executions(lambda execution: _difficulty_rows(ratings, execution, n_resamples, seed, level),
                         primary_seed)


DIFFICULTY_COLUMNS = ["Dataset", "Stratum", "questions", "Delta All-Correct", "Delta Mixed", "Delta All-Wrong",
                      "|Delta AW| - Delta AC", "CI low", "CI high"]


def _difficulty_rows(ratings: pd.DataFrame, execution: int | None, n_resamples: int, seed: int,
                     level: float) -> pd.DataFrame:
    q = question_shifts(ratings, execution)
    q["stratum"] = assign_terciles(q)
    records = []
    for dataset in [d for d in DATASET_LABELS if d in set(q["dataset"])]:
        for stratum in ("hard", "mid", "easy"):
            g = q[(q["dataset"] == dataset) & (q["stratum"] == stratum)]
            pair = g[["peer_wrong", "peer_correct"]].dropna()
            est, lo, hi = question_bootstrap(pair["peer_wrong"].to_numpy(), pair["peer_correct"].to_numpy(),
                                             n_resamples, seed, level)
            records.append({
                "Dataset": DATASET_LABELS[dataset], "Stratum": stratum, "questions": len(g),
                "Delta All-Correct": g["peer_correct"].mean(), "Delta Mixed": g["peer_mixed"].mean(),
                "Delta All-Wrong": g["peer_wrong"].mean(),
                "|Delta AW| - Delta AC": est, "CI low": lo, "CI high": hi,
            })
    return pd.DataFrame(records, columns=DIFFICULTY_COLUMNS)
