"""AMEL requests: one shard per model holding every domain, ordered for prefix-cache reuse.

How P(Yes) is measured
----------------------
Every comparison uses one measurement for all of its models, so there are two:

* ``samples`` (every model): ``n_samples`` requests per cell (``sample_index``
  0..n-1) at temperature 1, each reply parsed as Yes/No. The primary analysis
  reads sample 0 alone (``single_call``: one call per cell, the seed's design and
  its bill); with ``n_samples`` > 1 the share of Yes among a cell's replies is the
  all-samples secondary analysis. Anthropic's API ignores the temperature (the
  record says so). Each sampled request carries its own seed, a hash of
  ``amel.seed`` and its model, domain, item, cell and sample index
  (``sample_seed``): vLLM seeds a generator per request, so requests sharing a
  seed share their noise, and with one seed per sample index the single call of
  every cell would be one threshold on P(Yes) per model, not a draw
  (docs/llm-layer.md, "Sampling seeds").
* The baseline's uncertainty (the entropy strata) comes from the cheapest source
  that measures it: a model's first-token probabilities where they are measured,
  else ``baseline_samples`` sampled replies of each baseline cell (its baselines
  then get ``max(n_samples, baseline_samples)`` requests; the extra ones serve the
  strata only: ``scores.probabilities``).
* ``first_token`` (the secondary analysis, the seed's logprobs figure): one
  greedy request per cell with ``max_tokens = 1`` and probe tokens Yes/No (and
  their lower-case forms), only for models whose capability profile says
  logprobs are available (``logprobs_available``) and with
  ``amel.first_token`` on; vLLM reads exact first-position probabilities,
  OpenAI-style APIs their top logprobs.

Each request's meta names its method, and every later row keeps it.

Ordering
--------
Long histories dominate the cost. Requests are written sorted by their
messages, so requests that share a history prefix (one test item's samples and
methods of a cell, its cells of one k up to their first differing verdict, its
k = 5 history inside its k = 10 one) are adjacent and reach the engine in the
same or consecutive batches: vLLM's automatic prefix caching then computes each
shared prefix once (``bench/amel_prefix_cache.py`` measures it). Histories are
drawn per test item, so prefixes are shared within an item, not across items. Histories never cross domains, so
the domains follow one another in the shard, each in that order; one shard per
model means one model load per model for the whole study.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects.amel.design import Cell, DomainItems, as_transcript, build_messages, correct_verdict, design_cells
from context_effects.amel.items import read_domain_items
from context_effects.llm.capabilities import conform_sampling, profile
from context_effects.llm.factory import model_ref
from context_effects.llm.seeds import request_seed
from context_effects.llm.shards import write_request_shard
from context_effects.llm.types import LLMRequest, Sampling

PROBE_TOKENS = ("Yes", "No", "yes", "no")
PRIMARY_METHOD = "samples"
SECONDARY_METHOD = "first_token"
METHODS = (PRIMARY_METHOD, SECONDARY_METHOD)
SAMPLE_TEMPERATURE = 1.0
SAMPLE_MAX_TOKENS = 4
# Used only until context_effects.models.capabilities exists: engines we run ourselves
# give token probabilities; hosted APIs only where a profile says so.


def logprobs_available(config: Mapping[str, Any], model_name: str) -> bool:
    """Whether a model's capability profile (``llm.capabilities``) says first-token logprobs are available."""
    return bool(profile(config["models"][model_name])["logprobs"])


def methods_for(amel_cfg: Mapping[str, Any], logprobs: bool) -> tuple[str, ...]:
    """The measurements one model gets: samples always, first-token probabilities where available."""
    if amel_cfg["first_token"] and logprobs:
        return METHODS
    return (PRIMARY_METHOD,)


def cell_meta(
    cell: Cell,
    item: Mapping[str, Any],
    model_name: str,
    method: str,
    history_repeats: int,
    saturation_share: float = 1.0,
) -> dict[str, Any]:
    """Bookkeeping of one request (not part of its key); also the synthetic backend's AMEL contract."""
    meta: dict[str, Any] = {
        "study": "amel",
        "item_id": item["item_id"],
        "domain": item["domain"],
        "condition": cell.condition,
        "framing": cell.framing,
        "position": cell.position,
        "cell": cell.label,
        "answer": correct_verdict(item["answer"], cell.framing),
        "model": model_name,
        "method": method,
        "history_repeats": history_repeats,
    }
    if cell.condition != "baseline":
        meta["k"] = cell.k
    if cell.condition in ("yes_saturated", "no_saturated"):
        # Net excess of prevailing over opposing verdicts (= k when the share is 1);
        # the biased block for position runs.
        meta["n_biased"] = cell.n_biased if cell.position else max(1, 2 * cell.n_biased - cell.k)
        meta["saturation_share"] = None if cell.position else float(saturation_share)
        meta["prevailing_share"] = cell.n_biased / cell.k
    elif cell.condition == "balanced":
        # No prevailing verdict; k keeps the simulator's and the recovery check's contract.
        meta["n_biased"] = cell.k
    return meta


