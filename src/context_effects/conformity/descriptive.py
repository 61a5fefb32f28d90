"""Study C's model-free results (seed 002 §3.1–3.2, Tables 1, 2 and 5): computed from
the ratings and answers tables only, so they need no fitted model.

Which ratings enter (stated once, used by every table here):

* the **open judge panel** (``hosted == False``): hosted judges are an audit on a
  subset of the data and would change the mix of judges between datasets;
* **blind** ratings of the **main corpus**, pooling both authority variants of a peer
  arm as seed 002 does; Table 2, Krippendorff's alpha and the flip share pool every
  execution (seed label) and print the primary execution alone as sensitivity rows
  (``by_executions``); Table 1's example and the rating figure take the primary
  execution (docs/deviations.yaml#model-free-scope);
* a missing rating (``status == "missing"``) is absent, never a score.

The aggregations over ratings run in polars: each table reads only the columns it
needs, filters before it groups, and hands back a pandas DataFrame. They take each
dataset's ratings as a pandas DataFrame (as the registry reads them), a polars
DataFrame, or a ``LazyFrame`` from ``scan_ratings``, whose Parquet scan then reads only
those columns and row groups.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence

import krippendorff
import numpy as np
import pandas as pd
import polars as pl

from context_effects.conformity.conditions import ANCHOR_CONDITIONS, dataset_label

#: Table 2's columns: seed 002 names → conditions of the main corpus.
TABLE2_COLUMNS = {"NoPeer": "no_peer", "AllCorrect": "peer_correct", "Mixed": "peer_mixed", "AllWrong": "peer_wrong"}
DELTA_CW = "Delta_C-W"
#: The column of Tables 2 and 19 naming which executions' ratings a row uses, and its
#: value on the primary rows: every execution pooled. Seed 002's Table 19 tercile means
#: give Table 2's gaps to three decimals (TruthfulQA: (0.199 + 0.230 + 0.195) / 3 = 0.208),
#: so the two tables rate one set of answers; its Tables 13, 14, 16 and 18 (n = 12,000
#: per peer cell = 500 items x 4 generators x 2 authority variants x 3 executions) pool
#: the executions (docs/deviations.yaml#model-free-scope).
EXECUTIONS = "Executions"
POOLED = "pooled"


def execution_label(seed: int | None) -> str:
    """The ``Executions`` value of a row: ``pooled`` (every execution) or ``seed 42 only``."""
    return POOLED if seed is None else f"seed {int(seed)} only"

#: Conditions in display order (figure, parse-failure table).
DISPLAY_ORDER = (
    "round1", "no_peer", "content_correct", "content_mixed", "content_wrong",
    "peer_correct", "peer_mixed", "peer_wrong", "anchor_correct", "anchor_incorrect",
)


def panel_blind(ratings: pd.DataFrame, seed: int | None) -> pd.DataFrame:
    """Retained blind ratings of the open panel on the main corpus of execution ``seed``
    (None: every execution)."""
    keep = (
        (~ratings["hosted"].astype(bool))
        & (ratings["pass"] == "blind")
        & (ratings["corpus"] == "main")
        & (ratings["status"] == "ok")
    )
    if seed is not None:
        keep &= ratings["seed"] == seed
    return ratings[keep]


# --------------------------------------------------------------------- reading


RatingsFrame = pd.DataFrame | pl.DataFrame | pl.LazyFrame


def scan_ratings(paths: Sequence[str], datasets: Sequence[str]) -> dict[str, pl.LazyFrame]:
    """Each dataset's ratings table as a lazy Parquet scan (paths parallel to ``datasets``)."""
    return {d: pl.scan_parquet(p) for d, p in zip(datasets, paths, strict=True)}


def _lazy(ratings: RatingsFrame, columns: Sequence[str]) -> pl.LazyFrame:
    if isinstance(ratings, pl.LazyFrame):
        return ratings.select(columns)
    if isinstance(ratings, pl.DataFrame):
        return ratings.lazy().select(columns)
    # Only the columns a table uses cross over: converting text columns is the costly part.
    return pl.from_pandas(ratings[list(columns)]).lazy()


