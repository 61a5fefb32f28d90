"""Study A's part of the DAG: paths and per-rule settings of workflow/rules/amel.smk.

Plain functions of the validated config (``context_effects.config.validate_config``),
so the rule file holds rules only and each helper is unit-tested. Every settings
function returns exactly the keys its job reads, so changing another setting reruns
nothing of that rule. The study's targets are its registry's files
(``context_effects.amel.outputs.targets``): the registry imports this module, not the
other way round.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from context_effects.dag import items_path

Config = Mapping[str, Any]

PROBABILITIES = "results/amel/probabilities.parquet"
BIAS_SCORES = "results/amel/bias_scores.parquet"

#: What ``amel_items`` reads: which items are tested and how benchmark questions become items.
ITEM_KEYS = ("items_per_domain", "answers_per_question", "seed")
#: What ``amel_requests`` reads: the cells of the design and how P(Yes) is measured.
DESIGN_KEYS = (
    "history_lengths",
    "saturation_share",
    "position_history_length",
    "position_biased_turns",
    "positions",
    "framing_swap",
    "framing_history_lengths",
    "balanced_history_lengths",
    "first_token",
    "n_samples",
    "baseline_samples",
    "seed",
)
#: What ``amel_scores`` reads.
SCORE_KEYS = ("entropy_threshold_bits",)
#: The model fields the bias-score table carries (provider, display name, size, backend).
MODEL_INFO_KEYS = ("backend", "family", "display_name", "params_b")


def roster(config: Config) -> list[str]:
    """The seed's models: every pooled estimate (overall, by domain, provider, k) is of these."""
    return list(config["amel"]["models"])


def extra_models(config: Config) -> list[str]:
    """Models run with the same design but outside the seed's roster, reported per model only."""
    extra = list(config["amel"].get("extra_models", []))
    unknown = [m for m in extra if m not in config["models"]]
    if unknown:
        raise ValueError(f"`amel.extra_models` names model(s) {unknown} not defined under `models`")
    both = sorted(set(extra) & set(roster(config)))
    if both:
        raise ValueError(f"`amel.extra_models` repeats roster model(s) {both} from `amel.models`; list each once")
    return extra


def models(config: Config) -> list[str]:
    """Every model asked: the roster, then the extras."""
    return roster(config) + extra_models(config)


def logprobs_available(config: Config, model: str) -> bool:
    from context_effects.amel.requests import logprobs_available as available

    return available(config, model)


def domains(config: Config) -> list[str]:
    """Benchmark domains (answer verification) in config order, then item-file domains by name."""
    a = config["amel"]
    clash = sorted(set(a["benchmark_datasets"]) & set(a["item_files"]))
    if clash:
        raise ValueError(
            f"amel.item_files uses the benchmark name(s) {clash} as domain names; "
            "rename those domains (benchmark domains are built from results/items/)"
        )
    return list(a["benchmark_datasets"]) + list(a["item_files"])


def settings(config: Config, keys: tuple[str, ...]) -> dict[str, Any]:
    """Only the settings a rule uses, so changing another one does not rerun it."""
    return {k: config["amel"][k] for k in keys}


def item_settings(config: Config) -> dict[str, Any]:
    return settings(config, ITEM_KEYS)


def design_settings(config: Config) -> dict[str, Any]:
    return settings(config, DESIGN_KEYS)


def score_settings(config: Config) -> dict[str, Any]:
    return settings(config, SCORE_KEYS)


def score_models(config: Config) -> dict[str, dict[str, Any]]:
    """Per AMEL model the fields ``scores.bias_scores`` copies into its table, its place in
    its provider's size order and whether it is an extra (outside the seed's roster)."""
    extras = set(extra_models(config))
    out: dict[str, dict[str, Any]] = {}
    for rank, m in enumerate(models(config)):
        out[m] = {k: config["models"][m][k] for k in MODEL_INFO_KEYS}
        out[m]["extra_model"] = m in extras
        out[m]["list_rank"] = rank
    return out


def domain_items(domain: str) -> str:
    return f"results/amel/items/{domain}.parquet"


def domain_source(config: Config, domain: str) -> dict[str, str]:
    """The benchmark item table or the item file a domain is built from."""
    item_files = config["amel"]["item_files"]
    if domain in item_files:
        return {"item_file": item_files[domain]}
    return {"item_table": items_path(domain)}


def domain_item_tables(config: Config) -> list[str]:
    """Every domain's item table, in domain order (the order of a model's request shard)."""
    return [domain_items(d) for d in domains(config)]


#: A model's one request shard holds every domain: one model load per model for the study.
SHARD = "domains"


def response_shard(model: str) -> str:
    return f"results/responses/amel/judge/{model}/{SHARD}.parquet"


def response_shards(config: Config) -> list[str]:
    """Every model's response shard (answered by the generic rules of llm.smk)."""
    return [response_shard(m) for m in models(config)]


def request_shard(model: str) -> str:
    return f"results/requests/amel/judge/{model}/{SHARD}.parquet"


def request_shards(config: Config) -> list[str]:
    """The request shard of every ``response_shards`` entry, in the same order (the
    scores rule checks each response shard against its requests)."""
    return [request_shard(m) for m in models(config)]


def enabled(config: Config) -> bool:
    return bool(config["amel"]["enabled"] and models(config))
