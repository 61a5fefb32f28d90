"""Each study's one face: what the run-wide tools ask of a study, answered in one place.

The estimate (``context_effects.costs``) iterates over the enabled studies through their
faces rather than reaching into each study's DAG and request modules: a face says which
item tables its requests are built from (built without calling any model), every
(study, stage, model) with its requests (``llm.estimate.StageCount``, built by the same
functions the study's request rules call), and its sizes beside those the seed paper
prints (``llm.estimate.SizeRow``). The card (``context_effects.card``) asks each face for
a model's headline numbers (:class:`Headline`: which cell of which results table holds
it, and which published rows of the seed give the seed's models on the same quantity).
The faces are ``<study>/face.py``, found by name (:data:`FACES`) so that this module
imports none of the studies.
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
class Headline:
    """One headline number of a model's card: a cell of a results table (read by
    ``context_effects.paper.lookup``, as the paper's macros are), chosen by ``fixed``'s
    ``Column=value`` pairs and the model's own ``model_column`` value.

    The seed's models on the same quantity are the published rows
    (``paper/published/<study>/*.csv``) naming the same table and column (or ``seed_table``
    and ``seed_column``) whose row has the same ``fixed`` (or ``seed_fixed``) pairs and any model; ``pooled`` replaces pairs of ``fixed`` to select the
    seed's value over its whole roster, where it prints one (``scope=overall``)."""

    study: str
    #: Short key, unique within the study (``gamma``, ``d``).
    quantity: str
    #: What the number is, in words (the card's row label).
    label: str
    #: The part the model plays for it: ``judge``, ``generator`` or ``answering model``.
    role: str
    table: str
    fixed: tuple[tuple[str, str], ...]
    model_column: str
    model_value: str
    #: The column, with ``@ <interval columns>`` where the table keeps the interval apart.
    column: str
    #: How to read it: sign, unit, what 0 means.
    reading: str = ""
    pooled: tuple[tuple[str, str], ...] = ()
    #: Where the seed prints the same quantity, when the card reads it from another
    #: table than the seed's (``seed_table``, its ``seed_fixed`` pairs and ``seed_column``).
    seed_table: str = ""
    seed_fixed: tuple[tuple[str, str], ...] = ()
    seed_column: str = ""

    @property
    def row(self) -> str:
        """This model's row selector (``Column=value; …``)."""
        return "; ".join(f"{k}={v}" for k, v in (*self.fixed, (self.model_column, self.model_value)))


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
    #: A model's headline numbers for its card (none for a model the study does not run).
    headlines: Callable[[Config, str], list[Headline]]


def faces(config: Config) -> list[StudyFace]:
    """The faces of the studies the config runs, in :data:`FACES` order."""
    out = [importlib.import_module(name).FACE for name in FACES]
    return [face for face in out if face.enabled(config)]