def sample_seed(run_seed: int, model_name: str, domain: str, item_id: str, cell: Cell, index: int) -> int:
    """The sampling seed of one sampled request: its own, from the run seed and the request's
    identity (``llm.seeds``), so that every cell, item and sample is an independent draw,
    as the seed's API calls were, on an engine that seeds each request's generator
    (docs/llm-layer.md, "Sampling seeds")."""
    return request_seed(run_seed, "amel", PRIMARY_METHOD, model_name, domain, item_id, cell.label, index)


def domain_requests(
    items: pd.DataFrame,
    model_name: str,
    model_cfg: Mapping[str, Any],
    amel_cfg: Mapping[str, Any],
    *,
    logprobs: bool | None = None,
) -> list[LLMRequest]:
    """Every request of one model on one domain's test items, in prefix-sharing order
    (``logprobs``: the model's capability; None reads it from ``model_cfg`` alone)."""
    if logprobs is None:
        logprobs = logprobs_available({"models": {model_name: model_cfg}}, model_name)
    seed = int(amel_cfg["seed"])
    ref = model_ref(model_name, model_cfg)
    mode = model_cfg["mode"]
    methods = methods_for(amel_cfg, logprobs)
    n_samples = int(amel_cfg["n_samples"])
    # Without first-token probabilities a baseline's uncertainty is measured by sampling it.
    n_baseline = n_samples if SECONDARY_METHOD in methods else max(n_samples, int(amel_cfg["baseline_samples"]))
    first_token: Sampling | None = None
    sampled: Sampling | None = None
    for method in methods:
        # Built to the model's capability profile: the store key holds what is sent.
        if method == SECONDARY_METHOD:
            # Greedy, and read as probabilities: the seed draws nothing, so one serves every cell.
            asked = Sampling(temperature=0.0, max_tokens=1, seed=seed, probe_tokens=PROBE_TOKENS)
            first_token = conform_sampling(asked, model_cfg, model_name)
        else:
            asked = Sampling(temperature=SAMPLE_TEMPERATURE, max_tokens=SAMPLE_MAX_TOKENS, seed=seed)
            sampled = conform_sampling(asked, model_cfg, model_name)
    cells = design_cells(amel_cfg)
    domain = DomainItems(items)
    share = float(amel_cfg["saturation_share"])
    requests = []
    for item in domain.rows:
        if not item["is_test"]:
            continue
        for cell in cells:
            messages, facts = build_messages(domain, item["item_id"], cell, seed=seed)
            if mode == "completion":
                messages = (("user", as_transcript(messages)),)
            samplings: list[tuple[str, int, Sampling]] = []
            if sampled is not None:
                n = n_baseline if cell.condition == "baseline" else n_samples
                for index in range(n):
                    own = sampled
                    if sampled.seed is not None:
                        own = dataclasses.replace(
                            sampled, seed=sample_seed(seed, model_name, item["domain"], item["item_id"], cell, index))
                    samplings.append((PRIMARY_METHOD, index, own))
            if first_token is not None:
                samplings.append((SECONDARY_METHOD, 0, first_token))
            for method, index, sampling in samplings:
                meta = cell_meta(cell, item, model_name, method, facts["history_repeats"], share)
                if method == PRIMARY_METHOD:
                    # Replies past n_samples (a baseline's extra samples) measure its uncertainty only.
                    meta["n_samples"] = n_samples
                requests.append(
                    LLMRequest(
                        model=ref,
                        messages=messages,
                        sampling=sampling,
                        sample_index=index,
                        mode=mode,
                        meta=meta,
                    )
                )
    requests.sort(key=lambda r: (r.messages, r.meta["method"], r.sample_index))
    return requests


def write_model_shard(
    items_paths: Sequence[str | Path],
    out_path: str | Path,
    *,
    model_name: str,
    model_cfg: Mapping[str, Any],
    amel_cfg: Mapping[str, Any],
    logprobs: bool | None = None,
) -> int:
    """The model's one request shard: every domain's requests (``domain_requests``), the
    domains in the order of ``items_paths``."""
    requests = [
        request
        for path in items_paths
        for request in domain_requests(read_domain_items(path), model_name, model_cfg, amel_cfg, logprobs=logprobs)
    ]
    write_request_shard(out_path, requests)
    return len(requests)
