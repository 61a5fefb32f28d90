"""Each study's one face: what the run-wide tools ask of a study, answered in one place.

The estimate (``context_effects.costs``) iterates over the enabled studies through their
faces rather than reaching into each study's DAG and request modules: a face says which
item tables its requests are built from (built without calling any model), every
(study, stage, model) with its requests (``llm.estimate.StageCount``, built by the same
functions the study's request rules call), and its sizes beside those the seed paper
prints (``llm.estimate.SizeRow``). The faces are ``<study>/face.py``, found by name
(:data:`FACES`) so that this module imports none of the studies.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context_effects.llm.estimate import Estimate, SizeRow, StageCount

Config = Mapping[str, Any]

#: The studies in the order the estimate lists them: module of each one's ``FACE``.
FACES = ("context_effects.conformity.face", "context_effects.amel.face", "context_effects.anchoring.face")


@dataclass(frozen=True)
class StudyFace:
    """What one study answers for the run-wide tools (module docstring)."""

    name: str
    #: Whether the config runs the study.
    enabled: Callable[[Config], bool]
    #: The item tables its requests are built from (paths relative to the run's directory).
    item_inputs: Callable[[Config], list[str]]
    #: Every stage and model with the requests the design asks, from those tables under ``root``.
    design_counts: Callable[[Config, Path], list[StageCount]]
    #: Its sizes beside the seed paper's (its counts, the estimate of them, ``root``).
    seed_sizes: Callable[[Config, Sequence[StageCount], Estimate, Path], list[SizeRow]]


def faces(config: Config) -> list[StudyFace]:
    """The faces of the studies the config runs, in :data:`FACES` order."""
    out = [importlib.import_module(name).FACE for name in FACES]
    return [face for face in out if face.enabled(config)]
