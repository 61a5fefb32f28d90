"""Study H judge requests: one model run = every task x condition x repetition (seed 001 "Run rules").

* **Fresh context.** Every judgment is its own request holding only the system
  prompt and one user turn; no request carries another's reply.
* **Identical fields across conditions.** Model reference, system prompt,
  decoding settings, output schema and mode are the same for every request of a
  run; within a task the answer, rubric and output instruction are the same in
  all three conditions (only the history block differs, see ``prompts``).
* **Repetitions.** ``sample_index`` = repetition: a repetition is a new request
  (new cache key) and a new draw from the model's distribution. Every judgment
  has its own sampling seed, a hash of ``seed`` and its judge, task, condition
  and repetition (``judgment_seed``), reproducible on engines that honour
  per-request seeds. vLLM seeds a generator per request, so judgments sharing a
  seed share their noise: one seed per repetition would pair each task's three
  conditions on one draw, where the protocol's judgments are independent calls
  (docs/llm-layer.md, "Sampling seeds").
  The paper config samples at temperature 1 and top_p 1 (the model's own
  distribution, no truncation), so the spread across repetitions is sampling
  variation; at temperature 0 a deterministic engine would return one draw
  repeated. The seed and the settings are recorded with every judgment.
* **Order.** The judgments of a run are put in a random order (``numpy`` generator
  seeded with ``[seed, sha256(judge) prefix]``), which mixes tasks and conditions;
  the position is recorded as ``meta["order"]``. Backends answer a shard in that
  order (batched engines see one batch).

``meta`` follows the synthetic backend's Study H contract (``study``, ``task_id``,
``condition``, ``gold_score``, ``prior_score``, ``repetition``) plus bookkeeping.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from context_effects.anchoring.judging import SCORE_SCHEMA
from context_effects.anchoring.prompts import CONDITIONS, SYSTEM_PROMPT, TEMPLATE_VERSION, render_user
from context_effects.llm.capabilities import conform_sampling
from context_effects.llm.factory import model_ref
from context_effects.llm.seeds import request_seed
from context_effects.llm.shards import write_request_shard
from context_effects.llm.types import LLMRequest, Sampling

STUDY = "anchoring"


def judgment_seed(seed: int, judge: str, task_id: str, condition: str, repetition: int) -> int:
    """The sampling seed of one judgment: its own, from the run seed and the judgment's identity (``llm.seeds``)."""
    return request_seed(seed, STUDY, judge, task_id, condition, repetition)


def sampling_for(
    settings: Mapping[str, Any], model_cfg: Mapping[str, Any], *, judge: str, task_id: str, condition: str,
    repetition: int,
) -> Sampling:
    """The judgment's sampling as sent to the model (its capability profile, ``llm.capabilities``)."""
    return conform_sampling(
        Sampling(
            temperature=float(settings["temperature"]),
            top_p=float(settings["top_p"]),
            max_tokens=int(settings["max_tokens"]),
            seed=judgment_seed(int(settings["seed"]), judge, task_id, condition, repetition),
        ),
        model_cfg,
    )


def order_seed(seed: int, judge: str) -> list[int]:
    """The seed sequence of a run's order: the configured seed and a per-judge salt."""
    return [int(seed), int.from_bytes(hashlib.sha256(judge.encode()).digest()[:8], "big")]


def order_rng(seed: int, judge: str) -> np.random.Generator:
    return np.random.default_rng(order_seed(seed, judge))


def judge_requests(
    tasks: pd.DataFrame, judge: str, model_cfg: Mapping[str, Any], settings: Mapping[str, Any]
) -> list[LLMRequest]:
    """Every request of one model run, in the run's randomised order."""
    if model_cfg.get("mode", "chat") != "chat":
        raise ValueError(
            f"judge {judge!r} is a base model (mode: {model_cfg.get('mode')}); Study H needs chat models that "
            "follow the rubric prompt: remove it from anchoring.judges"
        )
    reps = int(settings["repetitions"])
    if reps < 1:
        raise ValueError(f"anchoring.repetitions must be at least 1, got {reps}")
    ref = model_ref(judge, model_cfg)
    cells = []
    for t in tasks.sort_values("task_id").to_dict("records"):
        for cond in CONDITIONS:
            for rep in range(reps):
                cells.append((t, cond, rep))
    perm = order_rng(int(settings["seed"]), judge).permutation(len(cells))
    out = []
    for order, idx in enumerate(perm):
        t, cond, rep = cells[idx]
        user = render_user(cond, t["question"], t["answer"], t["rubric"], t["prior_score"], t["prior_verdict"])
        meta = {
            "study": STUDY,
            "judge": judge,
            "task_id": t["task_id"],
            "source": t["source"],
            "condition": cond,
            "gold_score": int(t["gold_score"]),
            "prior_score": int(t["prior_score"]),
            "prior_verdict": t["prior_verdict"],
            "repetition": rep,
            "order": order,
            "template_version": TEMPLATE_VERSION,
        }
        out.append(
            LLMRequest(
                model=ref,
                messages=(("system", SYSTEM_PROMPT), ("user", user)),
                sampling=sampling_for(settings, model_cfg, judge=judge, task_id=t["task_id"], condition=cond,
                                      repetition=rep),
                output_schema=SCORE_SCHEMA,
                sample_index=rep,
                mode="chat",
                meta=meta,
            )
        )
    return out


def write_judge_shard(
    tasks: pd.DataFrame, out_path: str | Path, judge: str, model_cfg: Mapping[str, Any], settings: Mapping[str, Any]
) -> int:
    requests = judge_requests(tasks, judge, model_cfg, settings)
    write_request_shard(
        out_path, requests, reply_policy="anchoring.score", max_attempts=int(settings["max_attempts"])
    )
    return len(requests)
