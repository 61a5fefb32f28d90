"""Synthetic backend: a simulated LLM with planted, documented, known effects.

It is a **validation instrument**, never a default for real runs: it lets the
whole DAG run in seconds and lets every analysis be checked for recovery of the
values planted here (docs/architecture.md, "The synthetic backend"). Every
result it returns says so: ``notes`` starts with ``SYNTHETIC`` and
``engine_version`` is ``synthetic-<version>``.

This module is the backend shell: planted-parameter validation, the dispatch of
each request to the simulator of the study named by ``meta["study"]``, and the
result. Each study's simulated model lives in its own package, listed in
:data:`SIMULATORS` and imported on first use. A simulator module provides:

``DEFAULTS``  its planted parameters, with their meaning;
``PROFILES``  its per-family values (family -> {parameter: value});
``NESTED``    parameters that are mappings, with their allowed keys (a profile
              or ``params`` updates them key by key);
``validate(p)``  its parameters of the merged dict ``p``, checked and normalised;
``planted(eff)`` its section of :func:`planted_effects`;
``answer(backend, request, meta, rng)`` -> ``(text, finish_reason, extra)``,
              where ``extra`` may hold ``first_token_logprobs``/``probe_probs``;
              raises :class:`MetaError` for a bad meta contract.

Determinism
-----------
All randomness of one request (its *noise*: the uniform that decides a Yes, the
normal added to a score or to an answer's quality) comes from one
``numpy.random.default_rng`` (``SyntheticBackend.noise_rng``), seeded as a vLLM
engine seeds a request's generator (docs/llm-layer.md, "Sampling seeds"):

* a **seeded, sampled** request (``sampling.seed`` set, temperature not 0; None is
  the provider's default of 1) draws from its sampling seed alone, with the
  backend seed that names the world: sha256 of ``(backend seed, sampling seed)``.
  Two such requests with one seed draw the same noise whatever their prompts or
  sample index, as two requests with one seed do on vLLM, so a study that gives
  many requests one seed shows it in a synthetic run;
* any other request (no seed sent; or greedy, where vLLM ignores the seed and the
  reply is a function of the prompt) draws from sha256 of ``(backend seed,
  request.key)``, independently of every other request.

A rerun is therefore identical. A re-ask (``attempt + 1`` → new key) or another
sample (``sample_index``) gets fresh draws when unseeded or greedy, and when seeded
only through another sampling seed (as on vLLM; Study C's re-asks raise the seed by
one). The planted distributions are the same either way: only which stream of
uniforms and normals a request reads depends on its seed. Quantities that must be
shared across requests are seeded (:func:`seeded`) by the backend seed and their own
identity (the Study C trial baseline by item and generator, the AMEL item logit by
model and item, the Study H task bias by model and task).
A workflow run builds every synthetic model with the seed ``sampling.synthetic_seed``
(default 0; ``llm.factory``): another value is another draw of the same world, its
noise included.

``temperature``/``top_p`` do not change the planted distributions, which *are* the
simulated model's response distribution (the measurement-model noise); a
temperature of 0 only decides that the seed is not used (above).
``timestamp`` is left empty (the runner stamps it) so results are byte-for-byte
reproducible. Latency and cost are 0; tokens are whitespace counts; a reply
longer than ``max_tokens`` words is cut there (finish_reason "length").

Cache hygiene: the response store keys on the request only, so a changed
planted value would otherwise be served old answers. Put
``model_revision(model_name, params, seed)`` in ``ModelRef.revision``; a request
whose revision starts with ``synthetic-`` but does not match this backend's is
answered with an error instead of silently mixing two sets of planted values.

Meta contract (``LLMRequest.meta``; bookkeeping, not part of the key): extra keys
are ignored; no or an unknown ``study``, a missing required key or a value
outside the listed set gives an error result naming the field(s). The planted
per-model values are always those of this backend's ``model_name``.

Planted values: the simulators' ``DEFAULTS``, then — only when ``params`` names
one with ``profile: <family>`` — that family's built-in values, then ``params``;
unknown keys raise ``ValueError``. There is no hidden layer: without a named
profile the planted values are exactly the defaults plus what the config says,
whatever the model is called (the model name never selects a profile; the old
``profile: auto`` is refused with a message saying to name a family).
``planted_effects(model_name, params)`` returns the effective values plus
derived targets (decomposition, expected AMEL bias scores) for recovery tests;
``context_effects.recovery`` writes them for a run (``results/synthetic/planted.json``).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from context_effects.llm.backends.base import Backend
from context_effects.llm.types import LLMRequest, LLMResult

SYNTHETIC_VERSION = "1"
ENGINE_VERSION = f"synthetic-{SYNTHETIC_VERSION}"
NOTE = (
    "SYNTHETIC: simulated model with planted effects (context_effects.llm.backends.synthetic); "
    "not a finding about any real model"
)

#: Study name (``meta["study"]``) -> the module simulating it, imported on first use.
SIMULATORS: dict[str, str] = {
    "conformity": "context_effects.conformity.synthetic",
    "amel": "context_effects.amel.synthetic",
    "anchoring": "context_effects.anchoring.synthetic",
}
STUDIES = tuple(SIMULATORS)

#: Model families with built-in planted values (each simulator's ``PROFILES``); a
#: model gets one only when its config names it (``synthetic: {profile: qwen}``).
FAMILIES = ("qwen", "mistral", "gemma", "llama", "gpt-4o", "gpt-5")
#: Values of the ``profile`` parameter: "none" (the default) = the generic defaults only.
PROFILE_CHOICES = ("none", *FAMILIES)


# ----------------------------------------------------------------------------- helpers for simulators


def hash_int(*parts: Any) -> int:
    blob = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False, separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(blob.encode("utf-8")).digest()[:16], "little")


def seeded(*parts: Any) -> np.random.Generator:
    """A generator seeded by sha256 of ``parts`` (the same parts, the same draws)."""
    return np.random.default_rng(hash_int(*parts))


def sigmoid(x: Any) -> Any:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


def param_number(
    key: str, v: Any, *, lo: float | None = None, hi: float | None = None, strict_lo: bool = False
) -> float:
    """Planted parameter ``key`` as a finite float within the bounds, else ``ValueError``."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"synthetic param {key!r} must be a finite number, got {v!r}")
    v = float(v)
    if lo is not None and (v <= lo if strict_lo else v < lo):
        raise ValueError(f"synthetic param {key!r} must be {'>' if strict_lo else '>='} {lo}, got {v}")
    if hi is not None and v > hi:
        raise ValueError(f"synthetic param {key!r} must be <= {hi}, got {v}")
    return v


