"""AMEL requests: one shard per model x domain, ordered for prefix-cache reuse.

How P(Yes) is measured (``amel.probability_method``)
----------------------------------------------------
* ``first_token``: one greedy request per cell with ``max_tokens = 1`` and
  probe tokens Yes/No (and their lower-case forms); vLLM reads their exact
  first-position probabilities, OpenAI-style APIs their top logprobs.
* ``samples``: ``n_samples`` requests per cell (``sample_index`` 0..n-1) at
  temperature 1, each reply parsed as Yes/No; P(Yes) is the share of Yes among
  the parsed replies. Anthropic exposes no logprobs, so ``auto`` uses this
  there (and its API also ignores the temperature: the record says so).

``auto`` picks ``first_token`` for vllm, openai, openai_compatible and
synthetic models and ``samples`` for anthropic.

Ordering
--------
Long shared histories dominate the cost. Requests are written sorted by their
messages, so requests that share a history prefix (every test item of a
domain after the same k turns; k = 5 is a prefix of k = 10 when the share is
1) are adjacent and reach the engine in the same or consecutive batches:
vLLM's automatic prefix caching then computes each shared prefix once
(``bench/amel_prefix_cache.py`` measures it).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects.amel.design import Cell, DomainItems, as_transcript, build_messages, correct_verdict, design_cells
from context_effects.amel.items import read_domain_items
from context_effects.llm.factory import model_ref
from context_effects.llm.shards import write_request_shard
from context_effects.llm.types import LLMRequest, Sampling

PROBE_TOKENS = ("Yes", "No", "yes", "no")
LOGPROB_BACKENDS = frozenset({"vllm", "openai", "openai_compatible", "synthetic"})
SAMPLE_TEMPERATURE = 1.0
SAMPLE_MAX_TOKENS = 4


def probability_method(model_name: str, model_cfg: Mapping[str, Any], setting: str) -> str:
    """``first_token`` or ``samples`` for this model under ``amel.probability_method``."""
    backend = model_cfg["backend"]
    if setting == "samples":
        return "samples"
    if setting == "auto":
        return "samples" if backend == "anthropic" else "first_token"
    if setting == "logprobs":
        if backend == "anthropic":
            raise ValueError(
                f"model {model_name!r}: the anthropic backend exposes no token probabilities; "
                "set amel.probability_method to 'auto' or 'samples'"
            )
        return "first_token"
    raise ValueError(f"amel.probability_method must be auto, logprobs or samples, got {setting!r}")


def cell_meta(cell: Cell, item: Mapping[str, Any], model_name: str, method: str, history_repeats: int) -> dict[str, Any]:
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
        # Net excess of prevailing over opposing verdicts (= k when the share is 1);
        # the biased block for position runs.
        meta["n_biased"] = cell.n_biased if cell.position else max(1, 2 * cell.n_biased - cell.k)
    return meta


def domain_requests(
    items: pd.DataFrame,
    model_name: str,
    model_cfg: Mapping[str, Any],
    amel_cfg: Mapping[str, Any],
) -> list[LLMRequest]:
    """Every request of one model on one domain's test items, in prefix-sharing order."""
    seed = int(amel_cfg["seed"])
    method = probability_method(model_name, model_cfg, amel_cfg["probability_method"])
    ref = model_ref(model_name, model_cfg)
    mode = model_cfg["mode"]
    if method == "first_token":
        samplings = [(0, Sampling(temperature=0.0, max_tokens=1, seed=seed, probe_tokens=PROBE_TOKENS))]
    else:
        samplings = [
            (i, Sampling(temperature=SAMPLE_TEMPERATURE, max_tokens=SAMPLE_MAX_TOKENS, seed=seed + i))
            for i in range(int(amel_cfg["n_samples"]))
        ]
    cells = design_cells(amel_cfg)
    domain = DomainItems(items)
    requests = []
    for item in domain.rows:
        if not item["is_test"]:
            continue
        for cell in cells:
            messages, facts = build_messages(domain, item["item_id"], cell, seed=seed)
            if mode == "completion":
                messages = (("user", as_transcript(messages)),)
            meta = cell_meta(cell, item, model_name, method, facts["history_repeats"])
            for index, sampling in samplings:
                requests.append(
                    LLMRequest(
                        model=ref,
                        messages=messages,
                        sampling=sampling,
                        sample_index=index,
                        mode=mode,
                        meta=dict(meta),
                    )
                )
    requests.sort(key=lambda r: (r.messages, r.sample_index))
    return requests


def write_domain_shard(
    items_path: str | Path,
    out_path: str | Path,
    *,
    model_name: str,
    model_cfg: Mapping[str, Any],
    amel_cfg: Mapping[str, Any],
) -> int:
    requests = domain_requests(read_domain_items(items_path), model_name, model_cfg, amel_cfg)
    write_request_shard(out_path, requests)
    return len(requests)
