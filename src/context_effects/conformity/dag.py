"""Study C's DAG helpers: file paths, shard lists, per-rule settings and targets, as
plain functions of the validated config (the rule files under workflow/rules/ hold
rules only; see docs/architecture.md, "DAG helpers").

Which measurement-model fits exist is decided once, by
``context_effects.measurement.pipeline.fit_plan``; which tables and figures exist, by
the study registry ``context_effects.conformity.outputs.REGISTRY``, which imports this
module and so lists the study's targets (``outputs.targets``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from context_effects.conformity.judging import items_per_judge_shard
from context_effects.conformity.stages import Block, items_per_shard, packed_shards
from context_effects.dag import items_path, request_shard_of, rule_resources
from context_effects.measurement.pipeline import (
    BLIND_QUALITY,
    find_spec,
    fit_plan,
    sampler_settings,
)
from context_effects.measurement.pipeline import fit_families as spec_families
from context_effects.measurement.records import fit_keys

Config = Mapping[str, Any]

#: What one measurement-model fit writes into its folder.
FIT_FILES = ("posterior.nc", "summary.csv", "diagnostics.json", "quality.parquet")
#: The per-answer metric stages (one rule each) of the external validation.
METRIC_KINDS = ("text", "neural", "classifiers")


def datasets(config: Config) -> list[str]:
    return list(config["conformity"]["datasets"])


def generators(config: Config) -> list[str]:
    return list(config["conformity"]["generators"])


# --- generation ------------------------------------------------------------------------


def generation_shards(config: Config) -> dict[str, list[Block]]:
    """Generation shard name -> its item blocks, the same cut at every generation stage
    (blocks of shard_size/8 items; the small last blocks of several datasets share a shard)."""
    size = items_per_shard(config["conformity"]["generation"]["shard_size"])
    return packed_shards({d: config["datasets"][d]["n_items"] for d in datasets(config)}, size)


def shards(config: Config, dataset: str) -> list[str]:
    """Names of the generation shards that hold items of a dataset."""
    return _holding(generation_shards(config), dataset)


def _holding(shard_blocks: Mapping[str, list[Block]], dataset: str) -> list[str]:
    return [name for name, blocks in shard_blocks.items() if any(d == dataset for d, _ in blocks)]


def _blocks_of(shard_blocks: Mapping[str, list[Block]], shard: str, what: str) -> list[Block]:
    if shard not in shard_blocks:
        raise ValueError(f"{shard!r} is not a {what} of this config (known: {sorted(shard_blocks)})")
    return shard_blocks[shard]


def shard_blocks(config: Config, shard: str) -> list[list[Any]]:
    """The (dataset, block index) pairs of a generation shard (a rule param)."""
    return [[d, i] for d, i in _blocks_of(generation_shards(config), shard, "generation shard")]


def shard_item_tables(config: Config, shard: str) -> dict[str, str]:
    """Dataset -> item table of every dataset with items in a generation shard."""
    return {d: items_path(d) for d, _ in _blocks_of(generation_shards(config), shard, "generation shard")}


def executions(config: Config) -> list[tuple[str, int]]:
    """(corpus, seed) of every generation run: the main corpus per seed label, and the
    self-contained decomposition corpus (seed 002, "Experimental design")."""
    c = config["conformity"]
    runs = [("main", s) for s in c["seeds"]]
    if c["decomposition"]["enabled"]:
        runs.append(("decomp", c["decomposition"]["seed"]))
    return runs


def response_shards(config: Config, dataset: str) -> list[str]:
    """Every Round-1 and Round-2 response shard of a dataset (the answers table's inputs)."""
    return [
        f"results/responses/conformity/{corpus}-{stage}-s{seed}/{gen}/{shard}.parquet"
        for corpus, seed in executions(config)
        for stage in ("round1", "round2")
        for gen in generators(config)
        for shard in shards(config, dataset)
    ]


def request_shards(config: Config, dataset: str) -> list[str]:
    """The request shard of every ``response_shards`` entry, in the same order (the
    answers rule checks each response shard against its requests)."""
    return [request_shard_of(p) for p in response_shards(config, dataset)]


def synthetic_anchors(config: Config) -> bool:
    """A synthetic run's anchors come from the synthetic generator (tagged ±θ_a, see
    ``conformity.requests.anchor_requests``); a real run judges the fixed gold and
    attractor texts."""
    first = generators(config)[0]
    return config["models"][first]["backend"] == "synthetic"


def anchor_generator(config: Config) -> list[str]:
    """The generator that writes synthetic anchors (the first), as a one-name list."""
    return generators(config)[:1]


def anchor_response_shards(config: Config, dataset: str) -> list[str]:
    if not synthetic_anchors(config):
        return []
    gen = generators(config)[0]
    return [
        f"results/responses/conformity/anchors/{gen}/{shard}.parquet"
        for shard in shards(config, dataset)
    ]


def anchor_request_shards(config: Config, dataset: str) -> list[str]:
    """The request shard of every ``anchor_response_shards`` entry, in the same order."""
    return [request_shard_of(p) for p in anchor_response_shards(config, dataset)]


# --- judging ---------------------------------------------------------------------------


def all_judges(config: Config) -> list[str]:
    c = config["conformity"]
    return list(c["judges"]) + list(c["hosted_judges"])


def judges(config: Config, dataset: str) -> list[str]:
    """Open judges rate every dataset; hosted judges only ``hosted_judge_datasets``."""
    c = config["conformity"]
    hosted = c["hosted_judges"] if dataset in c["hosted_judge_datasets"] else []
    return list(c["judges"]) + [j for j in hosted if j not in c["judges"]]


def is_hosted_judge(config: Config, judge: str) -> bool:
    return judge in config["conformity"]["hosted_judges"]


def judge_shard_blocks(config: Config, judge: str) -> dict[str, list[Block]]:
    """Judge shard name -> its item blocks, over the datasets the judge rates (blocks
    sized from ``judging.shard_size``, see ``judge_block``)."""
    size = judge_block(config, judge)["items_per_shard"]
    rated = {d: config["datasets"][d]["n_items"] for d in datasets(config) if judge in judges(config, d)}
    return packed_shards(rated, size)


def judge_shards(config: Config, dataset: str, judge: str) -> list[str]:
    """Names of one judge's shards that hold items of a dataset."""
    return _holding(judge_shard_blocks(config, judge), dataset)


def judge_block(config: Config, judge: str) -> dict[str, Any]:
    """How one judge's shards cut the items: items per shard (sized from
    ``judging.shard_size``) and whether the judge is a hosted audit judge (it rates the
    primary main corpus and the anchors only, so more items fit one shard)."""
    hosted = is_hosted_judge(config, judge)
    return {"items_per_shard": items_per_judge_shard(config["conformity"], hosted), "hosted": hosted}


def judge_blocks(config: Config, judge: str, shard: str) -> list[list[Any]]:
    """The (dataset, block index) pairs of one judge's shard (a rule param)."""
    return [[d, i] for d, i in _blocks_of(judge_shard_blocks(config, judge), shard, f"judge shard of {judge}")]


def judge_tables(config: Config, judge: str, shard: str) -> dict[str, dict[str, str]]:
    """``item_tables`` and ``answers``: dataset -> table, for the datasets in one judge's shard."""
    names = dict.fromkeys(d for d, _ in _blocks_of(judge_shard_blocks(config, judge), shard, f"judge shard of {judge}"))
    return {"item_tables": {d: items_path(d) for d in names},
            "answers": {d: f"results/conformity/answers/{d}.parquet" for d in names}}


def judge_inputs(config: Config, judge: str, shard: str) -> dict[str, list[str]]:
    """``judge_tables`` as the rule's input lists."""
    return {key: list(tables.values()) for key, tables in judge_tables(config, judge, shard).items()}


def judge_response_shards(config: Config, dataset: str) -> list[str]:
    return [
        f"results/responses/conformity/judge/{judge}/{shard}.parquet"
        for judge in judges(config, dataset)
        for shard in judge_shards(config, dataset, judge)
    ]


def judge_request_shards(config: Config, dataset: str) -> list[str]:
    """The request shard of every ``judge_response_shards`` entry, in the same order."""
    return [request_shard_of(p) for p in judge_response_shards(config, dataset)]


def injection_table(dataset: str) -> str:
    """Per-answer injection flags of a dataset (``conformity.injection``)."""
    return f"results/conformity/injection/{dataset}.parquet"


def injection_rules_id() -> str:
    """The injection rule set's fingerprint (``conformity.injection.rules_id``), a param of
    the flag rule: a changed rule reruns the flags, the ratings and their tables."""
    from context_effects.conformity.injection import rules_id

    return rules_id()


def injection_tables(config: Config) -> list[str]:
    """Every dataset's injection flags; none when Study C is off (the run report's input)."""
    if not config["conformity"]["enabled"]:
        return []
    return [injection_table(d) for d in datasets(config)]


def answers_tables(config: Config) -> list[str]:
    return [f"results/conformity/answers/{d}.parquet" for d in datasets(config)]


def ratings_tables(config: Config) -> list[str]:
    return [f"results/conformity/ratings/{d}.parquet" for d in datasets(config)]


def revisions_tables(config: Config) -> list[str]:
    return [f"results/conformity/revisions/{d}.parquet" for d in datasets(config)]


# --- measurement model ---------------------------------------------------------------------


def fit_variants(config: Config) -> list[str]:
    return sorted({spec.variant for spec in fit_plan(config)})


def fit_spec(config: Config, dataset: str, variant: str) -> dict[str, Any]:
    return find_spec(config, dataset, variant).as_dict()


def fit_families(config: Config, dataset: str, variant: str) -> dict[str, str]:
    """Model family of the fit's judges and generators (self-rating exclusion, Table 17)."""
    return spec_families(config, find_spec(config, dataset, variant))


def fit_settings(config: Config) -> dict[str, Any]:
    """The sampler settings alone (``conformity.fit`` without plan and diagnostic keys)."""
    return sampler_settings(config)


def fit_key(config: Config, dataset: str, variant: str) -> dict[str, Any]:
    """What a reader of one fit's files compares their record with (``measurement.records``)."""
    return fit_keys(config, [find_spec(config, dataset, variant)])[f"{dataset}/{variant}"]


def fit_threads(config: Config) -> int:
    """One core per chain when the chains run in parallel (one JAX host device each)."""
    f = config["conformity"]["fit"]
    if f["method"] == "nuts" and f["chain_method"] == "parallel":
        return f["chains"]
    return 1


def quality_tables(config: Config) -> list[str]:
    """Per-answer blind latent quality of each dataset, every execution (its ``blind-quality`` fit)."""
    return [f"results/conformity/quality/{spec.dataset}.parquet" for spec in fit_plan(config)
            if spec.kind == BLIND_QUALITY]


# --- external validation and text metrics ------------------------------------------------


def metric_rows(config: Config, kind: str) -> list[str]:
    return [f"results/conformity/metrics/{kind}/{d}.parquet" for d in datasets(config)]


def metric_infos(config: Config, kinds: tuple[str, ...] = METRIC_KINDS) -> list[str]:
    return [f"results/conformity/metrics/{kind}/{d}.json" for kind in kinds for d in datasets(config)]


def merged_metrics(config: Config) -> list[str]:
    return [f"results/conformity/metrics/{d}.parquet" for d in datasets(config)]


#: Per kind of per-answer metric: default runtime (min) and memory (MB) of its job, and
#: whether it loads a model that runs on the validation GPU; a `resources:` entry under
#: the rule's name (every kind) and then under the kind's ``resources_key`` overrides
#: runtime and memory.
METRIC_JOBS = {
    "text": {"runtime": 120, "mem_mb": 4000, "gpu": False, "resources_key": "conformity_text_metrics"},
    "neural": {"runtime": 120, "mem_mb": 8000, "gpu": True, "resources_key": "conformity_neural_metrics"},
    "classifiers": {"runtime": 240, "mem_mb": 32000, "gpu": True, "resources_key": "conformity_classifier_metrics"},
}


def metric_inputs(config: Config, kind: str, dataset: str) -> dict[str, str]:
    """A dataset's answers and items; the text metrics also need the offline NLTK data."""
    inputs = {"answers": f"results/conformity/answers/{dataset}.parquet", "item_table": items_path(dataset)}
    if kind == "text":
        inputs["nltk_data"] = "resources/nltk_data"
    return inputs


def metric_threads(config: Config, kind: str) -> int:
    """The text metrics are single-threaded; the model-based kinds use the run's threads."""
    return config["run"]["threads_per_job"] if METRIC_JOBS[kind]["gpu"] else 1


#: The rule that runs every kind of per-answer metric (workflow/rules/conformity_metrics.smk).
METRIC_RULE = "conformity_answer_metrics"
#: `resources:` keys that are not rule names: one per kind of metric job.
RESOURCE_KEYS = tuple(job["resources_key"] for job in METRIC_JOBS.values())
#: A classifier job with no classifier to load for its dataset reads answers and writes
#: an empty table: it needs no more than a text-metric job.
IDLE_CLASSIFIER_JOB = {"runtime": 30, "mem_mb": 4000}


def _loads_classifier(config: Config, dataset: str) -> bool:
    val = config["conformity"]["validation"]
    return bool(val["truth_judge"] or val["info_judge"]) and dataset in val["truth_judge_datasets"]


def metric_resource(config: Config, name: str) -> Callable[..., Any]:
    """One resource (runtime, mem_mb, gpu, gpu_model) of the per-answer metric rule, as a
    function of its wildcards and attempt: each kind has its own defaults and overrides,
    and a classifier job is sized by whether it loads a classifier for its dataset."""
    gpu = config["conformity"]["validation"]["gpu"]

    def value(wildcards: Any, attempt: int = 1) -> Any:
        job = METRIC_JOBS[wildcards.kind]
        if wildcards.kind == "classifiers" and not _loads_classifier(config, wildcards.dataset):
            job = {**job, **IDLE_CLASSIFIER_JOB, "gpu": False}
        if name == "gpu":
            return gpu["count"] if job["gpu"] else 0
        if name == "gpu_model":
            return (gpu["model"] or "") if job["gpu"] and gpu["count"] else ""
        res = rule_resources(config, METRIC_RULE, job["runtime"], job["mem_mb"], keys=(job["resources_key"],))
        return res["mem_mb"](wildcards, attempt) if name == "mem_mb" else res[name]

    return value
