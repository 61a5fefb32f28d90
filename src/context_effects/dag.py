"""DAG helpers every study shares: plain functions of the validated config.

The rule files (workflow/rules/*.smk) hold rules only; the paths, targets and
per-rule settings they need come from here and from each study's ``dag`` module
(``context_effects.conformity.dag``, ``.amel.dag``, ``.anchoring.dag``), imported
under their own names, so no two helpers can shadow each other and each one is
unit-tested like any other library function.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Config = Mapping[str, Any]


def rule_resources(config: Config, rule_name: str, runtime: int, mem_mb: int) -> dict[str, Any]:
    """Runtime (min) and memory (MB) of a rule; the config's ``resources:`` overrides.

    Memory grows with the retry attempt so a job killed for memory on a cluster is
    resubmitted with more instead of failing the same way again.
    """
    override = config["resources"].get(rule_name, {})
    base_mem = override.get("mem_mb", mem_mb)
    return {
        "runtime": override.get("runtime", runtime),
        "mem_mb": lambda wildcards, attempt: base_mem * attempt,
    }


def name_regex(names: Sequence[str]) -> str:
    """Wildcard constraint matching exactly these names (or nothing)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


def run_kind(config: Config) -> str:
    """demo | synthetic | paper: decides the caveat every table and figure carries."""
    return config["run"]["kind"]


# --- datasets ------------------------------------------------------------------------


def items_path(dataset: str) -> str:
    return f"results/items/{dataset}.parquet"


def items_for(datasets: Sequence[str]) -> list[str]:
    return [items_path(d) for d in datasets]


def raw_dataset_input(config: Config, dataset: str) -> str:
    """A local dataset is read where it lies; a hub dataset is fetched first (fetch_dataset)."""
    ds = config["datasets"][dataset]
    if ds["source"] == "local":
        return ds["local_path"]
    return f"resources/datasets/{dataset}.parquet"


# --- request and response shards ---------------------------------------------------


def request_shard_of(response_shard: str) -> str:
    """The request shard a response shard answers (the generic answering rules map
    ``results/requests/<study>/...`` to ``results/responses/<study>/...``)."""
    prefix = "results/responses/"
    if not response_shard.startswith(prefix):
        raise ValueError(f"{response_shard!r} is not a response shard (under {prefix})")
    return "results/requests/" + response_shard[len(prefix):]


# --- models ----------------------------------------------------------------------------


def models_with(config: Config, predicate: Callable[[Mapping[str, Any]], bool]) -> list[str]:
    return sorted(name for name, m in config["models"].items() if predicate(m))


def vllm_models(config: Config) -> list[str]:
    return models_with(config, lambda m: m["backend"] == "vllm")


def remote_models(config: Config) -> list[str]:
    return models_with(config, lambda m: m["backend"] != "vllm")


def gguf_models(config: Config) -> list[str]:
    return models_with(config, lambda m: m["source"]["kind"] == "gguf_package")


def used_models(config: Config) -> list[str]:
    """Models the enabled studies call (only these need engines or API keys)."""
    names: set[str] = set()
    if config["conformity"]["enabled"]:
        c = config["conformity"]
        names |= set(c["generators"]) | set(c["judges"]) | set(c["hosted_judges"])
    if config["amel"]["enabled"]:
        names |= set(config["amel"]["models"])
    if config["anchoring"]["enabled"]:
        names |= set(config["anchoring"]["judges"])
    return sorted(names)


def model_files(config: Config, model: str) -> str | list[str]:
    """A packaged GGUF model must be converted (once, by a rule) before vLLM loads it."""
    if model in gguf_models(config):
        return config["models"][model]["model_id"]
    return []


def model_gpus(config: Config, model: str) -> int:
    """GPUs one answering job of a local (vLLM) model holds."""
    return config["models"][model]["gpu"]["count"]


def model_gpu_type(config: Config, model: str) -> str:
    """The slurm executor turns gpu_model into --gpus=<model>:<n>; no GPU, no tag."""
    gpu = config["models"][model]["gpu"]
    return (gpu["model"] or "") if gpu["count"] else ""


