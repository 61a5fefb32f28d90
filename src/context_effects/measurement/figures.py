"""Seed 002's model-based figures: forest plots of Table 3 and Table 4.

* ``eta_forest`` — the recalibrated total Round-2 condition shifts η (All-Correct,
  All-Wrong, Mixed) and the harmful-beneficial asymmetry Asym_total of every generator,
  one panel per dataset, from the main fits (Table 3's cells);
* ``gamma_forest`` — every judge's peer-context loading γ_j, one panel per dataset, one
  row per judge: the open-weight panel from the main fit, each hosted judge from its own
  five-judge refit (table4_by_dataset's rows; Table 4 prints the primary dataset's).

Both read exactly what the tables read (each fit's ``summary.csv`` and
``diagnostics.json``, never draws) and plot posterior means with the summary's 95%
interval columns at full precision; the DataFrame they return (the figure's CSV) holds
those summary values unrounded. A fit that fails the configured diagnostics thresholds is
drawn with hollow markers and named in the legend; a demo or synthetic run carries its
caveat under the figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from context_effects import style as look
from context_effects.measurement.pipeline import fit_dir, specs_for
from context_effects.measurement.report import (
    CONDITION_LABELS,
    DATASET_LABELS,
    TABLE3_CONDITIONS,
    FitResult,
    _spec,
    load_fit,
)
from context_effects.measurement.records import expected_for

#: Table 3's quantities in its column order: (block, condition, label).
ETA_QUANTITIES = tuple(("total_shift", c, CONDITION_LABELS[c]) for c in TABLE3_CONDITIONS) + (
    ("asym_total", None, "Asym_total"),
)
ETA_STYLE = {
    "All-Correct": {"color": "#1b7837", "marker": "o"},
    "All-Wrong": {"color": "#b2182b", "marker": "o"},
    "Mixed": {"color": "#2166ac", "marker": "o"},
    "Asym_total": {"color": "0.15", "marker": "D"},
}
OPEN_PANEL = "open-weight panel"
HOSTED_PANEL = "hosted API judge (own five-judge refit)"
GAMMA_STYLE = {
    OPEN_PANEL: {"color": "#2166ac", "marker": "o", "legend": "open-weight judge (main fit)"},
    HOSTED_PANEL: {"color": "#b35806", "marker": "s", "legend": "hosted judge (own five-judge refit)"},
}
FAILED_LEGEND = "hollow: fit failed diagnostics (Table 9)"
FAILED_NOTE = ("Hollow markers: the fit failed the configured convergence thresholds (Table 9); "
               "its intervals are not reliable.")
WIDTH_IN = look.FULL_WIDTH
#: Interval columns a summary may hold, in order of preference (``measurement.fit.summarize``
#: writes equal-tailed quantiles; ArviZ-style summaries hold HDI bounds).
INTERVAL_COLUMNS = (("q2.5", "q97.5"), ("hdi_2.5%", "hdi_97.5%"), ("hdi_3%", "hdi_97%"))


def interval_columns(columns: Sequence[str]) -> tuple[str, str]:
    """The lower and upper interval columns of a fit summary (or of a figure's data)."""
    for lo, hi in INTERVAL_COLUMNS:
        if lo in columns and hi in columns:
            return lo, hi
    raise KeyError(f"no 95% interval columns in {list(columns)}; expected one of {INTERVAL_COLUMNS}")


# ----------------------------------------------------------------------------- loading


def _fit_folder(spec, paths: Sequence[str | Path]) -> Path:
    """The folder of ``spec``'s fit among the rule's input paths (the summary whose path
    ends in the fit's directory), else the fit's directory relative to the working directory."""
    suffix = f"{fit_dir(spec)}/summary.csv"
    for p in paths:
        text = Path(p).as_posix()
        if text == suffix or text.endswith("/" + suffix):
            return Path(p).parent
    return Path(fit_dir(spec))


def load_results(paths: Sequence[str | Path], settings: Mapping[str, Any]) -> dict[tuple[str, str], FitResult]:
    """Every fit of ``settings["fits"]`` (what ``report.table_settings`` gives), read from its folder."""
    results = {}
    for d in settings["fits"]:
        spec = _spec(d)
        results[(spec.dataset, spec.variant)] = load_fit(spec, _fit_folder(spec, paths), settings["thresholds"],
                                                         expected_for(settings["made_with"], spec))
    return results


def _values(row: pd.Series) -> dict[str, Any]:
    """The summary row's estimate columns, under the summary's own names, unrounded."""
    lo, hi = interval_columns(list(row.index))
    keep = ["mean", "sd", lo, hi, "pr_gt0", "rhat", "ess_bulk", "ess_tail"]
    return {k: row[k] for k in keep if k in row.index}


def _plan(settings: Mapping[str, Any]):
    return [_spec(d) for d in settings["fits"]]


def _name(settings: Mapping[str, Any], model: str) -> str:
    return settings["display_names"].get(model, model)


# ----------------------------------------------------------------------------- data


def eta_forest_data(results: Mapping[tuple[str, str], FitResult], settings: Mapping[str, Any]) -> pd.DataFrame:
    """Table 3's cells, one row per dataset × generator × quantity, with the summary's values."""
    rows = []
    for spec in specs_for(_plan(settings), kind="main"):
        res = results[(spec.dataset, spec.variant)]
        for g in settings["generators"]:
            for block, condition, label in ETA_QUANTITIES:
                r = (res.row(block, generator=g, condition=condition) if condition is not None
                     else res.row(block, generator=g))
                if r is None:
                    continue
                rows.append({
                    "dataset": spec.dataset,
                    "dataset_label": DATASET_LABELS.get(spec.dataset, spec.dataset),
                    "generator": g,
                    "generator_label": _name(settings, g),
                    "quantity": label,
                    "block": block,
                    "condition": condition or "",
                    **_values(r),
                    "fit": spec.variant,
                    "diagnostics": res.status,
                })
    return pd.DataFrame(rows)


def gamma_forest_data(results: Mapping[tuple[str, str], FitResult], settings: Mapping[str, Any]) -> pd.DataFrame:
    """Table 4's rows: every open-weight judge of each main fit, every hosted judge of its refit."""
    rows = []
    plan = _plan(settings)
    entries = [(s, j, OPEN_PANEL) for s in specs_for(plan, kind="main") for j in s.judges]
    entries += [(s, s.hosted_judge, HOSTED_PANEL) for s in specs_for(plan, kind="hosted")]
    for spec, judge, panel in entries:
        res = results[(spec.dataset, spec.variant)]
        r = res.row("gamma", judge=judge)
        if r is None:
            continue
        rows.append({
            "dataset": spec.dataset,
            "dataset_label": DATASET_LABELS.get(spec.dataset, spec.dataset),
            "panel": panel,
            "judge": judge,
            "judge_label": _name(settings, judge),
            **_values(r),
            "fit": spec.variant,
            "diagnostics": res.status,
        })
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- drawing


def _datasets(settings: Mapping[str, Any], data: pd.DataFrame) -> list[str]:
    present = set(data["dataset"]) if len(data) else set()
    return [d for d in settings["datasets"] if d in present]


def _empty_figure(message: str, notes: Sequence[str]):
    fig, ax = look.figure(WIDTH_IN, 1.6)
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center")
    look.place_caveat(fig, notes)
    return fig


def _forest(data: pd.DataFrame, datasets: Sequence[str], rows: Sequence[tuple[Any, str]], row_key,
            series: Sequence[str], series_of, style: Mapping[str, Mapping[str, Any]], xlabel: str,
            notes: Sequence[str], legend_labels: Mapping[str, str] | None = None, dodge: bool = True,
            row_height: float = 0.42):
    """One panel per dataset (shared axes), one y row per ``rows`` entry (key, tick label),
    and within a row one point-and-interval per series (offset from each other if ``dodge``)."""
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    lo, hi = interval_columns(list(data.columns))
    n_rows = len(rows)
    height = 1.2 + row_height * n_rows
    # A point-range plot stays Matplotlib errorbar: the intervals are the summary's own
    # quantiles, which seaborn's estimators would recompute from draws we do not read.
    fig, axes = look.figure(WIDTH_IN, height, ncols=len(datasets), sharex=True, sharey=True, squeeze=False)
    axes = axes[0]
    if dodge and len(series) > 1:
        offsets = dict(zip(series, np.linspace(-0.3, 0.3, len(series))))
    else:
        offsets = dict.fromkeys(series, 0.0)
    index = {key: i for i, (key, _) in enumerate(rows)}
    any_failed = False
    for ax, dataset in zip(axes, datasets):
        part = data[data["dataset"] == dataset]
        for _, r in part.iterrows():
            s = series_of(r)
            y = index[row_key(r)] + offsets[s]
            failed = r["diagnostics"] != "ok"
            any_failed |= failed
            st = style[s]
            ax.errorbar(r["mean"], y, xerr=[[r["mean"] - r[lo]], [r[hi] - r["mean"]]], fmt="none",
                        ecolor=st["color"], elinewidth=1.0, capsize=0, zorder=2)
            ax.plot(r["mean"], y, linestyle="none", marker=st["marker"], markersize=4.2,
                    markeredgecolor=st["color"], markeredgewidth=1.0,
                    markerfacecolor="white" if failed else st["color"], zorder=3)
        ax.axvline(0.0, color="0.35", lw=0.8, ls="--", zorder=1)
        for i in range(n_rows - 1):
            ax.axhline(i + 0.5, color="0.88", lw=0.6, zorder=0)
        ax.set_title(DATASET_LABELS.get(dataset, dataset))
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
    axes[0].set_yticks(range(n_rows), [label for _, label in rows])
    axes[0].set_ylim(n_rows - 0.5, -0.5)
    fig.supxlabel(xlabel)
    look.despine(fig)
    present = [s for s in series if (data.apply(series_of, axis=1) == s).any()] if len(data) else []
    labels = legend_labels or {}
    handles = [Line2D([], [], linestyle="-", color=style[s]["color"], marker=style[s]["marker"], markersize=4.2,
                      lw=1.0, label=labels.get(s, s)) for s in present]
    if any_failed:
        handles.append(Line2D([], [], linestyle="none", marker="o", markersize=4.2, markerfacecolor="white",
                              markeredgecolor="0.3", label=FAILED_LEGEND))
    _legend(fig, handles)
    look.place_caveat(fig, ([FAILED_NOTE] if any_failed else []) + list(notes))
    return fig


def _legend(fig, handles) -> None:
    """One legend above the panels, in as few rows as the figure's width allows."""
    for ncol in range(len(handles), 0, -1):
        legend = fig.legend(handles=handles, loc="outside upper center", ncol=ncol, frameon=False,
                            handletextpad=0.4, columnspacing=1.2)
        fig.canvas.draw()
        if ncol == 1 or legend.get_window_extent().width <= 0.98 * fig.bbox.width:
            return
        legend.remove()


def plot_eta_forest(data: pd.DataFrame, settings: Mapping[str, Any], notes: Sequence[str] = ()):
    datasets = _datasets(settings, data)
    if not datasets:
        return _empty_figure("Total condition shifts: not estimated (no main-corpus fit in this run).", notes)
    gens = [g for g in settings["generators"] if (data["generator"] == g).any()]
    rows = [(g, _name(settings, g)) for g in gens]
    series = [label for _, _, label in ETA_QUANTITIES]
    return _forest(data, datasets, rows, lambda r: r["generator"], series, lambda r: r["quantity"], ETA_STYLE,
                   r"Total Round-2 shift $\eta$ and Asym$_\mathrm{total}$ (latent quality scale): posterior mean, "
                   "95% credible interval", notes, legend_labels={"Asym_total": r"Asym$_\mathrm{total}$"},
                   row_height=0.5)


def plot_gamma_forest(data: pd.DataFrame, settings: Mapping[str, Any], notes: Sequence[str] = ()):
    datasets = _datasets(settings, data)
    if not datasets:
        return _empty_figure("Judge loadings: not estimated (no main-corpus fit in this run).", notes)
    keys = list(dict.fromkeys(zip(data["panel"], data["judge"])))
    keys.sort(key=lambda k: (k[0] != OPEN_PANEL,))  # open panel first, then hosted refits; stable otherwise
    rows = [(k, _name(settings, k[1]) + (" (refit)" if k[0] == HOSTED_PANEL else "")) for k in keys]
    series = [OPEN_PANEL, HOSTED_PANEL]
    return _forest(data, datasets, rows, lambda r: (r["panel"], r["judge"]), series, lambda r: r["panel"],
                   GAMMA_STYLE, r"Judge peer-context loading $\gamma_j$: posterior mean, 95% credible interval", notes,
                   legend_labels={k: v["legend"] for k, v in GAMMA_STYLE.items()}, dodge=False, row_height=0.28)


# ----------------------------------------------------------------------------- registry entry points


def eta_forest(paths: Sequence[str | Path], settings: Mapping[str, Any]):
    """The η forest plot and its data from Table 3's fits (``report.table_settings(config, "3")``)."""
    from context_effects.tables import run_notes

    data = eta_forest_data(load_results(paths, settings), settings)
    return plot_eta_forest(data, settings, run_notes(settings["run_kind"])), data


def gamma_forest(paths: Sequence[str | Path], settings: Mapping[str, Any]):
    """The γ_j forest plot and its data from table4_by_dataset's fits
    (``report.table_settings(config, "4_by_dataset")``)."""
    from context_effects.tables import run_notes

    data = gamma_forest_data(load_results(paths, settings), settings)
    return plot_gamma_forest(data, settings, run_notes(settings["run_kind"])), data