class MetaError(ValueError):
    """The request's meta does not satisfy the simulator's contract (an error result, not an exception)."""


def require(meta: Mapping[str, Any], fields: Sequence[str], what: str) -> None:
    missing = [f for f in fields if meta.get(f) is None]
    if missing:
        raise MetaError(f"request meta is missing field(s) {', '.join(repr(m) for m in missing)} required for {what}")


def choice(meta: Mapping[str, Any], field: str, allowed: Sequence[Any], what: str) -> Any:
    v = meta.get(field)
    if v not in allowed or isinstance(v, bool):
        raise MetaError(f"meta[{field!r}] = {v!r} is not one of {list(allowed)} ({what})")
    return v


def meta_int(meta: Mapping[str, Any], field: str, what: str, lo: int | None = None) -> int:
    v = meta.get(field)
    ok = not isinstance(v, bool) and isinstance(v, (int, np.integer, float)) and math.isfinite(v)
    if not ok or float(v) != int(v):
        raise MetaError(f"meta[{field!r}] = {v!r} must be an integer ({what})")
    v = int(v)
    if lo is not None and v < lo:
        raise MetaError(f"meta[{field!r}] = {v} must be >= {lo} ({what})")
    return v


def jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    return x


# ----------------------------------------------------------------------------- params


@functools.cache
def simulator(study: str) -> ModuleType:
    """The simulator module of ``study`` (a key of :data:`SIMULATORS`)."""
    return importlib.import_module(SIMULATORS[study])


@functools.cache
def _tables() -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, tuple[str, ...]]]:
    """Every simulator's defaults, family profiles and nested keys, merged (never mutate)."""
    defaults: dict[str, Any] = {
        # Which built-in family profile to layer over the defaults (before the config's
        # own values): "none" = the generic defaults only, or a FAMILIES name. Never
        # chosen from the model name.
        "profile": "none",
    }
    profiles: dict[str, dict[str, Any]] = {fam: {} for fam in FAMILIES}
    nested: dict[str, tuple[str, ...]] = {}
    for study in STUDIES:
        sim = simulator(study)
        clash = sorted(set(defaults) & set(sim.DEFAULTS))
        unknown = sorted(set(sim.PROFILES) - set(FAMILIES))
        if clash or unknown:
            raise RuntimeError(
                f"{SIMULATORS[study]}: parameters {clash} defined twice, or unknown families {unknown}"
            )
        defaults.update(sim.DEFAULTS)
        for fam, values in sim.PROFILES.items():
            profiles[fam].update(values)
        nested.update(sim.NESTED)
    return defaults, profiles, nested


def resolve_profile(profile: str = "none") -> str | None:
    """The family whose built-in values are layered over the defaults (None for ``"none"``)."""
    if profile == "none":
        return None
    if profile == "auto":
        raise ValueError(
            "synthetic param 'profile' = 'auto' is no longer supported: a model's planted values are the "
            "defaults plus its `synthetic:` values, never chosen from its name; to layer a family's built-in "
            f"values name it (profile: {' | '.join(FAMILIES)}), or drop `profile` for the defaults"
        )
    if profile not in FAMILIES:
        raise ValueError(f"unknown synthetic profile {profile!r}; allowed: {', '.join(PROFILE_CHOICES)}")
    return profile


