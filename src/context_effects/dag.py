"""DAG helpers every study shares: plain functions of the validated config.

The rule files (workflow/rules/*.smk) hold rules only; the paths, targets and
per-rule settings they need come from here, from each study's ``dag`` module
(``context_effects.conformity.dag``, ``.amel.dag``, ``.anchoring.dag``) and from
``context_effects.targets`` (the run's files across every study), imported under
their own names, so no two helpers can shadow each other and each one is
unit-tested like any other library function.

This module is the bottom layer of those helpers: the study ``dag`` modules import
it, so it imports none of them (docs/architecture.md, "DAG helpers").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

Config = Mapping[str, Any]

#: The slurm profile's partitions and their limits (docs/cluster.md).
PARTITIONS_FILE = Path(__file__).resolve().parents[2] / "profiles" / "slurm" / "partitions.yaml"


@functools.lru_cache(maxsize=4)
def partition_mem_cap(path: Path = PARTITIONS_FILE) -> int | None:
    """The largest `max_mem_mb` of any partition: memory no job can be given (None: no limit known)."""
    try:
        parts = (yaml.safe_load(Path(path).read_text()) or {}).get("partitions") or {}
    except OSError:
        return None
    limits = [int(p["max_mem_mb"]) for p in parts.values() if isinstance(p, Mapping) and p.get("max_mem_mb")]
    return max(limits) if limits else None


def rule_resources(config: Config, rule_name: str, runtime: int, mem_mb: int,
                   keys: Sequence[str] = ()) -> dict[str, Any]:
    """Runtime (min) and memory (MB) of a rule; the config's ``resources:`` overrides, under
    the rule's name and then under each of ``keys`` (later ones win: a kind of job a rule
    runs, e.g. ``conformity_classifier_metrics``).

    Memory grows with the retry attempt so a job killed for memory on a cluster is
    resubmitted with more instead of failing the same way again, up to the largest
    partition's limit (``partition_mem_cap``): a request above it could never be scheduled.
    """
    override: dict[str, Any] = {}
    for key in (rule_name, *keys):
        override.update(config["resources"].get(key, {}))
    base_mem = override.get("mem_mb", mem_mb)
    cap = partition_mem_cap()

    def mem(wildcards: Any, attempt: int) -> int:
        grown = base_mem * attempt
        return grown if cap is None else max(base_mem, min(grown, cap))

    return {"runtime": override.get("runtime", runtime), "mem_mb": mem}


def name_regex(names: Sequence[str]) -> str:
    """Wildcard constraint matching exactly these names (or nothing)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


def run_kind(config: Config) -> str:
    """demo | synthetic | paper: decides the caveat every table and figure carries."""
    return config["run"]["kind"]


# --- what changes a result, and what only changes how fast ----------------------------

#: Settings that change how fast or where a job runs, never what it writes. They stay out
#: of every rule's params, so changing one reruns nothing (``*`` is every model).
SPEED_SETTINGS: tuple[tuple[str, ...], ...] = (
    ("run", "threads_per_job"),
    # What the run may pay changes no answer: raising it after a stop reruns nothing.
    ("run", "budget_usd"),
    ("resources",),
    ("models", "*", "gpu"),
    ("models", "*", "concurrency"),
    ("models", "*", "use_batch_api"),
    # A price changes what the ledger records a call cost, never the reply: a corrected
    # price must not rerun (or, where the store misses, pay for) any answering job.
    ("models", "*", "price"),
    # The id expected to answer is what the preflight checks the reply's model against;
    # nothing sent changes with it.
    ("models", "*", "served_id"),
    ("models", "*", "engine", "gpu_memory_utilization"),
    ("models", "*", "engine", "tensor_parallel_size"),
    ("models", "*", "engine", "enforce_eager"),
)


def _without(tree: Any, path: tuple[str, ...]) -> Any:
    if not path or not isinstance(tree, Mapping):
        return tree
    head, rest = path[0], path[1:]
    out = dict(tree)
    keys = list(out) if head == "*" else [head] if head in out else []
    for key in keys:
        if rest:
            out[key] = _without(out[key], rest)
        else:
            del out[key]
    return out


def result_settings(config: Config) -> dict[str, Any]:
    """The config without its speed settings (the run manifest's record)."""
    out: Any = config
    for path in SPEED_SETTINGS:
        out = _without(out, path)
    return dict(out)


def model_settings(config: Config, model: str) -> dict[str, Any]:
    """What a model answers with (its identity, decoding context, retries), without the
    settings that only change how fast it answers: a rule's ``model`` param."""
    out: Any = config["models"][model]
    for path in SPEED_SETTINGS:
        if path[:2] == ("models", "*"):
            out = _without(out, path[2:])
    out = dict(out)
    if out.get("backend") in ("openai", "anthropic", "openai_compatible"):
        from context_effects.llm.capabilities import profile

        # The resolved profile, so that an edit of its entry in capabilities.yaml (data,
        # not code) reruns exactly the jobs of the models it changes.
        out["capabilities"] = profile(out)
    if out.get("backend") == "synthetic":
        # The world's seed changes every answer of a synthetic model, so it travels with
        # the model's settings: into its request keys (llm.factory.model_ref) and its backend.
        out["synthetic_seed"] = int(config.get("sampling", {}).get("synthetic_seed", 0))
    return out


