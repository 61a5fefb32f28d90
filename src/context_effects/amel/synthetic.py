"""Study A's (AMEL) simulated model in the synthetic backend (``context_effects.llm.backends.synthetic``).

Meta contract
-------------
::

    {"study": "amel", "item_id": str,
     "condition": "baseline" | "yes_saturated" | "no_saturated" | "balanced",
     "k": int >= 1          (required unless baseline),
     "position": "start" | "middle" | "end" | None   (optional, default None),
     "framing": "standard" | "swapped"               (optional, default "standard"),
     "n_biased": int >= 1   (optional; default k)}

Logit of the token "Yes"::

    logit = s·z_i + τ + Δ,   s = +1 (standard) / −1 (swapped)

``z_i`` is the item's *semantic* logit for "Yes" in the standard framing
(:func:`amel_item_logit`): with probability ``amel_deterministic_share`` a
near-deterministic item, ``z = ±U(amel_deterministic_logit)`` (sign 50/50),
otherwise an uncertain item, ``z ~ N(0, amel_uncertain_logit_sd)``. ``τ =
amel_yes_bias`` is a **token-level** preference for "Yes" that does *not* flip
with framing; the framing swap flips only the semantic part. The history shift is::

    Δ = pol · c · f(n) · w(position) · (1 + a_tok·1[token No] + a_sem·1[semantically negative])

``pol = +1`` yes_saturated / ``−1`` no_saturated / 0 baseline and balanced
(a balanced history plants no shift: the seed's mitigation, fully effective); ``c =
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
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from context_effects.llm.backends.synthetic import (
    SyntheticBackend,
    choice,
    effective_params,
    meta_int,
    param_number,
    require,
    seeded,
    sigmoid,
)
from context_effects.llm.types import LLMRequest

AMEL_CONDITIONS = ("baseline", "yes_saturated", "no_saturated", "balanced")
AMEL_POSITIONS = ("start", "middle", "end")
FRAMINGS = ("standard", "swapped")

#: AMEL's planted values (seed 000), with their meaning.
DEFAULTS: dict[str, Any] = {
    "amel_deterministic_share": 0.5,  # share of near-deterministic items
    "amel_deterministic_logit": (3.0, 5.0),  # |z| ~ U(lo, hi) for those items
    "amel_uncertain_logit_sd": 1.0,  # z ~ N(0, sd) for uncertain items
    "amel_yes_bias": 0.3,  # τ: token-level logit preference for "Yes" (kept under framing swap)
    "amel_conformity": 0.8,  # c: logit shift of a yes-saturated history at f = w = 1
    "amel_negativity_asymmetry": 1.5,  # A: no/yes logit-shift ratio in the standard framing
    "amel_asymmetry_token_share": 0.6,  # t: share of the excess (A - 1) that is token-level
    "amel_k_scale": 10.0,  # f(n) = 1 - exp(-n / k_scale); 0 → f ≡ 1 (flat in k)
    "amel_position_weights": {"start": 0.6, "middle": 0.8, "end": 1.0},  # recency weights w
}

#: Per-family values (seed 000 scaling in spirit); only with ``profile: <family>`` in the config.
PROFILES: dict[str, dict[str, Any]] = {
    "qwen": {"amel_conformity": 0.9},
    "mistral": {"amel_conformity": 1.1},
    "gemma": {"amel_conformity": 0.7},
    "llama": {"amel_conformity": 1.0},
    "gpt-4o": {"amel_conformity": 0.5},
    "gpt-5": {"amel_conformity": 0.6},
}

NESTED: dict[str, tuple[str, ...]] = {"amel_position_weights": AMEL_POSITIONS}


def validate(p: Mapping[str, Any]) -> dict[str, Any]:
    """AMEL's planted values of ``p``, checked and normalised."""
    out: dict[str, Any] = {"amel_yes_bias": param_number("amel_yes_bias", p["amel_yes_bias"])}
    for key in ("amel_uncertain_logit_sd", "amel_conformity", "amel_k_scale"):
        out[key] = param_number(key, p[key], lo=0.0)
    out["amel_negativity_asymmetry"] = param_number(
        "amel_negativity_asymmetry", p["amel_negativity_asymmetry"], lo=0.0, strict_lo=True
    )
    for key in ("amel_deterministic_share", "amel_asymmetry_token_share"):
        out[key] = param_number(key, p[key], lo=0.0, hi=1.0)
    out["amel_position_weights"] = {
        pos: param_number(f"amel_position_weights.{pos}", p["amel_position_weights"][pos], lo=0.0)
        for pos in AMEL_POSITIONS
    }
    dl = p["amel_deterministic_logit"]
    if isinstance(dl, (str, bytes)) or not isinstance(dl, Sequence) or len(dl) != 2:
        raise ValueError(f"synthetic param 'amel_deterministic_logit' must be [lo, hi], got {dl!r}")
    lo, hi = (param_number("amel_deterministic_logit", x, lo=0.0) for x in dl)
    if hi < lo:
        raise ValueError(f"synthetic param 'amel_deterministic_logit' needs lo <= hi, got {dl!r}")
    out["amel_deterministic_logit"] = (lo, hi)
    return out


# ----------------------------------------------------------------------------- closed forms


