"""The AMEL analyses: ``<name>_table`` returns analysis ``<name>``'s table (a DataFrame)
from the item-level bias scores (``probabilities_table``: from the per-cell probabilities).

``context_effects.amel.outputs.ANALYSES`` lists the analyses with their captions and
number formats; the registry there writes each table. Which rows enter which analysis:

* *main* rows = standard framing, saturated histories without a position
  block (the length design): effects, entropy, asymmetry, length, congruence,
  scaling;
* position rows = standard framing with a position block;
* framing rows = both framings at the k of ``framing_history_lengths``;
* balanced rows = standard framing, balanced histories (against the main rows
  of the same k).

Three rules hold for every table:

* One measurement per comparison: each table is computed separately for each
  ``method`` and its rows say which: ``single_call`` (the primary analysis, the
  seed's design: one call per cell, the first sampled reply), then ``samples``
  (P(Yes) from every sampled reply of a cell) and ``first_token`` (first-token
  probabilities, the models with logprobs), the secondary analyses.
* The unit of replication: for ``single_call`` the row (one outcome per model x
  item x cell), as the seed's overall d and its p < 10^-46 need (about 7,000
  units for 2,481 items; ``docs/deviations.yaml``, amel-calls-per-cell), with the
  intervals of the mean and of d resampling items and the t-test's SE clustered by
  item (the rows of an item share it and its baseline reply:
  ``stats.cluster_bootstrap``, ``stats.cluster_t``); for the
  secondary methods the item, whose rows within a comparison (its k's,
  polarities, positions) are averaged before a test, so ``n`` counts items and
  ``n_rows`` the rows behind them. Paired designs (the negativity asymmetry, the
  framing swap, balanced against saturated, congruence over both polarities,
  positions, scaling) pair within item for every method.
* Pooled rows (overall, by domain, provider, k, ...) are of the seed's roster;
  extra models (``amel.extra_models``) appear in the by-model rows only,
  marked by ``extra_model``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pandas as pd

from context_effects.amel import stats
from context_effects.amel.design import METHOD_ORDER, POSITIONS

STRATA = ("deterministic", "uncertain")
#: The unit of every test.
UNIT = ["model", "domain", "item_id"]
#: Methods whose one-sample and between-group tests take the row, not the item mean, as the unit.
ROW_UNIT_METHODS = frozenset({"single_call"})


def main_rows(bs: pd.DataFrame) -> pd.DataFrame:
    saturated = bs["condition"].isin(["yes_saturated", "no_saturated"])
    return bs[(bs["framing"] == "standard") & bs["position"].isna() & saturated]


def position_rows(bs: pd.DataFrame) -> pd.DataFrame:
    return bs[(bs["framing"] == "standard") & bs["position"].notna()]


def balanced_rows(bs: pd.DataFrame) -> pd.DataFrame:
    return bs[(bs["framing"] == "standard") & (bs["condition"] == "balanced")]


def _roster(df: pd.DataFrame) -> pd.DataFrame:
    return df[~df["extra_model"].astype(bool)] if "extra_model" in df else df


def _scopes(df: pd.DataFrame, by: Iterable[str]) -> Iterable[tuple[str, str, pd.DataFrame]]:
    """("overall", "all", roster rows), then one slice per value of each column in ``by``
    (of every model for ``model``, of the roster otherwise)."""
    roster = _roster(df)
    yield "overall", "all", roster
    for col in by:
        for value, part in (df if col == "model" else roster).groupby(col, sort=True, dropna=True):
            yield col, str(value), part


def item_means(df: pd.DataFrame, value: str = "bs", by: Iterable[str] = ()) -> pd.DataFrame:
    """Mean of ``value`` per item (and per ``by``), with ``n_rows``: the unit of every test."""
    keys = UNIT + list(by)
    if not len(df):
        return pd.DataFrame(columns=[*keys, value, "n_rows"])
    g = df.groupby(keys, sort=True, dropna=False)[value]
    return pd.concat([g.mean(), g.count().rename("n_rows")], axis=1).reset_index()


def unit_values(df: pd.DataFrame, value: str = "bs", by: Iterable[str] = ()) -> pd.DataFrame:
    """The values a one-sample or between-group test takes: every row (``n_rows`` 1) for a
    row-unit method (``single_call``), else the item means (``item_means``)."""
    if len(df) and "method" in df and set(df["method"].dropna()) <= ROW_UNIT_METHODS and df["method"].notna().all():
        rows = df[[*UNIT, *by, value]].copy()
        rows["n_rows"] = rows[value].notna().astype(int)
        return rows.reset_index(drop=True)
    return item_means(df, value, by)


def by_method(table: Callable[..., pd.DataFrame]) -> Callable[..., pd.DataFrame]:
    """Run ``table`` once per measurement method and stack the results, primary first, with
    ``method`` and ``extra_model`` columns (a comparison never mixes methods)."""

    def run(data: pd.DataFrame, *args: Any, **kwargs: Any) -> pd.DataFrame:
        if "method" not in data:
            return table(data, *args, **kwargs)
        present = list(data["method"].dropna().unique())
        order = [m for m in METHOD_ORDER if m in present] + sorted(m for m in present if m not in METHOD_ORDER)
        extras = set(data.loc[data["extra_model"].astype(bool), "model"]) if "extra_model" in data else set()
        parts = []
        for method in order:
            out = table(data[data["method"] == method], *args, **kwargs)
            out.insert(0, "method", method)
            parts.append(out)
        out = pd.concat(parts, ignore_index=True) if parts else table(data, *args, **kwargs)
        if "scope" in out:
            out["extra_model"] = (out["scope"] == "model") & out["group"].isin(extras)
        if "saturation_share" in data:
            shares = main_rows(data)["saturation_share"].dropna().unique()
            out["saturation_share"] = float(shares[0]) if len(shares) == 1 else np.nan
        return out

    run.__name__ = table.__name__
    run.__doc__ = table.__doc__
    return run


def _welch_row(scope: str, group: str, w: dict[str, Any], **labels: Any) -> dict[str, Any]:
    """A difference row (Welch t between two groups of item means), in the effect rows' columns."""
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


