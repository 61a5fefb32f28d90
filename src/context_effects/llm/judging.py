"""Judge-reply validation (SPEC §3.3; seed 002 App. B: ``{"rating": <integer 1-5>}``).

Every reply is validated, structured output or not: vLLM and llama.cpp servers
can silently ignore a schema (notes lesson 9). A reply that does not carry
exactly one unambiguous integer rating is a *miss with a reason*, never a score:
mapping unparseable text to a default grade is how openai/evals #1712 biased
results. Each rejection has its own reason string so parse-failure rates can be
broken down per model × condition.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from context_effects.llm.types import LLMRequest

RATING_MIN, RATING_MAX = 1, 5

RATING_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"rating": {"type": "integer", "minimum": RATING_MIN, "maximum": RATING_MAX}},
    "required": ["rating"],
    "additionalProperties": False,
}

# Rejection reasons (stable strings: they are aggregated in reports).
EMPTY = "empty_reply"
NO_JSON = "no_json_object"
TRUNCATED = "truncated_json"
INVALID_JSON = "invalid_json"
MULTIPLE = "multiple_json_objects"
CONFLICTING = "conflicting_ratings"
MISSING = "missing_rating"
STRING = "rating_is_string"
NOT_INTEGER = "rating_not_integer"
NOT_NUMBER = "rating_not_a_number"
OUT_OF_RANGE = "rating_out_of_range"

REASONS = (
    EMPTY,
    NO_JSON,
    TRUNCATED,
    INVALID_JSON,
    MULTIPLE,
    CONFLICTING,
    MISSING,
    STRING,
    NOT_INTEGER,
    NOT_NUMBER,
    OUT_OF_RANGE,
)


def _brace_spans(text: str) -> tuple[list[str], bool]:
    """Top-level ``{...}`` spans, and whether an opened object never closed.

    String state is tracked only inside braces: apostrophes and quotes in the
    surrounding prose must not hide the JSON that follows them.
    """
    spans: list[str] = []
    depth = 0
    start = -1
    in_str = esc = False
    for i, ch in enumerate(text):
        if depth == 0:
            if ch == "{":
                depth, start, in_str, esc = 1, i, False, False
            continue
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                spans.append(text[start : i + 1])
    return spans, depth > 0


def _reject_constants(token: str) -> None:
    # Python's json accepts NaN/Infinity, which are not JSON.
    raise ValueError(f"non-JSON constant {token}")


class _DuplicateRating(ValueError):
    pass


def _no_dup_rating(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads would silently keep the last of {"rating": 2, "rating": 5}.
    seen = [v for k, v in pairs if k == "rating"]
    if len(seen) > 1 and any(json.dumps(v) != json.dumps(seen[0]) for v in seen):
        raise _DuplicateRating
    return dict(pairs)


def parse_rating(text: str | None) -> tuple[int | None, str | None]:
    """``(rating, None)`` for a valid reply, else ``(None, reason)``.

    Accepted: one JSON object (extra keys allowed) whose ``rating`` is an
    integer 1–5, optionally inside a code fence or surrounded by prose. A
    number with zero fraction (``4.0``) counts as an integer, as in JSON
    Schema; ``4.5``, ``"4"``, ``true`` and ``null`` do not. Repeating the
    same object is tolerated; two objects that differ are not.
    """
    if text is None or not text.strip():
        return None, EMPTY
    spans, unclosed = _brace_spans(text)
    if unclosed:
        # Even with an earlier complete object, the cut-off one might have disagreed.
        return None, TRUNCATED
    if not spans:
        return None, NO_JSON
    objects: list[Any] = []
    broken_rating = False
    for span in spans:
        try:
            objects.append(json.loads(span, parse_constant=_reject_constants, object_pairs_hook=_no_dup_rating))
        except _DuplicateRating:
            return None, CONFLICTING
        except ValueError:
            # Braces in prose are fine to skip, but a broken object that talks
            # about a rating might be the judge's real (conflicting) answer.
            broken_rating = broken_rating or "rating" in span
    if not objects or broken_rating:
        return None, INVALID_JSON
    objects = [o for o in objects if isinstance(o, dict)]
    distinct: list[dict[str, Any]] = []
    for o in objects:
        if o not in distinct:
            distinct.append(o)
    if len(distinct) > 1:
        ratings = {json.dumps(o.get("rating")) for o in distinct if "rating" in o}
        return None, CONFLICTING if len(ratings) > 1 else MULTIPLE
    obj = distinct[0]
    if "rating" not in obj:
        return None, MISSING
    value = obj["rating"]
    if isinstance(value, str):
        return None, STRING
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, NOT_NUMBER
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None, NOT_INTEGER
        value = int(value)
    if not RATING_MIN <= value <= RATING_MAX:
        return None, OUT_OF_RANGE
    return int(value), None


REMINDER = 'Reply with exactly one JSON object and nothing else: {"rating": <integer 1-5>}.'


def reask_with_reminder(req: LLMRequest, attempt: int, reason: str) -> LLMRequest:
    """Re-ask hook for ``run_requests``: new attempt number plus a corrective reminder.

    With greedy decoding a re-ask that differs only in ``attempt`` gets the
    same bad reply back from a deterministic engine; the reminder changes the
    prompt so the retry has a chance. The reason goes to ``meta`` (not the key).
    """
    messages = list(req.messages)
    role, content = messages[-1]
    if REMINDER not in content:
        messages[-1] = (role, f"{content}\n\n{REMINDER}")
    meta = {**req.meta, "reask_reason": reason, "reask_of": req.key}
    return dataclasses.replace(req, messages=tuple(messages), attempt=attempt, meta=meta)
