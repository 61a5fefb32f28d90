"""How well the main corpus's executions (``conformity.seeds``: seed 002's 42/43/44)
reproduce each other: the Round-1 match rate and the cross-execution agreement of blind
ratings (registry table ``reproducibility``).

Seed 002 (Models, Data, and Evaluation; Decomposition Corpora) reports that "only 54% of
Round 1 answers matched across nominally identical runs" and keeps the seed-43/44
executions "only to assess reproducibility", without saying how. This module's
definitions (docs/deviations.yaml#reproducibility-match-rate):

* a **trial** is one (dataset, item, generator); its Round-1 answer in an execution is the
  ``round1`` row of the main corpus at that seed, text verbatim (a missing or empty text
  is no answer);
* **Round-1 text identical, all executions** — share of trials, among those with an answer
  in every execution, whose texts are the same string in all of them; 95% Wilson interval
  with the trial as unit;
* **Round-1 text identical, pairwise** — per trial, the share of execution pairs (among
  pairs where both have an answer) with the same string, averaged over trials; 95% normal
  interval over trials. With two executions both rates are the same number. The seed's
  54% is compared with the pooled pairwise rate: "runs" that must reproduce one realized
  answer are two at a time (a run and its rerun);
* **Round-1 text identical, main vs decomposition** — per trial, whether the main corpus's
  Round-1 text at the decomposition corpus's execution label (42) is the same string as
  the decomposition corpus's own Round-1 text: the same prompt, the same sampling seed,
  generated in a separate run. This is the identical-prompt rerun the seed's 54% speaks
  of (the decomposition corpora exist because such a rerun did not reproduce Round 1),
  so the 54% is compared with it; 95% Wilson interval with the trial as unit;
* **blind rating identical, pairwise** — per judge, a unit is one answer slot (dataset,
  item, generator, condition, authority) with a valid blind rating in at least two
  executions; the share of its execution pairs with the same rating, averaged over units
  (95% normal interval over units);
* **blind rating alpha (ordinal)** — per judge, Krippendorff's ordinal α with executions
  as coders and answer slots as units (how far a judge's rating of "the same" answer slot
  reproduces across executions, whether or not the text itself was reproduced).

Rows: each dataset × model, each dataset pooled over models, and all datasets pooled
(``Dataset = All``, present with one dataset too).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence

import krippendorff
import numpy as np
import pandas as pd
from statsmodels.stats.proportion import proportion_confint

ALL = "All"
COLUMNS = ["Quantity", "Dataset", "Model", "Executions", "Units", "Value", "CI low", "CI high"]
MATCH_ALL = "Round-1 text identical, all executions"
MATCH_PAIRWISE = "Round-1 text identical, pairwise"
MATCH_DECOMPOSITION = "Round-1 text identical, main vs decomposition"
RATING_IDENTICAL = "Blind rating identical, pairwise"
RATING_ALPHA = "Blind rating alpha (ordinal), executions as coders"
#: What identifies "the same" answer slot across executions.
SLOT = ["item_id", "generator", "condition", "authority"]
Z95 = 1.959963984540054


def wilson(successes: int, n: int) -> tuple[float, float]:
    """95% Wilson score interval of a binomial share (NaN bounds for n = 0)."""
    if n <= 0:
        return math.nan, math.nan
    lo, hi = proportion_confint(successes, n, alpha=0.05, method="wilson")
    return float(lo), float(hi)


def mean_interval(values: Sequence[float], z: float = Z95) -> tuple[float, float, float]:
    """Mean with a normal 95% interval over independent units (clipped to [0, 1])."""
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return math.nan, math.nan, math.nan
    m = float(x.mean())
    if x.size < 2:
        return m, math.nan, math.nan
    half = z * float(x.std(ddof=1)) / math.sqrt(x.size)
    return m, max(0.0, m - half), min(1.0, m + half)


def _texts(answers: pd.DataFrame, seeds: Sequence[int]) -> pd.DataFrame:
    """Trials × executions of Round-1 texts (None where an execution has no answer)."""
    a = answers.loc[(answers["corpus"] == "main") & (answers["condition"] == "round1")]
    a = a.assign(seed=pd.to_numeric(a["seed"], errors="coerce"))
    a = a.loc[a["seed"].isin(list(seeds))]
    a = a.loc[a["text"].notna() & (a["text"].astype(str).str.len() > 0)]
    wide = a.drop_duplicates(["generator", "item_id", "seed"]).pivot(index=["generator", "item_id"],
                                                                     columns="seed", values="text")
    return wide.reindex(columns=list(seeds))


def _pair_share(row: np.ndarray) -> float:
    present = [v for v in row if isinstance(v, str)]
    pairs = list(itertools.combinations(present, 2))
    return math.nan if not pairs else sum(a == b for a, b in pairs) / len(pairs)


def _match_rows(wide: pd.DataFrame, dataset: str, model: str, n_exec: int) -> list[dict]:
    complete = wide.dropna()
    same = int(sum(len(set(r)) == 1 for r in complete.itertuples(index=False))) if len(complete) else 0
    lo, hi = wilson(same, len(complete))
    shares = [s for s in (_pair_share(r) for r in wide.to_numpy(dtype=object)) if not math.isnan(s)]
    m, plo, phi = mean_interval(shares)
    return [
        {"Quantity": MATCH_ALL, "Dataset": dataset, "Model": model, "Executions": n_exec, "Units": len(complete),
         "Value": same / len(complete) if len(complete) else math.nan, "CI low": lo, "CI high": hi},
        {"Quantity": MATCH_PAIRWISE, "Dataset": dataset, "Model": model, "Executions": n_exec,
         "Units": len(shares), "Value": m, "CI low": plo, "CI high": phi},
    ]


def round1_match(answers_by_dataset: Mapping[str, pd.DataFrame], seeds: Sequence[int],
                 names: Mapping[str, str] | None = None,
                 labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The Round-1 match rates (module docstring), per dataset × generator and pooled."""
    names, labels = dict(names or {}), dict(labels or {})
    rows, pooled = [], []
    for ds, answers in answers_by_dataset.items():
        wide = _texts(answers, seeds)
        pooled.append(wide.set_axis(pd.MultiIndex.from_tuples([(ds, *i) for i in wide.index]), axis=0)
                      if len(wide) else wide)
        label = labels.get(ds, ds)
        for g in sorted(set(wide.index.get_level_values(0))) if len(wide) else []:
            rows += _match_rows(wide.xs(g, level=0, drop_level=False), label, names.get(g, g), len(seeds))
        rows += _match_rows(wide, label, ALL, len(seeds))
    if pooled:  # also with one dataset: the paper's numbers and macros name the pooled row
        rows += _match_rows(pd.concat(pooled), ALL, ALL, len(seeds))
    return pd.DataFrame(rows, columns=COLUMNS)


