"""Study H's tables and figure, built from the result files of every judge's model run.

Three tables (``results/tables/anchoring/<name>.csv/.tex``: the signed prior-score
pull, the per-condition checks, correction harm and verdict flips) and the
pull-distribution figure. The row builders live in ``anchoring.results``; every
table carries the tie rule under it, and tables and figure the run's caveat.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from context_effects.anchoring.dag import enabled, results
from context_effects.dag import run_kind
from context_effects.outputs import Built, FigureSpec, Registry, TableSpec

STAGE = "report"
STUDY = "anchoring"


def _inputs(config: Mapping[str, Any]) -> dict[str, list[str]]:
    return {"results": results(config)}


def _settings(config: Mapping[str, Any]) -> dict[str, Any]:
    return {"run_kind": run_kind(config)}


def _records(inputs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The result files, in judge order (the rule's input list)."""
    from context_effects.anchoring.results import read_result

    paths = inputs["results"]
    return [read_result(p) for p in ([paths] if isinstance(paths, str) else paths)]


def _table(name: str, builder: str, caption: str) -> TableSpec:
    def build(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> Built:
        from context_effects.anchoring import results
        from context_effects.tables import run_notes

        df = getattr(results, builder)(_records(inputs))
        return Built(df, [results.TIE_RULE, *run_notes(settings["run_kind"])])

    return TableSpec(
        name=name,
        stage=STAGE,
        caption=caption,
        label=f"tab:anchoring-{name}",
        inputs=_inputs,
        build=build,
        settings=_settings,
    )


def _draw_pull_distribution(inputs: Mapping[str, Any], settings: Mapping[str, Any]):
    from context_effects.anchoring.results import pull_figure
    from context_effects.tables import run_notes

    return pull_figure(_records(inputs), run_notes(settings["run_kind"])), None


REGISTRY = Registry(
    STUDY,
    [
        _table(
            "pull",
            "pull_table",
            "Study H: signed prior-score pull per judge (mean and median over tasks, bootstrap 95% CIs): the "
            "primary estimand (ties scored 0) and the sensitivity analysis with ties excluded",
        ),
        _table(
            "conditions",
            "condition_table",
            "Study H: judgments, missing replies, absolute error against gold and repetition dispersion per condition",
        ),
        _table(
            "checks",
            "checks_table",
            "Study H: correction harm and blind-vs-anchor verdict flips per judge",
        ),
        FigureSpec(
            name="pull_distribution",
            stage=STAGE,
            caption="Study H: per-task signed pull toward the displayed prior score per judge (points), quartile "
            "box and median, and the mean with its bootstrap confidence interval",
            inputs=_inputs,
            draw=_draw_pull_distribution,
            settings=_settings,
            formats=("pdf", "png"),
        ),
    ],
)


def targets(config: Mapping[str, Any]) -> list[str]:
    """Every judge's result file, the summary tables and the pull figure; none when the study is off."""
    return results(config) + REGISTRY.files(config) if enabled(config) else []
