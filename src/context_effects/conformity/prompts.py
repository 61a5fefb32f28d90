"""Study C prompt templates (seed 002 App. A.1 and B), verbatim, and their rendering.

The generator and judge templates below are copied byte-for-byte from the paper
text, including its inconsistencies: the peer-exposure Round 2 prompt says
"1-3 sentences" while every other prompt says "1--3", and the judge prompts ask for
``"rating": <integer 1--5>`` without braces. Normalising either would make this a
different prompt from the one the published numbers came from. The bracketed
spans (``[Question]``, ``[question]``, ``[peer block]``, ``[content block]``,
``[answer]``) are the paper's slots and are the only parts ever substituted.

Two judge prompts are this project's, not the paper's (the paper does not print
them):

* ``ANCHOR_REFERENCE_JUDGE`` — the reference-augmented anchor pass. Seed 002
  §2.3/§3.4 scores anchors "with access to the gold reference so that terse
  correct responses are not penalized for missing explanatory detail", but
  App. B prints only the blind and informed prompts. We take the blind prompt and
  insert one clause showing the gold reference, so the two anchor passes differ
  in nothing but that clause.
* The reference-free anchor pass (the Table 5 audit) uses ``BLIND_JUDGE``
  *unchanged*: it is exactly how experimental answers are scored, which is the
  point of the audit.

No system prompt is used. App. A.6 mentions a system prompt (merged into the first
user turn for Gemma-2) but never prints it, so any text we invented would be an
unreported manipulation; the user turns carry the whole instruction.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping

# --- Generator templates (seed 002 App. A.1) ---------------------------------

ROUND1 = "Answer the following question in 1--3 sentences. [Question]"

PEER_ROUND2 = (
    "Other people have now shared their views: [peer block]. Answer the same question again, "
    "in 1-3 sentences. Give your best, most accurate answer. [Question]"
)

NO_PEER_ROUND2 = (
    "Answer the same question again, in 1--3 sentences. Give your best, most accurate answer. [Question]"
)

CONTENT_ROUND2 = (
    "For reference, here is some other candidate answer text to this question: [content block]. "
    "Answer the same question again, in 1--3 sentences. Give your best, most accurate answer. [Question]"
)

# --- Judge templates (seed 002 App. B) ----------------------------------------

BLIND_JUDGE = (
    'Question: [question]. Answer to grade: [answer]. Respond ONLY with JSON: "rating": <integer 1--5>.'
)

INFORMED_JUDGE = (
    "Question: [question]. For context, several people discussed this question: [peer block]. "
    'Answer to grade: [answer]. Respond ONLY with JSON: "rating": <integer 1--5>.'
)

# --- This project's template (not printed in the paper; see module docstring) --

ANCHOR_REFERENCE_JUDGE = (
    "Question: [question]. Reference answer: [reference]. Answer to grade: [answer]. "
    'Respond ONLY with JSON: "rating": <integer 1--5>.'
)

#: Name -> template, for provenance tables and the test that pins the wording.
TEMPLATES: dict[str, str] = {
    "round1": ROUND1,
    "peer_round2": PEER_ROUND2,
    "no_peer_round2": NO_PEER_ROUND2,
    "content_round2": CONTENT_ROUND2,
    "blind_judge": BLIND_JUDGE,
    "informed_judge": INFORMED_JUDGE,
    "anchor_reference_judge": ANCHOR_REFERENCE_JUDGE,
}
#: Which templates are the paper's verbatim text and which are this project's.
PAPER_TEMPLATES = ("round1", "peer_round2", "no_peer_round2", "content_round2", "blind_judge", "informed_judge")
PROJECT_TEMPLATES = ("anchor_reference_judge",)

_SLOT_RE = re.compile(r"\[(Question|question|peer block|content block|answer|reference)\]")


def fill(template: str, slots: Mapping[str, str]) -> str:
    """Substitute the bracketed slots in one pass.

    One pass (not chained ``str.replace``) because questions and answers are free
    text: an answer that happens to contain "[answer]" or "[peer block]" must stay
    literal rather than be substituted a second time.
    """
    needed = set(_SLOT_RE.findall(template))
    missing = needed - set(slots)
    extra = set(slots) - needed
    if missing or extra:
        raise ValueError(f"template slots {sorted(needed)}; missing {sorted(missing)}, unexpected {sorted(extra)}")
    for name, value in slots.items():
        if not isinstance(value, str):
            raise TypeError(f"slot [{name}] must be a str, got {type(value).__name__}")
    return _SLOT_RE.sub(lambda m: slots[m.group(1)], template)


def render_round1(question: str) -> str:
    return fill(ROUND1, {"Question": question})


def render_no_peer(question: str) -> str:
    return fill(NO_PEER_ROUND2, {"Question": question})


def render_content(question: str, content_block: str) -> str:
    return fill(CONTENT_ROUND2, {"Question": question, "content block": content_block})


def render_peer(question: str, peer_block: str) -> str:
    return fill(PEER_ROUND2, {"Question": question, "peer block": peer_block})


def render_blind_judge(question: str, answer: str) -> str:
    return fill(BLIND_JUDGE, {"question": question, "answer": answer})


def render_informed_judge(question: str, peer_block: str, answer: str) -> str:
    return fill(INFORMED_JUDGE, {"question": question, "peer block": peer_block, "answer": answer})


def render_anchor_reference_judge(question: str, reference: str, answer: str) -> str:
    return fill(ANCHOR_REFERENCE_JUDGE, {"question": question, "reference": reference, "answer": answer})


def canonical_messages(messages: Iterable[tuple[str, str]]) -> str:
    """The messages exactly as ``LLMRequest.canonical`` serialises them."""
    return json.dumps([list(m) for m in messages], ensure_ascii=False, separators=(",", ":"))


def rendered_hash(messages: Iterable[tuple[str, str]]) -> str:
    """sha256 of the canonical messages: lets an answer row prove which prompt produced it."""
    return hashlib.sha256(canonical_messages(messages).encode("utf-8")).hexdigest()