def _select(ratings: RatingsFrame, columns: Sequence[str], where: pl.Expr | None = None) -> pl.DataFrame:
    """``columns`` of the rows ``where`` holds, collected; the types the filters rely on fixed
    (a pandas NaN rating is a missing value, a missing ``hosted`` flag means not hosted)."""
    lf = _lazy(ratings, columns)
    casts = {"rating": pl.col("rating").cast(pl.Float64).fill_nan(None),
             "hosted": pl.col("hosted").cast(pl.Boolean).fill_null(False),
             "seed": pl.col("seed").cast(pl.Float64)}
    lf = lf.with_columns([e for c, e in casts.items() if c in columns])
    if where is not None:
        lf = lf.filter(where)
    return lf.collect()


def _pooled(frames: Mapping[str, pl.DataFrame]) -> pl.DataFrame:
    return pl.concat(list(frames.values()), how="diagonal_relaxed")


def _panel_blind_expr(seed: int | None) -> pl.Expr:
    keep = ~pl.col("hosted") & (pl.col("pass") == "blind") & (pl.col("corpus") == "main") & (pl.col("status") == "ok")
    if seed is not None:
        keep &= pl.col("seed") == seed
    return keep.fill_null(False)


def _panel_blind_pl(ratings: RatingsFrame, seed: int | None, columns: Sequence[str]) -> pl.DataFrame:
    """``columns`` of the open panel's ok blind main-corpus ratings of execution ``seed``
    (None: every execution)."""
    filters = ["hosted", "pass", "corpus", "seed", "status"]
    keep = list(dict.fromkeys([*columns, *filters]))
    return _select(ratings, keep, _panel_blind_expr(seed)).select(columns)


def _mean(values: pl.Series) -> float:
    m = values.mean()
    return np.nan if m is None else float(m)


# --------------------------------------------------------------------- Table 2


def mean_blind_ratings(ratings_by_dataset: Mapping[str, RatingsFrame], seed: int | None) -> pd.DataFrame:
    """Mean blind rating per dataset × peer condition, and AllCorrect − AllWrong, over the
    ratings of execution ``seed`` (None: every execution pooled)."""
    rows = []
    for dataset, ratings in ratings_by_dataset.items():
        blind = _panel_blind_pl(ratings, seed, ["condition", "rating"])
        means = dict(blind.group_by("condition").agg(pl.col("rating").mean()).iter_rows())
        row = {"Dataset": dataset}
        for col, cond in TABLE2_COLUMNS.items():
            value = means.get(cond)
            row[col] = np.nan if value is None else float(value)
        row[DELTA_CW] = row["AllCorrect"] - row["AllWrong"]
        row["n_ratings"] = int(blind["condition"].is_in(list(TABLE2_COLUMNS.values())).sum())
        rows.append(row)
    return pd.DataFrame(rows)


def by_executions(build, primary_seed: int) -> pd.DataFrame:
    """``build(seed)``'s rows for every execution pooled, then its rows for the primary
    execution alone (the sensitivity rows), with the ``Executions`` column after the first.

    Tables 2 and 19 use the same scope (``EXECUTIONS``); the pooled rows are the ones
    compared with seed 002."""
    frames = []
    for seed in (None, primary_seed):
        df = build(seed)
        df.insert(1, EXECUTIONS, execution_label(seed))
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


def table2(ratings_by_dataset: Mapping[str, RatingsFrame], primary_seed: int) -> pd.DataFrame:
    """Table 2: mean blind rating per dataset × peer condition and AllCorrect − AllWrong,
    every execution pooled, then the primary execution alone as sensitivity rows."""
    return by_executions(lambda seed: mean_blind_ratings(ratings_by_dataset, seed), primary_seed)


# --------------------------------------------------------------------- Table 5


