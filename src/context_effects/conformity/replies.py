"""Study C's reply policies (registered in ``context_effects.llm.replies.POLICIES``).

``conformity.generation``
    An answer is usable when it is not empty. seed 002 App. A.6: a malformed or
    empty completion is asked again with the temperature raised by
    ``retry_temperature_step`` per re-ask (capped at ``retry_temperature_cap``)
    and the sampling seed advanced by one; ``generation.max_attempts`` bounds
    the asks.

``conformity.rating``
    A judge reply is usable when it is exactly one ``{"rating": <integer 1-5>}``
    (seed 002 App. B), parsed by ``llm.judging.parse_integer_reply``. It is asked
    again by the shard's ``reask``: ``warmer``, the paper's setting, is App. A.6's
    shared retry loop (the generation re-ask above: temperature up by the step,
    capped, seed + 1, the prompt unchanged); ``reminder`` keeps the sampling and
    appends a one-line reminder of the format, since a greedy judge would otherwise
    repeat the same reply (docs/deviations.yaml#judge-retry-loop).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from context_effects.llm.judging import (
    field_reasons,
    integer_reply_schema,
    reply_reasons,
    parse_integer_reply,
)
from context_effects.llm.replies import Reask, ReplyPolicy, reminder_reask
from context_effects.llm.types import LLMRequest

# ----------------------------------------------------------------------------- generation

#: Why a generated answer was not usable.
EMPTY_COMPLETION = "empty_completion"


def nonempty(text: str) -> tuple[str | None, str | None]:
    stripped = (text or "").strip()
    return (stripped, None) if stripped else (None, EMPTY_COMPLETION)


def generation_reask(retry_temperature_step: float, retry_temperature_cap: float) -> Reask:
    """seed 002 App. A.6: each re-ask raises the temperature by the step (capped) and the seed by one."""

    def reask(req: LLMRequest, attempt: int, reason: str) -> LLMRequest:
        s = req.sampling
        sampling = dataclasses.replace(
            s,
            # A model that takes no temperature (llm/capabilities.py) is re-asked as it was asked.
            temperature=None if s.temperature is None else min(retry_temperature_cap,
                                                                s.temperature + retry_temperature_step),
            seed=None if s.seed is None else s.seed + 1,
        )
        meta = {**req.meta, "reask_reason": reason, "reask_of": req.key}
        return dataclasses.replace(req, sampling=sampling, attempt=attempt, meta=meta)

    return reask


def generation_policy(retry_temperature_step: float, retry_temperature_cap: float) -> ReplyPolicy:
    """Policy ``conformity.generation``, with the generation config's two retry settings."""
    return ReplyPolicy(
        "conformity.generation",
        nonempty,
        generation_reask(float(retry_temperature_step), float(retry_temperature_cap)),
    )


# ----------------------------------------------------------------------------- judge ratings

#: The judge's reply (seed 002 App. B): one integer rating 1-5; the schema is sent
#: where a judge decodes under a JSON schema.
RATING_MIN, RATING_MAX = 1, 5
RATING_SCHEMA: dict[str, Any] = integer_reply_schema("rating", RATING_MIN, RATING_MAX)

# Rejection reasons (stable strings: they are counted per judge x condition).
CONFLICTING, MISSING, STRING, NOT_INTEGER, NOT_NUMBER, OUT_OF_RANGE = field_reasons("rating").values()
REASONS = reply_reasons("rating")


def parse_rating(text: str | None) -> tuple[int | None, str | None]:
    """Study C's judge reply ``{"rating": <integer 1-5>}`` (seed 002 App. B); see ``parse_integer_reply``."""
    return parse_integer_reply(text, "rating", RATING_MIN, RATING_MAX)


REMINDER = 'Reply with exactly one JSON object and nothing else: {"rating": <integer 1-5>}.'
reask_with_reminder = reminder_reask(REMINDER)
#: ``conformity.judging.reask`` values.
JUDGE_REASKS = ("warmer", "reminder")


def rating_policy(reask: str = "reminder", retry_temperature_step: float = 0.1,
                  retry_temperature_cap: float = 1.0) -> ReplyPolicy:
    """Policy ``conformity.rating``, re-asked by ``reask`` (module docstring).

    A shard records its parameters; one written before judges had a choice records
    none and is re-asked as it was then, with the reminder.
    """
    if reask not in JUDGE_REASKS:
        raise ValueError(f"conformity.rating: reask must be one of {JUDGE_REASKS}, got {reask!r}")
    again = (generation_reask(float(retry_temperature_step), float(retry_temperature_cap)) if reask == "warmer"
             else reask_with_reminder)
    return ReplyPolicy("conformity.rating", parse_rating, again)


def judge_policy_params(judging: Any) -> dict[str, Any]:
    """The ``conformity.rating`` parameters of a judge shard, from ``conformity.judging``."""
    return {
        "reask": str(judging["reask"]),
        "retry_temperature_step": float(judging["retry_temperature_step"]),
        "retry_temperature_cap": float(judging["retry_temperature_cap"]),
    }
