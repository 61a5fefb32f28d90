"""Study registries: every table and figure a study writes, declared once.

A study's ``outputs`` module holds one ``Registry`` whose entries say, per table or
figure, which files it reads (a function of the config), which settings its builder
uses (a function of the config: exactly those, so changing another setting reruns
nothing), the builder itself, its caption, LaTeX label and number formats. One
wildcard rule per study stage runs one generic script (``workflow/scripts/
write_table.py`` or ``draw_figure.py``) for every entry of that stage, and the run
report and ``snakemake --report`` take their captions from here. Adding a table is
one entry and one builder function; docs/architecture.md walks through an example.

Builders import their heavy dependencies inside the function, so that listing a
registry (which the Snakefile does while the DAG is built) stays cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

#: Named input files of one entry: name -> one path or a list of paths.
Inputs = Mapping[str, Any]
Settings = Mapping[str, Any]


def _no_settings(config: Mapping[str, Any]) -> dict[str, Any]:
    return {}


def _always(config: Mapping[str, Any]) -> bool:
    return True


@dataclass(frozen=True)
class Built:
    """What a table builder returns: the rows, the notes printed under the table, and
    (rarely) a caption that depends on the data rather than on the settings."""

    df: pd.DataFrame
    notes: Sequence[str] = ()
    caption: str | None = None


@dataclass(frozen=True)
class TableSpec:
    """One table: ``results/tables/<study>/<name>.csv`` (full precision) and ``.tex``."""

    name: str
    stage: str
    caption: str
    label: str
    inputs: Callable[[Mapping[str, Any]], Inputs]
    build: Callable[[Inputs, Settings], Built]
    settings: Callable[[Mapping[str, Any]], dict[str, Any]] = _no_settings
    formats: Mapping[str, str] = field(default_factory=dict)
    #: LaTeX column alignment: a string, a function of the built DataFrame, or None
    #: (numeric columns right, others left).
    align: str | Callable[[pd.DataFrame], str] | None = None
    enabled: Callable[[Mapping[str, Any]], bool] = _always

    def caption_for(self, settings: Settings) -> str:
        """The caption, with ``{setting}`` fields filled from the entry's settings."""
        return self.caption.format(**settings)


@dataclass(frozen=True)
class FigureSpec:
    """One figure: ``figures/<study>/<name>.<ext>`` for each drawn format of ``formats``
    (``pdf``, ``png``: the paper's figure files), and, where ``formats`` lists ``csv``,
    the numbers it plots in ``results/figures/<study>/<name>.csv`` (``figure_outputs``).

    ``draw(inputs, settings)`` returns the Matplotlib figure and, where the figure
    carries numbers a reader may want, the DataFrame it plots (written as the CSV).
    """

    name: str
    stage: str
    caption: str
    inputs: Callable[[Mapping[str, Any]], Inputs]
    draw: Callable[[Inputs, Settings], tuple[Any, pd.DataFrame | None]]
    settings: Callable[[Mapping[str, Any]], dict[str, Any]] = _no_settings
    formats: tuple[str, ...] = ("pdf", "png")
    enabled: Callable[[Mapping[str, Any]], bool] = _always


class Registry:
    """The tables and figures of one study, by name.

    A name is unique among a study's tables and among its figures; a table and a
    figure may share one (AMEL draws each analysis's table as a figure of the same
    stem). ``table(name)`` and ``figure(name)`` are unambiguous; ``registry[name]``
    finds the one entry of that name and refuses a name that is both.
    """

    def __init__(self, study: str, entries: Iterable[TableSpec | FigureSpec]):
        self.study = study
        self.entries: dict[tuple[type, str], TableSpec | FigureSpec] = {}
        for entry in entries:
            key = (TableSpec if isinstance(entry, TableSpec) else FigureSpec, entry.name)
            if key in self.entries:
                kind = "tables" if key[0] is TableSpec else "figures"
                raise ValueError(f"{study}: two registry entries are named {entry.name!r} (both {kind})")
            self.entries[key] = entry

    def _get(self, kind: type, name: str) -> TableSpec | FigureSpec:
        try:
            return self.entries[(kind, name)]
        except KeyError:
            word = "table" if kind is TableSpec else "figure"
            raise KeyError(f"{self.study} has no {word} {name!r}; known: {self.names(kind)}") from None

    def table(self, name: str) -> TableSpec:
        return self._get(TableSpec, name)

    def figure(self, name: str) -> FigureSpec:
        return self._get(FigureSpec, name)

    def tables(self, stage: str | None = None) -> list[TableSpec]:
        return [e for e in self.entries.values() if isinstance(e, TableSpec) and stage in (None, e.stage)]

    def figures(self, stage: str | None = None) -> list[FigureSpec]:
        return [e for e in self.entries.values() if isinstance(e, FigureSpec) and stage in (None, e.stage)]

    def names(self, kind: type, stage: str | None = None) -> list[str]:
        entries = self.tables(stage) if kind is TableSpec else self.figures(stage)
        return [e.name for e in entries]

    def table_files(self, config: Mapping[str, Any], stage: str | None = None) -> list[str]:
        """The CSV and LaTeX files of every enabled table (of ``stage``)."""
        return [
            f"results/tables/{self.study}/{t.name}.{ext}"
            for t in self.tables(stage)
            if t.enabled(config)
            for ext in ("csv", "tex")
        ]

    def figure_files(self, config: Mapping[str, Any], stage: str | None = None) -> list[str]:
        """Every file of every enabled figure (of ``stage``): its formats, and its data CSV."""
        return [f for fig in self.figures(stage) if fig.enabled(config) for f in figure_outputs(self.study, fig)]

    def files(self, config: Mapping[str, Any], stage: str | None = None) -> list[str]:
        return self.table_files(config, stage) + self.figure_files(config, stage)