#: Table 5's two readings of "Correct Anchor Ranked Higher". Seed 002 ("Anchor Calibration
#: is Necessary", Table 5) says "on only 73.3% of questions": the per-question share is the
#: one compared with its 73.3% / 97.5%.
#: The printed numbers cannot tell the two apart at the seed's scale (three datasets pooled:
#: 1,500 questions, 73.3% = 1,100/1,500; 97.5% = 1,462 or 1,463 of 1,500; a share of 500
#: questions cannot print 73.3%: 366/500 = 73.2%, 367/500 = 73.4%), so the word decides;
#: the (item x judge) share is printed beside it (docs/deviations.yaml#anchor-audit-definition).
RANKED_PER_QUESTION = "Correct Anchor Ranked Higher (% of questions)"
RANKED_PER_PAIR = "Correct Anchor Ranked Higher (% of item x judge pairs)"


def anchor_audit(ratings_by_dataset: Mapping[str, RatingsFrame]) -> pd.DataFrame:
    """Table 5: anchor recognition under reference-free and reference-augmented scoring.

    "Correct anchor ranked higher" is read two ways, each a strict comparison (a tie is
    not a correct ranking) over the (item, judge) pairs with both anchors rated: per
    question, the panel's mean rating of the correct anchor above its mean rating of
    the incorrect one (``RANKED_PER_QUESTION``, the seed's "of questions"); and per
    (item, judge) pair (``RANKED_PER_PAIR``). Means are over all retained anchor
    ratings; separation = mean correct − mean incorrect. Rows: every dataset and all
    datasets pooled.
    """
    where = (pl.col("condition").is_in(list(ANCHOR_CONDITIONS)) & ~pl.col("hosted")
             & (pl.col("status") == "ok")).fill_null(False)
    columns = ["dataset", "item_id", "judge", "condition", "reference", "rating", "hosted", "status"]
    frames = {name: _select(df, columns, where) for name, df in ratings_by_dataset.items()}
    frames["All"] = _pooled(frames)
    rows = []
    for dataset, anchors in frames.items():
        stats = {}
        for ref in ("free", "augmented"):
            a = anchors.filter(pl.col("reference") == ref)
            # A pair needs both anchors rated (a judge's repeated rating of one anchor is averaged).
            wide = (a.group_by(["dataset", "item_id", "judge"])
                    .agg([pl.col("rating").filter(pl.col("condition") == c).mean().alias(c)
                          for c in ANCHOR_CONDITIONS])
                    .drop_nulls(list(ANCHOR_CONDITIONS)))
            # The panel means of one question are over the same judges, so comparing them is
            # comparing the sums of the judges' differences (exact on integer ratings).
            questions = (wide.group_by(["dataset", "item_id"])
                         .agg((pl.col("anchor_correct") - pl.col("anchor_incorrect")).sum().alias("diff")))
            correct = _mean(a.filter(pl.col("condition") == "anchor_correct")["rating"])
            incorrect = _mean(a.filter(pl.col("condition") == "anchor_incorrect")["rating"])
            stats[ref] = {
                RANKED_PER_QUESTION: (questions["diff"] > 0).mean() * 100 if questions.height else np.nan,
                RANKED_PER_PAIR: ((wide["anchor_correct"] > wide["anchor_incorrect"]).mean() * 100
                                  if wide.height else np.nan),
                "Mean Correct-Anchor Rating": correct,
                "Mean Incorrect-Anchor Rating": incorrect,
                "Mean Separation": correct - incorrect,
                "Questions": float(questions.height),
                "Pairs (item x judge)": float(wide.height),
            }
        for quantity in stats["free"]:
            rows.append({
                "Dataset": dataset,
                "Audit Quantity": quantity,
                "Reference-Free": float(stats["free"][quantity]),
                "Reference-Augmented": float(stats["augmented"][quantity]),
            })
    return pd.DataFrame(rows)


# ------------------------------------------------------------ Krippendorff's α


