"""Study H's part of the DAG: paths and per-rule settings of workflow/rules/anchoring.smk.

Plain functions of the validated config (``context_effects.config.validate_config``),
so the rule file holds rules only and each helper is unit-tested. Every settings
function returns exactly the keys its job reads, so changing another setting reruns
nothing of that rule. The study's targets are its registry's files
(``context_effects.anchoring.outputs.targets``): the registry imports this module, not the
other way round.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from context_effects.dag import items_for

Config = Mapping[str, Any]

TASKS = "results/anchoring/tasks.parquet"

#: What ``anchoring_tasks`` reads: how tasks are sampled and their prior scores assigned.
TASK_KEYS = ("tasks_per_dataset", "answer_kinds", "seed", "verdict_threshold")
#: What ``anchoring_requests`` reads: the decoding settings, repetitions and the order seed.
REQUEST_KEYS = ("temperature", "top_p", "max_tokens", "repetitions", "max_attempts", "seed")
#: What ``anchoring_score`` reads: the run's settings (recorded in the result file) and the scorer's.
SCORE_KEYS = REQUEST_KEYS + ("verdict_threshold", "bootstrap_resamples", "bootstrap_method", "confidence_level")
#: What a result file records of the run.
RUN_KEYS = ("label", "kind")


def judges(config: Config) -> list[str]:
    return list(config["anchoring"]["judges"])


def settings(config: Config, keys: tuple[str, ...]) -> dict[str, Any]:
    """Only the settings a rule uses, so changing another one reruns nothing here."""
    return {k: config["anchoring"][k] for k in keys}


def task_settings(config: Config) -> dict[str, Any]:
    return settings(config, TASK_KEYS)


def request_settings(config: Config) -> dict[str, Any]:
    return settings(config, REQUEST_KEYS)


def score_settings(config: Config) -> dict[str, Any]:
    return settings(config, SCORE_KEYS)


def run_info(config: Config) -> dict[str, Any]:
    """The run's label and kind, as a result file records them."""
    return {k: config["run"][k] for k in RUN_KEYS}


def benchmark_datasets(config: Config) -> list[str]:
    return list(config["anchoring"]["benchmark_datasets"])


def task_inputs(config: Config) -> dict[str, list[str]]:
    """The benchmarks' item tables (in ``benchmark_datasets`` order) and the task files."""
    return {
        "item_tables": items_for(benchmark_datasets(config)),
        "task_files": list(config["anchoring"]["task_files"]),
    }


def request_shard(judge: str) -> str:
    """One judge's model run as a request shard (written by ``anchoring_requests``)."""
    return f"results/requests/anchoring/judge/{judge}/tasks.parquet"


def response_shard(judge: str) -> str:
    """The answered run (by the generic rules of llm.smk); the scorer checks it against ``request_shard``."""
    return f"results/responses/anchoring/judge/{judge}/tasks.parquet"


def result_path(judge: str) -> str:
    return f"results/anchoring/runs/{judge}.json"


def results(config: Config) -> list[str]:
    """The result file of every judge's model run, in config order."""
    return [result_path(j) for j in judges(config)]


def enabled(config: Config) -> bool:
    return bool(config["anchoring"]["enabled"] and judges(config))