def _effect_row(scope: str, group: str, rows: pd.DataFrame, **extra: Any) -> dict[str, Any]:
    """One-sample statistics of ``rows``' bias scores in the method's unit (``unit_values``);
    where that unit is the row, the intervals resample items (``stats.cluster_bootstrap``)."""
    means = unit_values(rows)
    clusters = None
    if len(means) and (means["n_rows"] <= 1).all() and means.duplicated(UNIT).any():
        clusters = means[UNIT].astype(str).agg("|".join, axis=1).to_numpy()
    s = stats.one_sample(means["bs"], clusters=clusters)
    return {
        "scope": scope,
        "group": group,
        **extra,
        "n": s["n"],
        "n_rows": int(rows["bs"].notna().sum()),
        "mean_bs": s["mean"],
        "ci_low": s["ci_low"],
        "ci_high": s["ci_high"],
        "d": s["d"],
        "d_ci_low": s["d_ci_low"],
        "d_ci_high": s["d_ci_high"],
        "t": s["t"],
        "p": s["p"],
    }


def _welch_items(a: pd.DataFrame, b: pd.DataFrame) -> dict[str, Any]:
    return stats.welch(unit_values(a)["bs"], unit_values(b)["bs"])


@by_method
def effects_table(bs: pd.DataFrame) -> pd.DataFrame:
    """Mean BS, one-sample Cohen's d and t-test of item means: overall, by model, domain, provider."""
    df = main_rows(bs)
    rows = []
    for scope, group, part in _scopes(df, ("model", "domain", "provider")):
        extra: dict[str, Any] = {"provider": None, "params_b": np.nan}
        if scope == "model":
            extra = {"provider": part["provider"].iloc[0], "params_b": float(part["params_b"].iloc[0])}
        rows.append(_effect_row(scope, group, part, **extra))
    out = pd.DataFrame(rows)
    out["params_b"] = out["params_b"].astype(float)
    return out


@by_method
def entropy_table(bs: pd.DataFrame) -> pd.DataFrame:
    """BS by baseline-entropy stratum, and uncertain vs deterministic (Welch, item means)."""
    df = main_rows(bs)
    rows = []
    for scope, group, part in _scopes(df, ("model",)):
        for stratum in STRATA:
            sel = part[part["stratum"] == stratum]
            rows.append({**_effect_row(scope, group, sel, stratum=stratum), "test": "one-sample t"})
        w = _welch_items(part[part["stratum"] == "uncertain"], part[part["stratum"] == "deterministic"])
        rows.append(_welch_row(scope, group, w, stratum="uncertain - deterministic"))
    return pd.DataFrame(rows)