def blind_agreement(ratings_by_dataset: Mapping[str, RatingsFrame], seed: int | None) -> pd.DataFrame:
    """Krippendorff's α of the blind panel (units = generated answers, coders = judges)
    over the ratings of execution ``seed`` (None: every execution pooled, each execution's
    answers units of their own).

    Ordinal α is the primary number (the scale is a 5-point ordinal rating);
    interval α is reported beside it. α needs at least two judges: with one it is
    undefined and reported as NaN with the reason.
    """
    frames = {d: _panel_blind_pl(r, seed, ["judge", "answer_id", "rating"])
              for d, r in ratings_by_dataset.items()}
    frames["All"] = _pooled(frames)
    rows = []
    for dataset, blind in frames.items():
        values = _judge_by_answer(blind)
        row = {"Dataset": dataset, "judges": int(values.shape[0]), "answers": int(values.shape[1]),
               "ratings": int(blind.height)}
        pairable = int((np.isfinite(values).sum(axis=0) >= 2).sum()) if values.shape[0] >= 2 else 0
        defined = pairable > 0 and len(np.unique(values[np.isfinite(values)])) > 1
        for level in ("ordinal", "interval"):
            row[f"alpha_{level}"] = (
                float(krippendorff.alpha(reliability_data=values, level_of_measurement=level,
                                         value_domain=[1, 2, 3, 4, 5] if level == "ordinal" else None))
                if defined else np.nan
            )
        row["note"] = "" if defined else (
            "undefined: fewer than two judges" if values.shape[0] < 2 else "undefined: no answer rated by two judges"
        )
        rows.append(row)
    return pd.DataFrame(rows)


def agreement_table(ratings_by_dataset: Mapping[str, RatingsFrame], primary_seed: int) -> pd.DataFrame:
    """Krippendorff's α with every execution pooled (the rows compared with seed 002's
    0.235), then over the primary execution alone, as Table 2 (``by_executions``).

    Seed 002 prints no n for its α; App. A.5 counts 255,000 rating tasks = 147,000 blind
    (the three executions' 144,000 answers and 3,000 anchors) + 108,000 informed (the
    peer-presented 6 of 8), so every execution was rated blind by the panel, and each of
    its model-free numbers that prints an n pools the executions
    (docs/deviations.yaml#model-free-scope)."""
    return by_executions(lambda seed: blind_agreement(ratings_by_dataset, seed), primary_seed)


def _judge_by_answer(blind: pl.DataFrame) -> np.ndarray:
    """Judges × answers matrix of mean ratings (NaN: not rated), rows and columns in sorted
    order, as a pandas ``pivot_table`` lays it out (α's sums then run in the same order)."""
    cells = (blind.group_by(["judge", "answer_id"]).agg(pl.col("rating").mean()).drop_nulls("rating")
             .with_columns(pl.col("judge", "answer_id").rank("dense").cast(pl.Int64) - 1))
    if not cells.height:
        return np.empty((0, 0))
    values = np.full((cells["judge"].max() + 1, cells["answer_id"].max() + 1), np.nan)
    values[cells["judge"].to_numpy(), cells["answer_id"].to_numpy()] = cells["rating"].to_numpy()
    return values


# ------------------------------------------------------ flip indicator, Table 1

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def _tokens(text: str) -> list[str]:
    # SQuAD answer normalisation: lower case, no punctuation, no articles.
    return _ARTICLES.sub(" ", str(text).lower().translate(_PUNCT)).split()


def token_f1(a: str, b: str) -> float:
    """SQuAD token-overlap F1 between two texts (bag of normalised tokens)."""
    ta, tb = _tokens(a), _tokens(b)
    if not ta or not tb:
        return 0.0
    common = sum(min(ta.count(t), tb.count(t)) for t in set(ta) & set(tb))
    if common == 0:
        return 0.0
    p, r = common / len(ta), common / len(tb)
    return 2 * p * r / (p + r)


def _answer_list(value) -> list[str]:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    return [str(v) for v in value]