def require_api_keys(config: Config) -> None:
    """Stop before any job starts if a model the run calls needs a missing API key.

    Called from ``onstart``, which Snakemake runs only for a real run (not for a dry
    run or lint), so a DAG can still be inspected on a machine without keys. Replay
    makes no calls and needs none.
    """
    from context_effects.llm.secrets import check_env

    if not config["run"]["replay"]:
        check_env({m: config["models"][m] for m in used_models(config)})


# --- targets ---------------------------------------------------------------------------


def study_outputs(config: Config) -> list[str]:
    """Every file the enabled studies produce (``rule all`` and the run report's inputs)."""
    from context_effects.amel import dag as amel_dag
    from context_effects.anchoring import dag as anchoring_dag
    from context_effects.conformity import dag as conformity_dag

    return (conformity_dag.targets(config) + amel_dag.targets(config) + anchoring_dag.targets(config)
            + synthetic_targets(config))


def report_tables(config: Config) -> list[str]:
    return sorted(f for f in study_outputs(config) if f.startswith("results/tables/") and f.endswith(".csv"))


def report_figures(config: Config) -> list[str]:
    """Every figure file (``figures/<study>/<name>.pdf|png``) of the enabled studies;
    the data CSVs beside them in ``results/figures/`` are not figures."""
    from context_effects.outputs import FIGURE_DIR

    return sorted(
        f for f in study_outputs(config) if f.startswith(f"{FIGURE_DIR}/") and f.endswith((".pdf", ".png", ".svg"))
    )


def published_files(basedir: str) -> list[str]:
    """The transcribed numbers of the seed papers (``paper/published/<study>/*.csv`` of the
    repository at ``basedir``, wherever the run's working directory is)."""
    from pathlib import Path

    return sorted(str(p) for p in (Path(basedir) / "paper" / "published").glob("*/*.csv"))


def paper_sources(basedir: str) -> list[str]:
    """The paper's own files (``paper/**/*.tex``, ``numbers.yaml``, the allow-list of the
    repository at ``basedir``); the paper's output lies in the working directory."""
    from pathlib import Path

    paper = Path(basedir) / "paper"
    files = [p for p in paper.rglob("*.tex") if "build" not in p.relative_to(paper).parts[:-1]]
    files += [p for p in (paper / "numbers.yaml", paper / "allowed_numbers.txt") if p.exists()]
    return sorted(str(p) for p in files)


def paper_inputs(config: Config, basedir: str) -> dict[str, Any]:
    """Everything ``paper/paper.pdf`` reads (rule paper_pdf): the sources, the numbers,
    every table's LaTeX and every figure of the enabled studies, the reproduction table
    and the run manifest."""
    from pathlib import Path

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
    from pathlib import Path

    return str(Path(basedir) / "docs" / "deviations.yaml")


def paper_targets(config: Config) -> list[str]:
    """What ``rule all`` asks for beyond the studies: the manifest, the run report, the
    reproduction report and, when ``paper.pdf`` is on, the paper."""
    return ["results/run/manifest.json", "results/report/report.md", "results/report/reproduction.md",
            *paper_pdf_targets(config)]


# --- synthetic runs: planted values and their recovery (context_effects.recovery) ----------


def synthetic_targets(config: Config) -> list[str]:
    """``results/synthetic/planted.json`` and the recovery table (CSV, Markdown) when the run has
    synthetic models (or ``run.kind`` is synthetic); nothing otherwise."""
    from context_effects import recovery

    return recovery.targets(config)


def synthetic_planted_params(config: Config) -> dict[str, Any]:
    """What ``planted.json`` is computed from (rule ``synthetic_planted``; plain data)."""
    from context_effects import recovery

    return recovery.planted_inputs(config)


def recovery_inputs(config: Config) -> dict[str, Any]:
    """planted.json and the result files holding the estimates (rule ``recovery``)."""
    from context_effects import recovery

    return recovery.recovery_inputs(config)


def recovery_report_input(config: Config) -> list[str]:
    """The recovery table the run report summarises; none for a run without synthetic models."""
    from context_effects import recovery

    return recovery.report_input(config)
