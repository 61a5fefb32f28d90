"""Study H judge replies: ``{"score": <integer 1-5>}``, parsed by the same rules as
Study C's ratings (``context_effects.llm.judging.parse_integer_reply``).

A reply is accepted only when it carries exactly one unambiguous JSON object
whose ``score`` is an integer 1-5 (extra keys are allowed; ``SCORE_SCHEMA``, sent
with each request, is closed). Everything else is a *miss with a reason*: the LLM layer re-asks it
(``reask_with_reminder``) and, after the last attempt, records it as missing.
A miss is never turned into a score, so a judge that cannot follow the output
format shows up as missing data per condition, not as a biased mean.

Request shards name this as the reply policy ``anchoring.score``
(``score_policy``, registered in ``context_effects.llm.replies.POLICIES``), so
the generic answering rules apply it without knowing about Study H.
"""

from __future__ import annotations

from typing import Any

from context_effects.llm.judging import (
    field_reasons,
    reply_reasons,
    integer_reply_schema,
    parse_integer_reply,
)
from context_effects.llm.replies import ReplyPolicy, reminder_reask

SCORE_MIN, SCORE_MAX = 1, 5

SCORE_SCHEMA: dict[str, Any] = integer_reply_schema("score", SCORE_MIN, SCORE_MAX)

# Rejection reasons (stable strings: they are counted per model x condition).
CONFLICTING, MISSING, STRING, NOT_INTEGER, NOT_NUMBER, OUT_OF_RANGE = field_reasons("score").values()
REASONS = reply_reasons("score")


def parse_score(text: str | None) -> tuple[int | None, str | None]:
    """``(score, None)`` for a valid reply ``{"score": <integer 1-5>}``, else ``(None, reason)``.

    The same parser as Study C's ratings (``parse_integer_reply``), so both
    studies accept and reject exactly the same reply shapes.
    """
    return parse_integer_reply(text, "score", SCORE_MIN, SCORE_MAX)


REMINDER = 'Important: reply with only the JSON object {"score": <integer 1-5>} and no other text.'
reask_with_reminder = reminder_reask(REMINDER)


def score_policy() -> ReplyPolicy:
    """Reply policy ``anchoring.score``: ``parse_score``, re-asked with ``REMINDER``."""
    return ReplyPolicy("anchoring.score", parse_score, reask_with_reminder)
