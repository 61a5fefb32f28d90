"""Study H's simulated judge in the synthetic backend (``context_effects.llm.backends.synthetic``).

Meta contract
-------------
::

    {"study": "anchoring", "task_id": str,
     "condition": "blind" | "framing" | "anchor",
     "gold_score": int, "prior_score": int (required for anchor),
     "repetition": int (optional, bookkeeping only)}

``E_blind = gold + anchoring_bias + u_task``, ``u_task ~ N(0,
anchoring_task_bias_sd)`` per task (:func:`anchoring_blind_mean`); ::

    x = E_blind + anchoring_noise_sd·ε
        + 1[framing, or anchor when anchoring_framing_in_anchor]·δ_framing
        + 1[anchor]·λ·(prior_score − E_blind)
    score = clip(round_half_up(x), 1, 5),   reply {"score": score}

(the anchor prompt also says the answer was reviewed before, so by default it
carries the framing shift too; anchor − framing then isolates λ).

:func:`expected_pull` gives the scorer's primary estimand in expectation (repetition
means by convolution, a tie scored 0), the value a run should recover.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from context_effects.anchoring.judging import SCORE_MAX, SCORE_MIN
from context_effects.llm.backends.synthetic import (
    SyntheticBackend,
    choice,
    meta_int,
    param_number,
    require,
    seeded,
)
from context_effects.llm.types import LLMRequest

ANCHORING_CONDITIONS = ("blind", "framing", "anchor")

#: Study H's planted values (seed 001), with their meaning.
DEFAULTS: dict[str, Any] = {
    "anchoring_bias": 0.0,  # judge leniency in score points (E_blind - gold, task-averaged)
    "anchoring_task_bias_sd": 0.3,  # SD of the per-task misjudgement u_task
    "anchoring_noise_sd": 0.5,  # SD of per-judgment noise before rounding
    "anchoring_lambda": 0.3,  # λ: pull toward the displayed prior score
    "anchoring_framing_shift": 0.1,  # δ_framing: shift from "was reviewed before"
    "anchoring_framing_in_anchor": True,  # anchor prompts carry δ_framing too
}

#: Per-family values; only with ``profile: <family>`` in the config.
PROFILES: dict[str, dict[str, Any]] = {
    "qwen": {"anchoring_bias": 0.1},
    "mistral": {"anchoring_bias": 0.3},
    "gemma": {"anchoring_bias": -0.2},
    "llama": {"anchoring_bias": 0.0},
    "gpt-4o": {"anchoring_bias": -0.1},
    "gpt-5": {"anchoring_bias": -0.1},
}

NESTED: dict[str, tuple[str, ...]] = {}


def validate(p: Mapping[str, Any]) -> dict[str, Any]:
    """Study H's planted values of ``p``, checked and normalised."""
    out: dict[str, Any] = {}
    for key in ("anchoring_bias", "anchoring_framing_shift", "anchoring_lambda"):
        out[key] = param_number(key, p[key])
    for key in ("anchoring_task_bias_sd", "anchoring_noise_sd"):
        out[key] = param_number(key, p[key], lo=0.0)
    if not isinstance(p["anchoring_framing_in_anchor"], bool):
        raise ValueError("synthetic param 'anchoring_framing_in_anchor' must be true or false")
    out["anchoring_framing_in_anchor"] = p["anchoring_framing_in_anchor"]
    return out


def planted(eff: Mapping[str, Any]) -> dict[str, Any]:
    """Study H's section of ``planted_effects``."""
    return {
        "bias": eff["anchoring_bias"],
        "task_bias_sd": eff["anchoring_task_bias_sd"],
        "noise_sd": eff["anchoring_noise_sd"],
        "lambda": eff["anchoring_lambda"],
        "framing_shift": eff["anchoring_framing_shift"],
        "framing_in_anchor": eff["anchoring_framing_in_anchor"],
    }


