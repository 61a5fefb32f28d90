"""Study C's simulated model in the synthetic backend (``context_effects.llm.backends.synthetic``).

Meta contract
-------------
1. Generator::

       {"study": "conformity", "role": "generator",
        "item_id": str, "generator": str, "condition": str}

   ``condition`` ∈ round1, no_peer, content_correct, content_wrong,
   content_mixed, peer_correct, peer_wrong, peer_mixed, anchor_correct,
   anchor_incorrect. Latent quality::

       θ = b_t + η[condition] + σ_θ·ε,   b_t ~ N(quality_mean, σ_b), ε ~ N(0, 1)

   ``b_t`` is drawn once per ``(item_id, generator)`` (shared by all answers of
   the trial, :func:`trial_baseline`); ``η[round1] = 0``; anchors are exactly
   ``anchor_correct → +θ_a`` and ``anchor_incorrect → −θ_a`` (no baseline, no
   noise). Reply text: ``"[synthetic q=+0.4123] <short sentence>"`` (θ to 4
   decimals). With probability ``empty_rate`` the reply is ``""``
   (finish_reason "stop") to exercise the generation-retry path.

   Execution noise (seed 002 §2.2: greedy reruns reproduced only 54% of Round 1
   answers): a trial is *unstable* with probability ``round1_mismatch_rate``
   (a draw seeded by ``(item_id, generator)`` alone). A stable trial's Round-1 ε
   is seeded by the trial too, so every execution (sampling seed 42/43/44)
   writes the same text; an unstable trial's ε comes from the request, so each
   execution writes a different one. The planted share of trials whose Round-1
   text matches across executions (all of them, or any two) is therefore
   ``1 − round1_mismatch_rate``.

2. Judge::

       {"study": "conformity", "role": "judge", "judge": str,
        "pass": "blind" | "informed", "d": +1 | 0 | -1,
        "reference": "augmented" | "free"   (optional),
        "generator": str                     (optional)}

   ``d`` is required for ``pass == "informed"`` (all-correct +1, mixed 0,
   all-wrong −1) and ignored for blind. θ is read from the **last**
   ``[synthetic q=…]`` tag in the last user message (error result if none).
   ``μ = α'(θ − β) + 1[informed]·γ·d + 1[generator == judge]·self_preference``
   with ``α' = α·reference_free_alpha_scale`` when ``reference == "free"``
   (reference-free anchor scoring, seed 002 Table 5), else ``α``. Rating
   ``y ~ OrderedLogistic(μ, κ)`` (4 cutpoints, categories 1–5), reply
   ``{"rating": y}``. With probability ``parse_failure_rate`` the reply is
   malformed instead, one of four kinds chosen uniformly: prose without JSON,
   an out-of-range rating (6–10), truncated JSON (finish_reason "length"), or a
   string rating.

``meta["generator"]`` / ``meta["judge"]`` only identify the trial (for ``b_t``)
and self-ratings; the planted values are those of the backend's model.

3. Values by dataset and corpus. The seed's estimates differ by dataset (its Table 3
   per dataset, its Tables 10-12 one decomposition per dataset), and the decomposition
   corpus is a run of its own whose shifts the seed estimates separately. So the planted
   values of one request are the model's values, then ``by_dataset[meta["dataset"]]``
   (any of :data:`DATASET_KEYS`), and, for a request whose ``meta["corpus"]`` is
   ``decomposition``, the shifts ``decomposition_eta`` (of the dataset's layer, else the
   model's) over ``eta``. ``b_t`` uses the dataset's ``quality_mean`` and ``sigma_b``;
   it is still drawn once per ``(item_id, generator)``, so both corpora share it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from context_effects.conformity.conditions import CONDITIONS, ROUND2_CONDITIONS
from context_effects.llm.backends.synthetic import (
    MetaError,
    SyntheticBackend,
    choice,
    param_number,
    require,
    seeded,
    sigmoid,
)
from context_effects.llm.types import LLMRequest

GENERATION_CONDITIONS = CONDITIONS
#: Conditions with a planted shift η (round1 is the reference, η = 0; anchors are pinned).
ETA_CONDITIONS = ROUND2_CONDITIONS
JUDGE_PASSES = ("blind", "informed")
JUDGE_D = (1, 0, -1)
REFERENCE_KINDS = ("augmented", "free")
N_CATEGORIES = 5

TAG_RE = re.compile(r"\[synthetic q=([+-]?(?:\d+(?:\.\d*)?|\.\d+))\]")

#: Study C's planted values, with their meaning.
DEFAULTS: dict[str, Any] = {
    # --- generation (seed 002 Eq. 6) ---
    "quality_mean": 0.0,  # mean of the trial baseline b_t: the generator's mean quality μ_g (generator-mean fits)
    "sigma_b": 0.7,  # SD of b_t across trials (question x generator)
    "sigma_theta": 0.25,  # SD of the answer-level deviation σ_θ·ε
    "theta_anchor": 1.5,  # anchors pinned at ±θ_a
    # Round 2 condition shift η_c relative to Round 1 (η[round1] = 0), built as
    # Δ_sp + Δ_content,k + Δ_pp,c (seed 002 Eq. 1-4): no_peer = Δ_sp = -0.05,
    # content = Δ_sp + {correct +0.05, wrong -0.20, mixed -0.10},
    # peer = content + presentation residual {-0.10, -0.20, -0.10}; all-wrong most harmful.
    "eta": {
        "no_peer": -0.05,
        "content_correct": 0.00,
        "content_wrong": -0.25,
        "content_mixed": -0.15,
        "peer_correct": -0.10,
        "peer_wrong": -0.45,
        "peer_mixed": -0.25,
    },
    # Shifts of the decomposition corpus's answers (keys not given: ``eta``'s); the seed
    # estimates them from a run of their own (its Tables 10-12), not from the main corpus.
    "decomposition_eta": {},
    # Dataset -> values that differ on that dataset (any of DATASET_KEYS); module docstring, 3.
    "by_dataset": {},
    "empty_rate": 0.02,  # share of generations returned empty (exercises the retry path)
    # share of trials whose Round-1 text differs between executions (0: greedy reruns reproduce it)
    "round1_mismatch_rate": 0.0,
    # --- judging (seed 002 Eq. 7-8) ---
    "alpha": 1.5,  # discrimination α_j
    "beta": 0.0,  # severity β_j
    "gamma": 0.0,  # informed-pass peer-context loading γ_j (>0 toward peers, <0 away)
    "kappa": (-2.25, -0.75, 0.5, 1.75),  # shared ordered cutpoints (4 → ratings 1-5)
    "parse_failure_rate": 0.03,  # share of judge replies that are malformed
    "reference_free_alpha_scale": 0.5,  # α multiplier when meta reference == "free"
    "self_preference": 0.0,  # μ shift when meta generator == meta judge (self-rating)
}

#: Per-family values (seed 002 Tables 3/4 in spirit); used only when a model's config names
#: the family (``synthetic: {profile: qwen}``), never chosen from the model name.
PROFILES: dict[str, dict[str, Any]] = {
    "qwen": {
        "quality_mean": 0.20,
        "eta": {
            "no_peer": -0.02,
            "content_correct": 0.04,
            "content_wrong": -0.19,
            "content_mixed": -0.14,
            "peer_correct": -0.05,
            "peer_wrong": -0.40,
            "peer_mixed": -0.22,
        },
        "alpha": 1.6,
        "beta": 0.10,
        "gamma": -0.01,
    },
    "mistral": {
        "quality_mean": -0.10,
        "eta": {
            "no_peer": 0.03,
            "content_correct": 0.04,
            "content_wrong": -0.18,
            "content_mixed": -0.11,
            "peer_correct": -0.06,
            "peer_wrong": -0.37,
            "peer_mixed": -0.19,
        },
        "alpha": 1.2,
        "beta": -0.20,
        "gamma": 0.64,
    },
    "gemma": {
        "quality_mean": 0.10,
        "eta": {
            "no_peer": 0.08,
            "content_correct": 0.05,
            "content_wrong": -0.06,
            "content_mixed": -0.01,
            "peer_correct": -0.04,
            "peer_wrong": -0.23,
            "peer_mixed": -0.07,
        },
        "alpha": 1.8,
        "beta": 0.20,
        "gamma": -0.33,
    },
    "llama": {
        "quality_mean": 0.00,
        "eta": {
            "no_peer": 0.00,
            "content_correct": 0.17,
            "content_wrong": -0.24,
            "content_mixed": -0.07,
            "peer_correct": -0.01,
            "peer_wrong": -0.52,
            "peer_mixed": -0.25,
        },
        "alpha": 1.4,
        "beta": 0.00,
        "gamma": -0.24,
    },
    "gpt-4o": {"alpha": 2.0, "beta": 0.30, "gamma": -0.10},
    "gpt-5": {"alpha": 2.0, "beta": 0.25, "gamma": -0.17},
}

NESTED: dict[str, tuple[str, ...]] = {"eta": ETA_CONDITIONS, "decomposition_eta": ETA_CONDITIONS}
#: What ``by_dataset.<dataset>`` may set: the latent scale's values and the judges', not the
#: rates of the machinery (empty replies, parse failures, Round-1 mismatches) or the anchors,
#: which the fit pins at one θ_a for every dataset.
DATASET_KEYS = ("quality_mean", "sigma_b", "sigma_theta", "eta", "decomposition_eta", "alpha", "beta", "gamma",
                "kappa", "reference_free_alpha_scale", "self_preference")
#: The corpus whose answers take ``decomposition_eta`` (``conformity.requests.CORPORA``).
DECOMPOSITION_CORPUS = "decomposition"


def _validate_by_dataset(p: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    by = p["by_dataset"]
    if not isinstance(by, Mapping):
        raise ValueError(f"synthetic param 'by_dataset' must map dataset names to values, got {by!r}")
    out: dict[str, dict[str, Any]] = {}
    for dataset, over in by.items():
        if not isinstance(over, Mapping):
            raise ValueError(f"synthetic param 'by_dataset.{dataset}' must be a mapping, got {over!r}")
        bad = sorted(set(over) - set(DATASET_KEYS))
        if bad:
            raise ValueError(f"unknown keys in synthetic param 'by_dataset.{dataset}': {bad}; "
                             f"allowed: {list(DATASET_KEYS)}")
        try:
            merged = validate(with_overrides({**base, "by_dataset": {}}, over), nested_ok=False)
        except ValueError as e:
            raise ValueError(f"synthetic param 'by_dataset.{dataset}': {e}") from None
        out[str(dataset)] = {k: merged[k] for k in over}
    return out


def with_overrides(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with the values of ``over``; mappings among them (η) updated key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = {**base[key], **value} if key in NESTED and isinstance(value, Mapping) else value
    return out


def request_params(backend: SyntheticBackend, meta: Mapping[str, Any]) -> dict[str, Any]:
    """The planted values of one request: the model's, then its dataset's, then its corpus's
    shifts (module docstring, 3). Cached on the backend: a shard asks thousands of times."""
    dataset, corpus = meta.get("dataset"), meta.get("corpus")
    cache = backend.__dict__.setdefault("_conformity_params", {})
    key = (dataset, corpus == DECOMPOSITION_CORPUS)
    if key not in cache:
        p = backend.params
        if dataset in p["by_dataset"]:
            p = with_overrides(p, p["by_dataset"][dataset])
        if key[1]:
            p = {**p, "eta": {**p["eta"], **p["decomposition_eta"]}}
        cache[key] = p
    return cache[key]


def validate(p: Mapping[str, Any], nested_ok: bool = True) -> dict[str, Any]:
    """Study C's planted values of ``p``, checked and normalised (``nested_ok``: whether
    ``by_dataset`` may appear, i.e. ``p`` is a model's values, not a dataset's layer)."""
    out: dict[str, Any] = {}
    for key in ("quality_mean", "beta", "gamma", "self_preference"):
        out[key] = param_number(key, p[key])
    for key in ("sigma_b", "sigma_theta"):
        out[key] = param_number(key, p[key], lo=0.0)
    for key in ("theta_anchor", "alpha", "reference_free_alpha_scale"):
        out[key] = param_number(key, p[key], lo=0.0, strict_lo=True)
    for key in ("empty_rate", "parse_failure_rate", "round1_mismatch_rate"):
        out[key] = param_number(key, p[key], lo=0.0, hi=1.0)
    out["eta"] = {c: param_number(f"eta.{c}", p["eta"][c]) for c in ETA_CONDITIONS}
    decomposition = p["decomposition_eta"]
    bad = sorted(set(decomposition) - set(ETA_CONDITIONS)) if isinstance(decomposition, Mapping) else None
    if bad is None or bad:
        raise ValueError(f"synthetic param 'decomposition_eta' must map conditions {list(ETA_CONDITIONS)} "
                         f"to numbers, got {decomposition!r}")
    out["decomposition_eta"] = {c: param_number(f"decomposition_eta.{c}", v) for c, v in decomposition.items()}
    kappa = p["kappa"]
    if isinstance(kappa, (str, bytes)) or not isinstance(kappa, Sequence) or len(kappa) != N_CATEGORIES - 1:
        raise ValueError(f"synthetic param 'kappa' must be {N_CATEGORIES - 1} increasing numbers, got {kappa!r}")
    kappa = tuple(param_number("kappa", k) for k in kappa)
    if any(b <= a for a, b in zip(kappa, kappa[1:])):
        raise ValueError(f"synthetic param 'kappa' must be strictly increasing, got {kappa}")
    out["kappa"] = kappa
    if nested_ok:
        out["by_dataset"] = _validate_by_dataset(p, out | {k: p[k] for k in p if k not in out})
    elif p.get("by_dataset"):
        raise ValueError("'by_dataset' cannot be nested in a dataset's values")
    return out


def planted(eff: Mapping[str, Any]) -> dict[str, Any]:
    """Study C's section of ``planted_effects``: η and its decomposition, the judge's values;
    under ``by_dataset`` the same section for each dataset with values of its own."""
    out = _planted_section(eff)
    out["by_dataset"] = {d: _planted_section(with_overrides(eff, over)) for d, over in eff["by_dataset"].items()}
    return out


def _planted_section(eff: Mapping[str, Any]) -> dict[str, Any]:
    eta = {"round1": 0.0, **eff["eta"]}
    # The increments are estimated from the decomposition corpus alone (its own run).
    dec = {"round1": 0.0, **eff["eta"], **eff["decomposition_eta"]}
    return {
        "quality_mean": eff["quality_mean"],
        "sigma_b": eff["sigma_b"],
        "sigma_theta": eff["sigma_theta"],
        "theta_anchor": eff["theta_anchor"],
        "anchors": {"anchor_correct": eff["theta_anchor"], "anchor_incorrect": -eff["theta_anchor"]},
        "eta": eta,
        "decomposition_eta": dec,
        "decomposition": {
            "delta_sp": dec["no_peer"],
            "delta_content": {k: dec[f"content_{k}"] - dec["no_peer"] for k in ("correct", "wrong", "mixed")},
            "delta_pp": {k: dec[f"peer_{k}"] - dec[f"content_{k}"] for k in ("correct", "wrong", "mixed")},
            "delta_total": {k: dec[f"peer_{k}"] for k in ("correct", "wrong", "mixed")},
        },
        "asym_total": -eta["peer_wrong"] - eta["peer_correct"],
        "empty_rate": eff["empty_rate"],
        "round1_mismatch_rate": eff["round1_mismatch_rate"],
        "round1_match_rate": 1.0 - eff["round1_mismatch_rate"],
        "judge": {
            "alpha": eff["alpha"],
            "beta": eff["beta"],
            "gamma": eff["gamma"],
            "kappa": list(eff["kappa"]),
            "parse_failure_rate": eff["parse_failure_rate"],
            "reference_free_alpha_scale": eff["reference_free_alpha_scale"],
            "self_preference": eff["self_preference"],
        },
    }


def rating_probabilities(mu: Any, kappa: Sequence[float]) -> np.ndarray:
    """Ordered-logistic category probabilities, shape ``mu.shape + (len(kappa) + 1,)``.

    ``P(y <= k) = σ(κ_k − μ)``; column 0 is rating 1.
    """
    mu = np.asarray(mu, dtype=float)
    kap = np.asarray(kappa, dtype=float)
    cum = sigmoid(kap - mu[..., None])
    ones = np.ones(mu.shape + (1,))
    zeros = np.zeros(mu.shape + (1,))
    return np.diff(np.concatenate([zeros, cum, ones], axis=-1), axis=-1)


# ----------------------------------------------------------------------------- tags


def format_quality_tag(theta: float) -> str:
    return f"[synthetic q={theta:+.4f}]"


def parse_quality_tag(text: str | None) -> float | None:
    """θ from the last ``[synthetic q=…]`` tag in ``text``, or None."""
    if not text:
        return None
    found = TAG_RE.findall(text)
    return float(found[-1]) if found else None


_BANDS = (
    (1.0, "A careful, accurate and complete answer."),
    (0.3, "A mostly accurate answer with minor gaps."),
    (-0.3, "A partly accurate answer that hedges between options."),
    (-1.0, "A confused answer with notable errors."),
    (-math.inf, "An inaccurate answer that endorses a wrong option."),
)


# ----------------------------------------------------------------------------- answers


def trial_baseline(backend: SyntheticBackend, item_id: str, generator: str,
                   params: Mapping[str, Any] | None = None) -> float:
    """b_t of the trial (item_id, generator) under ``backend``'s seed and planted values
    (``params``: those of the request's dataset, :func:`request_params`)."""
    p = backend.params if params is None else params
    z = seeded("trial", backend.seed, str(item_id), str(generator)).standard_normal()
    return float(p["quality_mean"] + p["sigma_b"] * z)


def round1_stable(backend: SyntheticBackend, item_id: str, generator: str) -> bool:
    """Whether every execution of the trial writes the same Round-1 text (module docstring)."""
    u = seeded("round1-unstable", backend.seed, str(item_id), str(generator)).random()
    return bool(u >= backend.params["round1_mismatch_rate"])


def answer(backend: SyntheticBackend, req: LLMRequest, meta: Mapping[str, Any], rng: np.random.Generator):
    role = meta.get("role")
    if role is None:
        raise MetaError("request meta is missing field(s) 'role' required for study='conformity'")
    role = choice(meta, "role", ("generator", "judge"), "study='conformity'")
    return (_generate if role == "generator" else _judge)(backend, req, meta, rng)


def _generate(backend: SyntheticBackend, req: LLMRequest, meta: Mapping[str, Any], rng: np.random.Generator):
    what = "study='conformity' role='generator'"
    require(meta, ("item_id", "generator", "condition"), what)
    cond = choice(meta, "condition", GENERATION_CONDITIONS, what)
    p = request_params(backend, meta)
    u_empty, eps = rng.random(), rng.standard_normal()
    if cond == "anchor_correct":
        theta = p["theta_anchor"]
    elif cond == "anchor_incorrect":
        theta = -p["theta_anchor"]
    else:
        eta = 0.0 if cond == "round1" else p["eta"][cond]
        if cond == "round1" and round1_stable(backend, meta["item_id"], meta["generator"]):
            eps = seeded("round1", backend.seed, str(meta["item_id"]), str(meta["generator"])).standard_normal()
        theta = trial_baseline(backend, meta["item_id"], meta["generator"], p) + eta + p["sigma_theta"] * eps
    if u_empty < p["empty_rate"]:
        return "", "stop", {}
    sentence = next(s for cut, s in _BANDS if theta >= cut)
    return f"{format_quality_tag(theta)} {sentence}", "stop", {}


def _judge(backend: SyntheticBackend, req: LLMRequest, meta: Mapping[str, Any], rng: np.random.Generator):
    what = "study='conformity' role='judge'"
    require(meta, ("judge", "pass"), what)
    pas = choice(meta, "pass", JUDGE_PASSES, what)
    d = 0
    if pas == "informed":
        require(meta, ("d",), what + " pass='informed'")
        d = choice(meta, "d", JUDGE_D, what)
    ref = meta.get("reference")
    if ref is not None:
        choice(meta, "reference", REFERENCE_KINDS, what)
    u_fail, u_kind, u_rate, u_oor = rng.random(), rng.random(), rng.random(), rng.random()
    last_user = next((c for r, c in reversed(req.messages) if r == "user"), None)
    if last_user is None and req.mode == "completion" and req.messages:
        last_user = req.messages[-1][1]
    theta = parse_quality_tag(last_user)
    if theta is None:
        raise MetaError("synthetic judge: no '[synthetic q=...]' tag in the last user message")
    p = request_params(backend, meta)
    alpha = p["alpha"] * (p["reference_free_alpha_scale"] if ref == "free" else 1.0)
    mu = alpha * (theta - p["beta"]) + (p["gamma"] * d if pas == "informed" else 0.0)
    gen = meta.get("generator")
    if gen is not None and gen == meta["judge"]:
        mu += p["self_preference"]
    cum = sigmoid(np.asarray(p["kappa"]) - mu)
    rating = 1 + int(np.sum(u_rate > cum))
    if u_fail < p["parse_failure_rate"]:
        kind = int(u_kind * 4)
        if kind == 0:
            return f"I would rate this answer a {rating} out of 5.", "stop", {}
        if kind == 1:
            return json.dumps({"rating": 6 + int(u_oor * 5)}), "stop", {}
        if kind == 2:
            return '{"rating": ', "length", {}
        return json.dumps({"rating": str(rating)}), "stop", {}
    return json.dumps({"rating": rating}), "stop", {}
