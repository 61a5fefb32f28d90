"""Study H judge replies: ``{"score": <integer 1-5>}``, checked against a JSON schema.

A reply is accepted only when it carries exactly one unambiguous JSON object
whose ``score`` satisfies ``SCORE_SCHEMA`` (extra keys are allowed, as in Study C's
rating parser). Everything else is a *miss with a reason*: the LLM layer re-asks it
(``reask_with_reminder``) and, after the last attempt, records it as missing.
A miss is never turned into a score, so a judge that cannot follow the output
format shows up as missing data per condition, not as a biased mean.

The shard policy names these two functions by import path
(``context_effects.anchoring.judging:parse_score`` /
``...:reask_with_reminder``), so the generic answering rules apply them without
knowing about Study H.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import jsonschema

from context_effects.llm.types import LLMRequest

SCORE_MIN, SCORE_MAX = 1, 5

# Sent with every request: closed, so structured-output engines (vLLM, OpenAI strict
# mode) emit exactly {"score": n} instead of running on into extra keys.
SCORE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"score": {"type": "integer", "minimum": SCORE_MIN, "maximum": SCORE_MAX}},
    "required": ["score"],
    "additionalProperties": False,
}
# Validation tolerates extra keys (engines without structured output add reasons).
_VALIDATOR = jsonschema.Draft202012Validator({k: v for k, v in SCORE_SCHEMA.items() if k != "additionalProperties"})

# Rejection reasons (stable strings: they are counted per model x condition).
EMPTY = "empty_reply"
NO_JSON = "no_json_object"
TRUNCATED = "truncated_json"
CONFLICTING = "conflicting_scores"
MULTIPLE = "multiple_json_objects"
MISSING = "missing_score"
NOT_INTEGER = "score_not_integer"
OUT_OF_RANGE = "score_out_of_range"
NOT_OBJECT = "not_a_json_object"

REASONS = (EMPTY, NO_JSON, TRUNCATED, CONFLICTING, MULTIPLE, MISSING, NOT_INTEGER, OUT_OF_RANGE, NOT_OBJECT)

VALIDATOR_PATH = "context_effects.anchoring.judging:parse_score"
REASK_PATH = "context_effects.anchoring.judging:reask_with_reminder"


class _Conflict(ValueError):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads would silently keep the last of {"score": 2, "score": 5}.
    seen = [json.dumps(v) for k, v in pairs if k == "score"]
    if len(set(seen)) > 1:
        raise _Conflict
    return dict(pairs)


def _reject_constant(token: str) -> None:
    raise ValueError(f"non-JSON constant {token}")


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_constant=_reject_constant)


def _objects(text: str) -> tuple[list[Any], bool]:
    """Every JSON object embedded in ``text``, and whether one was cut off.

    Scans for ``{`` and decodes greedily from there; a brace that starts no
    valid JSON (prose, a broken object) is skipped. An object that opens but
    never closes before the end of the reply marks the reply as truncated.
    """
    found: list[Any] = []
    i = 0
    truncated = False
    while (i := text.find("{", i)) != -1:
        try:
            obj, end = _DECODER.raw_decode(text, i)
        except _Conflict:
            raise
        except ValueError:
            if text.count("{", i) > text.count("}", i):
                truncated = True
            i += 1
            continue
        found.append(obj)
        i = end
    return found, truncated


def parse_score(text: str | None) -> tuple[int | None, str | None]:
    """``(score, None)`` for a valid reply, else ``(None, reason)``.

    A number with zero fraction (``4.0``) is an integer (JSON Schema's rule);
    ``4.5``, ``"4"``, ``true`` and ``null`` are not. Repeating the same object is
    tolerated; two objects that differ are not.
    """
    if text is None or not text.strip():
        return None, EMPTY
    try:
        objects, truncated = _objects(text)
    except _Conflict:
        return None, CONFLICTING
    if truncated:
        # Even with an earlier complete object, the cut-off one might have disagreed.
        return None, TRUNCATED
    objects = [o for o in objects if isinstance(o, dict)]
    if not objects:
        return None, NO_JSON
    distinct: list[dict[str, Any]] = []
    for o in objects:
        if o not in distinct:
            distinct.append(o)
    if len(distinct) > 1:
        scores = {json.dumps(o.get("score")) for o in distinct if "score" in o}
        return None, CONFLICTING if len(scores) > 1 else MULTIPLE
    obj = distinct[0]
    errors = sorted(_VALIDATOR.iter_errors(obj), key=lambda e: list(e.absolute_path))
    if errors:
        err = errors[0]
        if err.validator == "required":
            return None, MISSING
        if err.validator == "type":
            return None, NOT_INTEGER if list(err.absolute_path) == ["score"] else NOT_OBJECT
        return None, OUT_OF_RANGE
    value = obj["score"]
    if isinstance(value, float) and not math.isfinite(value):
        return None, NOT_INTEGER
    return int(value), None


REMINDER = 'Important: reply with only the JSON object {"score": <integer 1-5>} and no other text.'


def reask_with_reminder(req: LLMRequest, attempt: int, reason: str) -> LLMRequest:
    """Re-ask with the next attempt number and a reminder appended to the user turn.

    With greedy decoding a re-ask that differs only in ``attempt`` gets the
    same bad reply back; the reminder (not in the original prompt) changes the
    prompt so the retry has a chance. The same rule applies in every condition.
    """
    messages = list(req.messages)
    role, content = messages[-1]
    if REMINDER not in content:
        messages[-1] = (role, f"{content}\n\n{REMINDER}")
    meta = {**req.meta, "reask_reason": reason, "reask_of": req.key}
    return dataclasses.replace(req, messages=tuple(messages), attempt=attempt, meta=meta)
