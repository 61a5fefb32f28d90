"""Study C generation as file-to-file steps (what the Snakemake scripts call).

Work is cut into shards of items, the same cut at every stage, so Round-2 shard k
needs only Round-1 shard k: a job never waits for a whole dataset, and a rerun of
one shard touches nothing else. A shard is one block of a dataset's items or, for
the small last blocks, several datasets' blocks together (``packed_shards``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects.conformity import prompts
from context_effects.conformity.replies import generation_policy
from context_effects.conformity.requests import (
    anchor_requests,
    anchor_texts,
    answers_frame,
    round1_requests,
    round2_requests,
)
from context_effects.datasets import read_items
from context_effects.llm.capabilities import served_model
from context_effects.llm.shards import read_response_shard, write_request_shard

#: A trial yields at most 8 answers (Round 1, no-peer, 3 content or 6 peer arms).
ANSWERS_PER_TRIAL = 8


def items_per_shard(shard_size: int) -> int:
    """Items per shard so that the largest stage stays within ``shard_size`` requests."""
    return max(1, shard_size // ANSWERS_PER_TRIAL)


def shard_label(index: int) -> str:
    return f"{index:03d}"


def item_block(items: pd.DataFrame, shard: int, shard_size: int) -> pd.DataFrame:
    k = items_per_shard(shard_size)
    return items.iloc[shard * k : (shard + 1) * k]


#: One block of a shard: (dataset, block index); block i holds items i*k .. (i+1)*k - 1.
Block = tuple[str, int]


def block_name(dataset: str, index: int) -> str:
    return f"{dataset}-{shard_label(index)}"


def packed_shards(n_items: Mapping[str, int], items_per_block: int) -> dict[str, list[Block]]:
    """Shard name -> its item blocks, for datasets of ``n_items`` items cut into blocks
    of ``items_per_block``.

    A full block is a shard of its own, named ``<dataset>-<block>``, so a change to one
    dataset's items reruns only its own shards. Each dataset's last block, when it is not
    full, shares a shard with the other datasets' last blocks while their items fit in one
    block (first fit, in dataset order); the shard is named by its blocks joined with
    ``+``. A small run therefore asks one answering job per model and stage instead of one
    per dataset (each job pays the model load), and a run of full blocks keeps one shard
    per block.
    """
    shards: dict[str, list[Block]] = {}
    open_packs: list[tuple[list[Block], list[int]]] = []  # (blocks, [items held])
    for dataset, n in n_items.items():
        n_blocks = max(1, math.ceil(n / items_per_block))
        for index in range(n_blocks):
            size = min(items_per_block, n - index * items_per_block)
            if size >= items_per_block:
                shards[block_name(dataset, index)] = [(dataset, index)]
                continue
            for blocks, held in open_packs:
                if held[0] + size <= items_per_block:
                    blocks.append((dataset, index))
                    held[0] += size
                    break
            else:
                open_packs.append(([(dataset, index)], [size]))
    for blocks, _ in open_packs:
        shards["+".join(block_name(d, i) for d, i in blocks)] = blocks
    return shards


def shard_items(items_paths: Mapping[str, str | Path], blocks: Sequence[Block], shard_size: int) -> pd.DataFrame:
    """The items of a shard's blocks, block after block (``items_paths``: dataset -> item table)."""
    frames = [item_block(read_items(items_paths[d]), i, shard_size) for d, i in blocks]
    return pd.concat(frames, ignore_index=True)


def _retry_settings(settings: Mapping[str, Any]) -> dict[str, float]:
    return {
        "retry_temperature_step": float(settings["retry_temperature_step"]),
        "retry_temperature_cap": float(settings["retry_temperature_cap"]),
    }


def _policy(settings: Mapping[str, Any]) -> dict[str, Any]:
    # seed 002 App. A.6: malformed or empty completions are asked again, at most
    # `max_attempts` asks in all, temperature +step per re-ask (capped), seed +1.
    return {
        "reply_policy": "conformity.generation",
        "policy_params": _retry_settings(settings),
        "max_attempts": int(settings["max_attempts"]),
    }


def write_round1_shard(
    items_paths: Mapping[str, str | Path],
    out_path: str | Path,
    *,
    blocks: Sequence[Block],
    generator: str,
    model_cfg: Mapping[str, Any],
    settings: Mapping[str, Any],
    seed: int,
    corpus: str,
) -> int:
    block = shard_items(items_paths, blocks, settings["shard_size"])
    requests = round1_requests(block, generator, model_cfg, settings, seed, corpus=corpus)
    write_request_shard(out_path, requests, **_policy(settings))
    return len(requests)


def read_responses(
    responses_path: str | Path, requests_path: str | Path | None = None
) -> tuple[list, list[str | None]]:
    """The requests of a response shard and their texts (None where the call never succeeded).

    With ``requests_path`` the responses must answer that request shard one to one
    (``llm.shards.check_response_coverage``).
    """
    requests, table = read_response_shard(responses_path, ["text", "ok"], requests_path=requests_path)
    return requests, _texts(table)


def _texts(table: pd.DataFrame) -> list[str | None]:
    return [t if ok else None for t, ok in zip(table["text"], table["ok"])]


def realised_answers(responses_path: str | Path, requests_path: str | Path | None = None) -> dict[str, str | None]:
    """item_id -> the realised answer text of a Round-1 response shard (None if it failed)."""
    requests, texts = read_responses(responses_path, requests_path)
    realised: dict[str, str | None] = {}
    for req, text in zip(requests, texts):
        item_id = req.meta["item_id"]
        if item_id in realised:
            # A shard can hold several datasets: their item ids must not collide.
            raise ValueError(f"{responses_path}: item id {item_id!r} answered twice in one Round-1 shard")
        realised[item_id] = text
    return realised


