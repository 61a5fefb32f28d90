"""What a model accepts, and requests that send only that.

Reasoning-model families reject settings other models take: OpenAI's GPT-5 and o-series
answer HTTP 400 to ``temperature``/``top_p`` other than the default and to ``logprobs``,
and spend the output budget on reasoning tokens, so a 16-token judge budget returns an
empty reply; Gemini's thinking models behave alike through the OpenAI-compatible
endpoint; Anthropic's Messages API (SDK 2.x) takes no ``temperature``, ``top_p`` or
``seed`` and returns no logprobs. Each model therefore has a
*capability profile*:

=====================  ==========================================================
``temperature``        the API accepts a ``temperature``
``top_p``              the API accepts a ``top_p``
``seed``               the API accepts a sampling ``seed``
``logprobs``           first-token log-probabilities can be returned
``reasoning_effort``   sent as ``reasoning_effort`` (OpenAI-style APIs); null = not sent
``min_output_tokens``  the smallest output budget that still leaves room for an
                       answer after the model's reasoning tokens
=====================  ==========================================================

The profile is the default of the model's provider family (``FAMILIES``, chosen by
backend and model id, ``family_of``) with the keys the config sets under
``models.<name>.capabilities`` laid over it; ``capabilities.family`` names a family
explicitly. ``conform_sampling`` is applied where a study builds its requests, so the
request — and with it the response store's key — holds exactly what is sent: a setting
the model does not take is ``None`` (not sent, the provider's default applies), the
output budget is raised to ``min_output_tokens``, and ``reasoning_effort`` is filled
in. A request for logprobs from a model without them is an error, never a silent
drop: a study that wants first-token probabilities asks ``profile(...)["logprobs"]``
first and falls back to sampled answers, recording which it used.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from context_effects.llm.types import LLMRequest, Sampling

#: Every key of a profile.
KEYS = ("temperature", "top_p", "seed", "logprobs", "reasoning_effort", "min_output_tokens")

_OPEN = {"temperature": True, "top_p": True, "seed": True, "logprobs": True, "reasoning_effort": None,
         "min_output_tokens": 1}

#: Provider families: name -> (backend, model-id pattern, profile). The first match wins;
#: the figures are the providers' documented behaviour at the time of writing and can be
#: overridden per model in the config.
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    # GPT-5 family and o-series: only the default temperature/top_p, no logprobs,
    # reasoning tokens count against max_completion_tokens.
    "openai-reasoning": ("openai", r"^(gpt-5|o[1-9])", {
        "temperature": False, "top_p": False, "seed": True, "logprobs": False,
        "reasoning_effort": "low", "min_output_tokens": 2048}),
    "openai-chat": ("openai", r"", dict(_OPEN)),
    # The 2.x Messages API has no temperature, top_p or seed parameter and no logprobs.
    "anthropic": ("anthropic", r"", {
        "temperature": False, "top_p": False, "seed": False, "logprobs": False,
        "reasoning_effort": None, "min_output_tokens": 1}),
    # Gemini through its OpenAI-compatible endpoint: thinking models think by default
    # (Pro cannot switch it off), no logprobs there, no seed.
    "gemini-openai": ("openai_compatible", r"^(models/)?gemini", {
        "temperature": True, "top_p": True, "seed": False, "logprobs": False,
        "reasoning_effort": "low", "min_output_tokens": 2048}),
    "openai-compatible": ("openai_compatible", r"", dict(_OPEN)),
    "vllm": ("vllm", r"", dict(_OPEN)),
    "synthetic": ("synthetic", r"", dict(_OPEN)),
    "replay": ("replay", r"", dict(_OPEN)),
}


def family_of(model_cfg: Mapping[str, Any]) -> str:
    """The provider family a model's defaults come from (explicit ``capabilities.family`` wins)."""
    explicit = (model_cfg.get("capabilities") or {}).get("family")
    if explicit is not None:
        if explicit not in FAMILIES:
            raise ValueError(f"unknown capability family {explicit!r}; known: {sorted(FAMILIES)}")
        return explicit
    backend = model_cfg.get("backend")
    model_id = str(model_cfg.get("model_id") or "")
    for name, (fam_backend, pattern, _) in FAMILIES.items():
        if fam_backend == backend and re.search(pattern, model_id):
            return name
    raise ValueError(f"no capability family for backend {backend!r}; set models.<name>.capabilities.family")


def profile(model_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The model's resolved profile: its family's defaults with the config's keys laid over."""
    family = family_of(model_cfg)
    out = {"family": family, **FAMILIES[family][2]}
    out.update({k: v for k, v in (model_cfg.get("capabilities") or {}).items() if k != "family"})
    return out


class UnsupportedSetting(ValueError):
    """A request asks for something the model's capability profile says it cannot do."""


def conform_sampling(sampling: Sampling, model_cfg: Mapping[str, Any], model_name: str = "") -> Sampling:
    """``sampling`` as it will be sent to the model (module docstring)."""
    p = profile(model_cfg)
    who = model_name or str(model_cfg.get("model_id"))
    if (sampling.logprobs is not None or sampling.probe_tokens) and not p["logprobs"]:
        raise UnsupportedSetting(
            f"{who} ({p['family']}) returns no logprobs, but a request asks for them; estimate from sampled "
            "answers instead, or set models.<name>.capabilities.logprobs: true if this model has them"
        )
    changes: dict[str, Any] = {}
    for key in ("temperature", "top_p", "seed"):
        if not p[key]:
            changes[key] = None
    if p["reasoning_effort"] is not None:
        changes["reasoning_effort"] = p["reasoning_effort"]
    if sampling.max_tokens < int(p["min_output_tokens"]):
        changes["max_tokens"] = int(p["min_output_tokens"])
    return dataclasses.replace(sampling, **changes) if changes else sampling


def describe(model_cfg: Mapping[str, Any]) -> str:
    """One line for logs and the dry run: family and what is not sent or added."""
    p = profile(model_cfg)
    not_sent = [k for k in ("temperature", "top_p", "seed") if not p[k]]
    parts = [p["family"], "logprobs" if p["logprobs"] else "no logprobs"]
    if not_sent:
        parts.append("not sent: " + ", ".join(not_sent))
    if p["reasoning_effort"] is not None:
        parts.append(f"reasoning_effort={p['reasoning_effort']}")
    if int(p["min_output_tokens"]) > 1:
        parts.append(f"min output {int(p['min_output_tokens'])} tokens")
    return "; ".join(parts)


#: Notes entries of a result that name the model version that answered.
SERVED_MODEL_NOTE, FINGERPRINT_NOTE = "served_model", "system_fingerprint"


def served_version(notes: str | None) -> tuple[str | None, str | None]:
    """``(served model, system fingerprint)`` recorded in a result's notes, if any."""
    found: dict[str, str] = {}
    for part in (notes or "").split("; "):
        key, sep, value = part.partition("=")
        if sep and key in (SERVED_MODEL_NOTE, FINGERPRINT_NOTE):
            found[key] = value
    return found.get(SERVED_MODEL_NOTE), found.get(FINGERPRINT_NOTE)


def served_model(request: LLMRequest, notes: str | None) -> tuple[str, str | None]:
    """``(model version that answered, system fingerprint)`` of one result.

    Hosted APIs name the snapshot behind an alias in every response (recorded in the
    result's notes by the backend); a local engine ran exactly the configured weights,
    named by model id and revision.
    """
    served, fingerprint = served_version(notes)
    if served is None:
        ref = request.model
        served = ref.model_id + (f"@{ref.revision}" if ref.revision else "")
    return served, fingerprint
