# Configuration, validation and helpers shared by every rule file.

import re
from pathlib import Path

from context_effects.config import load_config, validate_config
from context_effects.conformity.judging import n_judge_shards
from context_effects.conformity.stages import n_shards, shard_label
from context_effects.datasets import DATASETS
from context_effects.llm.secrets import check_env

if not config:
    config.update(load_config(Path(workflow.basedir) / "config" / "config.yaml"))

# Validate (and fill defaults) while the workflow is parsed: a bad key or value
# stops the run here, before any job is scheduled.
_validated = validate_config(config)
config.clear()
config.update(_validated)


wildcard_constraints:
    dataset="|".join(DATASETS),


def rule_resources(rule_name, runtime, mem_mb):
    """Runtime (min) and memory (MB) of a rule; `resources:` in config overrides.

    Memory grows with the retry attempt so a job killed for memory on a cluster
    is resubmitted with more instead of failing the same way again.
    """
    override = config["resources"].get(rule_name, {})
    base_mem = override.get("mem_mb", mem_mb)
    return {
        "runtime": override.get("runtime", runtime),
        "mem_mb": lambda wildcards, attempt: base_mem * attempt,
    }


def dataset_config(dataset):
    return config["datasets"][dataset]


def items_path(dataset):
    return f"results/items/{dataset}.parquet"


def items_for(datasets):
    return [items_path(d) for d in datasets]


def raw_dataset_input(wildcards):
    ds = dataset_config(wildcards.dataset)
    if ds["source"] == "local":
        return ds["local_path"]
    return f"resources/datasets/{wildcards.dataset}.parquet"


def paper_targets():
    return ["results/run/manifest.json", "results/report/report.md"]


def study_outputs():
    """Every table and figure the enabled studies produce (the report's inputs)."""
    return (
        conformity_targets()
        + fit_targets()
        + metrics_targets()
        + amel_targets()
        + anchoring_targets()
    )


def report_tables(wildcards):
    return sorted(
        f
        for f in study_outputs()
        if f.startswith("results/tables/") and f.endswith(".csv")
    )


def report_figures(wildcards):
    return sorted(
        f
        for f in study_outputs()
        if f.startswith("results/figures/") and f.endswith((".pdf", ".png", ".svg"))
    )


# --- models and the LLM layer ------------------------------------------------


def models_with(predicate):
    return sorted(name for name, m in config["models"].items() if predicate(m))


def name_regex(names):
    """Wildcard constraint matching exactly these names (or nothing)."""
    return "|".join(re.escape(n) for n in names) if names else "(?!)"


VLLM_MODELS = models_with(lambda m: m["backend"] == "vllm")
REMOTE_MODELS = models_with(lambda m: m["backend"] != "vllm")
GGUF_MODELS = models_with(lambda m: m["source"]["kind"] == "gguf_package")


def used_models():
    """Models the enabled studies call (only these need engines or API keys)."""
    names = set()
    if config["conformity"]["enabled"]:
        c = config["conformity"]
        names |= set(c["generators"]) | set(c["judges"]) | set(c["hosted_judges"])
    if config["amel"]["enabled"]:
        names |= set(config["amel"]["models"])
    if config["anchoring"]["enabled"]:
        names |= set(config["anchoring"]["judges"])
    return sorted(names)


def model_files(wildcards):
    """A packaged GGUF model must be converted (once, by a rule) before vLLM loads it."""
    if wildcards.model in GGUF_MODELS:
        return config["models"][wildcards.model]["model_id"]
    return []


def model_gpus(wildcards):
    return config["models"][wildcards.model]["gpu"]["count"]


def model_gpu_type(wildcards):
    gpu = config["models"][wildcards.model]["gpu"]
    # The slurm executor turns gpu_model into --gpus=<model>:<n>; no model, no tag.
    return (gpu["model"] or "") if gpu["count"] else ""


def require_api_keys():
    """Stop before any job starts if a model the run calls needs a missing API key.

    Called from `onstart`, which Snakemake runs only for a real run (not for a dry
    run or lint), so a DAG can still be inspected on a machine without keys.
    Replay makes no calls and needs none.
    """
    if not config["run"]["replay"]:
        check_env({m: config["models"][m] for m in used_models()})


# --- Study C: generation ---------------------------------------------------------


def conformity_generators():
    return config["conformity"]["generators"]


def conformity_shards(dataset):
    gen = config["conformity"]["generation"]
    return [
        shard_label(i)
        for i in range(n_shards(dataset_config(dataset)["n_items"], gen["shard_size"]))
    ]


def conformity_executions():
    """(corpus, seed) of every generation run: the main corpus per seed label, and
    the self-contained decomposition corpus (seed 002 §2.2)."""
    c = config["conformity"]
    runs = [("main", s) for s in c["seeds"]]
    if c["decomposition"]["enabled"]:
        runs.append(("decomp", c["decomposition"]["seed"]))
    return runs


def conformity_response_shards(wildcards):
    return [
        f"results/responses/conformity/{corpus}-{stage}-s{seed}/{gen}/{wildcards.dataset}-{shard}.parquet"
        for corpus, seed in conformity_executions()
        for stage in ("round1", "round2")
        for gen in conformity_generators()
        for shard in conformity_shards(wildcards.dataset)
    ]


def synthetic_anchors():
    """A synthetic run's anchors come from the synthetic generator (tagged ±θ_a), see
    `anchor_requests`; a real run judges the fixed gold and attractor texts."""
    first = config["conformity"]["generators"][0]
    return config["models"][first]["backend"] == "synthetic"


def anchor_response_shards(wildcards):
    if not synthetic_anchors():
        return []
    gen = config["conformity"]["generators"][0]
    return [
        f"results/responses/conformity/anchors/{gen}/{wildcards.dataset}-{shard}.parquet"
        for shard in conformity_shards(wildcards.dataset)
    ]


def conformity_judges(dataset):
    """Open judges rate every dataset; hosted judges only `hosted_judge_datasets`."""
    c = config["conformity"]
    hosted = c["hosted_judges"] if dataset in c["hosted_judge_datasets"] else []
    return list(c["judges"]) + [j for j in hosted if j not in c["judges"]]


def judge_shards(dataset, judge):
    c = config["conformity"]
    n_items = dataset_config(dataset)["n_items"]
    hosted = judge in c["hosted_judges"]
    return [shard_label(i) for i in range(n_judge_shards(n_items, c, hosted))]


def judge_response_shards(wildcards):
    return [
        f"results/responses/conformity/judge/{judge}/{wildcards.dataset}-{shard}.parquet"
        for judge in conformity_judges(wildcards.dataset)
        for shard in judge_shards(wildcards.dataset, judge)
    ]


CONFORMITY_TABLES = (
    "table1",
    "table2",
    "table5",
    "agreement",
    "flip_share",
    "parse_failures",
)


def conformity_table_files(name):
    return [
        f"results/tables/conformity/{name}.csv",
        f"results/tables/conformity/{name}.tex",
    ]


def conformity_targets():
    if not config["conformity"]["enabled"]:
        return []
    datasets = config["conformity"]["datasets"]
    return [
        *expand("results/conformity/answers/{dataset}.parquet", dataset=datasets),
        *expand("results/conformity/ratings/{dataset}.parquet", dataset=datasets),
        *[f for name in CONFORMITY_TABLES for f in conformity_table_files(name)],
        "results/figures/conformity/rating_distributions.pdf",
        "results/figures/conformity/rating_distributions.csv",
    ]