def report_caption(entry: TableSpec | FigureSpec, config: Mapping[str, Any]) -> str:
    """The registry caption of one table or figure as reStructuredText for
    ``snakemake --report`` (every markup character escaped: captions print ``|x|``,
    ``*`` and ``_`` literally)."""
    caption = entry.caption_for(entry.settings(config)) if isinstance(entry, TableSpec) else entry.caption
    return "".join("\\" + ch if ch in "\\`*_|[]<>:" else ch for ch in caption)


#: Where the figure files go (top level: the paper includes them from there) and where
#: the data a figure plots goes (with the other results).
FIGURE_DIR = "figures"
FIGURE_DATA_DIR = "results/figures"


def figure_path(study: str, name: str, ext: str) -> str:
    """``figures/<study>/<name>.<ext>`` for a drawn format, ``results/figures/<study>/<name>.csv``
    for the data it plots. The one place that decides where figures go."""
    folder = FIGURE_DATA_DIR if ext == "csv" else FIGURE_DIR
    return f"{folder}/{study}/{name}.{ext}"


def figure_outputs(study: str, fig: FigureSpec) -> list[str]:
    return [figure_path(study, fig.name, ext) for ext in fig.formats]


#: Each study's registry, by study name (the ``results/tables/<study>`` folder), as
#: ``module:attribute``: imported on first use.
STUDY_PACKAGES = {
    "conformity": "context_effects.conformity.outputs:REGISTRY",
    "amel": "context_effects.amel.outputs:REGISTRY",
    "anchoring": "context_effects.anchoring.outputs:REGISTRY",
    # The run's own tables, across the studies: the request counts (rule request_counts).
    "run": "context_effects.request_counts:REGISTRY",
}


def registry(study: str) -> Registry:
    if study not in STUDY_PACKAGES:
        raise KeyError(f"no study {study!r}; known: {sorted(STUDY_PACKAGES)}")
    module, _, attr = STUDY_PACKAGES[study].partition(":")
    return getattr(importlib.import_module(module), attr)


def write_registered_table(study: str, name: str, inputs: Inputs, settings: Settings,
                           csv_path: str, tex_path: str) -> pd.DataFrame:
    """Build one registered table and write it as CSV + LaTeX (``tables.write_table``)."""
    from context_effects.tables import write_table

    spec = registry(study).table(name)
    built = spec.build(inputs, settings)
    caption = built.caption if built.caption is not None else spec.caption_for(settings)
    align = spec.align(built.df) if callable(spec.align) else spec.align
    write_table(built.df, csv_path, tex_path, caption, spec.label, spec.formats, list(built.notes), align)
    return built.df


def draw_registered_figure(study: str, name: str, inputs: Inputs, settings: Settings,
                           outputs: Mapping[str, str]) -> pd.DataFrame | None:
    """Draw one registered figure into every file of ``outputs`` (keyed by format; ``csv`` = its data)."""
    from context_effects.figures import save_figure

    spec = registry(study).figure(name)
    fig, data = spec.draw(inputs, settings)
    for ext in spec.formats:
        if ext == "csv":
            if data is None:
                raise ValueError(f"{study}/{name} lists a csv output but its drawing returned no data")
            Path(outputs[ext]).parent.mkdir(parents=True, exist_ok=True)
            data.to_csv(outputs[ext], index=False)
        else:
            # save_figure closes the figure; a closed Agg figure still renders, so every
            # format comes from one drawing.
            save_figure(fig, outputs[ext])
    return data
