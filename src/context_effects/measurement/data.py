"""Ratings table → index arrays for the hierarchical measurement model (seed 002 §2.3).

Ratings-table contract (one row per retained rating; a recorded miss is simply an
absent row — rows whose ``rating`` is NaN are dropped and counted)::

    answer_id  str   one generated answer (or anchor); θ_i is per answer_id
    trial_id   str   item × generator × seed; the trial baseline b_t is per trial_id
                     (ignored for anchors)
    generator  str   model that wrote the answer (ignored for anchors)
    condition  str   round1 | no_peer | content_correct | content_wrong | content_mixed |
                     peer_correct | peer_wrong | peer_mixed | anchor_correct | anchor_incorrect
                     (authority-present/absent variants share one peer condition: seed 002
                     pools the six peer answers of a trial into three conditions)
    judge      str   rating model
    pass       str   "blind" | "informed"
    d          int   signed peer context: +1 all-correct, 0 mixed, -1 all-wrong; 0 for blind
    rating     int   1..n_categories

Extra columns are ignored. Every (answer_id, judge, pass) occurs at most once.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from context_effects.conformity.conditions import (
    CONDITIONS,
    CONTENT_CONDITIONS,
    PEER_CONDITIONS,
    ROUND2_CONDITIONS,
)
from context_effects.conformity.conditions import D_BY_CONDITION as PEER_D  # Eq. 7: d_i by peer arm

ANCHOR_SIGN = {"anchor_correct": 1, "anchor_incorrect": -1}
#: Eq. 3: the content-only arm k(c) that carries the same candidate text as peer arm c.
CONTENT_OF_PEER = {"peer_correct": "content_correct", "peer_wrong": "content_wrong", "peer_mixed": "content_mixed"}
PASSES = ("blind", "informed")
REQUIRED_COLUMNS = ("answer_id", "trial_id", "generator", "condition", "judge", "pass", "d", "rating")

_KNOWN_FAMILIES = ("qwen", "mistral", "mixtral", "gemma", "llama", "gpt", "claude", "phi", "deepseek", "smollm")


class RatingsError(ValueError):
    """The ratings table breaks the contract; the message names the rows or columns."""


def model_family(name: str) -> str:
    """Family of a model name ("Qwen/Qwen2.5-7B-Instruct" → "qwen"); the name itself if unknown.

    Self-rating exclusion compares families, not exact names, because a judge and
    a generator of the same family share training data and style preferences.
    """
    flat = re.sub(r"[^a-z0-9]", "", str(name).lower())
    for fam in _KNOWN_FAMILIES:
        if fam in flat:
            return fam
    return str(name)


def _family_fn(family: Callable[[str], str] | Mapping[str, str] | None) -> Callable[[str], str]:
    if family is None:
        return model_family
    if callable(family):
        return family
    mapping = dict(family)
    return lambda name: mapping.get(name, name)


def exclude_self_ratings(
    table: pd.DataFrame, family: Callable[[str], str] | Mapping[str, str] | None = None
) -> pd.DataFrame:
    """Drop every rating a judge gave to an answer of its own family (seed 002 Table 17); anchors stay."""
    fam = _family_fn(family)
    is_anchor = table["condition"].isin(tuple(ANCHOR_SIGN))
    judge_fam = table["judge"].map(fam)
    gen_fam = table["generator"].map(lambda g: fam(g) if isinstance(g, str) else None)
    self_rated = (judge_fam == gen_fam) & ~is_anchor
    return table.loc[~self_rated].reset_index(drop=True)


def validate_ratings(table: pd.DataFrame, n_categories: int = 5) -> pd.DataFrame:
    """Check the contract and return a cleaned copy (NaN ratings dropped, dtypes normalised)."""
    missing = [c for c in REQUIRED_COLUMNS if c not in table.columns]
    if missing:
        raise RatingsError(f"ratings table lacks column(s) {missing}; required: {list(REQUIRED_COLUMNS)}")
    df = table.loc[:, list(REQUIRED_COLUMNS)].copy()
    df = df.loc[df["rating"].notna()].reset_index(drop=True)
    problems: list[str] = []

    bad_cond = sorted(set(df["condition"]) - set(CONDITIONS))
    if bad_cond:
        problems.append(f"unknown condition(s) {bad_cond}; allowed: {list(CONDITIONS)}")
    bad_pass = sorted(map(str, set(df["pass"]) - set(PASSES)))
    if bad_pass:
        problems.append(f"unknown pass value(s) {bad_pass}; allowed: {list(PASSES)}")

    rating = pd.to_numeric(df["rating"], errors="coerce")
    bad_rating = rating.isna() | (rating != np.round(rating)) | (rating < 1) | (rating > n_categories)
    if bad_rating.any():
        problems.append(
            f"{int(bad_rating.sum())} rating(s) not an integer in 1..{n_categories}, "
            f"e.g. {df.loc[bad_rating, 'rating'].head(3).tolist()}"
        )
    d = pd.to_numeric(df["d"], errors="coerce")
    bad_d = d.isna() | ~d.isin([-1, 0, 1])
    if bad_d.any():
        problems.append(f"{int(bad_d.sum())} d value(s) outside {{-1, 0, +1}}")
    if problems:
        raise RatingsError("; ".join(problems))
    df["rating"] = rating.astype(np.int64)
    df["d"] = d.astype(np.int64)

    blind = df["pass"] == "blind"
    if (df.loc[blind, "d"] != 0).any():
        problems.append(f"{int((df.loc[blind, 'd'] != 0).sum())} blind rating(s) with d != 0 (d is 0 for blind)")
    is_anchor = df["condition"].isin(tuple(ANCHOR_SIGN))
    if (is_anchor & ~blind).any():
        problems.append("anchors are rated blind only (they have no peer block)")
    peer_inf = (~blind) & df["condition"].isin(PEER_CONDITIONS)
    expected_d = df.loc[peer_inf, "condition"].map(PEER_D)
    wrong_d = expected_d != df.loc[peer_inf, "d"]
    if wrong_d.any():
        problems.append(
            f"{int(wrong_d.sum())} informed peer rating(s) whose d disagrees with the condition "
            f"(peer_correct +1, peer_mixed 0, peer_wrong -1)"
        )
    dup = df.duplicated(["answer_id", "judge", "pass"], keep=False)
    if dup.any():
        problems.append(
            f"{int(dup.sum())} row(s) repeat an (answer_id, judge, pass), "
            f"e.g. {df.loc[dup, ['answer_id', 'judge', 'pass']].head(2).values.tolist()}"
        )
    exp = df.loc[~is_anchor]
    per_answer = exp.groupby("answer_id")[["trial_id", "generator", "condition"]].nunique()
    incons = per_answer.index[(per_answer > 1).any(axis=1)]
    if len(incons):
        problems.append(
            f"{len(incons)} answer_id(s) with more than one trial/generator/condition, e.g. {list(incons[:3])}"
        )
    per_trial = exp.groupby("trial_id")["generator"].nunique()
    if (per_trial > 1).any():
        problems.append(f"trial_id(s) spanning several generators, e.g. {list(per_trial.index[per_trial > 1][:3])}")
    anc = df.loc[is_anchor].groupby("answer_id")["condition"].nunique()
    if (anc > 1).any():
        problems.append("an anchor answer_id is both correct and incorrect")
    if exp.empty:
        problems.append("no experimental (non-anchor) ratings")
    if problems:
        raise RatingsError("; ".join(problems))
    return df


@dataclass(frozen=True)
class MeasurementData:
    """Index arrays for the model plus the names that give them meaning.

    θ is laid out as ``[experimental answers..., anchors...]``; ``row_answer`` indexes that
    layout. ``answer_cell`` is -1 for Round 1 answers (r_i = 0), else the index of the
    (generator, condition) cell in ``cells``.
    """

    judges: tuple[str, ...]
    generators: tuple[str, ...]
    cells: tuple[tuple[str, str], ...]
    trials: tuple[str, ...]
    answers: tuple[str, ...]
    anchors: tuple[str, ...]
    answer_trial: np.ndarray
    answer_cell: np.ndarray
    answer_generator: np.ndarray
    anchor_sign: np.ndarray
    row_answer: np.ndarray
    row_judge: np.ndarray
    row_informed: np.ndarray
    row_d: np.ndarray
    row_y: np.ndarray  # 0-based category
    n_categories: int = 5
    info: dict = field(default_factory=dict, compare=False)

    @property
    def n_answers(self) -> int:
        return len(self.answers)

    @property
    def n_anchors(self) -> int:
        return len(self.anchors)

    @property
    def n_trials(self) -> int:
        return len(self.trials)

    @property
    def n_cells(self) -> int:
        return len(self.cells)

    @property
    def n_judges(self) -> int:
        return len(self.judges)

    @property
    def n_ratings(self) -> int:
        return int(self.row_y.shape[0])

    def cell_index(self, generator: str, condition: str) -> int | None:
        try:
            return self.cells.index((generator, condition))
        except ValueError:
            return None

    @cached_property
    def grid(self) -> dict[str, np.ndarray]:
        """Dense answer × judge layout of the same ratings (masked where a rating is absent).

        Every answer is rated by (nearly) every judge, so a dense grid is barely larger than
        the long table and lets μ be formed by broadcasting instead of per-rating gathers,
        whose gradients are scatter-adds — slow on CPU.
        """
        n_theta = self.n_answers + self.n_anchors
        J = self.n_judges
        blind = self.row_informed == 0
        y_b = np.zeros((n_theta, J), np.int32)
        m_b = np.zeros((n_theta, J), bool)
        y_b[self.row_answer[blind], self.row_judge[blind]] = self.row_y[blind]
        m_b[self.row_answer[blind], self.row_judge[blind]] = True
        inf = ~blind
        inf_answers, inv = np.unique(self.row_answer[inf], return_inverse=True)
        y_i = np.zeros((len(inf_answers), J), np.int32)
        m_i = np.zeros((len(inf_answers), J), bool)
        y_i[inv, self.row_judge[inf]] = self.row_y[inf]
        m_i[inv, self.row_judge[inf]] = True
        d_i = np.zeros(len(inf_answers), np.int32)
        d_i[inv] = self.row_d[inf]
        # Blind rows that nobody rated would only cost work: keep the θ layout intact,
        # the mask already removes them from the likelihood.
        return {
            "blind_y": y_b,
            "blind_mask": m_b,
            "inf_answer": inf_answers.astype(np.int32),
            "inf_y": y_i,
            "inf_mask": m_i,
            "inf_d": d_i,
        }


def prepare_data(
    table: pd.DataFrame,
    *,
    judges: Sequence[str] | None = None,
    generators: Sequence[str] | None = None,
    n_categories: int = 5,
    exclude_self: bool = False,
    family: Callable[[str], str] | Mapping[str, str] | None = None,
) -> MeasurementData:
    """Validate a ratings table and build the model's index arrays.

    ``judges``/``generators`` fix the order (and may restrict the judge panel, e.g. a
    five-judge refit names five judges); default is sorted order of appearance.
    ``exclude_self`` drops self-family ratings (anchors kept) before indexing.
    """
    n_in = len(table)
    df = validate_ratings(table, n_categories=n_categories)
    n_missing = n_in - len(df)
    if judges is not None:
        judges = tuple(judges)
        unknown = sorted(set(judges) - set(df["judge"]))
        if unknown:
            raise RatingsError(f"judge(s) {unknown} have no ratings in the table")
        df = df.loc[df["judge"].isin(judges)].reset_index(drop=True)
    n_self = 0
    if exclude_self:
        before = len(df)
        df = exclude_self_ratings(df, family)
        n_self = before - len(df)
    judges = tuple(judges) if judges is not None else tuple(sorted(df["judge"].unique()))

    is_anchor = df["condition"].isin(tuple(ANCHOR_SIGN)).to_numpy()
    exp = df.loc[~is_anchor]
    if generators is None:
        generators = tuple(sorted(exp["generator"].unique()))
    else:
        generators = tuple(generators)
        unknown = sorted(set(exp["generator"]) - set(generators))
        if unknown:
            raise RatingsError(f"generator(s) {unknown} are in the table but not in `generators`")

    answers_df = exp.drop_duplicates("answer_id")[["answer_id", "trial_id", "generator", "condition"]]
    answers_df = answers_df.sort_values(["trial_id", "answer_id"], kind="stable")
    answers = tuple(answers_df["answer_id"])
    trials = tuple(sorted(answers_df["trial_id"].unique()))
    trial_pos = {t: i for i, t in enumerate(trials)}
    present = set(zip(answers_df["generator"], answers_df["condition"]))
    cells = tuple((g, c) for g in generators for c in ROUND2_CONDITIONS if (g, c) in present)
    cell_pos = {gc: i for i, gc in enumerate(cells)}
    answer_trial = answers_df["trial_id"].map(trial_pos).to_numpy(np.int32)
    gen_pos = {g: i for i, g in enumerate(generators)}
    answer_generator = answers_df["generator"].map(gen_pos).to_numpy(np.int32)
    answer_cell = np.array(
        [
            cell_pos.get((g, c), -1) if c != "round1" else -1
            for g, c in zip(answers_df["generator"], answers_df["condition"])
        ],
        np.int32,
    )

    anchors_df = df.loc[is_anchor].drop_duplicates("answer_id").sort_values("answer_id", kind="stable")
    anchors = tuple(anchors_df["answer_id"])
    anchor_sign = anchors_df["condition"].map(ANCHOR_SIGN).to_numpy(np.int32)

    theta_pos = {a: i for i, a in enumerate(answers)}
    theta_pos.update({a: len(answers) + i for i, a in enumerate(anchors)})
    judge_pos = {j: i for i, j in enumerate(judges)}
    info = {
        "n_rows_in": n_in,
        "n_missing_dropped": int(n_missing),
        "n_self_rated_dropped": int(n_self),
        "exclude_self": bool(exclude_self),
    }
    return MeasurementData(
        judges=judges,
        generators=generators,
        cells=cells,
        trials=trials,
        answers=answers,
        anchors=anchors,
        answer_trial=answer_trial,
        answer_cell=answer_cell,
        answer_generator=answer_generator,
        anchor_sign=anchor_sign,
        row_answer=df["answer_id"].map(theta_pos).to_numpy(np.int32),
        row_judge=df["judge"].map(judge_pos).to_numpy(np.int32),
        row_informed=(df["pass"] == "informed").to_numpy(np.int32),
        row_d=df["d"].to_numpy(np.int32),
        row_y=(df["rating"].to_numpy(np.int32) - 1),
        n_categories=int(n_categories),
        info=info,
    )
