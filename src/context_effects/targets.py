"""The run's files across every study: what ``rule all``, the run report and the paper ask for.

The top layer of the DAG helpers (docs/architecture.md, "DAG helpers"): it lists every
study's targets and response shards, so it imports each study's ``dag`` and ``outputs``
modules and ``context_effects.recovery``; none of them imports it back. The helpers
every study shares sit below, in ``context_effects.dag``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from context_effects import recovery
from context_effects.amel import dag as amel_dag
from context_effects.amel import outputs as amel_outputs
from context_effects.anchoring import dag as anchoring_dag
from context_effects.anchoring import outputs as anchoring_outputs
from context_effects.conformity import dag as conformity_dag
from context_effects.conformity import outputs as conformity_outputs
from context_effects.outputs import FIGURE_DIR, registry

Config = Mapping[str, Any]


def response_shards(config: Config) -> list[str]:
    """Every response shard the enabled studies have answered (by llm.smk's rules)."""
    shards: list[str] = []
    if config["conformity"]["enabled"]:
        for dataset in config["conformity"]["datasets"]:
            shards += conformity_dag.response_shards(config, dataset)
            shards += conformity_dag.anchor_response_shards(config, dataset)
            shards += conformity_dag.judge_response_shards(config, dataset)
    if config["amel"]["enabled"]:
        shards += amel_dag.response_shards(config)
    if anchoring_dag.enabled(config):
        shards += [anchoring_dag.response_shard(j) for j in config["anchoring"]["judges"]]
    # A Study C shard that holds several datasets is listed once per dataset above.
    return list(dict.fromkeys(shards))


def ledger_files(config: Config) -> list[str]:
    """The ledger beside every response shard of the run: what each answering job asked,
    served from the store, failed and paid (the run report's cost table)."""
    prefix = "results/responses/"
    return ["results/ledgers/" + p[len(prefix):].removesuffix(".parquet") + ".json" for p in response_shards(config)]


# --- targets ---------------------------------------------------------------------------


def study_outputs(config: Config) -> list[str]:
    """Every file the enabled studies produce (``rule all`` and the run report's inputs)."""
    return (conformity_outputs.targets(config) + amel_outputs.targets(config) + anchoring_outputs.targets(config)
            + run_tables(config) + synthetic_targets(config))


def run_tables(config: Config) -> list[str]:
    """The run's own tables across the studies (``results/tables/run/``: the request counts
    of ``context_effects.request_counts``, rule ``request_counts``), when it answers any shard."""
    return registry("run").table_files(config)


def report_tables(config: Config) -> list[str]:
    return sorted(f for f in study_outputs(config) if f.startswith("results/tables/") and f.endswith(".csv"))


def report_figures(config: Config) -> list[str]:
    """Every figure file (``figures/<study>/<name>.pdf|png``) of the enabled studies;
    the data CSVs beside them in ``results/figures/`` are not figures."""
    return sorted(
        f for f in study_outputs(config) if f.startswith(f"{FIGURE_DIR}/") and f.endswith((".pdf", ".png", ".svg"))
    )


def published_files(basedir: str) -> list[str]:
    """The transcribed numbers of the seed papers (``paper/published/<study>/*.csv`` of the
    repository at ``basedir``, wherever the run's working directory is)."""
    return sorted(str(p) for p in (Path(basedir) / "paper" / "published").glob("*/*.csv"))


def paper_sources(basedir: str) -> list[str]:
    """The paper's own files (``paper/**/*.tex``, ``numbers.yaml``, the allow-list of the
    repository at ``basedir``); the paper's output lies in the working directory."""
    paper = Path(basedir) / "paper"
    files = [p for p in paper.rglob("*.tex") if "build" not in p.relative_to(paper).parts[:-1]]
    files += [p for p in (paper / "numbers.yaml", paper / "allowed_numbers.txt") if p.exists()]
    return sorted(str(p) for p in files)


def paper_inputs(config: Config, basedir: str) -> dict[str, Any]:
    """Everything ``paper/paper.pdf`` reads (rule paper_pdf): the sources, the numbers,
    every table's LaTeX and every figure of the enabled studies, the reproduction table
    and the run manifest."""
    preamble = str(Path(basedir) / "paper" / "preamble.tex")
    return {
        # The build finds the source folder from the preamble's path (so no hard-coded prefix).
        "preamble": preamble,
        "sources": [f for f in paper_sources(basedir) if f != preamble],
        "numbers": "results/paper/numbers.tex",
        "tables": [f[: -len(".csv")] + ".tex" for f in report_tables(config)],
        "figures": report_figures(config),
        "reproduction": "results/report/reproduction.tex",
        "deviations": "results/paper/deviations.tex",
        "manifest": "results/run/manifest.json",
    }


def paper_pdf_targets(config: Config) -> list[str]:
    """``paper/paper.pdf`` when ``paper.pdf`` is on (it needs LaTeX), else nothing."""
    return ["paper/paper.pdf"] if config.get("paper", {}).get("pdf", False) else []


def deviations_ledger(basedir: str) -> str:
    """The deviations ledger of the repository at ``basedir`` (read by the run report and the paper)."""
    return str(Path(basedir) / "docs" / "deviations.yaml")


def paper_targets(config: Config) -> list[str]:
    """What ``rule all`` asks for beyond the studies: the manifest, the run report, the
    reproduction report and, when ``paper.pdf`` is on, the paper."""
    return ["results/run/manifest.json", "results/report/report.md", "results/report/reproduction.md",
            *paper_pdf_targets(config)]


# --- synthetic runs: planted values and their recovery (context_effects.recovery) -----------


def synthetic_targets(config: Config) -> list[str]:
    """``results/synthetic/planted.json`` and the recovery table (CSV, Markdown) when the run has
    synthetic models (or ``run.kind`` is synthetic); nothing otherwise."""
    return recovery.targets(config)


def synthetic_planted_params(config: Config) -> dict[str, Any]:
    """What ``planted.json`` is computed from (rule ``synthetic_planted``; plain data)."""
    return recovery.planted_inputs(config)


def recovery_inputs(config: Config) -> dict[str, Any]:
    """planted.json and the result files holding the estimates (rule ``recovery``)."""
    return recovery.recovery_inputs(config)


def recovery_fit_keys(config: Config) -> dict[str, Any]:
    """What each fit the recovery table reads must have been made with (rule ``recovery``)."""
    return recovery.recovery_fit_keys(config)


def recovery_report_input(config: Config) -> list[str]:
    """The recovery table the run report summarises; none for a run without synthetic models."""
    return recovery.report_input(config)
