"""AMEL figures, in the spirit of the seed paper's Figures 3-14; ``<name>_figure`` per analysis.

Each takes the analysis table (as written) and the item-level bias scores or
probabilities, and returns a matplotlib Figure; ``context_effects.amel.outputs``
registers them and ``context_effects.figures.save_figure`` writes them byte-stably.
Error bars are the tables' 95% t intervals.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from context_effects.amel import stats  # noqa: E402
from context_effects.amel.analysis import main_rows  # noqa: E402

POL_COLORS = {"yes": "#3b7dd8", "no": "#d8573b"}


def _bars(ax, rows: pd.DataFrame, title: str, value: str = "mean_bs") -> None:
    rows = rows.reset_index(drop=True)
    x = np.arange(len(rows))
    y = rows[value].to_numpy(dtype=float)
    if value == "mean_bs":
        ax.bar(x, y, color="#777")
        # CIs as plain segments: matplotlib's yerr path warns on single-bar panels.
        ax.vlines(x, rows["ci_low"].to_numpy(float), rows["ci_high"].to_numpy(float), color="black", lw=1)
        ax.axhline(0, color="black", lw=0.8)
    else:
        ax.bar(x, y, color="#777")
    ax.set_xticks(x, rows["group"], rotation=30, ha="right", fontsize=8)
    ax.set_title(title, fontsize=9)


def _note(fig, note: str) -> None:
    if note:
        fig.text(0.01, -0.02, note, fontsize=6, ha="left", va="top", wrap=True)


def effects_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
    _bars(axes[0], table[table["scope"] == "model"], "Mean BS by model (negative = conforming)")
    _bars(axes[1], table[table["scope"] == "domain"], "Mean BS by domain")
    models = table[table["scope"] == "model"].copy()
    models["abs_d"] = models["d"].abs()
    models = models.sort_values(["provider", "params_b", "group"], na_position="last")
    models["group"] = models["provider"].astype(str) + ": " + models["group"]
    _bars(axes[2], models, "|Cohen's d| by provider and size", value="abs_d")
    axes[0].set_ylabel("bias score")
    _note(fig, note)
    return fig


def entropy_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = "",
                   entropy_threshold_bits: float | None = None):
    df = main_rows(bs)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for pol, part in df.groupby("polarity"):
        axes[0].scatter(part["baseline_entropy"], part["bs"], s=8, alpha=0.5, color=POL_COLORS.get(pol), label=f"{pol}-saturated")
    if entropy_threshold_bits is not None:
        axes[0].axvline(entropy_threshold_bits, color="grey", ls="--", lw=0.8)
    axes[0].axhline(0, color="black", lw=0.8)
    axes[0].set_xlabel("baseline entropy (bits)")
    axes[0].set_ylabel("bias score")
    axes[0].legend(fontsize=7)
    rows = table[(table["scope"] == "overall") & table["stratum"].isin(["deterministic", "uncertain"])]
    _bars(axes[1], rows.assign(group=rows["stratum"]), "Mean BS by baseline stratum")
    _note(fig, note)
    return fig


def asymmetry_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    rows = table[table["scope"].isin(["overall", "model"])].reset_index(drop=True)
    fig, ax = plt.subplots(figsize=(6, 3.6))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, rows["mean_abs_yes"], 0.4, color=POL_COLORS["yes"], label="|BS| yes-saturated")
    ax.bar(x + 0.2, rows["mean_abs_no"], 0.4, color=POL_COLORS["no"], label="|BS| no-saturated")
    for xi, r in zip(x, rows["ratio_abs"]):
        if np.isfinite(r):
            ax.text(xi, 0, f"{r:.2f}x", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, rows["group"], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("mean |bias score|")
    ax.set_title("Polarity asymmetry (ratio no/yes)", fontsize=9)
    ax.legend(fontsize=7)
    _note(fig, note)
    return fig


def _mean_lines(ax, df: pd.DataFrame, x: str, order=None) -> None:
    for pol, part in df.groupby("polarity"):
        levels = order or sorted(part[x].unique())
        m = [stats.mean_ci(part.loc[part[x] == v, "bs"]) for v in levels]
        y = np.array([v[0] for v in m])
        err = np.nan_to_num(np.array([[v[0] - v[1], v[2] - v[0]] for v in m]).T)
        pos = np.arange(len(levels)) if order else np.asarray(levels, dtype=float)
        ax.errorbar(pos, y, yerr=err, marker="o", capsize=3, color=POL_COLORS.get(pol), label=f"{pol}-saturated")
        if order:
            ax.set_xticks(np.arange(len(levels)), levels)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_ylabel("mean bias score")
    ax.legend(fontsize=7)


def length_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    fig, ax = plt.subplots(figsize=(5, 3.6))
    _mean_lines(ax, main_rows(bs), "k")
    overall = table[table["scope"] == "overall"].iloc[0]
    ax.set_title(f"BS by history length k (rho = {overall['rho']:.3f}, slope p = {overall['slope_p']:.2g})", fontsize=9)
    ax.set_xlabel("prior turns k")
    _note(fig, note)
    return fig


def position_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    df = bs[(bs["framing"] == "standard") & bs["position"].notna()]
    fig, ax = plt.subplots(figsize=(5, 3.6))
    order = [p for p in ("start", "middle", "end") if (df["position"] == p).any()]
    _mean_lines(ax, df, "position", order=order)
    an = table[(table["scope"] == "overall") & (table["position"] == "ANOVA")]
    p = float(an["p"].iloc[0]) if len(an) else float("nan")
    ax.set_title(f"BS by position of the biased turns (ANOVA p = {p:.2g})", fontsize=9)
    _note(fig, note)
    return fig


def framing_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    rows = table[table["framing"].isin(["standard", "swapped"])]
    groups = list(dict.fromkeys(rows["group"]))
    fig, ax = plt.subplots(figsize=(6, 3.6))
    x = np.arange(len(groups))
    for off, framing, color in ((-0.2, "standard", "#555"), (0.2, "swapped", "#bbb")):
        vals = [rows.loc[(rows["group"] == g) & (rows["framing"] == framing), "ratio_abs"].astype(float).mean() for g in groups]
        ax.bar(x + off, vals, 0.4, color=color, label=framing)
    ax.axhline(1, color="black", lw=0.8, ls="--")
    ax.set_xticks(x, groups, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("|BS no| / |BS yes|")
    ax.set_title("Asymmetry ratio under the framing swap", fontsize=9)
    ax.legend(fontsize=7)
    _note(fig, note)
    return fig


def congruence_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, basis in zip(axes, ("truth", "baseline verdict")):
        rows = table[(table["basis"] == basis) & (table["scope"] == "polarity") & table["items"].isin(["congruent", "incongruent"])]
        rows = rows.assign(group=rows["group"] + "-sat, " + rows["items"])
        _bars(ax, rows, f"Congruence by {basis}")
    axes[0].set_ylabel("mean bias score")
    _note(fig, note)
    return fig


def probabilities_figure(table: pd.DataFrame, probs: pd.DataFrame, note: str = ""):
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    std = table[(table["framing"] == "standard") & (table["position"] == "-")]
    for model, part in std.groupby("model"):
        labels = [("baseline" if c == "baseline" else f"{c.split('_')[0]} k={k}") for c, k in zip(part["condition"], part["k"])]
        axes[0].plot(labels, part["mean_p_yes"], marker="o", label=model)
    axes[0].tick_params(axis="x", rotation=45, labelsize=7)
    axes[0].set_ylabel("mean P(Yes)")
    axes[0].set_title("(a) Mean first-token / sampled P(Yes) by condition", fontsize=9)
    axes[0].legend(fontsize=7)
    p = probs[(probs["framing"] == "standard") & probs["position"].isna()]
    base = p[p["condition"] == "baseline"][["model", "item_id", "p_yes"]].rename(columns={"p_yes": "base"})
    tr = p[p["condition"] != "baseline"].merge(base, on=["model", "item_id"])
    for cond, part in tr.groupby("condition"):
        axes[1].scatter(part["base"], part["p_yes"], s=8, alpha=0.5, color=POL_COLORS[cond.split("_")[0]], label=cond)
    axes[1].plot([0, 1], [0, 1], color="black", lw=0.8)
    axes[1].set_xlabel("P(Yes) at baseline")
    axes[1].set_ylabel("P(Yes) after history")
    axes[1].set_title("(b) Per-item shift", fontsize=9)
    axes[1].legend(fontsize=7)
    _note(fig, note)
    return fig