def polarity_pairs(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Per ``keys`` the yes- and no-saturated mean BS and mean |BS| side by side (columns
    bs_yes, bs_no, abs_yes, abs_no); repeated rows (the k's) are averaged first."""
    df = df.assign(abs_bs=df["bs"].abs())
    wide = df.pivot_table(index=keys, columns="polarity", values=["bs", "abs_bs"], aggfunc="mean")
    out = pd.DataFrame(index=wide.index)
    for value, name in (("bs", "bs"), ("abs_bs", "abs")):
        for pol in ("yes", "no"):
            out[f"{name}_{pol}"] = wide[(value, pol)] if (value, pol) in wide.columns else np.nan
    return out.reset_index().dropna(subset=["bs_yes", "bs_no"])


def _asymmetry_row(scope: str, group: str, pairs: pd.DataFrame, **extra: Any) -> dict[str, Any]:
    p = stats.paired(pairs["abs_no"], pairs["abs_yes"])
    mean_yes, mean_no = float(pairs["bs_yes"].mean()), float(pairs["bs_no"].mean())
    # `ratio` compares magnitudes: each side is taken with its mean's sign, so the
    # interval is of |mean no| / |mean yes| (given those signs)
    sign_no, sign_yes = (np.sign(m) or 1.0 for m in (mean_no, mean_yes))
    _, r_lo, r_hi = stats.fieller_ratio(sign_no * pairs["bs_no"], sign_yes * pairs["bs_yes"])
    _, a_lo, a_hi = stats.fieller_ratio(pairs["abs_no"], pairs["abs_yes"])
    return {
        "scope": scope,
        "group": group,
        **extra,
        "n_pairs": p["n"],
        "mean_bs_yes": mean_yes,
        "mean_bs_no": mean_no,
        "ratio": stats.ratio(mean_no, mean_yes),
        "ratio_ci_low": r_lo,
        "ratio_ci_high": r_hi,
        "mean_abs_yes": p["mean_b"],
        "mean_abs_no": p["mean_a"],
        "ratio_abs": stats.ratio(p["mean_a"], p["mean_b"]),
        "ratio_abs_ci_low": a_lo,
        "ratio_abs_ci_high": a_hi,
        "t": p["t"],
        "p": p["p"],
        # d_z = t / sqrt(n), with the exact interval of a one-sample d of the pair differences:
        # the asymmetry's size without its n, which t alone grows with.
        "d_z": p["d_z"],
        **dict(zip(("d_z_ci_low", "d_z_ci_high"), stats.d_interval(p["d_z"], p["n"]))),
    }


@by_method
def asymmetry_table(bs: pd.DataFrame) -> pd.DataFrame:
    """Negativity asymmetry |BS(no-sat)| / |BS(yes-sat)|, paired per item (mean over its k's first)."""
    rows = []
    for scope, group, part in _scopes(main_rows(bs), ("model", "k")):
        share = float(part["prevailing_share"].iloc[0]) if scope == "k" and "prevailing_share" in part else np.nan
        rows.append({**_asymmetry_row(scope, group, polarity_pairs(part, UNIT)), "prevailing_share": share})
    return pd.DataFrame(rows)


def _shares_by_k(part: pd.DataFrame) -> str:
    """The realised share of prevailing turns at each k ("5:0.80 50:0.80"): a share that
    differs between lengths would confound share with length."""
    if "prevailing_share" not in part or not len(part):
        return ""
    shares = part.groupby("k", sort=True)["prevailing_share"].first()
    return " ".join(f"{int(k)}:{s:.2f}" for k, s in shares.items())


@by_method
def length_table(bs: pd.DataFrame) -> pd.DataFrame:
    """Spearman rho and OLS slope of BS on k (cluster-robust SE by item): overall, by model, by polarity."""
    df = main_rows(bs)
    rows = []
    for scope, group, part in _scopes(df, ("model", "polarity")):
        rho, rho_p = stats.spearman(part["k"], part["bs"])
        unit = part[UNIT].astype(str).agg("|".join, axis=1) if len(part) else []
        fit = stats.ols_slope(part["k"], part["bs"], groups=unit)
        rows.append(
            {
                "scope": scope,
                "group": group,
                "n": fit["n"],
                "n_items": int(part[UNIT].drop_duplicates().shape[0]),
                "k_values": " ".join(str(int(k)) for k in sorted(part["k"].unique())),
                "prevailing_share_by_k": _shares_by_k(part),
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


@by_method
def position_table(bs: pd.DataFrame) -> pd.DataFrame:
    """BS of the biased block at each position (item means), and a repeated-measures ANOVA
    across positions (each item is asked at every position: ``n`` counts the items with all)."""
    df = position_rows(bs)
    rows = []
    for scope, group, part in _scopes(df, ("model", "polarity")):
        present = [p for p in POSITIONS if (part["position"] == p).any()]
        for pos in present:
            rows.append({**_effect_row(scope, group, part[part["position"] == pos], position=pos), "F": np.nan,
                         "test": "one-sample t"})
        means = item_means(part, by=["position"])
        wide = means.pivot_table(index=UNIT, columns="position", values="bs").reindex(columns=present)
        rm = stats.rm_anova(wide.to_numpy())
        rows.append(
            {
                "scope": scope,
                "group": group,
                "position": "ANOVA",
                "n": rm["n"],
                "n_rows": int(part["bs"].notna().sum()),
                "mean_bs": np.nan,
                "ci_low": np.nan,
                "ci_high": np.nan,
                "d": np.nan,
                "t": np.nan,
                "p": rm["p"],
                "F": rm["F"],
                "test": f"repeated-measures ANOVA, F({rm['df_num']:g}, {rm['df_den']:g})",
            }
        )
    return pd.DataFrame(rows)


@by_method
def framing_table(bs: pd.DataFrame, framing_history_lengths: Iterable[int]) -> pd.DataFrame:
    """Negativity asymmetry in the standard and the swapped framing, and their difference (per item)."""
    ks = [int(k) for k in framing_history_lengths]
    df = bs[bs["position"].isna() & bs["k"].isin(ks) & bs["condition"].isin(["yes_saturated", "no_saturated"])]
    rows = []
    for scope, group, part in _scopes(df, ("model",)):
        pairs = polarity_pairs(part, UNIT + ["framing"])
        pairs["asym"] = pairs["abs_no"] - pairs["abs_yes"]
        for framing in ("standard", "swapped"):
            sel = pairs[pairs["framing"] == framing]
            row = _asymmetry_row(scope, group, sel, framing=framing)
            row["asym"] = float(sel["asym"].mean()) if len(sel) else np.nan
            row["test"] = "paired t |BS no| vs |BS yes|"
            rows.append(row)
        both = pairs.pivot_table(index=UNIT, columns="framing", values="asym") if len(pairs) else pd.DataFrame()
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
    cols = ["scope", "group", "framing", "n_pairs", "mean_bs_yes", "mean_bs_no", "ratio", "ratio_ci_low",
            "ratio_ci_high", "mean_abs_yes", "mean_abs_no", "ratio_abs", "ratio_abs_ci_low", "ratio_abs_ci_high",
            "asym", "t", "p", "test"]
    return pd.DataFrame(rows).reindex(columns=cols)


@by_method
def congruence_table(bs: pd.DataFrame) -> pd.DataFrame:
    """BS for items whose correct (or baseline) verdict matches the history's polarity, vs the rest."""
    df = main_rows(bs)
    rows = []
    for basis, col in (("truth", "congruent"), ("baseline verdict", "baseline_congruent")):
        for scope, group, part in _scopes(df, ("model", "polarity")):
            flag = part[col].astype(bool)
            for value, label in ((True, "congruent"), (False, "incongruent")):
                rows.append(
                    {
                        **_effect_row(scope, group, part[flag == value], basis=basis, items=label),
                        "test": "one-sample t",
                    }
                )
            rows.append(_congruence_difference(scope, group, part, flag, basis=basis,
                                               items="congruent - incongruent"))
    return pd.DataFrame(rows)


def _congruence_difference(scope: str, group: str, part: pd.DataFrame, flag: pd.Series,
                           **labels: Any) -> dict[str, Any]:
    """Congruent minus incongruent BS. With both polarities in the scope an item has a
    congruent and an incongruent cell, so the comparison is within item (paired t of its
    two means over the items with both); with one polarity an item is one or the other,
    and different items are compared (Welch)."""
    if part["polarity"].nunique() < 2:
        return _welch_row(scope, group, _welch_items(part[flag], part[~flag]), **labels)
    a = item_means(part[flag]).set_index(UNIT)["bs"]
    b = item_means(part[~flag]).set_index(UNIT)["bs"]
    both = a.to_frame("a").join(b.to_frame("b"), how="inner")
    p = stats.paired(both["a"], both["b"])
    return {"scope": scope, "group": group, **labels, "n": p["n"], "mean_bs": p["diff"], "ci_low": np.nan,
            "ci_high": np.nan, "d": p["d_z"], "t": p["t"], "p": p["p"], "test": "paired t (per item)"}


@by_method
def balanced_table(bs: pd.DataFrame) -> pd.DataFrame:
    """Balanced histories (the seed's mitigation): the shift of P(Yes) from the baseline, and
    |shift| against the same items' mean |BS| after saturated histories of the same k (paired per item)."""
    bal = balanced_rows(bs)
    ks = sorted(int(k) for k in bal["k"].unique())
    sat = main_rows(bs)
    both = pd.concat([bal, sat[sat["k"].isin(ks)]], ignore_index=True)
    rows = []
    for scope, group, part in _scopes(both, ("model", "k")):
        b = part[part["condition"] == "balanced"]
        shift = unit_values(b, "shift")
        s = stats.one_sample(shift["shift"])
        absb = item_means(b.assign(abs_shift=b["shift"].abs()), "abs_shift")
        sat_part = part[part["condition"] != "balanced"]
        abss = item_means(sat_part.assign(abs_bs=sat_part["bs"].abs()), "abs_bs")
        pairs = absb.merge(abss, on=UNIT, how="inner")
        p = stats.paired(pairs["abs_shift"], pairs["abs_bs"])
        rows.append(
            {
                "scope": scope,
                "group": group,
                "n": s["n"],
                "mean_shift": s["mean"],
                "ci_low": s["ci_low"],
                "ci_high": s["ci_high"],
                "t": s["t"],
                "p": s["p"],
                "n_pairs": p["n"],
                "mean_abs_shift": p["mean_a"],
                "mean_abs_bs_saturated": p["mean_b"],
                "diff": p["diff"],
                "t_diff": p["t"],
                "p_diff": p["p"],
            }
        )
    return pd.DataFrame(rows)


def size_order(bs: pd.DataFrame) -> pd.DataFrame:
    """Roster models per provider with their size rank (1 = smallest): by ``params_b`` where
    known, else by their order in the config's model list (smallest first)."""
    models = _roster(bs).drop_duplicates("model")
    cols = ["model", "provider", "display_name", "params_b", "list_rank"]
    models = models[[c for c in cols if c in models]].copy()
    if "list_rank" not in models:
        models["list_rank"] = range(len(models))
    models = models.sort_values(["provider", "params_b", "list_rank"], na_position="last", kind="stable")
    models["size_rank"] = models.groupby("provider").cumcount() + 1
    models["n_models"] = models.groupby("provider")["model"].transform("count")
    return models.reset_index(drop=True)


@by_method
def scaling_table(bs: pd.DataFrame) -> pd.DataFrame:
    """Within-provider scaling (seed Figure 14): each roster model's mean BS and |d| in its provider's
    size order, and per provider the largest minus the smallest model, paired per item."""
    df = main_rows(bs)
    rows = []
    for prov in size_order(df).groupby("provider", sort=True):
        provider, models = prov
        for m in models.itertuples():
            part = df[df["model"] == m.model]
            row = _effect_row("model", m.model, part, provider=provider, size_rank=int(m.size_rank),
                              n_models=int(m.n_models))
            row["abs_d"] = abs(row["d"])
            rows.append(row)
        if len(models) >= 2:
            small, large = models["model"].iloc[0], models["model"].iloc[-1]
            a = item_means(df[df["model"] == large]).drop(columns="model")
            b = item_means(df[df["model"] == small]).drop(columns="model")
            pairs = a.merge(b, on=["domain", "item_id"], suffixes=("_large", "_small"))
            p = stats.paired(pairs["bs_large"], pairs["bs_small"])
            rows.append({"scope": "provider", "group": provider, "provider": provider, "size_rank": np.nan,
                         "n_models": len(models), "n": p["n"], "mean_bs": p["diff"], "d": p["d_z"], "t": p["t"],
                         "p": p["p"], "contrast": f"{large} - {small}"})
    cols = ["scope", "group", "provider", "size_rank", "n_models", "n", "n_rows", "mean_bs", "ci_low", "ci_high",
            "d", "d_ci_low", "d_ci_high", "abs_d", "t", "p", "contrast"]
    return pd.DataFrame(rows).reindex(columns=cols)


def probabilities_table(probs: pd.DataFrame) -> pd.DataFrame:
    """Mean P(Yes) per method x model x cell type (the secondary, first-token analysis is the seed's
    logprobs figure), with the saturation share of the cell."""
    df = probs.assign(position=probs["position"].fillna("-"))
    order = {m: i for i, m in enumerate(METHOD_ORDER)}
    grouped = df.groupby(["method", "model", "framing", "condition", "k", "position"], sort=True)
    out = grouped.agg(
        n=("p_yes", lambda s: int(s.notna().sum())),
        mean_p_yes=("p_yes", "mean"),
        sd_p_yes=("p_yes", "std"),
        mean_yes_no_mass=("yes_no_mass", "mean"),
        n_missing=("p_yes", lambda s: int(s.isna().sum())),
        prevailing_share=("prevailing_share", "first"),
    ).reset_index()
    out = out.sort_values("method", key=lambda m: m.map(order).fillna(len(order)), kind="stable")
    return out.reset_index(drop=True)