def answer_position(text: str, item: Mapping) -> str:
    """The binary flip indicator's reading of an open-ended answer: "correct" or "incorrect".

    Stated rule: the answer takes the side of the candidate it overlaps most
    (token F1), among the gold answer with the item's other correct answers versus
    the wrong attractor with the other incorrect answers; a tie reads as correct.
    This is deliberately the kind of coarse, categorical reading a flip rate
    uses — the point of the analysis is what it misses.
    """
    correct = [str(item["gold_answer"]), *_answer_list(item.get("correct_answers"))]
    incorrect = [str(item["wrong_attractor"]), *_answer_list(item.get("incorrect_answers"))]
    best_c = max(token_f1(text, c) for c in correct)
    best_i = max(token_f1(text, c) for c in incorrect)
    return "correct" if best_c >= best_i else "incorrect"


def wrong_peer_revisions(
    answers: pd.DataFrame, ratings: pd.DataFrame, items: pd.DataFrame, primary_seed: int
) -> pd.DataFrame:
    """Each all-wrong revision of the main corpus, every execution, beside its Round-1
    answer of the same execution.

    Columns: the execution (``seed``) and whether it is the primary one (``primary``),
    answer ids and texts, the flip indicator's positions and whether it calls the
    revision unchanged, and mean blind panel ratings of both answers (NaN when no judge
    rated one of them).
    """
    main = answers[answers["corpus"] == "main"]
    revisions = main[(main["condition"] == "peer_wrong") & main["text"].notna()]
    by_id = main.set_index("answer_id")
    mean_rating = panel_blind(ratings, None).groupby("answer_id")["rating"].mean()
    item_by_id = items.set_index("item_id")
    rows = []
    for r in revisions.itertuples(index=False):
        r1_id = r.round1_answer_id
        if r1_id not in by_id.index or not isinstance(by_id.at[r1_id, "text"], str):
            continue
        item = item_by_id.loc[r.item_id].to_dict() | {"item_id": r.item_id}
        r1_text = by_id.at[r1_id, "text"]
        pos_before, pos_after = answer_position(r1_text, item), answer_position(r.text, item)
        rows.append({
            "dataset": r.dataset, "seed": int(r.seed), "primary": int(r.seed) == int(primary_seed),
            "item_id": r.item_id, "generator": r.generator, "authority": r.authority,
            "answer_id": r.answer_id, "round1_answer_id": r1_id,
            "question": r.question, "round1_text": r1_text, "revision_text": r.text,
            "wrong_claim": item["wrong_attractor"],
            "position_round1": pos_before, "position_revision": pos_after,
            "unchanged": pos_before == pos_after,
            "rating_round1": float(mean_rating.get(r1_id, np.nan)),
            "rating_revision": float(mean_rating.get(r.answer_id, np.nan)),
        })
    out = pd.DataFrame(rows)
    if len(out):
        out["rating_drop"] = out["rating_round1"] - out["rating_revision"]
    return out


def _primary(revisions: pd.DataFrame) -> pd.DataFrame:
    """The revisions of the primary execution (all of them in a frame without ``primary``)."""
    if "primary" not in revisions.columns or not len(revisions):
        return revisions
    return revisions[revisions["primary"].astype(bool)]


def _execution(revisions: pd.DataFrame, seed: int | None) -> pd.DataFrame:
    """The revisions of execution ``seed`` (None: all)."""
    if seed is None or "seed" not in revisions.columns or not len(revisions):
        return revisions
    return revisions[revisions["seed"] == seed]


def flip_share(revisions_by_dataset: Mapping[str, pd.DataFrame], primary_seed: int | None = None) -> pd.DataFrame:
    """Share of all-wrong revisions a flip indicator calls unchanged that still lost ≥ 1 blind point.

    seed 002 §3.1 (9.0% on TruthfulQA): the denominator is the rated revisions the
    flip indicator scores as unchanged; "lost at least one point" compares mean
    blind panel ratings of the revision and its Round-1 answer. Rows with every
    execution pooled (compared with the 9.0%), then, given ``primary_seed``, the
    primary execution alone, as Table 2 (``by_executions``;
    docs/deviations.yaml#model-free-scope).
    """
    def build(seed: int | None) -> pd.DataFrame:
        return _flip_share_rows({d: _execution(rev, seed) for d, rev in revisions_by_dataset.items()})

    if primary_seed is None:
        df = build(None)
        df.insert(1, EXECUTIONS, POOLED)
        return df
    return by_executions(build, primary_seed)