def _round1(answers: pd.DataFrame, corpus: str, seed: int) -> pd.Series:
    """Round-1 texts of one corpus at one execution label, by (generator, item_id)."""
    a = answers.loc[(answers["corpus"] == corpus) & (answers["condition"] == "round1")]
    a = a.loc[(pd.to_numeric(a["seed"], errors="coerce") == seed) & a["text"].notna()
              & (a["text"].astype(str).str.len() > 0)]
    return a.drop_duplicates(["generator", "item_id"]).set_index(["generator", "item_id"])["text"]


def _rerun_rows(pairs: pd.DataFrame, dataset: str, model: str) -> dict:
    same = int((pairs["main"] == pairs["decomposition"]).sum())
    lo, hi = wilson(same, len(pairs))
    return {"Quantity": MATCH_DECOMPOSITION, "Dataset": dataset, "Model": model, "Executions": 2,
            "Units": len(pairs), "Value": same / len(pairs) if len(pairs) else math.nan, "CI low": lo, "CI high": hi}


def decomposition_match(answers_by_dataset: Mapping[str, pd.DataFrame], seed: int,
                        names: Mapping[str, str] | None = None,
                        labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """The main corpus's Round-1 texts at execution ``seed`` against the decomposition
    corpus's (module docstring), per dataset × generator, per dataset and pooled; trials
    with a Round-1 answer in both corpora only."""
    names, labels = dict(names or {}), dict(labels or {})
    rows, pooled = [], []
    for ds, answers in answers_by_dataset.items():
        pairs = pd.concat({"main": _round1(answers, "main", seed),
                           "decomposition": _round1(answers, "decomposition", seed)}, axis=1).dropna()
        pooled.append(pairs)
        label = labels.get(ds, ds)
        for g in sorted(set(pairs.index.get_level_values(0))):
            rows.append(_rerun_rows(pairs.xs(g, level=0, drop_level=False), label, names.get(g, g)))
        rows.append(_rerun_rows(pairs, label, ALL))
    if pooled:
        rows.append(_rerun_rows(pd.concat(pooled), ALL, ALL))
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out.loc[out["Units"] > 0].reset_index(drop=True)


def _slots(ratings: pd.DataFrame, seeds: Sequence[int]) -> pd.DataFrame:
    """Blind main-corpus ratings as (judge, slot) × execution (NaN: no valid rating)."""
    r = ratings.loc[(ratings["corpus"] == "main") & (ratings["pass"] == "blind") & (ratings["status"] == "ok")]
    r = r.assign(seed=pd.to_numeric(r["seed"], errors="coerce"), authority=r["authority"].fillna("-"))
    r = r.loc[r["seed"].isin(list(seeds)) & r["rating"].notna()]
    wide = r.pivot_table(index=["judge", *SLOT], columns="seed", values="rating", aggfunc="first")
    return wide.reindex(columns=list(seeds))


def _rating_rows(wide: pd.DataFrame, dataset: str, model: str, n_exec: int) -> list[dict]:
    values = wide.to_numpy(dtype=float)
    values = values[(np.isfinite(values).sum(axis=1) >= 2)] if values.size else values.reshape(0, n_exec)
    shares = []
    for row in values:
        present = row[np.isfinite(row)]
        pairs = list(itertools.combinations(present, 2))
        shares.append(sum(a == b for a, b in pairs) / len(pairs))
    m, lo, hi = mean_interval(shares)
    defined = len(values) > 0 and len(np.unique(values[np.isfinite(values)])) > 1
    alpha = (float(krippendorff.alpha(reliability_data=values.T, level_of_measurement="ordinal",
                                      value_domain=[1, 2, 3, 4, 5])) if defined else math.nan)
    base = {"Dataset": dataset, "Model": model, "Executions": n_exec, "Units": len(values)}
    return [{"Quantity": RATING_IDENTICAL, **base, "Value": m, "CI low": lo, "CI high": hi},
            {"Quantity": RATING_ALPHA, **base, "Value": alpha, "CI low": math.nan, "CI high": math.nan}]


def rating_agreement(ratings_by_dataset: Mapping[str, pd.DataFrame], seeds: Sequence[int],
                     names: Mapping[str, str] | None = None,
                     labels: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Cross-execution agreement of each judge's blind ratings (module docstring)."""
    names, labels = dict(names or {}), dict(labels or {})
    rows, pooled = [], {}
    for ds, ratings in ratings_by_dataset.items():
        wide = _slots(ratings, seeds)
        for j in sorted(set(wide.index.get_level_values(0))) if len(wide) else []:
            w = wide.xs(j, level=0)
            pooled.setdefault(j, []).append(w)
            rows += _rating_rows(w, labels.get(ds, ds), names.get(j, j), len(seeds))
    for j, frames in pooled.items():
        rows += _rating_rows(pd.concat(frames), ALL, names.get(j, j), len(seeds))
    out = pd.DataFrame(rows, columns=COLUMNS)
    return out.loc[out["Units"] > 0].reset_index(drop=True)


def reproducibility_table(answers_by_dataset: Mapping[str, pd.DataFrame],
                          ratings_by_dataset: Mapping[str, pd.DataFrame], seeds: Sequence[int],
                          names: Mapping[str, str] | None = None,
                          labels: Mapping[str, str] | None = None,
                          decomposition_seed: int | None = None) -> pd.DataFrame:
    """The registry table: Round-1 match rates across executions, the main corpus against
    the decomposition corpus at ``decomposition_seed`` (None: no decomposition corpus, no
    rows), then the judges' cross-execution agreement; with fewer than two executions a
    row saying so takes the place of the cross-execution rows."""
    seeds = [int(s) for s in seeds]
    rerun = ([decomposition_match(answers_by_dataset, int(decomposition_seed), names, labels)]
             if decomposition_seed is not None and int(decomposition_seed) in seeds else [])
    if len(seeds) < 2:
        row = {c: "" for c in COLUMNS}
        row["Quantity"] = f"not estimated: one execution configured (conformity.seeds = {seeds})"
        parts = [pd.DataFrame([row], columns=COLUMNS), *rerun]
    else:
        parts = [round1_match(answers_by_dataset, seeds, names, labels), *rerun,
                 rating_agreement(ratings_by_dataset, seeds, names, labels)]
    parts = [p for p in parts if len(p)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=COLUMNS)
