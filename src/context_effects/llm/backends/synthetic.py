"""Synthetic backend: a simulated LLM with planted, documented, known effects.

It is a **validation instrument** (SPEC §3.1), never a default for real runs: it
lets the whole DAG run in seconds and lets every analysis be checked for
recovery of the values planted here. Every result it returns says so: ``notes``
starts with ``SYNTHETIC`` and ``engine_version`` is ``synthetic-<version>``.

Determinism
-----------
All randomness of one request comes from ``numpy.random.default_rng`` seeded by
sha256 of ``(backend seed, request.key)``. A rerun is therefore identical, and a
re-ask (``attempt + 1`` → new key) or another sample (``sample_index``) or another
sampling seed gets fresh draws. Quantities that must be shared across requests
are seeded by sha256 of the backend seed and their own identity:

* the Study C trial baseline ``b_t`` by ``(item_id, generator)``;
* the AMEL item's semantic logit by ``(model_name, item_id)``;
* the Study H task bias by ``(model_name, task_id)``.

``temperature``/``top_p`` are ignored: the planted distributions *are* the
simulated model's response distribution (the measurement-model noise).
``timestamp`` is left empty (the runner stamps it) so results are byte-for-byte
reproducible. Latency and cost are 0; tokens are whitespace counts.

Cache hygiene: the response store keys on the request only, so a changed
planted value would otherwise be served old answers. Put
``model_revision(model_name, params, seed)`` in ``ModelRef.revision``; a request
whose revision starts with ``synthetic-`` but does not match this backend's is
answered with an error instead of silently mixing two sets of planted values.

Meta contract (``LLMRequest.meta``; bookkeeping, not part of the key)
----------------------------------------------------------------------
Extra keys are ignored. A missing required key, an unknown ``study``/``role`` or
a value outside the listed set gives an error result naming the field(s). The
planted per-model values (η, α, β, γ, AMEL conformity, Study H bias) are always
those of this backend's ``model_name``; ``meta["generator"]`` / ``meta["judge"]``
only identify the trial (for ``b_t``) and self-ratings.

1. Study C generator::

       {"study": "conformity", "role": "generator",
        "item_id": str, "generator": str, "condition": str}

   ``condition`` ∈ round1, no_peer, content_correct, content_wrong,
   content_mixed, peer_correct, peer_wrong, peer_mixed, anchor_correct,
   anchor_incorrect. Latent quality::

       θ = b_t + η[condition] + σ_θ·ε,   b_t ~ N(quality_mean, σ_b), ε ~ N(0, 1)

   ``b_t`` is drawn once per ``(item_id, generator)`` (shared by all answers of
   the trial); ``η[round1] = 0``; anchors are exactly ``anchor_correct → +θ_a``
   and ``anchor_incorrect → −θ_a`` (no baseline, no noise). Reply text:
   ``"[synthetic q=+0.4123] <short sentence>"`` (θ to 4 decimals). With
   probability ``empty_rate`` the reply is ``""`` (finish_reason "stop") to
   exercise the generation-retry path.

2. Study C judge::

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

3. Study A (AMEL)::

       {"study": "amel", "item_id": str,
        "condition": "baseline" | "yes_saturated" | "no_saturated",
        "k": int >= 1          (required unless baseline),
        "position": "start" | "middle" | "end" | None   (optional, default None),
        "framing": "standard" | "swapped"               (optional, default "standard"),
        "n_biased": int >= 1   (optional; default k)}

   Logit of the token "Yes"::

       logit = s·z_i + τ + Δ,   s = +1 (standard) / −1 (swapped)

   ``z_i`` is the item's *semantic* logit for "Yes" in the standard framing:
   with probability ``amel_deterministic_share`` a near-deterministic item,
   ``z = ±U(amel_deterministic_logit)`` (sign 50/50), otherwise an uncertain
   item, ``z ~ N(0, amel_uncertain_logit_sd)``. ``τ = amel_yes_bias`` is a
   **token-level** preference for "Yes" that does *not* flip with framing; the
   framing swap flips only the semantic part. The history shift is::

       Δ = pol · c · f(n) · w(position) · (1 + a_tok·1[token No] + a_sem·1[semantically negative])

   ``pol = +1`` yes_saturated / ``−1`` no_saturated / 0 baseline; ``c =
   amel_conformity``; ``n = n_biased`` (default ``k``); ``f(n) = 1 −
   exp(−n/amel_k_scale)`` (strictly increasing, saturating; ``amel_k_scale = 0``
   gives ``f ≡ 1``, the seed's flat-in-k finding); ``w`` =
   ``amel_position_weights[position]`` (recency) or 1 when position is None.
   "Token No" = no_saturated (history verdicts are the token "No");
   "semantically negative" = the history's verdicts mean the negative answer:
   no_saturated in the standard framing, yes_saturated in the swapped framing.
   With ``A = amel_negativity_asymmetry`` and ``t = amel_asymmetry_token_share``:
   ``a_tok = (A − 1)·t`` and ``a_sem = (A − 1)·(1 − t)``, so the logit-shift ratio
   no/yes is ``A`` in the standard framing and ``(1 + a_tok)/(1 + a_sem)`` in
   the swapped one (defaults: 1.5 → 1.083). ``p = σ(logit)``; the reply text is
   "Yes" with probability p, else "No". When ``sampling.logprobs`` is set or
   ``sampling.probe_tokens`` is non-empty: ``probe_probs`` (the probe tokens
   "Yes"/"No" — others are left out, as in the API backends — or both when no
   probes are named) and ``first_token_logprobs`` (top ``max(1, logprobs)`` of
   {"Yes": log p, "No": log(1 − p)}). ``mode == "completion"`` behaves the same.

4. Study H (anchoring)::

       {"study": "anchoring", "task_id": str,
        "condition": "blind" | "framing" | "anchor",
        "gold_score": int, "prior_score": int (required for anchor),
        "repetition": int (optional, bookkeeping only)}

   ``E_blind = gold + anchoring_bias + u_task``, ``u_task ~ N(0,
   anchoring_task_bias_sd)`` per task; ::

       x = E_blind + anchoring_noise_sd·ε
           + 1[framing, or anchor when anchoring_framing_in_anchor]·δ_framing
           + 1[anchor]·λ·(prior_score − E_blind)
       score = clip(round_half_up(x), 1, 5),   reply {"score": score}

   (the anchor prompt also says the answer was reviewed before, so by default it
   carries the framing shift too; anchor − framing then isolates λ).

5. Anything else (no/unknown ``study`` or ``role``, missing keys) → an error
   result naming the missing or invalid meta field(s).

Planted defaults
----------------
``DEFAULTS`` below documents every key; ``FAMILY_PROFILES`` layers per-model
values on top (selected by ``profile``), and ``params`` overrides both. Unknown
keys raise ``ValueError``. ``planted_effects(model_name, params)`` returns the
effective values plus derived targets (decomposition, expected AMEL bias
scores) for recovery tests.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from context_effects.conformity.conditions import CONDITIONS, ROUND2_CONDITIONS
from context_effects.llm.backends.base import Backend
from context_effects.llm.types import LLMRequest, LLMResult

SYNTHETIC_VERSION = "1"
ENGINE_VERSION = f"synthetic-{SYNTHETIC_VERSION}"
NOTE = (
    "SYNTHETIC: simulated model with planted effects (context_effects.llm.backends.synthetic); "
    "not a finding about any real model"
)

GENERATION_CONDITIONS = CONDITIONS
#: Conditions with a planted shift η (round1 is the reference, η = 0; anchors are pinned).
ETA_CONDITIONS = ROUND2_CONDITIONS
JUDGE_PASSES = ("blind", "informed")
JUDGE_D = (1, 0, -1)
REFERENCE_KINDS = ("augmented", "free")
AMEL_CONDITIONS = ("baseline", "yes_saturated", "no_saturated")
AMEL_POSITIONS = ("start", "middle", "end")
FRAMINGS = ("standard", "swapped")
ANCHORING_CONDITIONS = ("blind", "framing", "anchor")
STUDIES = ("conformity", "amel", "anchoring")
N_CATEGORIES = 5
SCORE_MIN, SCORE_MAX = 1, 5

TAG_RE = re.compile(r"\[synthetic q=([+-]?(?:\d+(?:\.\d*)?|\.\d+))\]")

#: Every planted value, with its meaning. Per-model values are layered on top by
#: ``FAMILY_PROFILES`` (see ``profile``), then by the constructor's ``params``.
DEFAULTS: dict[str, Any] = {
    # Which built-in per-model profile to layer over these defaults: "auto" =
    # the first FAMILY_PROFILES key found in the model name (case and
    # punctuation ignored), else one of the four open-weight profiles chosen by
    # sha256(model_name); a profile name; or "none" = these generic values only.
    "profile": "auto",
    # --- Study C, generation (seed 002 Eq. 6) ---
    "quality_mean": 0.0,  # mean of the trial baseline b_t (generator ability)
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
    "empty_rate": 0.02,  # share of generations returned empty (exercises the retry path)
    # --- Study C, judging (seed 002 Eq. 7-8) ---
    "alpha": 1.5,  # discrimination α_j
    "beta": 0.0,  # severity β_j
    "gamma": 0.0,  # informed-pass peer-context loading γ_j (>0 toward peers, <0 away)
    "kappa": (-2.25, -0.75, 0.5, 1.75),  # shared ordered cutpoints (4 → ratings 1-5)
    "parse_failure_rate": 0.03,  # share of judge replies that are malformed
    "reference_free_alpha_scale": 0.5,  # α multiplier when meta reference == "free"
    "self_preference": 0.0,  # μ shift when meta generator == meta judge (self-rating)
    # --- Study A, AMEL (seed 000) ---
    "amel_deterministic_share": 0.5,  # share of near-deterministic items
    "amel_deterministic_logit": (3.0, 5.0),  # |z| ~ U(lo, hi) for those items
    "amel_uncertain_logit_sd": 1.0,  # z ~ N(0, sd) for uncertain items
    "amel_yes_bias": 0.3,  # τ: token-level logit preference for "Yes" (kept under framing swap)
    "amel_conformity": 0.8,  # c: logit shift of a yes-saturated history at f = w = 1
    "amel_negativity_asymmetry": 1.5,  # A: no/yes logit-shift ratio in the standard framing
    "amel_asymmetry_token_share": 0.6,  # t: share of the excess (A - 1) that is token-level
    "amel_k_scale": 10.0,  # f(n) = 1 - exp(-n / k_scale); 0 → f ≡ 1 (flat in k)
    "amel_position_weights": {"start": 0.6, "middle": 0.8, "end": 1.0},  # recency weights w
    # --- Study H, anchoring (seed 001) ---
    "anchoring_bias": 0.0,  # judge leniency in score points (E_blind - gold, task-averaged)
    "anchoring_task_bias_sd": 0.3,  # SD of the per-task misjudgement u_task
    "anchoring_noise_sd": 0.5,  # SD of per-judgment noise before rounding
    "anchoring_lambda": 0.3,  # λ: pull toward the displayed prior score
    "anchoring_framing_shift": 0.1,  # δ_framing: shift from "was reviewed before"
    "anchoring_framing_in_anchor": True,  # anchor prompts carry δ_framing too
}

#: Per-model planted values (seed 002 Tables 3/4 in spirit; seed 000 scaling).
FAMILY_PROFILES: dict[str, dict[str, Any]] = {
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
        "amel_conformity": 0.9,
        "anchoring_bias": 0.1,
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
        "amel_conformity": 1.1,
        "anchoring_bias": 0.3,
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
        "amel_conformity": 0.7,
        "anchoring_bias": -0.2,
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
        "amel_conformity": 1.0,
        "anchoring_bias": 0.0,
    },
    "gpt-4o": {"alpha": 2.0, "beta": 0.30, "gamma": -0.10, "amel_conformity": 0.5, "anchoring_bias": -0.1},
    "gpt-5": {"alpha": 2.0, "beta": 0.25, "gamma": -0.17, "amel_conformity": 0.6, "anchoring_bias": -0.1},
}
#: Profiles the "auto" hash fallback chooses among.
OPEN_WEIGHT_PROFILES = ("qwen", "mistral", "gemma", "llama")


# ----------------------------------------------------------------------------- params


def _norm(s: str) -> str:
    return re.sub(r"[^a-z0-9]", "", s.lower())


def _hash_int(*parts: Any) -> int:
    blob = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False, separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(blob.encode("utf-8")).digest()[:16], "little")


def _rng(*parts: Any) -> np.random.Generator:
    return np.random.default_rng(_hash_int(*parts))


def resolve_profile(model_name: str, profile: str = "auto") -> str | None:
    """The FAMILY_PROFILES key used for ``model_name`` (None for ``profile == "none"``)."""
    if profile == "none":
        return None
    if profile != "auto":
        if profile not in FAMILY_PROFILES:
            raise ValueError(
                f"unknown synthetic profile {profile!r}; allowed: auto, none, {', '.join(FAMILY_PROFILES)}"
            )
        return profile
    name = _norm(model_name)
    for fam in FAMILY_PROFILES:
        if _norm(fam) in name:
            return fam
    return OPEN_WEIGHT_PROFILES[_hash_int("profile", model_name) % len(OPEN_WEIGHT_PROFILES)]


def _num(key: str, v: Any, *, lo: float | None = None, hi: float | None = None, strict_lo: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"synthetic param {key!r} must be a finite number, got {v!r}")
    v = float(v)
    if lo is not None and (v <= lo if strict_lo else v < lo):
        raise ValueError(f"synthetic param {key!r} must be {'>' if strict_lo else '>='} {lo}, got {v}")
    if hi is not None and v > hi:
        raise ValueError(f"synthetic param {key!r} must be <= {hi}, got {v}")
    return v


def _merge_dict(key: str, base: Mapping[str, float], over: Any, allowed: Sequence[str]) -> dict[str, float]:
    if not isinstance(over, Mapping):
        raise ValueError(f"synthetic param {key!r} must be a mapping, got {type(over).__name__}")
    bad = sorted(set(over) - set(allowed))
    if bad:
        raise ValueError(f"unknown keys in synthetic param {key!r}: {bad}; allowed: {list(allowed)}")
    out = dict(base)
    out.update(over)
    return out


def _validate(p: dict[str, Any]) -> dict[str, Any]:
    out = dict(p)
    for key in (
        "quality_mean",
        "beta",
        "gamma",
        "self_preference",
        "amel_yes_bias",
        "anchoring_bias",
        "anchoring_framing_shift",
        "anchoring_lambda",
    ):
        out[key] = _num(key, p[key])
    for key in (
        "sigma_b",
        "sigma_theta",
        "amel_uncertain_logit_sd",
        "anchoring_task_bias_sd",
        "anchoring_noise_sd",
        "amel_conformity",
        "amel_k_scale",
    ):
        out[key] = _num(key, p[key], lo=0.0)
    for key in ("theta_anchor", "alpha", "reference_free_alpha_scale", "amel_negativity_asymmetry"):
        out[key] = _num(key, p[key], lo=0.0, strict_lo=True)
    for key in ("empty_rate", "parse_failure_rate", "amel_deterministic_share", "amel_asymmetry_token_share"):
        out[key] = _num(key, p[key], lo=0.0, hi=1.0)
    out["eta"] = {c: _num(f"eta.{c}", p["eta"][c]) for c in ETA_CONDITIONS}
    out["amel_position_weights"] = {
        pos: _num(f"amel_position_weights.{pos}", p["amel_position_weights"][pos], lo=0.0) for pos in AMEL_POSITIONS
    }
    kappa = p["kappa"]
    if isinstance(kappa, (str, bytes)) or not isinstance(kappa, Sequence) or len(kappa) != N_CATEGORIES - 1:
        raise ValueError(f"synthetic param 'kappa' must be {N_CATEGORIES - 1} increasing numbers, got {kappa!r}")
    kappa = tuple(_num("kappa", k) for k in kappa)
    if any(b <= a for a, b in zip(kappa, kappa[1:])):
        raise ValueError(f"synthetic param 'kappa' must be strictly increasing, got {kappa}")
    out["kappa"] = kappa
    dl = p["amel_deterministic_logit"]
    if isinstance(dl, (str, bytes)) or not isinstance(dl, Sequence) or len(dl) != 2:
        raise ValueError(f"synthetic param 'amel_deterministic_logit' must be [lo, hi], got {dl!r}")
    lo, hi = (_num("amel_deterministic_logit", x, lo=0.0) for x in dl)
    if hi < lo:
        raise ValueError(f"synthetic param 'amel_deterministic_logit' needs lo <= hi, got {dl!r}")
    out["amel_deterministic_logit"] = (lo, hi)
    if not isinstance(p["anchoring_framing_in_anchor"], bool):
        raise ValueError("synthetic param 'anchoring_framing_in_anchor' must be true or false")
    return out


def effective_params(model_name: str, params: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], str | None]:
    """``DEFAULTS`` ⊕ family profile ⊕ ``params``, validated; and the profile used."""
    params = dict(params or {})
    unknown = sorted(set(params) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown synthetic params: {unknown}; allowed: {sorted(DEFAULTS)}")
    profile_opt = params.get("profile", DEFAULTS["profile"])
    if not isinstance(profile_opt, str):
        raise ValueError(f"synthetic param 'profile' must be a string, got {profile_opt!r}")
    fam = resolve_profile(model_name, profile_opt)
    eff = copy.deepcopy(DEFAULTS)
    eff["profile"] = profile_opt
    layers = [FAMILY_PROFILES[fam]] if fam else []
    layers.append({k: v for k, v in params.items() if k != "profile"})
    for layer in layers:
        for key, value in layer.items():
            if key == "eta":
                eff[key] = _merge_dict(key, eff[key], value, ETA_CONDITIONS)
            elif key == "amel_position_weights":
                eff[key] = _merge_dict(key, eff[key], value, AMEL_POSITIONS)
            else:
                eff[key] = copy.deepcopy(value)
    return _validate(eff), fam


def model_revision(model_name: str, params: Mapping[str, Any] | None = None, seed: int = 0) -> str:
    """``synthetic-<version>-<12 hex>`` fingerprint of the effective planted values and seed.

    Use it as ``ModelRef.revision`` so that changing a planted value changes every key.
    """
    eff, fam = effective_params(model_name, params)
    digest = _hash_int("revision", SYNTHETIC_VERSION, model_name, fam, seed, _jsonable(eff))
    return f"{ENGINE_VERSION}-{digest:032x}"[: len(ENGINE_VERSION) + 13]


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


# ----------------------------------------------------------------------------- closed forms


def _sigmoid(x: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


def rating_probabilities(mu: Any, kappa: Sequence[float]) -> np.ndarray:
    """Ordered-logistic category probabilities, shape ``mu.shape + (len(kappa) + 1,)``.

    ``P(y <= k) = σ(κ_k − μ)``; column 0 is rating 1.
    """
    mu = np.asarray(mu, dtype=float)
    kap = np.asarray(kappa, dtype=float)
    cum = _sigmoid(kap - mu[..., None])
    ones = np.ones(mu.shape + (1,))
    zeros = np.zeros(mu.shape + (1,))
    return np.diff(np.concatenate([zeros, cum, ones], axis=-1), axis=-1)


def amel_f(n: float, k_scale: float) -> float:
    """History-length factor f(n) = 1 − exp(−n / k_scale); 1 when k_scale == 0."""
    if k_scale == 0:
        return 1.0
    return float(1.0 - math.exp(-float(n) / k_scale))


def _amel_shift(eff: Mapping[str, Any], condition: str, n: float | None, position: str | None, framing: str) -> float:
    if condition == "baseline":
        return 0.0
    pol = 1.0 if condition == "yes_saturated" else -1.0
    excess = eff["amel_negativity_asymmetry"] - 1.0
    a_tok = excess * eff["amel_asymmetry_token_share"]
    a_sem = excess * (1.0 - eff["amel_asymmetry_token_share"])
    token_no = condition == "no_saturated"
    sem_neg = (condition == "no_saturated") == (framing == "standard")
    w = 1.0 if position is None else eff["amel_position_weights"][position]
    mult = 1.0 + a_tok * token_no + a_sem * sem_neg
    return pol * eff["amel_conformity"] * amel_f(n, eff["amel_k_scale"]) * w * mult


def amel_logit_shift(
    model_name: str,
    params: Mapping[str, Any] | None,
    condition: str,
    k: int | None = None,
    position: str | None = None,
    framing: str = "standard",
) -> float:
    """Planted logit shift Δ of P("Yes") for one AMEL cell (k = number of biased turns)."""
    eff, _ = effective_params(model_name, params)
    return _amel_shift(eff, condition, k, position, framing)


@functools.lru_cache(maxsize=4)
def _unit_normal_quantiles(n: int) -> np.ndarray:
    nd = NormalDist(0.0, 1.0)
    return np.array([nd.inv_cdf((i + 0.5) / n) for i in range(n)])


def _amel_z_grid(eff: Mapping[str, Any], n: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    """Quadrature nodes and weights of the planted item distribution of z."""
    share = eff["amel_deterministic_share"]
    lo, hi = eff["amel_deterministic_logit"]
    u = (np.arange(n) + 0.5) / n
    det = lo + (hi - lo) * u
    unc = _unit_normal_quantiles(n) * eff["amel_uncertain_logit_sd"]
    z = np.concatenate([det, -det, unc])
    w = np.concatenate([np.full(n, share / (2 * n)), np.full(n, share / (2 * n)), np.full(n, (1 - share) / n)])
    return z, w


def _expected_bs(eff: Mapping[str, Any], condition: str, k: int, position: str | None, framing: str) -> float:
    z, w = _amel_z_grid(eff)
    s = 1.0 if framing == "standard" else -1.0
    base = s * z + eff["amel_yes_bias"]
    dp_yes = _sigmoid(base + _amel_shift(eff, condition, k, position, framing)) - _sigmoid(base)
    # r* is the verdict against the history: "No" after yes-saturated, "Yes" after no-saturated.
    sign = -1.0 if condition == "yes_saturated" else 1.0
    return float(np.sum(w * sign * dp_yes))


def amel_expected_bias_score(
    model_name: str,
    params: Mapping[str, Any] | None,
    condition: str,
    k: int,
    position: str | None = None,
    framing: str = "standard",
) -> float:
    """Population mean bias score BS = P(r*|treatment) − P(r*|baseline) over the planted item distribution.

    Negative = conforming. Computed by quadrature (no sampling), so it is the
    target a mean over many items should recover.
    """
    eff, _ = effective_params(model_name, params)
    return _expected_bs(eff, condition, k, position, framing)


def _ratio(cells: Mapping[str, Mapping[int, float]], k: int) -> float:
    yes = abs(cells["yes_saturated"][k])
    return abs(cells["no_saturated"][k]) / yes if yes > 0 else math.inf


def planted_effects(model_name: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The effective planted values for ``model_name`` with ``params``, plus derived targets."""
    eff, fam = effective_params(model_name, params)
    eta = {"round1": 0.0, **eff["eta"]}
    excess = eff["amel_negativity_asymmetry"] - 1.0
    a_tok = excess * eff["amel_asymmetry_token_share"]
    a_sem = excess - a_tok
    ks = (5, 10, 20, 50)
    exp_bs = {
        fr: {c: {k: _expected_bs(eff, c, k, None, fr) for k in ks} for c in ("yes_saturated", "no_saturated")}
        for fr in FRAMINGS
    }
    return {
        "version": ENGINE_VERSION,
        "model_name": model_name,
        "profile": fam,
        "params": _jsonable(eff),
        "conformity": {
            "quality_mean": eff["quality_mean"],
            "sigma_b": eff["sigma_b"],
            "sigma_theta": eff["sigma_theta"],
            "theta_anchor": eff["theta_anchor"],
            "anchors": {"anchor_correct": eff["theta_anchor"], "anchor_incorrect": -eff["theta_anchor"]},
            "eta": eta,
            "decomposition": {
                "delta_sp": eta["no_peer"],
                "delta_content": {k: eta[f"content_{k}"] - eta["no_peer"] for k in ("correct", "wrong", "mixed")},
                "delta_pp": {k: eta[f"peer_{k}"] - eta[f"content_{k}"] for k in ("correct", "wrong", "mixed")},
                "delta_total": {k: eta[f"peer_{k}"] for k in ("correct", "wrong", "mixed")},
            },
            "asym_total": -eta["peer_wrong"] - eta["peer_correct"],
            "empty_rate": eff["empty_rate"],
            "judge": {
                "alpha": eff["alpha"],
                "beta": eff["beta"],
                "gamma": eff["gamma"],
                "kappa": list(eff["kappa"]),
                "parse_failure_rate": eff["parse_failure_rate"],
                "reference_free_alpha_scale": eff["reference_free_alpha_scale"],
                "self_preference": eff["self_preference"],
            },
        },
        "amel": {
            "yes_bias": eff["amel_yes_bias"],
            "conformity": eff["amel_conformity"],
            "negativity_asymmetry": eff["amel_negativity_asymmetry"],
            "token_asymmetry": a_tok,
            "semantic_asymmetry": a_sem,
            "asymmetry_ratio_logit": {"standard": 1.0 + a_tok + a_sem, "swapped": (1.0 + a_tok) / (1.0 + a_sem)},
            "k_scale": eff["amel_k_scale"],
            "f_k": {k: amel_f(k, eff["amel_k_scale"]) for k in ks},
            "position_weights": dict(eff["amel_position_weights"]),
            "deterministic_share": eff["amel_deterministic_share"],
            "expected_bias_score": exp_bs,
            # |E BS(no-sat)| / |E BS(yes-sat)| on the probability scale (what the paired analysis estimates).
            "bias_score_ratio": {fr: {k: _ratio(exp_bs[fr], k) for k in ks} for fr in FRAMINGS},
        },
        "anchoring": {
            "bias": eff["anchoring_bias"],
            "task_bias_sd": eff["anchoring_task_bias_sd"],
            "noise_sd": eff["anchoring_noise_sd"],
            "lambda": eff["anchoring_lambda"],
            "framing_shift": eff["anchoring_framing_shift"],
            "framing_in_anchor": eff["anchoring_framing_in_anchor"],
        },
    }


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


