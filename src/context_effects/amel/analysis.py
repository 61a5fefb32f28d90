"""The AMEL analyses: ``<name>_table`` returns analysis ``<name>``'s table (a DataFrame)
from the item-level bias scores (``probabilities_table``: from the per-cell probabilities).

``context_effects.amel.outputs.ANALYSES`` lists the analyses with their captions and
number formats; the registry there writes each table. Which rows enter which analysis:

* *main* rows = standard framing, saturated histories without a position
  block (the length design): effects, entropy, asymmetry, length, congruence;
* position rows = standard framing with a position block;
* framing rows = both framings at the k of ``framing_history_lengths``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from context_effects.amel import stats
from context_effects.amel.design import POSITIONS

STRATA = ("deterministic", "uncertain")


def main_rows(bs: pd.DataFrame) -> pd.DataFrame:
    return bs[(bs["framing"] == "standard") & bs["position"].isna()]


def position_rows(bs: pd.DataFrame) -> pd.DataFrame:
    return bs[(bs["framing"] == "standard") & bs["position"].notna()]


def _scopes(df: pd.DataFrame, by: Iterable[str]) -> Iterable[tuple[str, str, pd.DataFrame]]:
    """("overall", "all", df), then one slice per value of each column in ``by``."""
    yield "overall", "all", df
    for col in by:
        for value, part in df.groupby(col, sort=True, dropna=True):
            yield col, str(value), part


def _welch_row(scope: str, group: str, w: dict[str, Any], **labels: Any) -> dict[str, Any]:
    """A difference row (Welch t between two groups of bias scores), in the effect rows' columns."""
    return {
        "scope": scope,
        "group": group,
        **labels,
        "n": w["n_a"] + w["n_b"],
        "mean_bs": w["diff"],
        "ci_low": np.nan,
        "ci_high": np.nan,
        "d": w["d"],
        "t": w["t"],
        "p": w["p"],
        "test": "Welch t",
    }


def _effect_row(scope: str, group: str, values: Any, **extra: Any) -> dict[str, Any]:
    s = stats.one_sample(values)
    return {
        "scope": scope,
        "group": group,
        **extra,
        "n": s["n"],
        "mean_bs": s["mean"],
        "ci_low": s["ci_low"],
        "ci_high": s["ci_high"],
        "d": s["d"],
        "t": s["t"],
        "p": s["p"],
    }


def effects_table(bs: pd.DataFrame) -> pd.DataFrame:
    """Mean BS, one-sample Cohen's d and t-test: overall, by model, domain, provider."""
    df = main_rows(bs)
    rows = []
    for scope, group, part in _scopes(df, ("model", "domain", "provider")):
        extra: dict[str, Any] = {"provider": None, "params_b": np.nan}
        if scope == "model":
            extra = {"provider": part["provider"].iloc[0], "params_b": float(part["params_b"].iloc[0])}
        rows.append(_effect_row(scope, group, part["bs"], **extra))
    out = pd.DataFrame(rows)
    out["params_b"] = out["params_b"].astype(float)
    return out


def entropy_table(bs: pd.DataFrame) -> pd.DataFrame:
    """BS by baseline-entropy stratum, and uncertain vs deterministic (Welch)."""
    df = main_rows(bs)
    rows = []
    for scope, group, part in _scopes(df, ("model",)):
        for stratum in STRATA:
            sel = part.loc[part["stratum"] == stratum, "bs"]
            rows.append({**_effect_row(scope, group, sel, stratum=stratum), "test": "one-sample t"})
        w = stats.welch(part.loc[part["stratum"] == "uncertain", "bs"], part.loc[part["stratum"] == "deterministic", "bs"])
        rows.append(_welch_row(scope, group, w, stratum="uncertain - deterministic"))
    return pd.DataFrame(rows)


