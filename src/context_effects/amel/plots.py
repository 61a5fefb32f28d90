"""AMEL figures, in the spirit of the seed paper's Figures 3-14; ``<name>_figure`` per analysis.

Each takes the analysis table (as written) and the item-level bias scores or
probabilities, and returns a matplotlib Figure; ``context_effects.amel.outputs``
registers them and ``context_effects.figures.save_figure`` writes them byte-stably.
Bars and points are drawn by seaborn in the shared style (``context_effects.style``).
Error bars are the tables' 95% t intervals (``stats.mean_ci``), never seaborn's own
bootstrap, so a figure and its table show the same interval.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from context_effects import style  # noqa: E402
from context_effects.amel import stats  # noqa: E402
from context_effects.amel.analysis import main_rows  # noqa: E402

POL_COLORS = style.POLARITY_COLORS
FRAMING_COLORS = {"standard": "0.35", "swapped": "0.75"}
METHOD_LABEL = {"single_call": "one call per cell (primary, the seed's design)",
                "samples": "P(Yes) from all samples (secondary)",
                "first_token": "first-token probabilities (secondary)"}


def one_method(name: str, table: pd.DataFrame, data: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, str | None]:
    """The table and rows of the one method a figure draws: the primary (single_call),
    except the probabilities figure (the seed's logprobs figure), which prefers first-token
    rows, then the sampled P(Yes), then the single calls."""
    if "method" not in data:
        return table, data, None
    present = set(data["method"].dropna())
    prefer = (("first_token", "samples", "single_call") if name == "probabilities"
              else ("single_call", "samples", "first_token"))
    method = next((m for m in prefer if m in present), None)
    if method is None:
        return table, data, None
    if "method" in table:
        table = table[table["method"] == method].reset_index(drop=True)
    return table, data[data["method"] == method].reset_index(drop=True), method


def _history(polarity: str) -> str:
    return f"{polarity}-saturated"


def _history_palette() -> dict[str, str]:
    return {_history(p): c for p, c in POL_COLORS.items()}


def _no_data(ax, title: str) -> None:
    ax.text(0.5, 0.5, "no rows", ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_title(title)


def _tick_labels(ax, labels, rotate: bool = True) -> None:
    ax.set_xticks(np.arange(len(labels)), labels, rotation=30 if rotate else 0, ha="right" if rotate else "center",
                  rotation_mode="anchor" if rotate else "default")


def _bars(ax, rows: pd.DataFrame, title: str, value: str = "mean_bs") -> None:
    import seaborn as sns

    rows = rows.reset_index(drop=True)
    if not len(rows):
        _no_data(ax, title)
        return
    x = np.arange(len(rows))
    y = rows[value].to_numpy(dtype=float)
    # Positions, not labels, on x: two rows may share a label and must stay two bars.
    sns.barplot(x=x, y=y, color=style.NEUTRAL, errorbar=None, ax=ax, width=0.7, saturation=1)
    if value == "mean_bs":
        # CIs as plain segments: matplotlib's yerr path warns on single-bar panels.
        ax.vlines(x, rows["ci_low"].to_numpy(float), rows["ci_high"].to_numpy(float), color="0.1", lw=1.0, zorder=3)
        ax.axhline(0, **style.REFERENCE_LINE)
    _tick_labels(ax, rows["group"].astype(str).tolist())
    pad = max(0.0, (3 - len(rows)) / 2)  # keeps one or two bars from filling the panel
    ax.set_xlim(-0.5 - pad, len(rows) - 0.5 + pad)
    ax.set_xlabel("")
    ax.set_title(title)


def _legend_above(fig, ax) -> None:
    """The axes' legend moved above the panel, in one row, clear of bars and their labels."""
    legend = ax.get_legend()
    if legend is None:
        return
    handles, labels = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
    legend.remove()
    fig.legend(handles, labels, loc="outside upper center", ncol=len(labels), title=None)


def _note(fig, note: str) -> None:
    style.despine(fig)
    style.place_caveat(fig, [note])


def _mark_extras(rows: pd.DataFrame) -> pd.DataFrame:
    if "extra_model" not in rows:
        return rows
    extra = rows["extra_model"].astype(bool)
    return rows.assign(group=np.where(extra, rows["group"].astype(str) + " (extra)", rows["group"].astype(str)))


def effects_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    fig, axes = style.figure(style.FULL_WIDTH, 2.8, ncols=3)
    _bars(axes[0], _mark_extras(table[table["scope"] == "model"]), "Mean BS by model\n(negative = conforming)")
    _bars(axes[1], table[table["scope"] == "domain"], "Mean BS by domain")
    models = table[table["scope"] == "model"].copy()
    models["abs_d"] = models["d"].abs()
    models = models.sort_values(["provider", "params_b", "group"], na_position="last")
    models["group"] = models["provider"].astype(str) + ": " + models["group"]
    _bars(axes[2], models, "|Cohen's d| by\nprovider and size", value="abs_d")
    axes[0].set_ylabel("bias score")
    _note(fig, note)
    return fig


def entropy_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = "",
                   entropy_threshold_bits: float | None = None):
    import seaborn as sns

    df = main_rows(bs)
    df = df.assign(history=df["polarity"].map(_history))
    fig, axes = style.figure(style.FULL_WIDTH, 2.6, ncols=2, width_ratios=(3, 2))
    palette = _history_palette()
    sns.scatterplot(data=df, x="baseline_entropy", y="bs", hue="history",
                    hue_order=[h for h in palette if (df["history"] == h).any()], palette=palette, s=8, alpha=0.5,
                    linewidth=0, ax=axes[0])
    if entropy_threshold_bits is not None:
        axes[0].axvline(entropy_threshold_bits, color="0.5", ls="--", lw=0.8)
    axes[0].axhline(0, **style.REFERENCE_LINE)
    axes[0].set_xlabel("baseline entropy (bits)")
    axes[0].set_ylabel("bias score")
    if axes[0].get_legend() is not None:
        axes[0].legend(title=None, markerscale=1.5)
    rows = table[(table["scope"] == "overall") & table["stratum"].isin(["deterministic", "uncertain"])]
    _bars(axes[1], rows.assign(group=rows["stratum"]), "Mean BS by baseline stratum")
    _note(fig, note)
    return fig