# ----------------------------------------------------------------------------- backend


class _MetaError(ValueError):
    pass


def _require(meta: Mapping[str, Any], fields: Sequence[str], what: str) -> None:
    missing = [f for f in fields if meta.get(f) is None]
    if missing:
        raise _MetaError(f"request meta is missing field(s) {', '.join(repr(m) for m in missing)} required for {what}")


def _choice(meta: Mapping[str, Any], field: str, allowed: Sequence[Any], what: str) -> Any:
    v = meta.get(field)
    if v not in allowed or isinstance(v, bool):
        raise _MetaError(f"meta[{field!r}] = {v!r} is not one of {list(allowed)} ({what})")
    return v


def _int(meta: Mapping[str, Any], field: str, what: str, lo: int | None = None) -> int:
    v = meta.get(field)
    ok = not isinstance(v, bool) and isinstance(v, (int, np.integer, float)) and math.isfinite(v)
    if not ok or float(v) != int(v):
        raise _MetaError(f"meta[{field!r}] = {v!r} must be an integer ({what})")
    v = int(v)
    if lo is not None and v < lo:
        raise _MetaError(f"meta[{field!r}] = {v} must be >= {lo} ({what})")
    return v


def _words(text: str) -> int:
    return len(text.split())


class SyntheticBackend(Backend):
    """A simulated model with the planted effects documented in this module."""

    name = "synthetic"

    def __init__(
        self,
        *,
        model_name: str,
        params: Mapping[str, Any] | None = None,
        seed: int = 0,
        state_dir: Path | None = None,
    ) -> None:
        super().__init__(state_dir=state_dir)
        self.model_name = model_name
        self.seed = int(seed)
        self.user_params = dict(params or {})
        self.params, self.profile = effective_params(model_name, self.user_params)
        self.revision = model_revision(model_name, self.user_params, self.seed)

    def engine_version(self) -> str:
        return ENGINE_VERSION

    def planted_effects(self) -> dict[str, Any]:
        return planted_effects(self.model_name, self.user_params)

    # -- shared (request-independent) draws: exposed so tests can check exact truths

    def trial_baseline(self, item_id: str, generator: str) -> float:
        """b_t of the trial (item_id, generator)."""
        z = _rng("trial", self.seed, str(item_id), str(generator)).standard_normal()
        return float(self.params["quality_mean"] + self.params["sigma_b"] * z)

    def amel_item_logit(self, item_id: str) -> float:
        """z_i: the item's semantic logit of "Yes" in the standard framing (before τ)."""
        p = self.params
        r = _rng("amel-item", self.seed, self.model_name, str(item_id))
        u, sign_u, mag_u, g = r.random(), r.random(), r.random(), r.standard_normal()
        if u < p["amel_deterministic_share"]:
            lo, hi = p["amel_deterministic_logit"]
            return float((1.0 if sign_u < 0.5 else -1.0) * (lo + (hi - lo) * mag_u))
        return float(g * p["amel_uncertain_logit_sd"])

    def amel_p_yes(
        self,
        item_id: str,
        condition: str = "baseline",
        k: int | None = None,
        position: str | None = None,
        framing: str = "standard",
    ) -> float:
        """Exact planted P("Yes") of one AMEL cell (k = number of biased turns)."""
        s = 1.0 if framing == "standard" else -1.0
        logit = s * self.amel_item_logit(item_id) + self.params["amel_yes_bias"]
        logit += _amel_shift(self.params, condition, k, position, framing)
        return float(_sigmoid(logit))

    def anchoring_blind_mean(self, task_id: str, gold_score: float) -> float:
        """E_blind = gold + anchoring_bias + u_task (latent, before noise, rounding, clipping)."""
        u = _rng("anchoring-task", self.seed, self.model_name, str(task_id)).standard_normal()
        return float(gold_score + self.params["anchoring_bias"] + self.params["anchoring_task_bias_sd"] * u)

    # -- the Backend contract

    def run(self, requests: Sequence[LLMRequest]) -> Iterator[LLMResult]:
        for req in requests:
            yield self.answer(req)

    def answer(self, req: LLMRequest) -> LLMResult:
        try:
            rev = req.model.revision
            if rev and rev.startswith("synthetic-") and rev != self.revision:
                raise _MetaError(
                    f"request revision {rev!r} does not match this backend's planted values ({self.revision!r})"
                )
            meta = req.meta or {}
            study = meta.get("study")
            if study is None:
                raise _MetaError("request meta is missing field(s) 'study' (one of conformity, amel, anchoring)")
            study = _choice(meta, "study", STUDIES, "synthetic backend")
            rng = _rng("request", self.seed, req.key)
            if study == "conformity":
                role = meta.get("role")
                if role is None:
                    raise _MetaError("request meta is missing field(s) 'role' required for study='conformity'")
                role = _choice(meta, "role", ("generator", "judge"), "study='conformity'")
                text, finish, extra = (self._generate if role == "generator" else self._judge)(req, meta, rng)
            elif study == "amel":
                text, finish, extra = self._amel(req, meta, rng)
            else:
                text, finish, extra = self._anchoring(req, meta, rng)
        except _MetaError as exc:
            return self._error(req, f"synthetic backend: {exc}")
        except Exception as exc:  # never raise for a single request
            return self._error(req, f"synthetic backend: {type(exc).__name__}: {exc}")
        words = text.split()
        if len(words) > req.sampling.max_tokens:
            text = " ".join(words[: req.sampling.max_tokens])
            finish = "length"
        return self._result(
            req,
            text=text,
            finish_reason=finish,
            tokens_out=_words(text),
            first_token_logprobs=extra.get("first_token_logprobs"),
            probe_probs=extra.get("probe_probs"),
            notes=f"{NOTE}; model={self.model_name}; profile={self.profile}; seed={self.seed}",
        )

    def _error(self, req: LLMRequest, message: str) -> LLMResult:
        return self._result(req, text=None, finish_reason=None, tokens_out=0, notes=NOTE, error=message)

    def _result(self, req: LLMRequest, **fields) -> LLMResult:
        """The fields every synthetic result shares (no latency, no cost, the engine tag)."""
        return LLMResult(
            key=req.key,
            tokens_in=sum(_words(c) for _, c in req.messages),
            latency_s=0.0,
            attempt=req.attempt,
            backend=self.name,
            engine_version=ENGINE_VERSION,
            timestamp="",
            cost_usd=0.0,
            **fields,
        )

    # -- Study C

    def _generate(self, req: LLMRequest, meta: Mapping[str, Any], rng: np.random.Generator):
        what = "study='conformity' role='generator'"
        _require(meta, ("item_id", "generator", "condition"), what)
        cond = _choice(meta, "condition", GENERATION_CONDITIONS, what)
        p = self.params
        u_empty, eps = rng.random(), rng.standard_normal()
        if cond == "anchor_correct":
            theta = p["theta_anchor"]
        elif cond == "anchor_incorrect":
            theta = -p["theta_anchor"]
        else:
            eta = 0.0 if cond == "round1" else p["eta"][cond]
            theta = self.trial_baseline(meta["item_id"], meta["generator"]) + eta + p["sigma_theta"] * eps
        if u_empty < p["empty_rate"]:
            return "", "stop", {}
        sentence = next(s for cut, s in _BANDS if theta >= cut)
        return f"{format_quality_tag(theta)} {sentence}", "stop", {}

    def _judge(self, req: LLMRequest, meta: Mapping[str, Any], rng: np.random.Generator):
        what = "study='conformity' role='judge'"
        _require(meta, ("judge", "pass"), what)
        pas = _choice(meta, "pass", JUDGE_PASSES, what)
        d = 0
        if pas == "informed":
            _require(meta, ("d",), what + " pass='informed'")
            d = _choice(meta, "d", JUDGE_D, what)
        ref = meta.get("reference")
        if ref is not None:
            _choice(meta, "reference", REFERENCE_KINDS, what)
        u_fail, u_kind, u_rate, u_oor = rng.random(), rng.random(), rng.random(), rng.random()
        last_user = next((c for r, c in reversed(req.messages) if r == "user"), None)
        if last_user is None and req.mode == "completion" and req.messages:
            last_user = req.messages[-1][1]
        theta = parse_quality_tag(last_user)
        if theta is None:
            raise _MetaError("synthetic judge: no '[synthetic q=...]' tag in the last user message")
        p = self.params
        alpha = p["alpha"] * (p["reference_free_alpha_scale"] if ref == "free" else 1.0)
        mu = alpha * (theta - p["beta"]) + (p["gamma"] * d if pas == "informed" else 0.0)
        gen = meta.get("generator")
        if gen is not None and gen == meta["judge"]:
            mu += p["self_preference"]
        cum = _sigmoid(np.asarray(p["kappa"]) - mu)
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

    # -- Study A

    def _amel(self, req: LLMRequest, meta: Mapping[str, Any], rng: np.random.Generator):
        what = "study='amel'"
        _require(meta, ("item_id", "condition"), what)
        cond = _choice(meta, "condition", AMEL_CONDITIONS, what)
        framing = meta.get("framing")
        framing = "standard" if framing is None else _choice(meta, "framing", FRAMINGS, what)
        position = meta.get("position")
        if position is not None:
            _choice(meta, "position", AMEL_POSITIONS, what)
        n = None
        if cond != "baseline":
            _require(meta, ("k",), f"{what} condition={cond!r}")
            n = _int(meta, "k", what, lo=1)
            if meta.get("n_biased") is not None:
                n = _int(meta, "n_biased", what, lo=1)
        p_yes = self.amel_p_yes(meta["item_id"], cond, n, position, framing)
        text = "Yes" if rng.random() < p_yes else "No"
        extra: dict[str, Any] = {}
        s = req.sampling
        if s.logprobs is not None or s.probe_tokens:
            probs = {"Yes": p_yes, "No": 1.0 - p_yes}
            extra["probe_probs"] = {t: probs[t] for t in s.probe_tokens if t in probs} if s.probe_tokens else probs
            top = sorted(probs.items(), key=lambda kv: -kv[1])[: max(1, s.logprobs or 2)]
            extra["first_token_logprobs"] = {t: (math.log(v) if v > 0 else -math.inf) for t, v in top}
        return text, "stop", extra

    # -- Study H

    def _anchoring(self, req: LLMRequest, meta: Mapping[str, Any], rng: np.random.Generator):
        what = "study='anchoring'"
        _require(meta, ("task_id", "condition", "gold_score"), what)
        cond = _choice(meta, "condition", ANCHORING_CONDITIONS, what)
        gold = _int(meta, "gold_score", what)
        prior = None
        if cond == "anchor":
            _require(meta, ("prior_score",), f"{what} condition='anchor'")
            prior = _int(meta, "prior_score", what)
        p = self.params
        eps = rng.standard_normal()
        blind = self.anchoring_blind_mean(meta["task_id"], gold)
        x = blind + p["anchoring_noise_sd"] * eps
        if cond == "framing" or (cond == "anchor" and p["anchoring_framing_in_anchor"]):
            x += p["anchoring_framing_shift"]
        if cond == "anchor":
            x += p["anchoring_lambda"] * (prior - blind)
        score = int(min(SCORE_MAX, max(SCORE_MIN, math.floor(x + 0.5))))
        return json.dumps({"score": score}), "stop", {}


__all__ = [
    "DEFAULTS",
    "ENGINE_VERSION",
    "FAMILY_PROFILES",
    "SyntheticBackend",
    "amel_expected_bias_score",
    "amel_f",
    "amel_logit_shift",
    "effective_params",
    "format_quality_tag",
    "model_revision",
    "parse_quality_tag",
    "planted_effects",
    "rating_probabilities",
    "resolve_profile",
]
