"""Study H's face (``context_effects.studies``): its task table and every judge's requests;
seed 001 prints no size of a run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from context_effects.llm.estimate import Estimate, SizeRow, StageCount
from context_effects.studies import StudyFace

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


FACE = StudyFace("anchoring", enabled, item_inputs, design_counts, seed_sizes)
