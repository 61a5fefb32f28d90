"""Study H prompt templates, fixed within ``TEMPLATE_VERSION`` (seed 001, "Limits").

The three conditions share one system prompt and one user template; they differ
only in the history block placed before the task (seed 001: "Same answer. Same
rubric. Different history."):

* ``blind``   — no block at all: answer and rubric only;
* ``framing`` — says the answer was reviewed before, gives no score or verdict;
* ``anchor``  — the same sentence plus the experimentally assigned previous
  score and verdict.

Removing the history block from a framing or anchor prompt gives the blind prompt
byte for byte (a tested invariant). The seed prints no template text; these are
this project's and are stored verbatim in every result file. Any edit to them must
bump ``TEMPLATE_VERSION``: results of different versions are not comparable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

TEMPLATE_VERSION = "h1"

CONDITIONS = ("blind", "framing", "anchor")

SYSTEM_PROMPT = "You are an evaluator. You score one answer to one question using the rubric you are given."

USER_TEMPLATE = (
    "{history}"
    "Question:\n{question}\n\n"
    "Answer to evaluate:\n{answer}\n\n"
    "Rubric:\n{rubric}\n\n"
    'Score the answer using the rubric. Reply with exactly one JSON object and nothing else: {{"score": <integer 1-5>}}'
)

HISTORY_TEMPLATES: Mapping[str, str] = {
    "blind": "",
    "framing": "Evaluation history: this answer was reviewed before. Evaluate it again.\n\n",
    "anchor": (
        "Evaluation history: this answer was reviewed before. "
        "Previous score: {prior_score}/5 (verdict: {prior_verdict}). Evaluate it again.\n\n"
    ),
}

VERDICTS = ("pass", "fail")

_FIELD = re.compile(r"\{(history|question|answer|rubric)\}|\{\{|\}\}")

# The rubric of tasks built from the benchmarks; a task file may bring its own.
BENCHMARK_RUBRIC = (
    "5 = correct and complete: gives the reference answer or an equivalent, with nothing incorrect\n"
    "4 = correct but less complete or less specific than the reference answer, with nothing incorrect\n"
    "3 = mixed: includes the correct answer but also presents an incorrect answer as possible\n"
    "2 = mostly incorrect: leans to an incorrect answer, with only a trace of the correct one\n"
    "1 = incorrect: gives an incorrect answer\n"
    "Reference answer: {reference}"
)


def verdict(score: float, threshold: int) -> str:
    """``pass`` for a score at or above ``threshold`` (``anchoring.verdict_threshold``), else ``fail``."""
    return "pass" if score >= threshold else "fail"


def history_block(condition: str, prior_score: int | None = None, prior_verdict: str | None = None) -> str:
    if condition not in HISTORY_TEMPLATES:
        raise ValueError(f"unknown condition {condition!r}; expected one of {CONDITIONS}")
    if condition == "anchor":
        if prior_score is None or prior_verdict not in VERDICTS:
            raise ValueError("the anchor condition needs a prior score and a prior verdict ('pass' or 'fail')")
        return HISTORY_TEMPLATES["anchor"].format(prior_score=int(prior_score), prior_verdict=prior_verdict)
    return HISTORY_TEMPLATES[condition]


def render_user(
    condition: str,
    question: str,
    answer: str,
    rubric: str,
    prior_score: int | None = None,
    prior_verdict: str | None = None,
) -> str:
    fields = {
        "history": history_block(condition, prior_score, prior_verdict),
        "question": question,
        "answer": answer,
        "rubric": rubric,
    }
    # One pass, not str.format: task texts may contain braces or "{answer}".
    return _FIELD.sub(lambda m: fields[m[1]] if m[1] else m[0][0], USER_TEMPLATE)


def render_rubric(reference: str) -> str:
    return BENCHMARK_RUBRIC.replace("{reference}", reference)


def templates() -> dict[str, object]:
    """Every template, verbatim, for the result file."""
    return {
        "version": TEMPLATE_VERSION,
        "system": SYSTEM_PROMPT,
        "user": USER_TEMPLATE,
        "history": dict(HISTORY_TEMPLATES),
        "benchmark_rubric": BENCHMARK_RUBRIC,
    }
