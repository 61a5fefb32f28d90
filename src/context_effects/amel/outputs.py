"""Study A's tables and figures: one table and one figure per analysis.

Analysis ``<name>`` is computed by ``analysis.<name>_table`` from the item-level
bias scores (or, for ``probabilities``, the per-cell probabilities) and written as
``results/tables/amel/<name>.csv/.tex``; ``plots.<name>_figure`` draws it from that
CSV and the same item-level file into ``figures/amel/<name>.pdf/.png``.
``ANALYSES`` below is the one list of analyses, with their captions and the
settings each table and figure uses besides the run kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from context_effects.amel.dag import BIAS_SCORES, PROBABILITIES, enabled
from context_effects.dag import run_kind
from context_effects.outputs import Built, FigureSpec, Registry, TableSpec

STAGE = "analysis"
STUDY = "amel"


@dataclass(frozen=True)
class Analysis:
    caption: str
    #: The item-level file the table and the figure read: "bias_scores" or "probabilities".
    data: str = "bias_scores"
    #: amel settings the table function takes as keyword arguments.
    table_settings: tuple[str, ...] = ()
    #: amel settings the figure function takes as keyword arguments.
    figure_settings: tuple[str, ...] = ()


_COMMON = (
    "BS = P(r*|treatment) - P(r*|baseline), r* the verdict against the history's polarity; BS < 0 = conforming. "
    "method = single_call (primary: one call per cell, the first sampled reply), samples (every sampled reply) "
    "or first_token (models with logprobs). Unit of a test: for single_call the row (n = rows: model x item x "
    "cell), its intervals resampling items; for the others the item mean (n = items, n_rows behind them); "
    "paired designs pair within item. Pooled rows are of the seed's roster, extra models are marked."
)

ANALYSES: dict[str, Analysis] = {
    "effects": Analysis(
        "AMEL bias scores overall, by model, domain and provider: mean BS with 95% CI, one-sample Cohen's d "
        "(mean/sd) with its exact 95% CI (noncentral t) and t-test against 0. " + _COMMON,
    ),
    "scaling": Analysis(
        "Scaling within each provider: mean BS and |Cohen's d| of each roster model in its provider's size "
        "order, and the largest minus the smallest model paired per item. " + _COMMON,
    ),
    "balanced": Analysis(
        "Balanced histories (half Yes, half No): mean shift of P(Yes) from the baseline (t-test against 0), "
        "and |shift| against the same items' mean |BS| after saturated histories of the same k (paired t; "
        "diff < 0 = balancing helps). " + _COMMON,
    ),
    "entropy": Analysis(
        "Bias by baseline entropy stratum (deterministic vs uncertain baseline) and the difference (Welch t). "
        + _COMMON,
        figure_settings=("entropy_threshold_bits",),
    ),
    "asymmetry": Analysis(
        "Negativity asymmetry: |BS(no-saturated)| / |BS(yes-saturated)| paired per item (mean over its k's "
        "first); ratio of mean BS and ratio of mean |BS|, each with Fieller's 95% CI for a ratio of paired means "
        "(empty where the denominator is not clearly non-zero), paired t-test of |BS| (no vs yes). " + _COMMON,
    ),
    "length": Analysis(
        "Bias and history length: Spearman rho and OLS slope of BS on k (per turn). " + _COMMON,
    ),
    "position": Analysis(
        "Position of the biased turns inside an otherwise balanced history: mean BS per position and a "
        "repeated-measures ANOVA across positions (each item is asked at every position). " + _COMMON,
    ),
    "framing": Analysis(
        "Negativity asymmetry under the framing swap (Yes and No trade meanings): persistence in the swapped "
        "framing points to a token-level, reversal to a semantic asymmetry. asym = mean(|BS no| - |BS yes|).",
        table_settings=("framing_history_lengths",),
    ),
    "congruence": Analysis(
        "Congruent (the history's prevailing verdict is the item's correct verdict, or its baseline verdict) "
        "vs incongruent items. " + _COMMON,
    ),
    "probabilities": Analysis(
        "Mean P(Yes) per measurement method, model and cell: repeated samples (primary) and first-token "
        "probabilities (secondary, models with logprobs; the figure shows these where present).",
        data="probabilities",
    ),
}

#: LaTeX number formats of the analysis tables' columns (the CSVs keep full precision).
FORMATS = {
    "params_b": ".2f",
    "mean_bs": ".3f",
    "ci_low": ".3f",
    "ci_high": ".3f",
    "d": ".2f",
    "d_ci_low": ".2f",
    "d_ci_high": ".2f",
    "t": ".2f",
    "p": ".2g",
    "rho": ".3f",
    "rho_p": ".2g",
    "slope": ".4f",
    "slope_se": ".4f",
    "slope_ci_low": ".4f",
    "slope_ci_high": ".4f",
    "slope_p": ".2g",
    "F": ".2f",
    "ratio": ".2f",
    "ratio_abs": ".2f",
    "ratio_ci_low": ".2f",
    "ratio_ci_high": ".2f",
    "ratio_abs_ci_low": ".2f",
    "ratio_abs_ci_high": ".2f",
    "asym": ".3f",
    "abs_d": ".2f",
    "mean_shift": ".3f",
    "mean_abs_shift": ".3f",
    "mean_abs_bs_saturated": ".3f",
    "diff": ".3f",
    "t_diff": ".2f",
    "p_diff": ".2g",
    "saturation_share": ".2f",
    "prevailing_share": ".2f",
}

_DATA_PATHS = {"bias_scores": BIAS_SCORES, "probabilities": PROBABILITIES}


def table_path(name: str) -> str:
    return f"results/tables/{STUDY}/{name}.csv"


def analysis_table(name: str, data: Any, settings: Mapping[str, Any]) -> Any:
    """Analysis ``name``'s table (a DataFrame) from its item-level data and the amel settings."""
    from context_effects.amel import analysis

    kwargs = {k: settings[k] for k in ANALYSES[name].table_settings}
    return getattr(analysis, f"{name}_table")(data, **kwargs)


