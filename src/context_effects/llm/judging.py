"""Judge replies that are one JSON integer, e.g. ``{"rating": <integer 1-5>}``.

The parser every study's judge replies go through (Study C's ratings, seed 002
App. B; Study H's scores): ``parse_integer_reply`` and its rejection reasons,
and ``integer_reply_schema`` for structured output. Each study wraps them in
its own reply policy (docs/architecture.md, "Reply validation").

Every reply is validated, structured output or not: vLLM and llama.cpp servers
can silently ignore a schema (an unsupported schema feature, a server started
without guided decoding), so the schema is a hint and this parser is the check.
A reply that does not carry exactly one unambiguous integer is a *miss with a
reason*, never a score: mapping unparseable text to a default grade is how
openai/evals #1712 biased results. Each rejection has its own reason string so
parse-failure rates can be broken down per model × condition.
"""

from __future__ import annotations

import json
import math
from typing import Any


def integer_reply_schema(field: str, lo: int, hi: int) -> dict[str, Any]:
    """JSON schema of a judge reply that is one object ``{field: <integer lo-hi>}``.

    Closed (no other keys), so structured-output engines (vLLM, OpenAI strict mode)
    emit exactly that object instead of running on into extra keys.
    """
    return {
        "type": "object",
        "properties": {field: {"type": "integer", "minimum": lo, "maximum": hi}},
        "required": [field],
        "additionalProperties": False,
    }


# Rejection reasons (stable strings: they are aggregated in reports). The ones that
# name the field are built by ``field_reasons`` (e.g. "missing_score" for Study H).
EMPTY = "empty_reply"
NO_JSON = "no_json_object"
TRUNCATED = "truncated_json"
INVALID_JSON = "invalid_json"
MULTIPLE = "multiple_json_objects"


def field_reasons(field: str) -> dict[str, str]:
    """The rejection reasons that name the field, in a fixed order: conflicting,
    missing, string, not_integer, not_number, out_of_range."""
    return {
        "conflicting": f"conflicting_{field}s",
        "missing": f"missing_{field}",
        "string": f"{field}_is_string",
        "not_integer": f"{field}_not_integer",
        "not_number": f"{field}_not_a_number",
        "out_of_range": f"{field}_out_of_range",
    }


def reply_reasons(field: str) -> tuple[str, ...]:
    """Every reason a ``{"<field>": <integer>}`` reply can be rejected for."""
    return (EMPTY, NO_JSON, TRUNCATED, INVALID_JSON, MULTIPLE, *field_reasons(field).values())


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


class _DuplicateField(ValueError):
    pass


def _no_dup(field: str):
    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        # json.loads would silently keep the last of {"rating": 2, "rating": 5}.
        seen = [v for k, v in pairs if k == field]
        if len(seen) > 1 and any(json.dumps(v) != json.dumps(seen[0]) for v in seen):
            raise _DuplicateField
        return dict(pairs)

    return hook


def parse_integer_reply(text: str | None, field: str, lo: int, hi: int) -> tuple[int | None, str | None]:
    """``(value, None)`` for a valid reply ``{field: <integer lo-hi>}``, else ``(None, reason)``.

    Accepted: one JSON object (extra keys allowed) whose ``field`` is an integer
    in range, optionally inside a code fence or surrounded by prose. A number with
    zero fraction (``4.0``) counts as an integer, as in JSON Schema; ``4.5``,
    ``"4"``, ``true`` and ``null`` do not. Repeating the same object is
    tolerated; two objects that differ are not.
    """
    reasons = field_reasons(field)
    if text is None or not text.strip():
        return None, EMPTY
    spans, unclosed = _brace_spans(text)
    if unclosed:
        # Even with an earlier complete object, the cut-off one might have disagreed.
        return None, TRUNCATED
    if not spans:
        return None, NO_JSON
    objects: list[Any] = []
    broken = False
    for span in spans:
        try:
            objects.append(json.loads(span, parse_constant=_reject_constants, object_pairs_hook=_no_dup(field)))
        except _DuplicateField:
            return None, reasons["conflicting"]
        except ValueError:
            # Braces in prose are fine to skip, but a broken object that names the
            # field might be the judge's real (conflicting) answer.
            broken = broken or field in span
    if not objects or broken:
        return None, INVALID_JSON
    distinct: list[dict[str, Any]] = []
    for o in objects:
        if o not in distinct:
            distinct.append(o)
    if len(distinct) > 1:
        values = {json.dumps(o.get(field)) for o in distinct if field in o}
        return None, reasons["conflicting"] if len(values) > 1 else MULTIPLE
    obj = distinct[0]
    if field not in obj:
        return None, reasons["missing"]
    value = obj[field]
    if isinstance(value, str):
        return None, reasons["string"]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None, reasons["not_number"]
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            return None, reasons["not_integer"]
        value = int(value)
    if not lo <= value <= hi:
        return None, reasons["out_of_range"]
    return int(value), None