def anchoring_blind_mean(backend: SyntheticBackend, task_id: str, gold_score: float) -> float:
    """E_blind = gold + anchoring_bias + u_task (latent, before noise, rounding, clipping)."""
    u = seeded("anchoring-task", backend.seed, backend.model_name, str(task_id)).standard_normal()
    return float(gold_score + backend.params["anchoring_bias"] + backend.params["anchoring_task_bias_sd"] * u)


def score_probs(mu: float, sd: float) -> np.ndarray:
    """P(score = 1..5) of the reply rule ``clip(round_half_up(x), 1, 5)`` for x ~ N(mu, sd)."""
    from scipy.stats import norm

    if sd <= 0:
        probs = np.zeros(SCORE_MAX - SCORE_MIN + 1)
        probs[int(min(SCORE_MAX, max(SCORE_MIN, math.floor(mu + 0.5)))) - SCORE_MIN] = 1.0
        return probs
    cdf = [float(norm.cdf(k + 0.5, mu, sd)) for k in range(SCORE_MIN, SCORE_MAX)] + [1.0]
    return np.diff([0.0, *cdf])


def condition_mean(backend: SyntheticBackend, task_id: str, gold_score: float, condition: str,
                   prior_score: float | None = None) -> float:
    """The latent mean of one condition's x (the formula in the module docstring, before noise)."""
    p = backend.params
    blind = anchoring_blind_mean(backend, task_id, gold_score)
    x = blind
    if condition == "framing" or (condition == "anchor" and p["anchoring_framing_in_anchor"]):
        x += p["anchoring_framing_shift"]
    if condition == "anchor":
        x += p["anchoring_lambda"] * (float(prior_score) - blind)
    return x


def expected_pull(backend: SyntheticBackend, task_id: str, gold_score: float, prior_score: float,
                  repetitions: int, reference: str = "blind") -> float:
    """E[sign(prior - R) * (A - R)] exactly as the scorer's primary estimand defines it.

    R and A are the means of ``repetitions`` scores of the ``reference`` condition and of the
    anchor condition (independent given the task); R's distribution by convolution, and a
    tie (prior = R) has sign 0, so it contributes 0.
    """
    sd = backend.params["anchoring_noise_sd"]
    scores = np.arange(SCORE_MIN, SCORE_MAX + 1)
    anchor = float(scores @ score_probs(condition_mean(backend, task_id, gold_score, "anchor", prior_score), sd))
    ref_p = score_probs(condition_mean(backend, task_id, gold_score, reference), sd)
    total = np.array([1.0])
    for _ in range(int(repetitions)):
        total = np.convolve(total, ref_p)
    means = (np.arange(len(total)) + SCORE_MIN * repetitions) / repetitions
    return float(np.sum(total * np.sign(float(prior_score) - means) * (anchor - means)))


def answer(backend: SyntheticBackend, req: LLMRequest, meta: Mapping[str, Any], rng: np.random.Generator):
    what = "study='anchoring'"
    require(meta, ("task_id", "condition", "gold_score"), what)
    cond = choice(meta, "condition", ANCHORING_CONDITIONS, what)
    gold = meta_int(meta, "gold_score", what)
    prior = None
    if cond == "anchor":
        require(meta, ("prior_score",), f"{what} condition='anchor'")
        prior = meta_int(meta, "prior_score", what)
    p = backend.params
    eps = rng.standard_normal()
    blind = anchoring_blind_mean(backend, meta["task_id"], gold)
    x = blind + p["anchoring_noise_sd"] * eps
    if cond == "framing" or (cond == "anchor" and p["anchoring_framing_in_anchor"]):
        x += p["anchoring_framing_shift"]
    if cond == "anchor":
        x += p["anchoring_lambda"] * (prior - blind)
    score = int(min(SCORE_MAX, max(SCORE_MIN, math.floor(x + 0.5))))
    return json.dumps({"score": score}), "stop", {}
