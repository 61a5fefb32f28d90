"""Judge-reply validation: real-looking replies, each rejection with its own reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from context_effects.llm import judging  # noqa: E402
from context_effects.llm.judging import RATING_SCHEMA, REASONS, parse_rating, reask_with_reminder  # noqa: E402
from context_effects.llm.types import LLMRequest, ModelRef  # noqa: E402

ACCEPTED = [
    ('{"rating": 4}', 4),
    ('{"rating":1}', 1),
    ('  \n{"rating": 5}\n\n', 5),
    ('{\n  "rating": 3\n}', 3),
    ('```json\n{"rating": 2}\n```', 2),
    ('```\n{"rating": 5}\n```\n', 5),
    ('Here is my evaluation:\n{"rating": 4}', 4),
    ('{"rating": 3}\nThe answer is mostly correct but misses a detail.', 3),
    ('Sure! Based on the rubric, {"rating": 2}. Let me know if you need more.', 2),
    ("The student's answer isn't quite right. {\"rating\": 2}", 2),  # apostrophes in prose
    ('{"rating": 4, "explanation": "Accurate, but the {braces} in here are fine."}', 4),
    ('{"rating": 5.0}', 5),  # zero fraction is an integer in JSON Schema
    ('{"rating": 4} {"rating": 4}', 4),  # a repeated identical answer is not ambiguous
    ('<answer>{"rating": 1}</answer>', 1),
    ('Using set notation {x | x > 0} is irrelevant here. {"rating": 3}', 3),
    ('{"rating": 4}\u200b', 4),
    ('{"rating" : 5 }', 5),
]

REJECTED = [
    ("", judging.EMPTY),
    (None, judging.EMPTY),
    ("   \n\t ", judging.EMPTY),
    ("4", judging.NO_JSON),
    ("Rating: 4/5", judging.NO_JSON),
    ("I would rate this answer a 4 out of 5.", judging.NO_JSON),
    ('{"rating": 4', judging.TRUNCATED),
    ('{"rating": 4, "reason": "The answer correctly identifies', judging.TRUNCATED),
    ('```json\n{"rat', judging.TRUNCATED),
    ('{"rating": 4} and then {"rating": 5', judging.TRUNCATED),
    ("{rating: 4}", judging.INVALID_JSON),
    ("{'rating': 4}", judging.INVALID_JSON),
    ('{"rating": <integer 1-5>}', judging.INVALID_JSON),  # echoed template
    ('{{"rating": 4}}', judging.INVALID_JSON),
    ('{"rating": 4,}', judging.INVALID_JSON),
    ('{"rating": NaN}', judging.INVALID_JSON),
    ('{"rating": 4} but on reflection {rating: 2}', judging.INVALID_JSON),
    ('{"rating": 2}\n{"rating": 3}', judging.CONFLICTING),
    ('Blind: {"rating": 4}. Informed: {"rating": 2}.', judging.CONFLICTING),
    ('{"rating": 3, "rating": 5}', judging.CONFLICTING),
    ('{"rating": 4} {"confidence": "high"}', judging.MULTIPLE),
    ('{"rating": 4} {"rating": 4, "note": "same"}', judging.MULTIPLE),
    ('{"score": 4}', judging.MISSING),
    ('{"Rating": 4}', judging.MISSING),
    ('{"result": {"rating": 4}}', judging.MISSING),
    ("{}", judging.MISSING),
    ('{"rating": "4"}', judging.STRING),
    ('{"rating": "four"}', judging.STRING),
    ('{"rating": 4.5}', judging.NOT_INTEGER),
    ('{"rating": 3.999}', judging.NOT_INTEGER),
    ('{"rating": 1e400}', judging.NOT_INTEGER),  # overflows to inf
    ('{"rating": null}', judging.NOT_NUMBER),
    ('{"rating": true}', judging.NOT_NUMBER),
    ('{"rating": [4]}', judging.NOT_NUMBER),
    ('{"rating": {"value": 4}}', judging.NOT_NUMBER),
    ('{"rating": 0}', judging.OUT_OF_RANGE),
    ('{"rating": 6}', judging.OUT_OF_RANGE),
    ('{"rating": -3}', judging.OUT_OF_RANGE),
    ('{"rating": 10}', judging.OUT_OF_RANGE),
    ('{"rating": 100000000000000000000000}', judging.OUT_OF_RANGE),
]


@pytest.mark.parametrize("text,expected", ACCEPTED)
def test_accepts(text: str, expected: int) -> None:
    value, reason = parse_rating(text)
    assert (value, reason) == (expected, None)
    assert type(value) is int


@pytest.mark.parametrize("text,reason", REJECTED)
def test_rejects_with_reason(text: str | None, reason: str) -> None:
    assert parse_rating(text) == (None, reason)


def test_every_reason_is_distinct_and_exercised() -> None:
    assert len(set(REASONS)) == len(REASONS)
    assert {r for _, r in REJECTED} == set(REASONS)


def test_schema_matches_the_seed_format() -> None:
    prop = RATING_SCHEMA["properties"]["rating"]
    assert prop == {"type": "integer", "minimum": 1, "maximum": 5}
    assert RATING_SCHEMA["required"] == ["rating"]


def test_reask_with_reminder() -> None:
    req = LLMRequest(model=ModelRef("vllm", "m"), messages=(("system", "s"), ("user", "Rate this.")), meta={"item": 7})
    again = reask_with_reminder(req, 1, judging.NO_JSON)
    assert again.attempt == 1 and again.key != req.key
    assert again.messages[0] == req.messages[0]
    assert again.messages[-1][1].startswith("Rate this.") and judging.REMINDER in again.messages[-1][1]
    assert again.meta == {"item": 7, "reask_reason": judging.NO_JSON, "reask_of": req.key}
    # Reminder added once, however many times we re-ask.
    third = reask_with_reminder(again, 2, judging.NO_JSON)
    assert third.messages[-1][1].count(judging.REMINDER) == 1 and third.key != again.key
