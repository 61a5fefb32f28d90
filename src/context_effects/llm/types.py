"""The one request type and the one result type every study and backend uses.

A request is everything that can change what a model returns; its ``key`` is the
content address in the response store (docs/architecture.md, "The response
store"). Study bookkeeping that must *not* change the answer (item id,
condition, judge pass ...) travels in ``meta``, which is deliberately excluded
from the key so two studies asking the very same question share one paid call.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, Literal

from context_effects.utc import utc_now_iso

Role = Literal["system", "user", "assistant"]

# Bump when the canonical form below changes: old keys then stop matching
# instead of silently serving answers to differently-rendered requests.
KEY_VERSION = 1


@dataclass(frozen=True)
class ModelRef:
    """Which model answers. ``provider`` is the backend family (vllm, openai, ...)."""

    provider: str
    model_id: str
    revision: str | None = None
    # For OpenAI-compatible servers the endpoint is part of the identity of the model.
    base_url: str | None = None


@dataclass(frozen=True)
class Sampling:
    # None = not sent: the model's capability profile says the API rejects the setting,
    # so the provider's default applies (llm/capabilities.py).
    temperature: float | None = 0.0
    top_p: float | None = 1.0
    # No default: every study's config section holds it (the config schema has
    # the defaults), and a second default here could silently disagree.
    max_tokens: int = field(kw_only=True)
    seed: int | None = None
    # Number of top alternatives per generated position; None = no logprobs.
    logprobs: int | None = None
    # Tokens whose first-position probability is wanted explicitly (e.g. "Yes", "No").
    probe_tokens: tuple[str, ...] = ()
    # Reasoning models: the effort sent as ``reasoning_effort``; None = not sent.
    reasoning_effort: str | None = None
    # Anthropic's ``thinking`` type (disabled, adaptive); None = not sent.
    thinking: str | None = None


@dataclass(frozen=True)
class LLMRequest:
    model: ModelRef
    messages: tuple[tuple[Role, str], ...]
    sampling: Sampling
    # JSON schema the reply must satisfy (structured output where supported).
    output_schema: dict[str, Any] | None = None
    # Distinguishes repeated samples of the same prompt (AMEL sampling, Study H reps).
    sample_index: int = 0
    # Re-ask counter for replies that failed validation: a new attempt is a new key.
    attempt: int = 0
    # "chat" for instruction-tuned models, "completion" for base models (few-shot text).
    mode: Literal["chat", "completion"] = "chat"
    # Keeps byte-identical requests of separately generated collections apart: a
    # study that the paper ran as its own run (Study C's decomposition corpus) must
    # not be served the answers of another run from the store. In the key only when
    # set, so every other request keeps its address.
    namespace: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def canonical(self) -> dict[str, Any]:
        """Everything that can change the reply, in a stable JSON-able form."""
        body = {
            "v": KEY_VERSION,
            "model": asdict(self.model),
            "messages": [list(m) for m in self.messages],
            "sampling": asdict(self.sampling),
            "output_schema": self.output_schema,
            "sample_index": self.sample_index,
            "attempt": self.attempt,
            "mode": self.mode,
        }
        if self.namespace is not None:
            body["namespace"] = self.namespace
        body["sampling"]["probe_tokens"] = list(self.sampling.probe_tokens)
        for late in ("reasoning_effort", "thinking"):
            if getattr(self.sampling, late) is None:
                # Added after keys were first recorded: absent when unused keeps every key.
                del body["sampling"][late]
        return body

    @cached_property
    def key(self) -> str:
        # Computed once per request (every field of a frozen request is fixed): the runner,
        # the store and the shard checks ask for it several times, and for a long Study A
        # conversation it is most of what answering from the store costs.
        blob = json.dumps(self.canonical(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class LLMResult:
    key: str
    text: str | None
    finish_reason: str | None
    tokens_in: int | None = None
    tokens_out: int | None = None
    # Top alternatives at the first generated position: token -> logprob.
    first_token_logprobs: dict[str, float] | None = None
    # Probability of each requested probe token at the first position.
    probe_probs: dict[str, float] | None = None
    latency_s: float | None = None
    attempt: int = 0
    backend: str = ""
    engine_version: str = ""
    timestamp: str = ""
    cost_usd: float | None = None
    # Free-text notes on how the request was adapted (e.g. "system merged into first user turn").
    notes: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.text is not None

    @classmethod
    def failure(
        cls, request: LLMRequest, error: str, *, backend: str, engine_version: str, notes: str = ""
    ) -> LLMResult:
        """A request that got no answer this attempt: no text, why in ``error``, stamped now.
        The one builder every backend and the runner use, so a failed row reads the same
        whichever engine wrote it."""
        return cls(
            key=request.key,
            text=None,
            finish_reason=None,
            attempt=request.attempt,
            backend=backend,
            engine_version=engine_version,
            timestamp=utc_now_iso(),
            notes=notes,
            error=error,
        )
