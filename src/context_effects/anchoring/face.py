"""Study H's face (``context_effects.studies``): its task table and every judge's requests;
seed 001 prints no size of a run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from context_effects.llm.estimate import Estimate, SizeRow, StageCount
from context_effects.studies import Headline, StudyFace

Config = Mapping[str, Any]


def enabled(config: Config) -> bool:
    from context_effects.anchoring import dag as anchoring_dag

    return anchoring_dag.enabled(config)


def item_inputs(config: Config) -> list[str]:
    from context_effects.anchoring import dag as anchoring_dag

    return [anchoring_dag.TASKS]


def design_counts(config: Config, root: Path) -> list[StageCount]:
    from context_effects import dag
    from context_effects.anchoring import dag as anchoring_dag
    from context_effects.anchoring.requests import judge_requests
    from context_effects.anchoring.tasks import read_tasks

    tasks = read_tasks(root / anchoring_dag.TASKS)
    out = []
    for judge in anchoring_dag.judges(config):
        row = StageCount("anchoring", "judge", judge)
        row.add(judge_requests(tasks, judge, dag.model_settings(config, judge), anchoring_dag.request_settings(config)))
        out.append(row)
    return out


def seed_sizes(config: Config, counts: Sequence[StageCount], est: Estimate, root: Path) -> list[SizeRow]:
    """None: the protocol prints no size of a run."""
    return []


def headlines(config: Config, model: str) -> list[Headline]:
    """The model as a judge shown an earlier score: the signed pull toward it (the
    protocol's primary estimand, ties scored 0). Seed 001 is a preregistered protocol: it
    prints no model's result, so the card has no seed values to set beside it."""
    from context_effects.measurement.pipeline import display_name

    if not (enabled(config) and model in config["anchoring"]["judges"]):
        return []
    return [Headline("anchoring", "pull", "pull toward a displayed prior score (mean, points)", "judge",
                     "anchoring/pull", (("Tie handling", "ties scored 0 (primary)"),), "Model",
                     display_name(config, model), "Mean pull @ Mean CI low, Mean CI high",
                     "points on the 1-5 rubric toward the earlier score; 0 = no anchoring")]


FACE = StudyFace("anchoring", enabled, item_inputs, design_counts, seed_sizes, headlines)