def write_round2_shard(
    items_paths: Mapping[str, str | Path],
    round1_responses: str | Path,
    out_path: str | Path,
    *,
    blocks: Sequence[Block],
    generator: str,
    model_cfg: Mapping[str, Any],
    settings: Mapping[str, Any],
    peers: Mapping[str, Any],
    seed: int,
    corpus: str,
) -> int:
    block = shard_items(items_paths, blocks, settings["shard_size"])
    requests = round2_requests(
        block,
        realised_answers(round1_responses),
        generator,
        model_cfg,
        settings,
        seed,
        corpus=corpus,
        authority_variants=tuple(peers["authority_variants"]),
        n_speakers=int(peers["n_speakers"]),
        # A trial whose Round 1 never produced an answer has nothing to branch from.
        on_missing="skip",
    )
    write_request_shard(out_path, requests, **_policy(settings))
    return len(requests)


def write_anchor_shard(
    items_paths: Mapping[str, str | Path],
    out_path: str | Path,
    *,
    blocks: Sequence[Block],
    generator: str,
    model_cfg: Mapping[str, Any],
    settings: Mapping[str, Any],
    seed: int,
) -> int:
    """Synthetic runs only: anchors "written" by the synthetic generator at exactly ±θ_a.

    The synthetic judge reads quality from a tag in the answer, which the fixed
    gold/attractor texts lack (see ``anchor_requests``).
    """
    block = shard_items(items_paths, blocks, settings["shard_size"])
    requests = anchor_requests(block, generator, model_cfg, settings, seed)
    write_request_shard(out_path, requests, **_policy(settings))
    return len(requests)


def _paired(
    response_paths: Sequence[str | Path], request_paths: Sequence[str | Path] | None
) -> list[tuple[str | Path, str | Path | None]]:
    if request_paths is None:
        return [(p, None) for p in response_paths]
    if len(request_paths) != len(response_paths):
        raise ValueError(f"{len(response_paths)} response shards but {len(request_paths)} request shards")
    return list(zip(response_paths, request_paths))


#: Generation bookkeeping added to every generated answer (seed 002 App. A.6: how
#: the accepted answer was obtained). Fixed anchor texts have none.
GENERATION_COLUMNS = ("attempt", "temperature", "sampling_seed", "finish_reason", "messages_json", "served_model",
                      "system_fingerprint")


def generation_frame(
    responses_path: str | Path, settings: Mapping[str, Any], requests_path: str | Path | None = None
) -> pd.DataFrame:
    """Answers of one response shard with the attempt and sampling settings that produced each.

    The final settings are recomputed by replaying the shard's own re-ask rule
    ``attempt`` times, so they cannot drift from what the runner sent. With
    ``requests_path`` the responses must answer that request shard one to one.
    """
    requests, extra = read_response_shard(
        responses_path, ["text", "ok", "attempt", "finish_reason", "notes"], requests_path=requests_path
    )
    frame = answers_frame(requests, _texts(extra))
    reask = generation_policy(**_retry_settings(settings)).reask
    temps, seeds = [], []
    for req, attempt in zip(requests, extra["attempt"]):
        final = req
        for a in range(1, int(attempt or 0) + 1):
            final = reask(final, a, "")
        temps.append(final.sampling.temperature)
        seeds.append(final.sampling.seed)
    frame["attempt"] = extra["attempt"].fillna(0).astype(int).to_numpy()
    frame["temperature"] = temps
    frame["sampling_seed"] = pd.array(seeds, dtype="Int64")
    frame["finish_reason"] = extra["finish_reason"].to_numpy()
    frame["messages_json"] = [prompts.canonical_messages(req.messages) for req in requests]
    served = [served_model(req, notes) for req, notes in zip(requests, extra["notes"])]
    frame["served_model"] = [s for s, _ in served]
    frame["system_fingerprint"] = [f for _, f in served]
    return frame


def collect_answers(
    items_path: str | Path,
    response_paths: Sequence[str | Path],
    anchor_paths: Sequence[str | Path],
    settings: Mapping[str, Any],
    request_paths: Sequence[str | Path] | None = None,
    anchor_request_paths: Sequence[str | Path] | None = None,
) -> pd.DataFrame:
    """One row per answer of a dataset (the items of ``items_path``): every generated
    answer plus the two anchors per item.

    Anchors are the fixed gold and attractor texts, or, in a synthetic run, the
    synthetic generator's tagged anchors from ``anchor_paths``. ``settings`` (the
    generation config) adds ``GENERATION_COLUMNS`` to generated rows.
    ``request_paths`` / ``anchor_request_paths``, parallel to ``response_paths`` /
    ``anchor_paths``, are the request shards those files answer: each response
    shard must cover its requests one to one, so a lost answer fails the job
    instead of vanishing from the table (the rule always passes them).
    """
    pairs = _paired(response_paths, request_paths) + _paired(anchor_paths, anchor_request_paths)
    frames = [generation_frame(path, settings, requests_path=req) for path, req in pairs]
    items = read_items(items_path)
    # A shard can hold other datasets' blocks too: keep the answers to this dataset's items.
    frames = [f[f["item_id"].isin(items["item_id"])] for f in frames]
    if not anchor_paths:
        frames.append(anchor_texts(items))
    frames = [f for f in frames if len(f)]
    answers = pd.concat(frames, ignore_index=True)
    dup = answers["answer_id"].duplicated()
    if dup.any():
        raise ValueError(f"duplicate answer ids: {answers.loc[dup, 'answer_id'].head().tolist()}")
    return answers