def polarity_pairs(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """yes- and no-saturated BS of the same item side by side (columns bs_yes, bs_no)."""
    wide = df.pivot_table(index=keys, columns="polarity", values="bs", aggfunc="first")
    wide = wide.rename(columns={"yes": "bs_yes", "no": "bs_no"}).reset_index()
    for col in ("bs_yes", "bs_no"):
        if col not in wide:
            wide[col] = np.nan
    return wide.dropna(subset=["bs_yes", "bs_no"])


def _asymmetry_row(scope: str, group: str, pairs: pd.DataFrame, **extra: Any) -> dict[str, Any]:
    abs_no, abs_yes = pairs["bs_no"].abs(), pairs["bs_yes"].abs()
    p = stats.paired(abs_no, abs_yes)
    mean_yes, mean_no = float(pairs["bs_yes"].mean()), float(pairs["bs_no"].mean())
    return {
        "scope": scope,
        "group": group,
        **extra,
        "n_pairs": p["n"],
        "mean_bs_yes": mean_yes,
        "mean_bs_no": mean_no,
        "ratio": stats.ratio(mean_no, mean_yes),
        "mean_abs_yes": p["mean_b"],
        "mean_abs_no": p["mean_a"],
        "ratio_abs": stats.ratio(p["mean_a"], p["mean_b"]),
        "t": p["t"],
        "p": p["p"],
    }


def asymmetry_table(bs: pd.DataFrame) -> pd.DataFrame:
    """Negativity asymmetry |BS(no-sat)| / |BS(yes-sat)|, paired per item x model x k."""
    pairs = polarity_pairs(main_rows(bs), ["model", "domain", "item_id", "k"])
    return pd.DataFrame([_asymmetry_row(s, g, part) for s, g, part in _scopes(pairs, ("model", "k"))])


def length_table(bs: pd.DataFrame) -> pd.DataFrame:
    """Spearman rho and OLS slope of BS on k: overall, by model, by polarity."""
    df = main_rows(bs)
    rows = []
    for scope, group, part in _scopes(df, ("model", "polarity")):
        rho, rho_p = stats.spearman(part["k"], part["bs"])
        fit = stats.ols_slope(part["k"], part["bs"])
        rows.append(
            {
                "scope": scope,
                "group": group,
                "n": fit["n"],
                "k_values": " ".join(str(int(k)) for k in sorted(part["k"].unique())),
                "rho": rho,
                "rho_p": rho_p,
                "slope": fit["slope"],
                "slope_se": fit["se"],
                "slope_ci_low": fit["ci_low"],
                "slope_ci_high": fit["ci_high"],
                "slope_p": fit["p"],
            }
        )
    return pd.DataFrame(rows)


def position_table(bs: pd.DataFrame) -> pd.DataFrame:
    """BS of the biased block at each position, and a one-way ANOVA across positions."""
    df = position_rows(bs)
    rows = []
    for scope, group, part in _scopes(df, ("model", "polarity")):
        present = [p for p in POSITIONS if (part["position"] == p).any()]
        for pos in present:
            rows.append({**_effect_row(scope, group, part.loc[part["position"] == pos, "bs"], position=pos), "F": np.nan})
        f, p = stats.anova([part.loc[part["position"] == pos, "bs"] for pos in present])
        rows.append(
            {
                "scope": scope,
                "group": group,
                "position": "ANOVA",
                "n": int(part["bs"].notna().sum()),
                "mean_bs": np.nan,
                "ci_low": np.nan,
                "ci_high": np.nan,
                "d": np.nan,
                "t": np.nan,
                "p": p,
                "F": f,
            }
        )
    return pd.DataFrame(rows)


def framing_table(bs: pd.DataFrame, framing_history_lengths: Iterable[int]) -> pd.DataFrame:
    """Negativity asymmetry in the standard and the swapped framing, and their difference."""
    ks = [int(k) for k in framing_history_lengths]
    df = bs[bs["position"].isna() & bs["k"].isin(ks)]
    pairs = polarity_pairs(df, ["model", "domain", "item_id", "k", "framing"])
    pairs["asym"] = pairs["bs_no"].abs() - pairs["bs_yes"].abs()
    rows = []
    for scope, group, part in _scopes(pairs, ("model",)):
        for framing in ("standard", "swapped"):
            sel = part[part["framing"] == framing]
            row = _asymmetry_row(scope, group, sel, framing=framing)
            row["asym"] = float(sel["asym"].mean()) if len(sel) else np.nan
            row["test"] = "paired t |BS no| vs |BS yes|"
            rows.append(row)
        both = part.pivot_table(index=["model", "domain", "item_id", "k"], columns="framing", values="asym")
        both = both.dropna(subset=[c for c in ("standard", "swapped") if c in both]) if len(both) else both
        if {"standard", "swapped"} <= set(both.columns):
            d = stats.paired(both["standard"], both["swapped"])
        else:
            d = stats.paired([], [])
        rows.append(
            {
                "scope": scope,
                "group": group,
                "framing": "standard - swapped",
                "n_pairs": d["n"],
                "asym": d["diff"],
                "t": d["t"],
                "p": d["p"],
                "test": "paired t of asym across framings",
            }
        )
    cols = ["scope", "group", "framing", "n_pairs", "mean_bs_yes", "mean_bs_no", "ratio", "mean_abs_yes",
            "mean_abs_no", "ratio_abs", "asym", "t", "p", "test"]
    return pd.DataFrame(rows).reindex(columns=cols)


def congruence_table(bs: pd.DataFrame) -> pd.DataFrame:
    """BS for items whose correct (or baseline) verdict matches the history's polarity, vs the rest."""
    df = main_rows(bs)
    rows = []
    for basis, col in (("truth", "congruent"), ("baseline verdict", "baseline_congruent")):
        for scope, group, part in _scopes(df, ("model", "polarity")):
            for value, label in ((True, "congruent"), (False, "incongruent")):
                rows.append(
                    {
                        **_effect_row(scope, group, part.loc[part[col].astype(bool) == value, "bs"], basis=basis, items=label),
                        "test": "one-sample t",
                    }
                )
            flag = part[col].astype(bool)
            w = stats.welch(part.loc[flag, "bs"], part.loc[~flag, "bs"])
            rows.append(_welch_row(scope, group, w, basis=basis, items="congruent - incongruent"))
    return pd.DataFrame(rows)


def probabilities_table(probs: pd.DataFrame) -> pd.DataFrame:
    """Mean P(Yes) per model x cell type, with how it was measured (first token or samples)."""
    df = probs.assign(position=probs["position"].fillna("-"))
    grouped = df.groupby(["model", "method", "framing", "condition", "k", "position"], sort=True)
    out = grouped.agg(
        n=("p_yes", lambda s: int(s.notna().sum())),
        mean_p_yes=("p_yes", "mean"),
        sd_p_yes=("p_yes", "std"),
        mean_yes_no_mass=("yes_no_mass", "mean"),
        n_missing=("p_yes", lambda s: int(s.isna().sum())),
    ).reset_index()
    return out