def asymmetry_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    import seaborn as sns

    rows = table[table["scope"].isin(["overall", "model"])].reset_index(drop=True)
    groups = rows["group"].astype(str).tolist()
    fig, ax = style.figure(style.width_for(len(groups), per_group=0.6), style.PANEL_HEIGHT + 0.3)
    long = pd.concat([
        pd.DataFrame({"x": np.arange(len(rows)), "value": rows["mean_abs_yes"].astype(float), "history": "yes"}),
        pd.DataFrame({"x": np.arange(len(rows)), "value": rows["mean_abs_no"].astype(float), "history": "no"}),
    ], ignore_index=True)
    long["history"] = "|BS| " + long["history"].map(_history)
    sns.barplot(data=long, x="x", y="value", hue="history",
                palette={f"|BS| {_history(p)}": c for p, c in POL_COLORS.items()}, errorbar=None, ax=ax, width=0.8,
                saturation=1)
    tops = np.fmax(rows["mean_abs_yes"].to_numpy(float), rows["mean_abs_no"].to_numpy(float))
    for xi, (r, top) in enumerate(zip(rows["ratio_abs"].astype(float), tops)):
        if np.isfinite(r):
            ax.text(xi, top if np.isfinite(top) else 0, f"{r:.2f}x", ha="center", va="bottom",
                    fontsize=style.MIN_FONT_PT)
    ax.margins(y=0.15)
    _tick_labels(ax, groups)
    ax.set_xlabel("")
    ax.set_ylabel("mean |bias score|")
    ax.set_title("Polarity asymmetry (ratio no/yes)")
    _legend_above(fig, ax)
    _note(fig, note)
    return fig


def _t_interval(values) -> tuple[float, float]:
    _, lo, hi = stats.mean_ci(values)
    return lo, hi


