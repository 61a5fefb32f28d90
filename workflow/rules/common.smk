# Configuration, validation and helpers shared by every rule file.

from pathlib import Path

from context_effects.config import load_config, validate_config
from context_effects.datasets import DATASETS

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
    return ["results/run/manifest.json"]
