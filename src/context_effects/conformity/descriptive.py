"""Study C's model-free results (seed 002 §3.1–3.2, Tables 1, 2 and 5): computed from
the ratings and answers tables only, so they need no fitted model.

Which ratings enter (stated once, used by every table here):

* the **open judge panel** (``hosted == False``): hosted judges are an audit on a
  subset of the data and would change the mix of judges between datasets;
* **blind** ratings of the **main corpus at the primary seed** (the corpus of the
  primary analysis), pooling both authority variants of a peer arm as seed 002 does;
* a missing rating (``status == "missing"``) is absent, never a score.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping, Sequence

import krippendorff
import numpy as np
import pandas as pd

from context_effects.conformity.conditions import ANCHOR_CONDITIONS

#: Table 2's columns: seed 002 names → conditions of the main corpus.
TABLE2_COLUMNS = {"NoPeer": "no_peer", "AllCorrect": "peer_correct", "Mixed": "peer_mixed", "AllWrong": "peer_wrong"}
DELTA_CW = "Delta_C-W"

#: Conditions in display order (figure, parse-failure table).
DISPLAY_ORDER = (
    "round1", "no_peer", "content_correct", "content_mixed", "content_wrong",
    "peer_correct", "peer_mixed", "peer_wrong", "anchor_correct", "anchor_incorrect",
)


def panel_blind(ratings: pd.DataFrame, primary_seed: int) -> pd.DataFrame:
    """Retained blind ratings of the open panel on the primary main corpus."""
    keep = (
        (~ratings["hosted"].astype(bool))
        & (ratings["pass"] == "blind")
        & (ratings["corpus"] == "main")
        & (ratings["seed"] == primary_seed)
        & (ratings["status"] == "ok")
    )
    return ratings[keep]


# --------------------------------------------------------------------- Table 2


def mean_blind_ratings(ratings_by_dataset: Mapping[str, pd.DataFrame], primary_seed: int) -> pd.DataFrame:
    """Table 2: mean blind rating per dataset × peer condition, and AllCorrect − AllWrong."""
    rows = []
    for dataset, ratings in ratings_by_dataset.items():
        blind = panel_blind(ratings, primary_seed)
        means = blind.groupby("condition")["rating"].mean()
        row = {"Dataset": dataset}
        for col, cond in TABLE2_COLUMNS.items():
            row[col] = float(means.get(cond, np.nan))
        row[DELTA_CW] = row["AllCorrect"] - row["AllWrong"]
        row["n_ratings"] = int(blind["condition"].isin(tuple(TABLE2_COLUMNS.values())).sum())
        rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------- Table 5


def anchor_audit(ratings_by_dataset: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Table 5: anchor recognition under reference-free and reference-augmented scoring.

    "Correct anchor ranked higher" is the share of (item, judge) pairs whose
    correct anchor got a strictly higher rating than the incorrect one (a tie is
    not a correct ranking); pairs with a missing rating are left out. Means are
    over all retained anchor ratings; separation = mean correct − mean incorrect.
    Rows: every dataset and all datasets pooled.
    """
    frames = {name: df for name, df in ratings_by_dataset.items()}
    frames["All"] = pd.concat(list(ratings_by_dataset.values()), ignore_index=True)
    rows = []
    for dataset, ratings in frames.items():
        anchors = ratings[
            ratings["condition"].isin(ANCHOR_CONDITIONS) & (~ratings["hosted"].astype(bool)) & (ratings["status"] == "ok")
        ]
        stats = {}
        for ref in ("free", "augmented"):
            a = anchors[anchors["reference"] == ref]
            wide = a.pivot_table(index=["dataset", "item_id", "judge"], columns="condition", values="rating")
            wide = wide.dropna() if set(ANCHOR_CONDITIONS) <= set(wide.columns) else wide.iloc[0:0]
            correct = a.loc[a["condition"] == "anchor_correct", "rating"].mean()
            incorrect = a.loc[a["condition"] == "anchor_incorrect", "rating"].mean()
            ranked = (wide["anchor_correct"] > wide["anchor_incorrect"]).mean() * 100 if len(wide) else np.nan
            stats[ref] = {
                "Correct Anchor Ranked Higher (%)": ranked,
                "Mean Correct-Anchor Rating": correct,
                "Mean Incorrect-Anchor Rating": incorrect,
                "Mean Separation": correct - incorrect,
                "Pairs (item x judge)": float(len(wide)),
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


def blind_agreement(ratings_by_dataset: Mapping[str, pd.DataFrame], primary_seed: int) -> pd.DataFrame:
    """Krippendorff's α of the blind panel (units = generated answers, coders = judges).

    Ordinal α is the primary number (the scale is a 5-point ordinal rating);
    interval α is reported beside it. α needs at least two judges: with one it is
    undefined and reported as NaN with the reason.
    """
    frames = dict(ratings_by_dataset)
    frames["All"] = pd.concat(list(ratings_by_dataset.values()), ignore_index=True)
    rows = []
    for dataset, ratings in frames.items():
        blind = panel_blind(ratings, primary_seed)
        matrix = blind.pivot_table(index="judge", columns="answer_id", values="rating")
        row = {"Dataset": dataset, "judges": int(matrix.shape[0]), "answers": int(matrix.shape[1]),
               "ratings": int(len(blind))}
        values = matrix.to_numpy(dtype=float)
        pairable = int((np.isfinite(values).sum(axis=0) >= 2).sum()) if matrix.shape[0] >= 2 else 0
        defined = pairable > 0 and len(np.unique(values[np.isfinite(values)])) > 1
        for level in ("ordinal", "interval"):
            row[f"alpha_{level}"] = (
                float(krippendorff.alpha(reliability_data=values, level_of_measurement=level,
                                         value_domain=[1, 2, 3, 4, 5] if level == "ordinal" else None))
                if defined else np.nan
            )
        row["note"] = "" if defined else (
            "undefined: fewer than two judges" if matrix.shape[0] < 2 else "undefined: no answer rated by two judges"
        )
        rows.append(row)
    return pd.DataFrame(rows)


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
    """Each all-wrong revision of the primary main corpus beside its Round-1 answer.

    Columns: answer ids and texts, the flip indicator's positions and whether it
    calls the revision unchanged, and mean blind panel ratings of both answers
    (NaN when no judge rated one of them).
    """
    main = answers[(answers["corpus"] == "main") & (answers["seed"] == primary_seed)]
    revisions = main[(main["condition"] == "peer_wrong") & main["text"].notna()]
    by_id = main.set_index("answer_id")
    mean_rating = panel_blind(ratings, primary_seed).groupby("answer_id")["rating"].mean()
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
            "dataset": r.dataset, "item_id": r.item_id, "generator": r.generator, "authority": r.authority,
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


def flip_share(revisions_by_dataset: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Share of all-wrong revisions a flip indicator calls unchanged that still lost ≥ 1 blind point.

    seed 002 §3.1 (9.0% on TruthfulQA): the denominator is the rated revisions the
    flip indicator scores as unchanged; "lost at least one point" compares mean
    blind panel ratings of the revision and its Round-1 answer.
    """
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
    "Selection rule: among the first dataset's all-wrong revisions (primary seed, main corpus) that the "
    "flip indicator scores as unchanged, the one whose mean blind panel rating dropped most from its "
    "Round-1 answer; ties go to the smallest answer id. If none is unchanged, the largest drop overall."
)


def select_example(revisions: pd.DataFrame) -> tuple[pd.Series | None, str]:
    """Table 1's example by ``TABLE1_RULE`` (never chosen by hand); (row, which branch applied)."""
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


def parse_failures(ratings_by_dataset: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """Missing-rating rate per judge × pass × condition, with the commonest reason."""
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


# ----------------------------------------------------------------- the figure


def rating_distribution(ratings_by_dataset: Mapping[str, pd.DataFrame], primary_seed: int) -> pd.DataFrame:
    """Share of each blind rating 1–5 per dataset × condition (rows sum to 1)."""
    frames = []
    for dataset, ratings in ratings_by_dataset.items():
        blind = panel_blind(ratings, primary_seed)
        counts = blind.groupby(["condition", "rating"]).size().unstack(fill_value=0)
        counts = counts.reindex(columns=[1.0, 2.0, 3.0, 4.0, 5.0], fill_value=0)
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


def plot_rating_distribution(dist: pd.DataFrame, datasets: Sequence[str]):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(datasets), figsize=(4.2 * len(datasets), 3.6), sharey=True, squeeze=False)
    colours = plt.get_cmap("RdYlGn")(np.linspace(0.1, 0.9, 5))
    for ax, dataset in zip(axes[0], datasets):
        d = dist[dist["dataset"] == dataset]
        left = np.zeros(len(d))
        for k, colour in zip("12345", colours):
            ax.barh(d["condition"], d[k], left=left, color=colour, label=k)
            left += d[k].to_numpy()
        ax.set_title(dataset)
        ax.set_xlim(0, 1)
        ax.set_xlabel("share of blind ratings")
        ax.invert_yaxis()
    axes[0][-1].legend(title="rating", bbox_to_anchor=(1.02, 1), loc="upper left", frameon=False)
    fig.tight_layout()
    return fig
