"""Study C's reply policies (registered in ``context_effects.llm.replies.POLICIES``).

``conformity.generation``
    An answer is usable when it is not empty. seed 002 App. A.6: a malformed or
    empty completion is asked again with the temperature raised by
    ``retry_temperature_step`` per re-ask (capped at ``retry_temperature_cap``)
    and the sampling seed advanced by one; ``generation.max_attempts`` bounds
    the asks.

``conformity.rating``
    A judge reply is usable when it is exactly one ``{"rating": <integer 1-5>}``,
    parsed by ``llm.judging.parse_integer_reply``, or, with no braces anywhere in it,
    the form seed 002's judge prompts themselves show (App. B: ``"rating": <integer
    1--5>``, no braces): ``"rating": 4`` (``parse_rating``). It is asked
    again by the shard's ``reask``: ``warmer``, the paper's setting, is App. A.6's
    shared retry loop (the generation re-ask above: temperature up by the step,
    capped, seed + 1, the prompt unchanged); ``reminder`` keeps the sampling and
    appends a one-line reminder of the format, since a greedy judge would otherwise
    repeat the same reply (docs/deviations.yaml#judge-retry-loop).
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from context_effects.llm.judging import (
    NO_JSON,
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


#: The key as the judge prompts print it (seed 002 App. B: ``"rating": <integer 1--5>``).
_BARE_KEY = re.compile(r'"rating"\s*:\s*')


class _NotAValue:
    """What follows the key is no JSON value (``<integer 1--5>`` echoed, ``NaN``)."""


_NOT_A_VALUE = _NotAValue()


def _bare_values(text: str) -> list[Any] | None:
    """The value after each ``"rating":`` of a reply without braces, decoded as JSON
    (``_NOT_A_VALUE`` where none decodes); None when the key is not there."""
    decoder = json.JSONDecoder(parse_constant=lambda token: _NOT_A_VALUE)
    values = []
    for m in _BARE_KEY.finditer(text):
        try:
            values.append(decoder.raw_decode(text, m.end())[0])
        except ValueError:
            values.append(_NOT_A_VALUE)
    return values or None


def parse_rating(text: str | None) -> tuple[int | None, str | None]:
    """Study C's judge reply (seed 002 App. B); see ``parse_integer_reply``.

    ``{"rating": <integer 1-5>}`` as ``parse_integer_reply`` reads it. A reply with no
    brace at all is read in the form the judge prompts show, ``"rating": 4`` (a trailing
    period or prose around it allowed), and judged by the same rules as the object
    ``{"rating": 4}``: one value, or one value repeated; two different values are
    ``conflicting_ratings``; ``"4"``, 4.5, 7, ``null`` are rejected as in an object, and
    so is a key with no JSON value after it.
    """
    value, reason = parse_integer_reply(text, "rating", RATING_MIN, RATING_MAX)
    if reason != NO_JSON or "{" in text or "}" in text:
        return value, reason
    values = _bare_values(text)
    if values is None:
        return None, NO_JSON
    if any(v is _NOT_A_VALUE for v in values):
        return None, NOT_NUMBER
    if len({json.dumps(v) for v in values}) > 1:
        return None, CONFLICTING
    return parse_integer_reply(json.dumps({"rating": values[0]}), "rating", RATING_MIN, RATING_MAX)


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