def _mean_lines(ax, df: pd.DataFrame, x: str, order=None) -> None:
    """Mean bias score per level of ``x`` and polarity, with the t interval of the tables."""
    import seaborn as sns

    df = df.assign(history=df["polarity"].map(_history))
    palette = _history_palette()
    hue_order = [h for h in palette if (df["history"] == h).any()]
    if order is None:
        order = sorted(df[x].unique())
    sns.pointplot(data=df, x=x, y="bs", hue="history", hue_order=hue_order, order=order, palette=palette,
                  estimator="mean", errorbar=_t_interval, dodge=0.25 if len(hue_order) > 1 else False,
                  capsize=0.08, markersize=4, linewidth=1.0, err_kws={"linewidth": 1.0}, ax=ax)
    ax.axhline(0, **style.REFERENCE_LINE)
    ax.set_ylabel("mean bias score")
    if ax.get_legend() is not None:
        ax.legend(title=None)


def length_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    fig, ax = style.figure(style.COLUMN_WIDTH, style.PANEL_HEIGHT + 0.2)
    _mean_lines(ax, main_rows(bs), "k")
    overall = table[table["scope"] == "overall"].iloc[0]
    ax.set_title(f"BS by history length k\n(rho = {overall['rho']:.3f}, slope p = {overall['slope_p']:.2g})")
    ax.set_xlabel("prior turns k")
    _note(fig, note)
    return fig


def position_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    df = bs[(bs["framing"] == "standard") & bs["position"].notna()]
    fig, ax = style.figure(style.COLUMN_WIDTH, style.PANEL_HEIGHT + 0.2)
    order = [p for p in ("start", "middle", "end") if (df["position"] == p).any()]
    _mean_lines(ax, df, "position", order=order)
    an = table[(table["scope"] == "overall") & (table["position"] == "ANOVA")]
    p = float(an["p"].iloc[0]) if len(an) else float("nan")
    ax.set_title(f"BS by position of the biased turns\n(repeated-measures ANOVA p = {p:.2g})")
    ax.set_xlabel("position of the biased turns")
    _note(fig, note)
    return fig


def framing_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    import seaborn as sns

    rows = table[table["framing"].isin(["standard", "swapped"])].copy()
    rows["ratio_abs"] = rows["ratio_abs"].astype(float)
    groups = list(dict.fromkeys(rows["group"].astype(str)))
    rows["group"] = rows["group"].astype(str)
    fig, ax = style.figure(style.width_for(len(groups), per_group=0.6), style.PANEL_HEIGHT + 0.3)
    hue_order = [f for f in FRAMING_COLORS if (rows["framing"] == f).any()]
    # Mean over a group's rows (one per table scope), as the table pools them.
    sns.barplot(data=rows, x="group", y="ratio_abs", hue="framing", order=groups, hue_order=hue_order,
                palette=FRAMING_COLORS, estimator="mean", errorbar=None, ax=ax, width=0.8, saturation=1)
    ax.axhline(1, color="0.1", lw=0.8, ls="--")
    _tick_labels(ax, groups)
    ax.set_xlabel("")
    ax.set_ylabel("|BS no| / |BS yes|")
    ax.set_title("Asymmetry ratio under the framing swap")
    _legend_above(fig, ax)
    _note(fig, note)
    return fig


def congruence_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    fig, axes = style.figure(style.FULL_WIDTH, 2.6, ncols=2, sharey=True)
    for ax, basis in zip(axes, ("truth", "baseline verdict")):
        rows = table[(table["basis"] == basis) & (table["scope"] == "polarity") & table["items"].isin(["congruent", "incongruent"])]
        rows = rows.assign(group=rows["group"] + "-sat, " + rows["items"])
        _bars(ax, rows, f"Congruence by {basis}")
    axes[0].set_ylabel("mean bias score")
    _note(fig, note)
    return fig