def analysis_figure(name: str, table: Any, data: Any, settings: Mapping[str, Any], note: str = "") -> Any:
    """Analysis ``name``'s Matplotlib figure from its table (as written) and its item-level data."""
    from context_effects.amel import plots

    kwargs = {k: settings[k] for k in ANALYSES[name].figure_settings}
    table, data, method = plots.one_method(name, table, data)
    if method:
        note = f"P(Yes) from {plots.METHOD_LABEL.get(method, method)}. {note}".strip()
    return getattr(plots, f"{name}_figure")(table, data, note=note, **kwargs)


def _settings(keys: tuple[str, ...]):
    def settings(config: Mapping[str, Any]) -> dict[str, Any]:
        return {"run_kind": run_kind(config), **{k: config["amel"][k] for k in keys}}

    return settings


def _table_spec(name: str, a: Analysis) -> TableSpec:
    def inputs(config: Mapping[str, Any]) -> dict[str, str]:
        return {a.data: _DATA_PATHS[a.data]}

    def build(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> Built:
        import pandas as pd

        from context_effects.tables import run_notes

        df = analysis_table(name, pd.read_parquet(inputs[a.data]), settings)
        return Built(df, run_notes(settings["run_kind"]))

    return TableSpec(
        name=name,
        stage=STAGE,
        caption=a.caption,
        label=f"tab:amel-{name}",
        inputs=inputs,
        build=build,
        settings=_settings(a.table_settings),
        formats=FORMATS,
    )


def _figure_spec(name: str, a: Analysis) -> FigureSpec:
    def inputs(config: Mapping[str, Any]) -> dict[str, str]:
        return {"table": table_path(name), a.data: _DATA_PATHS[a.data]}

    def draw(inputs: Mapping[str, Any], settings: Mapping[str, Any]):
        import pandas as pd

        from context_effects.tables import run_notes

        note = " ".join(run_notes(settings["run_kind"]))
        fig = analysis_figure(name, pd.read_csv(inputs["table"]), pd.read_parquet(inputs[a.data]), settings, note)
        return fig, None

    return FigureSpec(
        name=name,
        stage=STAGE,
        caption=a.caption,
        inputs=inputs,
        draw=draw,
        settings=_settings(a.figure_settings),
        formats=("pdf", "png"),
    )


REGISTRY = Registry(
    STUDY,
    [_table_spec(n, a) for n, a in ANALYSES.items()] + [_figure_spec(n, a) for n, a in ANALYSES.items()],
)


def targets(config: Mapping[str, Any]) -> list[str]:
    """Every AMEL table (CSV + LaTeX) and figure (PDF + PNG); none when the study is off."""
    return REGISTRY.files(config) if enabled(config) else []