def amel_f(n: float, k_scale: float) -> float:
    """History-length factor f(n) = 1 − exp(−n / k_scale); 1 when k_scale == 0."""
    if k_scale == 0:
        return 1.0
    return float(1.0 - math.exp(-float(n) / k_scale))


def _shift(eff: Mapping[str, Any], condition: str, n: float | None, position: str | None, framing: str) -> float:
    if condition in ("baseline", "balanced"):
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
    return _shift(eff, condition, k, position, framing)


@functools.lru_cache(maxsize=4)
def _unit_normal_quantiles(n: int) -> np.ndarray:
    nd = NormalDist(0.0, 1.0)
    return np.array([nd.inv_cdf((i + 0.5) / n) for i in range(n)])


def _z_grid(eff: Mapping[str, Any], n: int = 4000) -> tuple[np.ndarray, np.ndarray]:
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
    z, w = _z_grid(eff)
    s = 1.0 if framing == "standard" else -1.0
    base = s * z + eff["amel_yes_bias"]
    dp_yes = sigmoid(base + _shift(eff, condition, k, position, framing)) - sigmoid(base)
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


def cell_targets(eff: Mapping[str, Any], condition: str, n: int, position: str | None, framing: str) -> dict[str, float]:
    """The planted logit shift Δ and the population mean bias score of one cell, for resolved
    values ``eff`` and ``n`` biased turns as the request's meta gives them (``n_biased``, else ``k``)."""
    return {
        "f_n": amel_f(n, eff["amel_k_scale"]),
        "logit_shift": _shift(eff, condition, n, position, framing),
        "expected_bias_score": _expected_bs(eff, condition, n, position, framing),
    }


def _ratio(cells: Mapping[str, Mapping[int, float]], k: int) -> float:
    yes = abs(cells["yes_saturated"][k])
    return abs(cells["no_saturated"][k]) / yes if yes > 0 else math.inf


def planted(eff: Mapping[str, Any]) -> dict[str, Any]:
    """AMEL's section of ``planted_effects``: the planted values and the expected bias scores."""
    excess = eff["amel_negativity_asymmetry"] - 1.0
    a_tok = excess * eff["amel_asymmetry_token_share"]
    a_sem = excess - a_tok
    ks = (5, 10, 20, 50)
    exp_bs = {
        fr: {c: {k: _expected_bs(eff, c, k, None, fr) for k in ks} for c in ("yes_saturated", "no_saturated")}
        for fr in FRAMINGS
    }
    return {
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
    }


# ----------------------------------------------------------------------------- answers


def amel_item_logit(backend: SyntheticBackend, item_id: str) -> float:
    """z_i: the item's semantic logit of "Yes" in the standard framing (before τ)."""
    p = backend.params
    r = seeded("amel-item", backend.seed, backend.model_name, str(item_id))
    u, sign_u, mag_u, g = r.random(), r.random(), r.random(), r.standard_normal()
    if u < p["amel_deterministic_share"]:
        lo, hi = p["amel_deterministic_logit"]
        return float((1.0 if sign_u < 0.5 else -1.0) * (lo + (hi - lo) * mag_u))
    return float(g * p["amel_uncertain_logit_sd"])


def amel_p_yes(
    backend: SyntheticBackend,
    item_id: str,
    condition: str = "baseline",
    k: int | None = None,
    position: str | None = None,
    framing: str = "standard",
) -> float:
    """Exact planted P("Yes") of one AMEL cell under ``backend`` (k = number of biased turns)."""
    s = 1.0 if framing == "standard" else -1.0
    logit = s * amel_item_logit(backend, item_id) + backend.params["amel_yes_bias"]
    logit += _shift(backend.params, condition, k, position, framing)
    return float(sigmoid(logit))


def answer(backend: SyntheticBackend, req: LLMRequest, meta: Mapping[str, Any], rng: np.random.Generator):
    what = "study='amel'"
    require(meta, ("item_id", "condition"), what)
    cond = choice(meta, "condition", AMEL_CONDITIONS, what)
    framing = meta.get("framing")
    framing = "standard" if framing is None else choice(meta, "framing", FRAMINGS, what)
    position = meta.get("position")
    if position is not None:
        choice(meta, "position", AMEL_POSITIONS, what)
    n = None
    if cond != "baseline":
        require(meta, ("k",), f"{what} condition={cond!r}")
        n = meta_int(meta, "k", what, lo=1)
        if meta.get("n_biased") is not None:
            n = meta_int(meta, "n_biased", what, lo=1)
    p_yes = amel_p_yes(backend, meta["item_id"], cond, n, position, framing)
    text = "Yes" if rng.random() < p_yes else "No"
    extra: dict[str, Any] = {}
    s = req.sampling
    if s.logprobs is not None or s.probe_tokens:
        probs = {"Yes": p_yes, "No": 1.0 - p_yes}
        extra["probe_probs"] = {t: probs[t] for t in s.probe_tokens if t in probs} if s.probe_tokens else probs
        top = sorted(probs.items(), key=lambda kv: -kv[1])[: max(1, s.logprobs or 2)]
        extra["first_token_logprobs"] = {t: (math.log(v) if v > 0 else -math.inf) for t, v in top}
    return text, "stop", extra