def probabilities_figure(table: pd.DataFrame, probs: pd.DataFrame, note: str = ""):
    import seaborn as sns

    fig, axes = style.figure(style.FULL_WIDTH, 2.9, ncols=2)
    std = table[(table["framing"] == "standard") & (table["position"] == "-")].copy()
    std["label"] = [("baseline" if c == "baseline" else f"{c.split('_')[0]} k={k}")
                    for c, k in zip(std["condition"], std["k"])]
    std["mean_p_yes"] = std["mean_p_yes"].astype(float)
    order = list(dict.fromkeys(std["label"]))
    models = list(dict.fromkeys(std["model"]))
    sns.pointplot(data=std, x="label", y="mean_p_yes", hue="model", order=order, hue_order=models,
                  palette=style.palette(len(models)), errorbar=None, markersize=4, linewidth=1.0, ax=axes[0])
    _tick_labels(axes[0], order)
    axes[0].set_xlabel("")
    axes[0].set_ylabel("mean P(Yes)")
    axes[0].set_title("(a) Mean P(Yes) by condition")
    if axes[0].get_legend() is not None:
        axes[0].legend(title=None)
    p = probs[(probs["framing"] == "standard") & probs["position"].isna()]
    base = p[p["condition"] == "baseline"][["model", "item_id", "p_yes"]].rename(columns={"p_yes": "base"})
    tr = p[p["condition"].isin(["yes_saturated", "no_saturated"])].merge(base, on=["model", "item_id"])
    conditions = sorted(tr["condition"].unique())
    sns.scatterplot(data=tr, x="base", y="p_yes", hue="condition", hue_order=conditions,
                    palette={c: POL_COLORS[c.split("_")[0]] for c in conditions}, s=8, alpha=0.5, linewidth=0,
                    ax=axes[1])
    axes[1].plot([0, 1], [0, 1], color="0.1", lw=0.8)
    axes[1].set_xlabel("P(Yes) at baseline")
    axes[1].set_ylabel("P(Yes) after history")
    axes[1].set_title("(b) Per-item shift")
    if axes[1].get_legend() is not None:
        axes[1].legend(title=None, markerscale=1.5)
    _note(fig, note)
    return fig


def scaling_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    """|d| of each roster model in its provider's size order (seed Figure 14)."""
    rows = table[table["scope"] == "model"].copy()
    rows = rows.sort_values(["provider", "size_rank"], kind="stable")
    # A stand-in for a retired seed model is labelled with both (the seed's model first
    # words of `stands_in_for`, before its parenthesised details).
    seeds = (bs.drop_duplicates("model").set_index("model")["stands_in_for"]
             if "stands_in_for" in bs else pd.Series(dtype=object))
    rows["group"] = [
        f"{prov}: {model}" + (f"\nfor {str(seeds[model]).split(' (')[0]}" if pd.notna(seeds.get(model)) else "")
        for prov, model in zip(rows["provider"].astype(str), rows["group"].astype(str))
    ]
    fig, ax = style.figure(style.width_for(max(len(rows), 1), per_group=0.5), style.PANEL_HEIGHT + 0.4)
    _bars(ax, rows, "|Cohen's d| within each provider\n(smallest to largest)", value="abs_d")
    ax.set_ylabel("|Cohen's d|")
    _note(fig, note)
    return fig


def balanced_figure(table: pd.DataFrame, bs: pd.DataFrame, note: str = ""):
    """Mean |shift| after a balanced history beside mean |BS| after saturated ones, per k."""
    import seaborn as sns

    rows = table[table["scope"].isin(["overall", "k"])].reset_index(drop=True)
    labels = ["all k" if s == "overall" else f"k={g}" for s, g in zip(rows["scope"], rows["group"])]
    long = pd.concat([
        pd.DataFrame({"x": labels, "value": rows["mean_abs_bs_saturated"].astype(float), "history": "saturated |BS|"}),
        pd.DataFrame({"x": labels, "value": rows["mean_abs_shift"].astype(float), "history": "balanced |shift|"}),
    ], ignore_index=True)
    fig, ax = style.figure(style.COLUMN_WIDTH, style.PANEL_HEIGHT + 0.3)
    if long["value"].notna().any():
        sns.barplot(data=long, x="x", y="value", hue="history", order=list(dict.fromkeys(labels)),
                    palette={"saturated |BS|": "0.35", "balanced |shift|": "0.75"}, errorbar=None, ax=ax,
                    width=0.8, saturation=1)
        _legend_above(fig, ax)
    else:
        _no_data(ax, "")
    ax.set_xlabel("")
    ax.set_ylabel("mean absolute change")
    ax.set_title("Balanced vs saturated histories")
    _note(fig, note)
    return fig
