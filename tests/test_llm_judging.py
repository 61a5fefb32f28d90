"""Judge-reply validation (Study C ratings through the shared JSON-integer parser):
real-looking replies, each rejection with its own reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from context_effects.conformity import replies  # noqa: E402
from context_effects.conformity.replies import REASONS, parse_rating, reask_with_reminder  # noqa: E402
from context_effects.llm import judging as reply_format  # noqa: E402
from context_effects.conformity.replies import RATING_SCHEMA  # noqa: E402
from context_effects.llm.types import LLMRequest, ModelRef, Sampling  # noqa: E402

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
    ("", reply_format.EMPTY),
    (None, reply_format.EMPTY),
    ("   \n\t ", reply_format.EMPTY),
    ("4", reply_format.NO_JSON),
    ("Rating: 4/5", reply_format.NO_JSON),
    ("I would rate this answer a 4 out of 5.", reply_format.NO_JSON),
    ('{"rating": 4', reply_format.TRUNCATED),
    ('{"rating": 4, "reason": "The answer correctly identifies', reply_format.TRUNCATED),
    ('```json\n{"rat', reply_format.TRUNCATED),
    ('{"rating": 4} and then {"rating": 5', reply_format.TRUNCATED),
    ("{rating: 4}", reply_format.INVALID_JSON),
    ("{'rating': 4}", reply_format.INVALID_JSON),
    ('{"rating": <integer 1-5>}', reply_format.INVALID_JSON),  # echoed template
    ('{{"rating": 4}}', reply_format.INVALID_JSON),
    ('{"rating": 4,}', reply_format.INVALID_JSON),
    ('{"rating": NaN}', reply_format.INVALID_JSON),
    ('{"rating": 4} but on reflection {rating: 2}', reply_format.INVALID_JSON),
    ('{"rating": 2}\n{"rating": 3}', replies.CONFLICTING),
    ('Blind: {"rating": 4}. Informed: {"rating": 2}.', replies.CONFLICTING),
    ('{"rating": 3, "rating": 5}', replies.CONFLICTING),
    ('{"rating": 4} {"confidence": "high"}', reply_format.MULTIPLE),
    ('{"rating": 4} {"rating": 4, "note": "same"}', reply_format.MULTIPLE),
    ('{"score": 4}', replies.MISSING),
    ('{"Rating": 4}', replies.MISSING),
    ('{"result": {"rating": 4}}', replies.MISSING),
    ("{}", replies.MISSING),
    ('{"rating": "4"}', replies.STRING),
    ('{"rating": "four"}', replies.STRING),
    ('{"rating": 4.5}', replies.NOT_INTEGER),
    ('{"rating": 3.999}', replies.NOT_INTEGER),
    ('{"rating": 1e400}', replies.NOT_INTEGER),  # overflows to inf
    ('{"rating": null}', replies.NOT_NUMBER),
    ('{"rating": true}', replies.NOT_NUMBER),
    ('{"rating": [4]}', replies.NOT_NUMBER),
    ('{"rating": {"value": 4}}', replies.NOT_NUMBER),
    ('{"rating": 0}', replies.OUT_OF_RANGE),
    ('{"rating": 6}', replies.OUT_OF_RANGE),
    ('{"rating": -3}', replies.OUT_OF_RANGE),
    ('{"rating": 10}', replies.OUT_OF_RANGE),
    ('{"rating": 100000000000000000000000}', replies.OUT_OF_RANGE),
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
    req = LLMRequest(
        model=ModelRef("vllm", "m"),
        messages=(("system", "s"), ("user", "Rate this.")),
        sampling=Sampling(max_tokens=16),
        meta={"item": 7},
    )
    again = reask_with_reminder(req, 1, reply_format.NO_JSON)
    assert again.attempt == 1 and again.key != req.key
    assert again.messages[0] == req.messages[0]
    assert again.messages[-1][1].startswith("Rate this.") and replies.REMINDER in again.messages[-1][1]
    assert again.meta == {"item": 7, "reask_reason": reply_format.NO_JSON, "reask_of": req.key}
    # Reminder added once, however many times we re-ask.
    third = reask_with_reminder(again, 2, reply_format.NO_JSON)
    assert third.messages[-1][1].count(replies.REMINDER) == 1 and third.key != again.key


# ------------------------------------------------------------------ the judges' retry loop


def _judge_request() -> LLMRequest:
    return LLMRequest(model=ModelRef("vllm", "m"), messages=(("user", "Rate this."),),
                      sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=16, seed=42), meta={"item": 7})


def test_paper_judges_retry_warmer_up_to_five_times() -> None:
    """seed 002 App. A.6's shared retry loop is the paper setting for judges: up to five
    retries, temperature +0.1 per retry (capped at 1.0), seed + 1, the prompt unchanged."""
    from context_effects.config import fill_defaults, load_config, load_schema

    judging = fill_defaults({}, load_schema())["conformity"]["judging"]
    assert (judging["max_attempts"], judging["reask"]) == (6, "warmer")
    paper = load_config(SRC.parent / "config" / "config.yaml")["conformity"]["judging"]
    assert {k: paper[k] for k in replies.judge_policy_params(judging)} == replies.judge_policy_params(judging)
    policy = replies.rating_policy(**replies.judge_policy_params(judging))
    req = _judge_request()
    asks = [req]
    for attempt in range(1, judging["max_attempts"]):
        asks.append(policy.reask(asks[-1], attempt, reply_format.NO_JSON))
    assert [round(a.sampling.temperature, 6) for a in asks] == [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]
    assert [a.sampling.seed for a in asks] == [42, 43, 44, 45, 46, 47]
    assert all(a.messages == req.messages for a in asks) and len({a.key for a in asks}) == 6
    capped = replies.rating_policy("warmer", 0.4, 1.0)
    hot = asks[0]
    for attempt in range(1, 5):
        hot = capped.reask(hot, attempt, reply_format.NO_JSON)
    assert hot.sampling.temperature == 1.0


def test_reminder_reask_stays_an_option_and_old_shards_keep_it() -> None:
    req = _judge_request()
    for policy in (replies.rating_policy("reminder"), replies.rating_policy()):
        again = policy.reask(req, 1, reply_format.NO_JSON)
        assert again.sampling == req.sampling and replies.REMINDER in again.messages[-1][1]
    with pytest.raises(ValueError, match="reask must be one of"):
        replies.rating_policy("louder")
