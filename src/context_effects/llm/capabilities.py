"""What a model accepts, and requests that send only that.

Hosted models differ in what their API takes, model by model and version by version:
GPT-5, GPT-5-mini and GPT-5-nano always reason, answer HTTP 400 to a ``temperature``
other than 1 and to ``logprobs``, and spend the output budget on reasoning tokens, so a
16-token judge budget comes back empty; GPT-5.1 and later default to no reasoning and
then take temperature and logprobs; the Anthropic Messages API (SDK 2.x) takes no
``temperature``, ``top_p`` or ``seed`` and returns no logprobs, and some Claude models
think unless told not to; Gemini's models think by default. Each model therefore has a
*capability profile*:

=====================  ==========================================================
``temperature``        the API accepts a ``temperature``
``top_p``              the API accepts a ``top_p``
``seed``               the API accepts a sampling ``seed``
``logprobs``           first-token log-probabilities can be returned
``reasoning_effort``   sent as ``reasoning_effort`` (OpenAI-style APIs); null = not sent
``thinking``           sent as Anthropic's ``thinking`` type (disabled, adaptive); null = not sent
``min_output_tokens``  the smallest output budget that still leaves room for an
                       answer after the model's reasoning tokens
=====================  ==========================================================

The profiles are data: ``capabilities.yaml`` beside this module holds one entry per
model id or snapshot pattern (``FAMILIES``), each with the provider documentation it
was taken from and the date it was read (``source``). A model's profile is the first
entry of its backend whose pattern matches its model id (``family_of``), with the keys
the config sets under ``models.<name>.capabilities`` laid over it;
``capabilities.family`` names an entry explicitly. ``conform_sampling`` is applied where
a study builds its requests, so the request, and with it the response store's key,
holds exactly what is sent: a setting the model does not take is ``None`` (not sent,
the provider's default applies), the output budget is raised to ``min_output_tokens``,
and ``reasoning_effort`` and ``thinking`` are filled in. A request for logprobs from a
model without them is an error, never a silent drop: a study that wants first-token
probabilities asks ``profile(...)["logprobs"]`` first and falls back to sampled answers,
recording which it used.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from context_effects.llm.types import LLMRequest, Sampling

#: Every key of a profile.
KEYS = ("temperature", "top_p", "seed", "logprobs", "reasoning_effort", "thinking", "min_output_tokens")
#: Values ``thinking`` may take (Anthropic's ``thinking.type``); null = not sent.
THINKING = ("disabled", "adaptive")
#: The data file of profiles.
DATA = Path(__file__).with_name("capabilities.yaml")
_SOURCE_KEYS = ("docs", "checked", "says", "unverified")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One entry of ``capabilities.yaml``."""

    name: str
    backend: str
    match: str
    profile: Mapping[str, Any]
    source: Mapping[str, Any]


def load_entries(path: str | Path = DATA) -> dict[str, Entry]:
    """The entries of a profile file, in order; a malformed entry is an error naming it."""
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    entries: dict[str, Entry] = {}
    for i, e in enumerate(raw.get("profiles") or []):
        name = e.get("name") or f"#{i}"
        problems = []
        if name in entries:
            problems.append("name used twice")
        if set(e) != {"name", "backend", "match", "profile", "source"}:
            problems.append(f"keys {sorted(e)}, expected name, backend, match, profile, source")
        profile, source = e.get("profile") or {}, e.get("source") or {}
        if set(profile) != set(KEYS):
            problems.append(f"profile keys {sorted(profile)}, expected {sorted(KEYS)}")
        if profile.get("thinking") not in (None, *THINKING):
            problems.append(f"thinking {profile.get('thinking')!r}, expected null or one of {THINKING}")
        if set(source) != set(_SOURCE_KEYS) or not source.get("docs") or not source.get("checked"):
            problems.append(f"source needs {', '.join(_SOURCE_KEYS)} (docs and checked non-empty)")
        try:
            re.compile(str(e.get("match", "")))
        except re.error as err:
            problems.append(f"match is not a regular expression ({err})")
        if problems:
            raise ValueError(f"{path}: capability entry {name!r}: " + "; ".join(problems))
        entries[name] = Entry(name, str(e["backend"]), str(e["match"]), dict(profile), dict(source))
    return entries


#: The entries of ``capabilities.yaml`` by name, in the file's order.
ENTRIES: dict[str, Entry] = load_entries()
#: Entry name -> (backend, model-id pattern, profile), in the data file's order; the
#: first match wins.
FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    name: (e.backend, e.match, dict(e.profile)) for name, e in ENTRIES.items()
}
#: Backends whose models are called over a provider's API (their profiles cite documents).
HOSTED = frozenset({"openai", "anthropic", "openai_compatible"})


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
    if p["thinking"] is not None:
        changes["thinking"] = p["thinking"]
    if sampling.max_tokens < int(p["min_output_tokens"]):
        changes["max_tokens"] = int(p["min_output_tokens"])
    return dataclasses.replace(sampling, **changes) if changes else sampling


def source(model_cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Where the model's profile comes from: its entry's ``source`` (documents, date read,
    what they say, what they leave open), and the config keys laid over it."""
    entry = ENTRIES[family_of(model_cfg)]
    overrides = sorted(k for k in (model_cfg.get("capabilities") or {}) if k != "family")
    return {**entry.source, "entry": entry.name, "config_overrides": overrides}


def describe(model_cfg: Mapping[str, Any]) -> str:
    """One line for logs and the dry run: the profile's entry, what is not sent or added,
    and for a hosted model the documents it was taken from and their date."""
    p = profile(model_cfg)
    not_sent = [k for k in ("temperature", "top_p", "seed") if not p[k]]
    parts = [p["family"], "logprobs" if p["logprobs"] else "no logprobs"]
    if not_sent:
        parts.append("not sent: " + ", ".join(not_sent))
    if p["reasoning_effort"] is not None:
        parts.append(f"reasoning_effort={p['reasoning_effort']}")
    if p["thinking"] is not None:
        parts.append(f"thinking={p['thinking']}")
    if int(p["min_output_tokens"]) > 1:
        parts.append(f"min output {int(p['min_output_tokens'])} tokens")
    if model_cfg.get("backend") in HOSTED:
        src = source(model_cfg)
        text = f"source: {src['docs'][0]} (read {src['checked']})"
        if src["unverified"]:
            text += ", partly unverified"
        if src["config_overrides"]:
            text += f"; config sets {', '.join(src['config_overrides'])}"
        parts.append(text)
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