def with_speed_settings(model_params: Mapping[str, Any], config: Config, model: str) -> dict[str, Any]:
    """A model's full settings inside its answering job: the result settings the rule
    passed as params, plus the speed settings of the run's config."""
    full = config["models"][model]
    out = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in model_params.items()}
    for path in SPEED_SETTINGS:
        if path[:2] != ("models", "*"):
            continue
        src, dst = full, out
        for key in path[2:-1]:
            src, dst = src.get(key, {}), dst.setdefault(key, {})
        if path[-1] in src:
            dst[path[-1]] = src[path[-1]]
    return out


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
    """Models answered by a hosted API or an HTTP server: a scheduler job each shard."""
    return models_with(config, lambda m: m["backend"] not in ("vllm", "synthetic"))


def synthetic_models(config: Config) -> list[str]:
    """Models whose replies come from a formula (the synthetic backend): milliseconds a
    request, nothing loaded, so their shards are answered on the submitting host."""
    return models_with(config, lambda m: m["backend"] == "synthetic")


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


def require_api_keys(config: Config, workflow: Any = None) -> None:
    """Stop before any job starts if a job of this run needs a missing API key.

    Only the answering jobs Snakemake is about to run count (their ``model``
    wildcard), so a run that needs no hosted model needs no key, whatever else the
    config names; without ``workflow`` (or before its DAG is built) every model the
    enabled studies call counts. The error names each missing variable and the
    models that need it. Replay makes no calls and needs none.

    Snakemake calls ``onstart`` only for a real run, with the DAG built: call this
    there. Called while the Snakefile is parsed, it only arranges for a dry run to
    warn about the keys its jobs would need (``secrets.once_dag_is_built``); a dry
    run never fails for a key.
    """
    from context_effects.llm.secrets import MissingSecretError, missing_env, once_dag_is_built

    if config["run"]["replay"]:
        return
    if workflow is not None and getattr(workflow, "dag", None) is None:
        once_dag_is_built(workflow, lambda: workflow.dryrun and require_api_keys(config, workflow))
        return
    models = _answering_models(config, workflow)
    missing = missing_env({m: config["models"][m] for m in models if m in config["models"]})
    if not missing:
        return
    if workflow is not None and workflow.dryrun:
        import logging

        # Formatted here: Snakemake's handlers print ``record.msg`` without its args.
        logging.getLogger("snakemake.logging").warning(
            f"Dry run: a real run of these jobs would stop before any job starts.\n{MissingSecretError(missing)}"
        )
        return
    raise MissingSecretError(missing)


def _answering_models(config: Config, workflow: Any = None) -> list[str]:
    """The models of the answering jobs Snakemake is about to run (every model the enabled
    studies call, without a built DAG)."""
    if workflow is None:
        return used_models(config)
    return sorted(
        {
            str(job.wildcards_dict["model"])
            for job in workflow.dag.needrun_jobs()
            if job.rule.name.startswith("answer_requests") and "model" in job.wildcards_dict
        }
    )


def require_served_models(config: Config, workflow: Any = None) -> None:
    """Stop before any job starts if a hosted model the run's answering jobs call is not
    served by its provider, or is answered by another model than the one it names
    (``llm.preflight``): the error names each model, its config key, the id and the
    provider's answer (or the id that answered). Call it from ``onstart``, after the keys
    are checked: a real run only, with the DAG built. Replay calls no provider, and
    ``run.preflight: false`` skips the check (no request at all, the probes included)."""
    if config["run"]["replay"] or not config["run"]["preflight"]:
        return
    import logging

    from context_effects.llm.preflight import check_served

    log = logging.getLogger("snakemake.logging")
    models = {m: config["models"][m] for m in _answering_models(config, workflow) if m in config["models"]}
    # The probes are paid: what they cost is said whether or not the run goes on.
    for warning in check_served(models, report=lambda cost: log.info(f"Model check: {cost}")):
        log.warning(f"Model check: {warning}")


def model_profiles(config: Config) -> str:
    """Each model the run calls with its capability profile (what its API is sent), one per line."""
    from context_effects.llm.capabilities import describe

    models = config["models"]
    return "\n".join(f"  {m} ({models[m]['backend']}, {models[m]['model_id']}): {describe(models[m])}"
                     for m in used_models(config))


def log_model_profiles(config: Config) -> None:
    """Print the models and their capability profiles when the workflow is parsed (also on a dry run)."""
    import logging

    if used_models(config):
        # Formatted here: Snakemake's handlers print ``record.msg`` without its args.
        logging.getLogger("snakemake.logging").info(f"Models and capability profiles:\n{model_profiles(config)}")
