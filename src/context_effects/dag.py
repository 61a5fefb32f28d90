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

    return conformity_dag.targets(config) + amel_dag.targets(config) + anchoring_dag.targets(config)


def report_tables(config: Config) -> list[str]:
    return sorted(f for f in study_outputs(config) if f.startswith("results/tables/") and f.endswith(".csv"))


def report_figures(config: Config) -> list[str]:
    return sorted(
        f for f in study_outputs(config) if f.startswith("results/figures/") and f.endswith((".pdf", ".png", ".svg"))
    )


def paper_targets() -> list[str]:
    return ["results/run/manifest.json", "results/report/report.md"]