def _flip_share_rows(revisions_by_dataset: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    rows = []
    for dataset, rev in revisions_by_dataset.items():
        rated = rev[rev["rating_round1"].notna() & rev["rating_revision"].notna()] if len(rev) else rev
        unchanged = rated[rated["unchanged"]] if len(rated) else rated
        lost = int((unchanged["rating_drop"] >= 1).sum()) if len(unchanged) else 0
        rows.append({
            "Dataset": dataset,
            "all_wrong_revisions": int(len(rated)),
            "flip_rate": float((~rated["unchanged"]).mean()) if len(rated) else np.nan,
            "unchanged_by_flip_indicator": int(len(unchanged)),
            "unchanged_but_lost_1pt": lost,
            "share_unchanged_but_lost_1pt": lost / len(unchanged) if len(unchanged) else np.nan,
        })
    return pd.DataFrame(rows)


TABLE1_RULE = (
    "Selection rule: among the first dataset's all-wrong revisions (primary execution, main corpus) that the "
    "flip indicator scores as unchanged, the one whose mean blind panel rating dropped most from its "
    "Round-1 answer; ties go to the smallest answer id. If none is unchanged, the largest drop overall."
)


def select_example(revisions: pd.DataFrame) -> tuple[pd.Series | None, str]:
    """Table 1's example by ``TABLE1_RULE`` (never chosen by hand); (row, which branch applied)."""
    revisions = _primary(revisions)
    rated = revisions[revisions["rating_drop"].notna()] if len(revisions) else revisions
    if not len(rated):
        return None, "no rated all-wrong revision"
    pool, branch = rated[rated["unchanged"]], "unchanged by the flip indicator"
    if not len(pool):
        pool, branch = rated, "no revision unchanged by the flip indicator: largest drop overall"
    pool = pool.sort_values(["rating_drop", "answer_id"], ascending=[False, True])
    return pool.iloc[0], branch


def example_table(revisions: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    row, branch = select_example(revisions)
    if row is None:
        return pd.DataFrame({"Field": ["Selection"], "Text": [branch]}), branch
    fields = [
        ("Question", row["question"]),
        ("Round 1", row["round1_text"]),
        ("Wrong-Peer Claim", row["wrong_claim"]),
        ("After Wrong Peers", row["revision_text"]),
        ("Generator", row["generator"]),
        ("Flip indicator", f"{row['position_round1']} -> {row['position_revision']} "
                           f"({'unchanged' if row['unchanged'] else 'flipped'})"),
        ("Mean blind rating", f"{row['rating_round1']:.2f} -> {row['rating_revision']:.2f}"),
        ("Answer ids", f"{row['round1_answer_id']} -> {row['answer_id']}"),
    ]
    return pd.DataFrame(fields, columns=["Field", "Text"]), branch


# -------------------------------------------------------------- parse failures


def parse_failures(ratings_by_dataset: Mapping[str, RatingsFrame]) -> pd.DataFrame:
    """Missing-rating rate per judge × pass × condition, with the commonest reason
    (a tie goes to the reason seen first)."""
    columns = ["judge", "pass", "condition", "status", "error", "attempts"]
    key = ["judge", "pass", "condition"]
    # Rows without a key are in no cell (as in a pandas group-by).
    ratings = _pooled({d: _select(r, columns) for d, r in ratings_by_dataset.items()}).drop_nulls(key)
    missing = pl.col("status") == "missing"
    cells = ratings.group_by(key, maintain_order=True).agg(
        pl.len().alias("requests"),
        missing.sum().alias("missing"),
        pl.col("attempts").cast(pl.Float64).mean().alias("mean_attempts"),
    )
    reasons = (ratings.filter(missing & pl.col("error").is_not_null()).with_row_index("order")
               .group_by([*key, "error"], maintain_order=True)
               .agg(pl.len().alias("n"), pl.col("order").first())
               .sort(["n", "order"], descending=[True, False])
               .group_by(key, maintain_order=True).first())
    top = {tuple(r[:3]): f"{r[3]} ({int(r[4])})" for r in reasons.select([*key, "error", "n"]).iter_rows()}
    rows = [{
        "judge": judge, "pass": pass_, "condition": cond, "requests": int(n),
        "missing": int(m), "missing_rate": int(m) / int(n), "mean_attempts": float(attempts),
        "top_reason": top.get((judge, pass_, cond), ""),
    } for judge, pass_, cond, n, m, attempts in cells.iter_rows()]
    out = pd.DataFrame(rows, columns=["judge", "pass", "condition", "requests", "missing", "missing_rate",
                                      "mean_attempts", "top_reason"])
    order = {c: i for i, c in enumerate(DISPLAY_ORDER)}
    return out.sort_values(["judge", "pass", "condition"], key=lambda s: s.map(order) if s.name == "condition" else s,
                           ignore_index=True)


# ----------------------------------------------------------------- the figure


def rating_distribution(ratings_by_dataset: Mapping[str, RatingsFrame], primary_seed: int) -> pd.DataFrame:
    """Share of each blind rating 1–5 per dataset × condition (rows sum to 1)."""
    counts = {}
    for dataset, ratings in ratings_by_dataset.items():
        blind = _panel_blind_pl(ratings, primary_seed, ["condition", "rating"])
        long = blind.group_by(["condition", "rating"]).len().to_pandas()
        counts[dataset] = long.pivot(index="condition", columns="rating", values="len").fillna(0).astype("int64")
    return rating_shares(counts)


def rating_shares(counts_by_dataset: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """The rating distribution's rows from each dataset's condition × rating counts."""
    frames = []
    for dataset, counts in counts_by_dataset.items():
        counts = counts.sort_index().reindex(columns=[1.0, 2.0, 3.0, 4.0, 5.0], fill_value=0)
        counts.columns.name = None
        share = counts.div(counts.sum(axis=1), axis=0)
        share.columns = [str(int(c)) for c in share.columns]
        share.insert(0, "n", counts.sum(axis=1))
        share = share.reset_index()
        share.insert(0, "dataset", dataset)
        frames.append(share)
    out = pd.concat(frames, ignore_index=True)
    order = {c: i for i, c in enumerate(DISPLAY_ORDER)}
    return out.sort_values(["dataset", "condition"], key=lambda s: s.map(order) if s.name == "condition" else s,
                           ignore_index=True)


def plot_rating_distribution(dist: pd.DataFrame, datasets: Sequence[str], notes: Sequence[str] = ()):
    """Stacked shares of blind ratings 1-5, one bar per condition, one panel per dataset."""
    import seaborn as sns

    from context_effects import style

    n_conditions = max([int((dist["dataset"] == d).sum()) for d in datasets] + [1])
    width = style.COLUMN_WIDTH if len(datasets) == 1 else style.FULL_WIDTH
    fig, axes = style.figure(width, 0.9 + 0.2 * n_conditions, ncols=len(datasets), sharey=True, squeeze=False)
    # A diverging palette: low ratings red, high green, the middle neutral.
    colours = sns.color_palette("RdYlGn", 5)
    for ax, dataset in zip(axes[0], datasets):
        d = dist[dist["dataset"] == dataset]
        left = np.zeros(len(d))
        for k, colour in zip("12345", colours):
            ax.barh(d["condition"], d[k], left=left, color=colour, label=k, height=0.75, linewidth=0)
            left += d[k].to_numpy()
        ax.set_title(dataset_label(dataset))
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of blind ratings")
    # Once: the panels share y, and a second inversion would undo the first.
    axes[0][0].invert_yaxis()
    sns.despine(fig=fig, left=True)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, title="rating", loc="outside upper center", ncol=5, frameon=False,
                   handlelength=1.0, columnspacing=1.0)
    style.place_caveat(fig, notes)
    return fig
