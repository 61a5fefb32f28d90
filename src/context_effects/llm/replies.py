"""Reply policies: the one plug-in point for "validate a reply, and re-ask if it fails".

A :class:`ReplyPolicy` says when a reply is usable (``validate(text) -> (value,
reason)``; a reason means it is not) and how to ask again (``reask(request,
attempt, reason) -> request``; the new request must have a new key, or the store
would serve the bad reply again). The runner applies it; a reply that never
passes is a miss with its reason, never a value (docs/architecture.md, "Reply
validation").

Each study defines its policies in its own package; a request shard names one
by its entry in :data:`POLICIES` (and its parameters), and :func:`resolve_policy`
turns that name into the policy, both when the shard is written (so a typo fails
the study rule, not the answering job hours later) and when it is answered.
The study module is imported only then, so the LLM layer never imports a study.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from context_effects.llm.types import LLMRequest, LLMResult

Validator = Callable[[str], tuple[Any, "str | None"]]
Reask = Callable[[LLMRequest, int, str], LLMRequest]

#: Reasons of a reply that carries no answer, whatever the study: the model
#: declined, or sent nothing. Both were paid for, so they are stored; the runner
#: re-asks them under the study's policy like an invalid reply and, after the last
#: attempt, records the item missing with this reason (the ``invalid_reason`` of
#: its response row), before any study validator sees the text.
REFUSAL = "refusal"
EMPTY = "empty"
#: An empty reply that ended because the output budget ran out (finish reason
#: "length"): a reasoning model spent ``max_tokens`` before writing anything. Asking
#: again at the same budget buys the same empty reply, so the runner never re-asks
#: it and stops a job where it is the rule (``runner.BUDGET_STOP_AFTER``).
BUDGET_EXHAUSTED = "budget_exhausted"
#: The finish reason every backend gives a reply cut off at ``max_tokens``
#: (Anthropic's "max_tokens" is mapped to it).
LENGTH_FINISH_REASON = "length"
#: Finish reasons by which a provider says the model declined: "refusal" is
#: Anthropic's stop_reason and the backends' label for OpenAI's ``message.refusal``;
#: "content_filter" is OpenAI's moderation cutting the reply.
REFUSAL_FINISH_REASONS = frozenset({REFUSAL, "content_filter"})


def no_answer_reason(result: LLMResult) -> str | None:
    """``"refusal"``, ``"budget_exhausted"`` or ``"empty"`` for a successful reply that
    carries no answer, else ``None``.

    Empty means no text but whitespace *and* no first-token probabilities: a
    Yes/No probe read off the first position is an answer even when the decoded
    text is empty (Study A's first-token method). A reply with no text at all, cut
    off at the output budget, is ``"budget_exhausted"``, not ``"empty"``: the fix is a
    larger budget, not another ask. Whitespace up to the budget stays ``"empty"``: a
    model that wrote something, if nothing useful, may do better when asked again.
    """
    if result.finish_reason in REFUSAL_FINISH_REASONS:
        return REFUSAL
    if not (result.text or "").strip() and not result.probe_probs and not result.first_token_logprobs:
        return BUDGET_EXHAUSTED if not result.text and result.finish_reason == LENGTH_FINISH_REASON else EMPTY
    return None


def default_reask(req: LLMRequest, attempt: int, reason: str) -> LLMRequest:
    """Same request, next attempt number: a new key, so the cached bad reply is not served again."""
    meta = {**req.meta, "reask_reason": reason, "reask_of": req.key}
    return dataclasses.replace(req, attempt=attempt, meta=meta)


def reminder_reask(reminder: str) -> Reask:
    """A re-ask that bumps the attempt number and appends ``reminder`` to the last turn.

    With greedy decoding a re-ask that differs only in ``attempt`` gets the
    same bad reply back from a deterministic engine; the reminder changes the
    prompt so the retry has a chance. The reason goes to ``meta`` (not the key).
    """

    def reask(req: LLMRequest, attempt: int, reason: str) -> LLMRequest:
        messages = list(req.messages)
        role, content = messages[-1]
        if reminder not in content:
            messages[-1] = (role, f"{content}\n\n{reminder}")
        meta = {**req.meta, "reask_reason": reason, "reask_of": req.key}
        return dataclasses.replace(req, messages=tuple(messages), attempt=attempt, meta=meta)

    return reask


@dataclass(frozen=True)
class ReplyPolicy:
    """How replies of one kind are validated and re-asked."""

    #: The name a shard records (a key of :data:`POLICIES`).
    name: str
    validate: Validator
    reask: Reask = default_reask


def accept_any() -> ReplyPolicy:
    """Every reply is used as it is (AMEL's one-token answers, probe probabilities)."""
    return ReplyPolicy("none", lambda text: (text, None))


#: Every policy a request shard may name -> ``"module:factory"``; the factory takes
#: the shard's recorded parameters as keywords and returns the ReplyPolicy. A study
#: adds its policies here and defines them in its own package.
POLICIES: dict[str, str] = {
    "none": "context_effects.llm.replies:accept_any",
    # Study C: non-empty answers, re-asked warmer (seed 002, App. A.6).
    "conformity.generation": "context_effects.conformity.replies:generation_policy",
    # Study C: judge replies {"rating": 1-5} (seed 002, App. B).
    "conformity.rating": "context_effects.conformity.replies:rating_policy",
    # Study H: judge replies {"score": 1-5}.
    "anchoring.score": "context_effects.anchoring.judging:score_policy",
}


def resolve_policy(name: str, params: Mapping[str, Any] | None = None) -> ReplyPolicy:
    """The :class:`ReplyPolicy` registered as ``name``, built with ``params``.

    Raises ``ValueError`` naming the policy and what is allowed: the registered
    names for an unknown policy, the factory's parameters for a wrong one.
    """
    if name not in POLICIES:
        raise ValueError(f"unknown reply policy {name!r}; allowed: {', '.join(sorted(POLICIES))}")
    module, _, attr = POLICIES[name].partition(":")
    factory = getattr(importlib.import_module(module), attr)
    params = dict(params or {})
    signature = inspect.signature(factory)
    try:
        signature.bind(**params)
    except TypeError as exc:
        takes = ", ".join(signature.parameters) or "no parameters"
        raise ValueError(f"reply policy {name!r} takes {takes}; got {sorted(params)} ({exc})") from None
    try:
        json.dumps(params)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"reply policy {name!r}: parameters must be JSON values ({exc})") from None
    policy = factory(**params)
    if not isinstance(policy, ReplyPolicy) or policy.name != name:
        raise TypeError(f"{POLICIES[name]} must return a ReplyPolicy named {name!r}, got {policy!r}")
    return policy