def parameter_names() -> list[str]:
    """Every planted parameter a model's ``synthetic:`` mapping may set (the schema lists the same)."""
    return sorted(_tables()[0])


def nested_keys() -> dict[str, tuple[str, ...]]:
    """Planted parameters that are mappings, with their allowed keys."""
    return dict(_tables()[2])


def _merge_dict(key: str, base: Mapping[str, float], over: Any, allowed: Sequence[str]) -> dict[str, float]:
    if not isinstance(over, Mapping):
        raise ValueError(f"synthetic param {key!r} must be a mapping, got {type(over).__name__}")
    bad = sorted(set(over) - set(allowed))
    if bad:
        raise ValueError(f"unknown keys in synthetic param {key!r}: {bad}; allowed: {list(allowed)}")
    out = dict(base)
    out.update(over)
    return out


def effective_params(model_name: str, params: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], str | None]:
    """Defaults ⊕ the named family profile (if any) ⊕ ``params``, validated; and the profile used.

    ``model_name`` does not change the values (it is kept for the callers' symmetry with
    ``planted_effects``): without ``profile`` in ``params`` the result is the defaults
    updated by ``params`` exactly."""
    defaults, profiles, nested = _tables()
    params = dict(params or {})
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise ValueError(f"unknown synthetic params: {unknown}; allowed: {sorted(defaults)}")
    profile_opt = params.get("profile", defaults["profile"])
    if not isinstance(profile_opt, str):
        raise ValueError(f"synthetic param 'profile' must be a string, got {profile_opt!r}")
    fam = resolve_profile(profile_opt)
    eff = copy.deepcopy(defaults)
    eff["profile"] = profile_opt
    layers = [profiles[fam]] if fam else []
    layers.append({k: v for k, v in params.items() if k != "profile"})
    for layer in layers:
        for key, value in layer.items():
            if key in nested:
                eff[key] = _merge_dict(key, eff[key], value, nested[key])
            else:
                eff[key] = copy.deepcopy(value)
    out = dict(eff)
    for study in STUDIES:
        out.update(simulator(study).validate(eff))
    return out, fam


#: Parameters whose empty value plants nothing (``model_revision``).
OPTIONAL_MAPPINGS = ("by_dataset", "decomposition_eta")


def model_revision(model_name: str, params: Mapping[str, Any] | None = None, seed: int = 0) -> str:
    """``synthetic-<version>-<12 hex>`` fingerprint of the effective planted values and seed.

    Use it as ``ModelRef.revision`` so that changing a planted value changes every key.
    """
    eff, fam = effective_params(model_name, params)
    # A mapping parameter left empty (no values by dataset, no shifts of a corpus of its own)
    # plants nothing: left out of the fingerprint, so adding such a parameter keeps every
    # stored answer of a model that does not use it (and its draws) as they were.
    eff = {k: v for k, v in eff.items() if not (k in OPTIONAL_MAPPINGS and not v)}
    digest = hash_int("revision", SYNTHETIC_VERSION, model_name, fam, seed, jsonable(eff))
    return f"{ENGINE_VERSION}-{digest:032x}"[: len(ENGINE_VERSION) + 13]


def planted_effects(model_name: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The effective planted values for ``model_name`` with ``params``, plus each study's derived targets."""
    eff, fam = effective_params(model_name, params)
    out: dict[str, Any] = {"version": ENGINE_VERSION, "model_name": model_name, "profile": fam, "params": jsonable(eff)}
    for study in STUDIES:
        out[study] = simulator(study).planted(eff)
    return out


# ----------------------------------------------------------------------------- backend


def _words(text: str) -> int:
    return len(text.split())


class SyntheticBackend(Backend):
    """A simulated model with the planted effects of the study simulators."""

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

    def noise_rng(self, req: LLMRequest) -> np.random.Generator:
        """The generator of ``req``'s noise (module docstring, "Determinism"): its sampling
        seed's alone when it is seeded and sampled, else its key's. The backend seed
        (``sampling.synthetic_seed``) enters both, so another world draws other noise."""
        s = req.sampling
        if s.seed is not None and s.temperature != 0:
            return seeded("sampling-seed", self.seed, int(s.seed))
        return seeded("request", self.seed, req.key)

    def run(self, requests: Sequence[LLMRequest]) -> Iterator[LLMResult]:
        for req in requests:
            yield self.answer(req)

    def answer(self, req: LLMRequest) -> LLMResult:
        try:
            rev = req.model.revision
            if rev and rev.startswith("synthetic-") and rev != self.revision:
                raise MetaError(
                    f"request revision {rev!r} does not match this backend's planted values ({self.revision!r})"
                )
            meta = req.meta or {}
            if meta.get("study") is None:
                raise MetaError(f"request meta is missing field(s) 'study' (one of {', '.join(STUDIES)})")
            study = choice(meta, "study", STUDIES, "synthetic backend")
            text, finish, extra = simulator(study).answer(self, req, meta, self.noise_rng(req))
        except MetaError as exc:
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
