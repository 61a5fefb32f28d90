"""The dataset layer: benchmark files or hub splits -> one normalised item table.

Study C (seed 002, The Evaluator Is Part of the Experiment, §2.2 "Datasets") asks
open-ended questions drawn from TruthfulQA (generation split), MMLU-Pro (test) and
ARC-Challenge (test). Whatever the source layout, every
item becomes one row of ``ITEM_SCHEMA``: question, gold answer text, correct and
incorrect answer texts, the item's own option labels (ARC uses '1'-'4' on some
items; never assume A-D), and one fixed wrong attractor.

Items from a release
--------------------
``build_item_table(..., sample={"source": "release", "path": ...})`` takes exactly the
items of a predecessor release file instead of a seeded sample (seed 002 §2.2: "500
questions sampled by Qu et al."); the matching rules (TruthfulQA by question text, ARC
by id, MMLU-Pro by question_id) and their errors are in ``conformity.release``. The
table's metadata records ``sample`` (source, path, commit, sha256), ``panel_seed`` and
``peer_source`` (whether Study C's peer blocks come from the release, are built with the
release's design where none were released, or come from the seeded generator) and, for
the first two, ``release_blocks``.

Wrong-attractor rules (cited by the paper config)
-------------------------------------------------
Each item gets exactly one wrong attractor, chosen once and reused by every
wrong-endorsing condition (an attractor drawn per condition would confound the
condition with the attractor).

* **Items taken from a release** (the paper config): the item's first wrong option
  in the release's option order, as the item table's incorrect-answer text
  (``conformity.release.release_attractors``). It gives seed 002's only printed
  attractor (Table 1's magpie item), which the hash below does not; the evidence, the
  rules tried and why this one is kept are in docs/deviations.yaml#wrong-attractor-rule.
* **A seeded sample** (no release order to follow)::

    attractor_index = int.from_bytes(
        sha256(f"{attractor_seed}:{item_id}".encode()).digest()[:8], "big"
    ) % len(incorrect_answers)
    wrong_attractor = incorrect_answers[attractor_index]

  It depends only on the seed, the item id and the item's incorrect-answer list, so
  it does not change with which items are sampled or in what order.

``incorrect_answers`` is, in source order, with whitespace stripped, empty strings
and duplicates removed, and any text that is also a correct answer removed:
TruthfulQA's "Incorrect Answers"; for multiple-choice items every option except
the keyed one. For multiple-choice items ``attractor_label`` is the label of the
first option carrying that text. The table's metadata names the rule it followed
(``attractor_rule``).

Cleaning (stated so the counts can be checked against the source files)
---------------------------------------------------------------------------
- Answer and option texts are whitespace-stripped (140 MMLU-Pro options end in a
  space). TruthfulQA answer lists are split on ';' like the HF loading script,
  and empty pieces (trailing ';' in 29 rows) are dropped; the best answer is
  added to the correct answers if missing.
- MMLU-Pro "N/A" options are padding in the HF parquet: they are dropped and the
  options relabelled A, B, ... by position, as the official eval scripts do.
- Items left with no incorrect answer cannot carry an attractor and are dropped
  with a logged warning (none in the shared copies). This is the only row that is
  dropped, and only after cleaning: a field missing from the source is an error (below).

Source checks (the whole source, before sampling)
-------------------------------------------------
``normalise`` reads every row, so a broken row fails the build whichever rows the
sample would take. Each problem names the file, the line (JSON lines, CSV), record
(a JSON list) or row (Parquet, hub; all counted from 1) and the field, and one
``SourceDataError`` lists every problem of the source:

- a required field missing or empty: TruthfulQA question, best answer, correct and
  incorrect answers; MMLU-Pro ``question_id`` (an integer), question, options (each
  non-empty), ``answer_index``; ARC ``id``, question (stem), every choice's text and
  label, ``answerKey``;
- a duplicate id (MMLU-Pro ``question_id``, ARC ``id``): a sample could take one copy,
  and the item could carry the other row's gold answer;
- TruthfulQA has no ids (item ids are row positions, ``truthfulqa-NNNN``), so a row
  whose whitespace-stripped question repeats an earlier row's is an error too, never
  silently deduplicated: which copy's answers are right is for a person to decide
  (the shared copies have no repeated question);
- a byte that is not UTF-8: file, line and column, and the field for JSON lines and CSV.

Missing values in the nullable string columns (``gold_label``, ``category``,
``attractor_label``) are ``None``, never NaN, so ``if row.gold_label:`` is safe.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from context_effects import pinned
from context_effects.conformity import release

log = logging.getLogger(__name__)

DATASETS = ("truthfulqa", "mmlu_pro", "arc_challenge")

# Bump when a cleaning or attractor rule changes: they decide incorrect_answers and
# every attractor, so old item tables must not be mistaken for new ones.
ITEM_TABLE_VERSION = "2"

_STR = pa.string()
_LIST = pa.list_(pa.string())

ITEM_SCHEMA = pa.schema(
    [
        pa.field("item_id", _STR, nullable=False),
        pa.field("dataset", _STR, nullable=False),
        pa.field("source_index", pa.int64(), nullable=False),
        pa.field("question", _STR, nullable=False),
        pa.field("gold_answer", _STR, nullable=False),
        pa.field("correct_answers", _LIST, nullable=False),
        pa.field("incorrect_answers", _LIST, nullable=False),
        pa.field("option_labels", _LIST, nullable=False),
        pa.field("options", _LIST, nullable=False),
        pa.field("gold_label", _STR, nullable=True),
        pa.field("category", _STR, nullable=True),
        pa.field("wrong_attractor", _STR, nullable=False),
        pa.field("attractor_label", _STR, nullable=True),
    ]
)
COLUMNS = tuple(ITEM_SCHEMA.names)
_LIST_COLUMNS = tuple(f.name for f in ITEM_SCHEMA if f.type == _LIST)
_NULLABLE_STR = tuple(f.name for f in ITEM_SCHEMA if f.nullable and f.type == _STR)

# Where the paper's data lives on the hub. Revisions must be pinned in config;
# None here because an unverified commit hash would be worse than none.
HUB_DEFAULTS: dict[str, dict[str, Any]] = {
    "truthfulqa": {"kind": "hub", "id": "truthfulqa/truthful_qa", "config": "generation",
                   "split": "validation", "revision": None},
    "mmlu_pro": {"kind": "hub", "id": "TIGER-Lab/MMLU-Pro", "config": None,
                 "split": "test", "revision": None},
    "arc_challenge": {"kind": "hub", "id": "allenai/ai2_arc", "config": "ARC-Challenge",
                      "split": "test", "revision": None},
}

# Raw layouts accepted per dataset: name -> columns that must be present.
LAYOUTS: dict[str, dict[str, tuple[str, ...]]] = {
    "truthfulqa": {
        "truthfulqa_csv": ("Type", "Category", "Question", "Best Answer",
                           "Correct Answers", "Incorrect Answers"),
        "truthfulqa_hf_generation": ("question", "best_answer", "correct_answers",
                                     "incorrect_answers"),
    },
    "mmlu_pro": {
        "mmlu_pro_hf": ("question_id", "question", "options", "answer_index"),
    },
    "arc_challenge": {
        "arc_hf_flat": ("id", "question", "choices", "answerKey"),
        "arc_raw_nested": ("id", "question", "answerKey"),  # question = {stem, choices}
    },
}

_LAYOUT_NOTES = {"arc_raw_nested": "; question = {stem, choices: [{text, label}]}",
                 "arc_hf_flat": "; choices = {text: [...], label: [...]}"}

ATTRACTOR_RULE = (
    'attractor_index = int.from_bytes(sha256(f"{attractor_seed}:{item_id}".encode()).digest()[:8], '
    '"big") % len(incorrect_answers)'
)
RELEASE_ATTRACTOR_RULE = (
    "wrong_attractor = the item's first wrong option in the release's option order that is among its "
    "incorrect_answers (conformity.release.release_attractors)"
)

_MMLU_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_MMLU_PADDING = "N/A"


class ItemTableError(ValueError):
    """An item table breaks the schema or an item invariant."""


class SourceDataError(ValueError):
    """A source file (or hub split) breaks a rule every item needs.

    The message names the file, the line (JSON lines, CSV), record (JSON list) or row
    (Parquet, hub), the field, and the fix; a whole source is checked at once and
    every problem is listed.
    """


# --------------------------------------------------------------------------- load
#
# Every reader returns the rows and, in ``raw.attrs``, where each row came from:
# ``origin`` (the file) and ``locations`` (``"line 12"``, ``"record 3"``, ``"row 7"``;
# all counted from 1), so that an error about any row can name its place.


def _check_dataset(dataset: str) -> None:
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {DATASETS}")


def _decode(path: Path) -> str:
    data = path.read_bytes()
    try:
        # utf-8-sig: the upstream TruthfulQA.csv starts with a BOM.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceDataError(_utf8_error(path, data, exc)) from None


def _utf8_error(path: Path, data: bytes, exc: UnicodeDecodeError) -> str:
    start = exc.start
    line = data.count(b"\n", 0, start) + 1
    column = start - (data.rfind(b"\n", 0, start) + 1) + 1
    field = _field_holding_bad_byte(path, data.decode("utf-8-sig", errors="replace"), line)
    where = f" (field `{field}`)" if field else ""
    return (
        f"{path}:{line}:{column}: byte 0x{data[start]:02x} is not valid UTF-8{where}; source files "
        "must be UTF-8: save the file as UTF-8 (e.g. `iconv -f latin1 -t utf-8 IN > OUT` for a "
        "Latin-1 file) or fix the character"
    )


def _field_holding_bad_byte(path: Path, text: str, line: int) -> str | None:
    """The field whose value holds the replacement character at ``line`` (None if unknown)."""
    try:
        if path.suffix.lower() == ".csv":
            header, rows = _csv_rows(path, text)
            for first, last, cells in rows:
                if first <= line <= last:
                    return next((h for h, c in zip(header, cells) if "\ufffd" in c), None)
            return None
        if path.suffix.lower() == ".jsonl":
            return _path_to(json.loads(text.split("\n")[line - 1]), "\ufffd")
    except (SourceDataError, ValueError, IndexError):
        pass
    return None


def _path_to(value: Any, needle: str, prefix: str = "") -> str | None:
    """Dotted path (``question.choices[2].text``) of the first string holding ``needle``."""
    if isinstance(value, str):
        return prefix if needle in value else None
    items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    for key, sub in items:
        name = f"{prefix}[{key}]" if isinstance(key, int) else f"{prefix}.{key}" if prefix else str(key)
        found = _path_to(sub, needle, name)
        if found:
            return found
    return None


def _read_json_records(path: Path) -> tuple[list[dict], list[str]]:
    # The json module, not pandas.read_json: pandas coerces id-like and date-like
    # strings, which would corrupt ids such as ARC's.
    text = _decode(path)
    stripped = text.lstrip()
    records, where = [], []
    if path.suffix == ".json" and stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            line = text[: len(text) - len(stripped)].count("\n") + exc.lineno
            raise SourceDataError(f"{path}:{line}:{exc.colno}: not valid JSON ({exc.msg}); fix the file") from None
        for n, rec in enumerate(data, 1):
            records.append(rec)
            where.append(f"record {n}")
    else:
        # split("\n"), not splitlines(): the latter also breaks at U+2028 etc. inside strings.
        for lineno, line in enumerate(text.split("\n"), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise SourceDataError(
                        f"{path}:{lineno}:{exc.colno}: not JSON lines ({exc.msg}); each line must hold one "
                        "JSON object: fix or delete the line"
                    ) from None
                where.append(f"line {lineno}")
    for rec, loc in zip(records, where):
        if not isinstance(rec, dict):
            raise SourceDataError(
                f"{_place(str(path), loc)}: expected a JSON object (one item), got {type(rec).__name__}; "
                "fix or delete it"
            )
    return records, where


def _csv_rows(path: Path, text: str) -> tuple[list[str], list[tuple[int, int, list[str]]]]:
    """Header and data rows of a CSV text, each row with its first and last line.

    The csv module, not pandas: it says where a row starts and ends, and a quoted
    field may span lines.
    """
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    rows: list[tuple[int, int, list[str]]] = []
    end = 0
    for cells in reader:
        first, end = end + 1, reader.line_num
        if not cells or (len(cells) == 1 and not cells[0].strip()):
            continue  # blank lines, as pandas skips them; a row of empty fields is checked as a row
        if header is None:
            header = [c.strip() for c in cells]
            dup = sorted({h for h in header if header.count(h) > 1})
            if dup:
                raise SourceDataError(f"{path}:{first}: column(s) {dup} appear twice in the header; rename one")
            continue
        if len(cells) != len(header):
            raise SourceDataError(
                f"{path}:{first}: {len(cells)} fields where the header has {len(header)}; "
                "quote a field that holds a comma (\"a, b\") or fix the row"
            )
        rows.append((first, end, cells))
    return header or [], rows


def _read_local(path: Path) -> pd.DataFrame:
    # A shipped or fetched copy with a pinned checksum must still be the pinned bytes.
    pinned.verify(path)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        records, where = _read_json_records(path)
        raw = pd.DataFrame.from_records(records)
    elif suffix == ".csv":
        # Every cell stays text: answers such as "None" or "N/A" are not missing values.
        header, rows = _csv_rows(path, _decode(path))
        raw = pd.DataFrame([cells for _, _, cells in rows], columns=header, dtype=object)
        where = [f"line {first}" for first, _, _ in rows]
    elif suffix == ".parquet":
        raw = pd.read_parquet(path)
        where = [f"row {i}" for i in range(1, len(raw) + 1)]
    else:
        raise ValueError(f"{path}: unsupported extension {suffix!r}; use .jsonl, .json, .csv or .parquet")
    # Replace (not update) attrs: pandas restores attrs stored in a Parquet file.
    raw.attrs = {"origin": str(path), "locations": where}
    return raw


def _load_hub(source: Mapping[str, Any]) -> pd.DataFrame:
    import datasets as hf_datasets  # heavy import, only on the hub path

    missing = [k for k in ("id", "split") if not source.get(k)]
    if missing:
        raise ValueError(f"hub source {dict(source)!r} lacks {missing}")
    if source.get("revision") is None:
        log.warning("hub dataset %s loaded without a pinned revision: not reproducible", source["id"])
    ds = hf_datasets.load_dataset(
        source["id"], source.get("config"), split=source["split"], revision=source.get("revision")
    )
    raw = ds.to_pandas()
    # Rows only (no per-row list): fetch_dataset writes this frame, attrs included, to Parquet.
    raw.attrs = {"origin": f"hub {source['id']} ({source.get('config')}, {source['split']}, "
                           f"revision {source.get('revision')})"}
    return raw


def detect_layout(dataset: str, raw: pd.DataFrame) -> str:
    """Name of the raw layout of ``raw`` (see ``LAYOUTS``); ValueError if none fits."""
    _check_dataset(dataset)
    cols = set(raw.columns)
    for name, required in LAYOUTS[dataset].items():
        if not set(required) <= cols:
            continue
        if name == "arc_raw_nested":
            # The first row that has a question decides; a row without one is reported later.
            first = next((q for q in raw["question"] if not _absent(q)), None)
            if not isinstance(first, Mapping):
                continue
        return name
    others = [f"{d}:{n}" for d, layouts in LAYOUTS.items() if d != dataset
              for n, req in layouts.items() if set(req) <= cols]
    hint = f" It looks like {', '.join(others)}: check the dataset name." if others else ""
    accepted = "; ".join(f"{n} ({', '.join(req)}{_LAYOUT_NOTES.get(n, '')})"
                         for n, req in LAYOUTS[dataset].items())
    raise ValueError(
        f"{dataset}: unrecognised raw layout with columns {sorted(map(str, cols))}. "
        f"Accepted layouts: {accepted}.{hint}"
    )


def load_raw(dataset: str, source: Mapping[str, Any]) -> pd.DataFrame:
    """Load one split as a raw DataFrame, rows in source order.

    ``source`` is ``{"kind": "hub", "id", "config", "split", "revision"}`` or
    ``{"kind": "local", "path"}`` (.jsonl, .json, .csv or .parquet).
    """
    _check_dataset(dataset)
    kind = source.get("kind")
    if kind == "hub":
        raw = _load_hub(source)
    elif kind == "local":
        if not source.get("path"):
            raise ValueError(f"local source {dict(source)!r} lacks 'path'")
        raw = _read_local(Path(source["path"]))
    else:
        raise ValueError(f"source kind must be 'hub' or 'local', got {kind!r} in {dict(source)!r}")
    if raw.empty:
        raise ValueError(f"{dataset}: source {dict(source)!r} holds no rows")
    detect_layout(dataset, raw)
    return raw.reset_index(drop=True)


def describe_source(source: Mapping[str, Any]) -> dict[str, Any]:
    """The source plus, for local files, their sha256: what the item table came from."""
    desc = dict(source)
    if source.get("kind") == "local" and Path(source["path"]).is_file():
        desc["sha256"] = pinned.sha256_of(source["path"])
    return desc


# ---------------------------------------------------------------------- normalise
#
# Each source is checked whole, before any sampling (``normalise`` sees every row):
# a row with a missing or empty required field, a duplicate id, or (TruthfulQA,
# whose ids are positional) a repeated question is an error naming file, line or
# row and field. Sampling only one copy of a duplicate would otherwise pass, and an
# item could carry another item's gold answer. Every problem of the source is
# listed in one error.


def _place(origin: str, loc: str) -> str:
    """``file:12`` for a line, ``file, row 7`` / ``file, record 3`` otherwise."""
    return f"{origin}:{loc.removeprefix('line ')}" if loc.startswith("line ") else f"{origin}, {loc}"


def _locator(dataset: str, raw: pd.DataFrame) -> tuple[str, list[str]]:
    origin = str(raw.attrs.get("origin") or f"{dataset} source")
    where = raw.attrs.get("locations")
    if not isinstance(where, list) or len(where) != len(raw):
        # A frame built in memory, or rows filtered after loading: name rows by position.
        where = [f"row {i}" for i in range(1, len(raw) + 1)]
    return origin, where


class _RowProblem(Exception):
    """One row's problem; collected by ``normalise`` into a SourceDataError."""


def _absent(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value)) if not isinstance(value, (list, tuple, np.ndarray, Mapping)) else False
    except (TypeError, ValueError):
        return False


def _as_list(value: Any) -> list:
    # Parquet and Dataset.to_pandas give numpy arrays for list columns.
    if _absent(value):
        return []
    if isinstance(value, (list, tuple, np.ndarray)):
        return list(value)
    raise TypeError(f"expected a list, got {type(value).__name__}: {value!r}")


def _text(value: Any) -> str:
    if _absent(value):
        return ""
    return str(value).strip()


def _unique_texts(values: Iterable[Any], exclude: Iterable[str] = ()) -> list[str]:
    seen = set(exclude)
    out = []
    for v in values:
        t = _text(v)
        if t and t not in seen:
            seen.add(t)
            out.append(t)
    return out


def _split_answers(field: Any) -> list[str]:
    # Same split as the HF truthful_qa script (';', strip), so CSV and jsonl agree.
    if isinstance(field, str):
        return field.split(";")
    return _as_list(field)


def _empty(loc: str, field: str, dataset: str) -> _RowProblem:
    return _RowProblem(f"{loc}: field `{field}` is missing or empty; every {dataset} item needs it: "
                       "fill it in or delete the row")


def _need_text(row: Mapping[str, Any], field: str, loc: str, dataset: str) -> str:
    text = _text(row.get(field))
    if not text:
        raise _empty(loc, field, dataset)
    return text


def _need_list(value: Any, field: str, loc: str, dataset: str) -> list:
    try:
        values = _as_list(value)
    except TypeError:
        raise _RowProblem(f"{loc}: field `{field}` must be a list, got {type(value).__name__} {value!r}; "
                          "fix the row") from None
    if not values:
        raise _empty(loc, field, dataset)
    return values


def _need_int(row: Mapping[str, Any], field: str, loc: str, dataset: str) -> int:
    value = row.get(field)
    if _absent(value) or (isinstance(value, str) and not value.strip()):
        raise _empty(loc, field, dataset)
    if isinstance(value, (bool, np.bool_)):
        ok = False
    elif isinstance(value, (int, np.integer)):
        return int(value)
    elif isinstance(value, (float, np.floating)):
        ok = float(value).is_integer()  # a JSON column with a gap is read as floats
    else:
        ok = isinstance(value, str) and value.strip().lstrip("-").isdigit()
    if not ok:
        raise _RowProblem(f"{loc}: field `{field}` = {value!r} must be an integer; fix the row")
    return int(float(value)) if not isinstance(value, str) else int(value)


def _need_answers(row: Mapping[str, Any], field: str, loc: str, dataset: str) -> list[str]:
    value = row.get(field)
    if _absent(value):
        raise _empty(loc, field, dataset)
    try:
        answers = _unique_texts(_split_answers(value))
    except TypeError:
        raise _RowProblem(f"{loc}: field `{field}` must be a list of answers or a ';'-separated string, "
                          f"got {type(value).__name__}; fix the row") from None
    if not answers:
        raise _empty(loc, field, dataset)
    return answers


_TQA_FIELDS = {
    "truthfulqa_csv": ("Question", "Best Answer", "Correct Answers", "Incorrect Answers", "Category"),
    "truthfulqa_hf_generation": ("question", "best_answer", "correct_answers", "incorrect_answers", "category"),
}


def _truthfulqa_record(row: Mapping[str, Any], i: int, loc: str, layout: str) -> dict:
    q_col, best_col, corr_col, inc_col, cat_col = _TQA_FIELDS[layout]
    question = _need_text(row, q_col, loc, "truthfulqa")
    best = _need_text(row, best_col, loc, "truthfulqa")
    correct = _need_answers(row, corr_col, loc, "truthfulqa")
    if best not in correct:
        correct.insert(0, best)
    raw_incorrect = _need_answers(row, inc_col, loc, "truthfulqa")
    # A text listed as both correct and incorrect ("Unknown" in two rows) must
    # never become the wrong attractor, so the correct side wins.
    correct_set = set(correct)
    incorrect = [t for t in raw_incorrect if t not in correct_set]
    return dict(
        item_id=f"truthfulqa-{i:04d}", dataset="truthfulqa", source_index=i, question=question,
        gold_answer=best, correct_answers=correct, incorrect_answers=incorrect,
        option_labels=[], options=[], gold_label=None, category=_text(row.get(cat_col)) or None,
        _overlap=len(raw_incorrect) - len(incorrect), _key=question, _key_field=q_col,
    )


def _mc_record(dataset: str, item_id: str, i: int, loc: str, question: str, labels: list[str],
               options: list[str], gold_label: str, category: str | None,
               fields: Mapping[str, str]) -> dict:
    """``fields`` names the source fields, for messages: the label and option lists
    (``labels``, ``options``), one label or option (``label``, ``option``: templates
    with ``{j}``) and the answer key (``key``)."""
    if len(labels) != len(options):
        raise _RowProblem(f"{loc}: {len(labels)} labels (`{fields['labels']}`) for {len(options)} options "
                          f"(`{fields['options']}`); give every option exactly one label")
    for name, values in (("label", labels), ("option", options)):
        blank = [j for j, v in enumerate(values) if not v]
        if blank:
            raise _empty(loc, fields[name].format(j=blank[0]), dataset)
    if len(set(labels)) != len(labels):
        raise _RowProblem(f"{loc}: field `{fields['labels']}` repeats a label ({labels}); labels must be unique")
    if gold_label not in labels:
        raise _RowProblem(f"{loc}: field `{fields['key']}` = {gold_label!r} is not among the labels {labels}; "
                          "fix the answer key")
    gold = options[labels.index(gold_label)]
    return dict(
        item_id=item_id, dataset=dataset, source_index=i, question=question,
        gold_answer=gold, correct_answers=[gold],
        incorrect_answers=_unique_texts(
            (o for lab, o in zip(labels, options) if lab != gold_label), exclude=[gold]),
        option_labels=labels, options=options, gold_label=gold_label, category=category,
    )


def _mmlu_pro_record(row: Mapping[str, Any], i: int, loc: str, layout: str) -> dict:
    qid = _need_int(row, "question_id", loc, "mmlu_pro")
    question = _need_text(row, "question", loc, "mmlu_pro")
    raw_options = [_text(o) for o in _need_list(row.get("options"), "options", loc, "mmlu_pro")]
    blank = [j for j, o in enumerate(raw_options) if not o]
    if blank:
        raise _empty(loc, f"options[{blank[0]}]", "mmlu_pro")
    gold_index = _need_int(row, "answer_index", loc, "mmlu_pro")
    if not 0 <= gold_index < len(raw_options):
        raise _RowProblem(f"{loc}: field `answer_index` = {gold_index} is outside the {len(raw_options)} "
                          f"options (0-{len(raw_options) - 1}); fix the answer key")
    letter = _text(row.get("answer")) or None
    if letter is not None and (gold_index >= len(_MMLU_LETTERS) or letter != _MMLU_LETTERS[gold_index]):
        raise _RowProblem(f"{loc}: field `answer` = {letter!r} disagrees with `answer_index` = {gold_index}; "
                          "fix the source before sampling")
    if raw_options[gold_index] == _MMLU_PADDING:
        raise _RowProblem(f"{loc}: field `options[{gold_index}]`, the keyed option, is the 'N/A' padding; "
                          "fix the answer key")
    keep = [j for j, o in enumerate(raw_options) if o != _MMLU_PADDING]
    options = [raw_options[j] for j in keep]
    new_gold = keep.index(gold_index)
    labels = list(_MMLU_LETTERS[: len(options)])
    rec = _mc_record("mmlu_pro", f"mmlu_pro-{qid}", i, loc, question, labels, options, labels[new_gold],
                     _text(row.get("category")) or None,
                     {"labels": "options", "options": "options", "label": "options[{j}]",
                      "option": "options[{j}]", "key": "answer_index"})
    return {**rec, "_padded": len(keep) < len(raw_options), "_relettered": new_gold != gold_index,
            "_key": str(qid), "_key_field": "question_id"}


def _arc_record(row: Mapping[str, Any], i: int, loc: str, layout: str) -> dict:
    item_id = f"arc_challenge-{_need_text(row, 'id', loc, 'arc_challenge')}"
    if layout == "arc_raw_nested":
        q = row.get("question")
        if not isinstance(q, Mapping):
            raise _RowProblem(f"{loc}: field `question` must be an object {{stem, choices}} in this layout, "
                              f"got {type(q).__name__}; fix the row")
        question = _text(q.get("stem"))
        if not question:
            raise _empty(loc, "question.stem", "arc_challenge")
        choices = _need_list(q.get("choices"), "question.choices", loc, "arc_challenge")
        if not all(isinstance(c, Mapping) for c in choices):
            raise _RowProblem(f"{loc}: field `question.choices` must hold {{text, label}} objects; fix the row")
        labels = [_text(c.get("label")) for c in choices]
        options = [_text(c.get("text")) for c in choices]
        fields = {"labels": "question.choices[].label", "options": "question.choices[].text",
                  "label": "question.choices[{j}].label", "option": "question.choices[{j}].text",
                  "key": "answerKey"}
    else:
        question = _need_text(row, "question", loc, "arc_challenge")
        choices = row.get("choices")
        if _absent(choices) or not isinstance(choices, Mapping):
            raise _empty(loc, "choices", "arc_challenge")
        labels = [_text(x) for x in _need_list(choices.get("label"), "choices.label", loc, "arc_challenge")]
        options = [_text(x) for x in _need_list(choices.get("text"), "choices.text", loc, "arc_challenge")]
        fields = {"labels": "choices.label", "options": "choices.text", "label": "choices.label[{j}]",
                  "option": "choices.text[{j}]", "key": "answerKey"}
    key = _need_text(row, "answerKey", loc, "arc_challenge")
    rec = _mc_record("arc_challenge", item_id, i, loc, question, labels, options, key, None, fields)
    return {**rec, "_key": item_id.removeprefix("arc_challenge-"), "_key_field": "id"}


_RECORD = {"truthfulqa": _truthfulqa_record, "mmlu_pro": _mmlu_pro_record, "arc_challenge": _arc_record}


def _source_records(dataset: str, raw: pd.DataFrame, layout: str) -> list[dict]:
    """Every row as an item record; SourceDataError listing every problem of the source."""
    origin, where = _locator(dataset, raw)
    build = _RECORD[dataset]
    records: list[dict] = []
    problems: list[str] = []
    first: dict[str, str] = {}
    for i, (row, loc) in enumerate(zip(raw.to_dict("records"), where)):
        try:
            rec = build(row, i, _place(origin, loc), layout)
        except _RowProblem as exc:
            problems.append(str(exc))
            continue
        key = rec.pop("_key")
        field = rec.pop("_key_field")
        if key in first:
            why = ("TruthfulQA ids are positional (truthfulqa-NNNN), so a repeated row would become a second "
                   "item" if dataset == "truthfulqa" else "an id must name one item, or an item could carry "
                   "another's gold answer")
            shown = key if len(key) <= 80 else key[:77] + "..."
            problems.append(f"{_place(origin, loc)}: duplicate `{field}` (first at {first[key]}): {shown!r}; "
                            f"{why}: delete one of the two rows")
            continue
        first[key] = loc
        records.append(rec)
    if problems:
        shown = problems[:25] + ([f"... and {len(problems) - 25} more"] if len(problems) > 25 else [])
        raise SourceDataError(
            f"{dataset}: {origin}: {len(problems)} problem(s), found checking all {len(raw)} rows before "
            "sampling:\n- " + "\n- ".join(shown)
        )
    return records


def _log_cleaning(dataset: str, records: list[dict]) -> None:
    counts = {k: sum(int(r.pop(k, 0)) for r in records) for k in ("_overlap", "_padded", "_relettered")}
    if counts["_overlap"]:
        log.info("%s: removed %d incorrect answers that are also listed as correct", dataset, counts["_overlap"])
    if counts["_padded"]:
        log.info("%s: dropped 'N/A' padding options in %d items", dataset, counts["_padded"])
    if counts["_relettered"]:
        log.warning("%s: %d keyed options changed letter after dropping mid-list 'N/A' options", dataset,
                    counts["_relettered"])


def _table_to_frame(table: pa.Table) -> pd.DataFrame:
    df = table.to_pandas()
    for col in _LIST_COLUMNS:
        df[col] = pd.Series([[str(x) for x in v] for v in df[col]], index=df.index, dtype=object)
    for col in _NULLABLE_STR:
        df[col] = pd.Series([None if pd.isna(v) else str(v) for v in df[col]], index=df.index,
                            dtype=object)
    return df


def _frame(records: list[dict]) -> pd.DataFrame:
    # Through Arrow so normalised, sampled and re-read tables share one set of dtypes.
    return _table_to_frame(pa.Table.from_pylist(records, schema=ITEM_SCHEMA))


def attractor_index(item_id: str, n_incorrect: int, attractor_seed: int | str) -> int:
    """The seeded, order-independent attractor rule (see module docstring)."""
    if n_incorrect < 1:
        raise ValueError(f"{item_id}: no incorrect answers to choose an attractor from")
    digest = hashlib.sha256(f"{attractor_seed}:{item_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % n_incorrect


def _set_attractors(items: pd.DataFrame, pick) -> pd.DataFrame:
    """``wrong_attractor`` = ``pick(row)`` for every row, ``attractor_label`` the label of
    the first non-keyed option carrying that text."""
    out = items.copy()
    attractors, labels = [], []
    for row in out[["item_id", "incorrect_answers", "option_labels", "options",
                    "gold_label"]].itertuples(index=False):
        wrong = pick(row)
        attractors.append(wrong)
        label = None
        for lab, opt in zip(row.option_labels, row.options):
            if opt == wrong and lab != row.gold_label:
                label = lab
                break
        labels.append(label)
    out["wrong_attractor"] = pd.Series(attractors, index=out.index, dtype=out["question"].dtype)
    out["attractor_label"] = pd.Series(labels, index=out.index, dtype=object)
    return out


def assign_attractors(items: pd.DataFrame, attractor_seed: int | str) -> pd.DataFrame:
    """Fill ``wrong_attractor`` / ``attractor_label`` by the seeded rule."""
    out = _set_attractors(items, lambda row: row.incorrect_answers[
        attractor_index(row.item_id, len(row.incorrect_answers), attractor_seed)])
    out.attrs["attractor_seed"] = attractor_seed
    out.attrs["attractor_rule"] = ATTRACTOR_RULE
    return out


def assign_release_attractors(items: pd.DataFrame, attractors: Mapping[str, str]) -> pd.DataFrame:
    """Fill ``wrong_attractor`` / ``attractor_label`` from the release's rule
    (``attractors``: item_id -> text, from ``conformity.release.release_attractors``)."""
    missing = sorted(set(map(str, items["item_id"])) - set(attractors))
    if missing:
        raise ItemTableError(f"{len(missing)} items have no release attractor {_ids(missing)}; take the items "
                             "from the same release file")
    out = _set_attractors(items, lambda row: attractors[row.item_id])
    out.attrs["attractor_rule"] = RELEASE_ATTRACTOR_RULE
    return out


def follows_seeded_rule(df: pd.DataFrame) -> bool:
    """Whether an item table's attractors follow the seeded hash rule (a table without
    an ``attractor_rule`` in its metadata predates the release rule, so it does)."""
    return df.attrs.get("attractor_rule", ATTRACTOR_RULE) == ATTRACTOR_RULE


def normalise(dataset: str, raw: pd.DataFrame,
              attractor_seed: int | str | None = None) -> pd.DataFrame:
    """Raw rows -> the normalised item table (``ITEM_SCHEMA`` columns, source order).

    Every row is checked first (see "Source checks" in the module docstring): a
    SourceDataError lists every problem of the source with its file, line or row
    and field.

    Without ``attractor_seed`` the attractor columns are filled with placeholders
    ("" / None) for ``assign_attractors`` to replace; the result is then not yet
    valid for ``validate_items``.
    """
    layout = detect_layout(dataset, raw)
    records = _source_records(dataset, raw, layout)
    _log_cleaning(dataset, records)
    kept = [r for r in records if r["incorrect_answers"]]
    if len(kept) < len(records):
        dropped = [r["item_id"] for r in records if not r["incorrect_answers"]]
        log.warning("%s: dropped %d items with no incorrect answer (no attractor possible): %s%s",
                    dataset, len(dropped), ", ".join(dropped[:10]), " ..." if len(dropped) > 10 else "")
    for r in kept:
        r["wrong_attractor"] = ""
        r["attractor_label"] = None
    items = _frame(kept)
    items.attrs["layout"] = layout
    if attractor_seed is not None:
        items = assign_attractors(items, attractor_seed)
    return items


# ------------------------------------------------------------------------- sample


def _allocate(counts: Mapping[str, int], n: int) -> dict[str, int]:
    """Split n as equally as possible over groups capped at their sizes.

    Groups too small for the equal share give everything they have and their
    surplus is re-shared; the leftover units after flooring go to the largest
    remainders, ties broken by group name (all remainders tie when shares are equal).
    """
    alloc: dict[str, int] = {}
    active = sorted(counts)
    remaining = n
    while active:
        share = remaining / len(active)
        small = [g for g in active if counts[g] <= share]
        if not small:
            break
        for g in small:
            alloc[g] = counts[g]
            remaining -= counts[g]
        active = [g for g in active if g not in small]
    if active:
        share = remaining / len(active)
        base = {g: int(np.floor(share)) for g in active}
        left = remaining - sum(base.values())
        order = sorted(active, key=lambda g: (-(share - base[g]), g))
        for g in order[:left]:
            base[g] += 1
        alloc.update(base)
    return alloc


def sample_items(items: pd.DataFrame, n: int | None, seed: int,
                 balance_by: str | None = None) -> pd.DataFrame:
    """Seeded sample of ``n`` items without replacement, sorted by ``source_index``.

    ``balance_by="category"`` spreads n as equally as possible over the categories
    (see ``_allocate``) and samples within each. ``n=None`` keeps every item.
    The input order does not matter: items are put in source order first.
    """
    pool = items.sort_values("source_index", kind="stable").reset_index(drop=True)
    name = ", ".join(sorted(map(str, pool["dataset"].unique()))) if len(pool) else "(empty table)"
    if n is None:
        return pool
    if n < 0:
        raise ValueError(f"{name}: n_items must be >= 0, got {n}")
    if n > len(pool):
        raise ValueError(f"{name}: asked for n_items={n} but only {len(pool)} items are available; "
                         f"lower n_items to at most {len(pool)}")
    rng = np.random.default_rng(seed)
    if balance_by is None:
        chosen = rng.choice(len(pool), size=n, replace=False)
    else:
        if balance_by not in pool.columns:
            raise ValueError(f"{name}: balance_by={balance_by!r} is not a column of the item table")
        groups = pool[balance_by]
        if groups.isna().any():
            raise ValueError(f"{name}: {int(groups.isna().sum())} items have no {balance_by!r}; "
                             f"set balance_by to null for this dataset")
        positions = {g: np.flatnonzero((groups == g).to_numpy()) for g in sorted(groups.unique())}
        alloc = _allocate({g: len(p) for g, p in positions.items()}, n)
        chosen = np.concatenate(
            [rng.choice(positions[g], size=alloc[g], replace=False) for g in sorted(positions)]
        ) if positions else np.array([], dtype=int)
    out = pool.iloc[np.sort(chosen)].reset_index(drop=True)
    out.attrs = dict(items.attrs)
    out.attrs["sample_seed"] = seed
    return out


# ----------------------------------------------------------------------- validate


def validate_items(df: pd.DataFrame, attractor_seed: int | str | None = None) -> None:
    """Raise ``ItemTableError`` naming every broken column or item (and the fix).

    With ``attractor_seed`` also checks that each attractor follows the seeded rule.
    Column order is not checked (``write_items`` writes in schema order).
    """
    missing = [c for c in COLUMNS if c not in df.columns]
    extra = [c for c in df.columns if c not in COLUMNS]
    if missing or extra:
        raise ItemTableError(f"item table columns differ from ITEM_SCHEMA: missing {missing}, "
                             f"unexpected {extra}; build it with normalise()/build_item_table()")
    problems: list[str] = []
    for field in ITEM_SCHEMA:
        col = df[field.name]
        if field.name == "source_index" and not pd.api.types.is_integer_dtype(col):
            problems.append(f"column source_index has dtype {col.dtype}, expected int64")
            continue
        try:
            arr = pa.array(col, type=field.type, from_pandas=True)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            problems.append(f"column {field.name} does not convert to {field.type}: {exc}")
            continue
        if not field.nullable and arr.null_count:
            ids = df.loc[col.isna(), "item_id"].tolist() if field.name != "item_id" else []
            problems.append(f"column {field.name} has {arr.null_count} nulls (not allowed) "
                            f"{_ids(ids)}".rstrip())
    if problems:
        raise ItemTableError("item table schema errors:\n- " + "\n- ".join(problems))

    dup = df.loc[df["item_id"].duplicated(keep=False), "item_id"].unique().tolist()
    if dup:
        problems.append(f"duplicate item_id {_ids(dup)}: item ids must be unique (drop or rename duplicates)")

    bad: dict[str, list[str]] = {}

    def flag(rule: str, item_id: str) -> None:
        bad.setdefault(rule, []).append(item_id)

    for r in df.itertuples(index=False):
        iid = r.item_id
        if not r.question.strip():
            flag("empty question", iid)
        if not r.gold_answer.strip():
            flag("empty gold_answer (item lost its gold answer)", iid)
        if r.gold_answer not in r.correct_answers:
            flag("gold_answer not in correct_answers (add it to correct_answers)", iid)
        if not r.incorrect_answers:
            flag("empty incorrect_answers (no attractor possible; drop the item)", iid)
        if r.wrong_attractor not in r.incorrect_answers:
            flag("wrong_attractor not in incorrect_answers (rerun assign_attractors)", iid)
        if r.wrong_attractor in r.correct_answers:
            flag("wrong_attractor is also a correct answer (remove it from incorrect_answers)", iid)
        if attractor_seed is not None and r.incorrect_answers and r.wrong_attractor != r.incorrect_answers[
                attractor_index(iid, len(r.incorrect_answers), attractor_seed)]:
            flag(f"wrong_attractor does not follow the seeded rule for seed {attractor_seed!r}", iid)
        labels, options = list(r.option_labels), list(r.options)
        if labels or options:
            if len(labels) != len(options):
                flag("option_labels and options differ in length", iid)
                continue
            if len(set(labels)) != len(labels):
                flag("duplicate option_labels", iid)
            if _missing(r.gold_label) or r.gold_label not in labels:
                flag("gold_label missing or not among option_labels (item lost its gold answer)", iid)
            elif options[labels.index(r.gold_label)] != r.gold_answer:
                flag("options[gold_label] != gold_answer (item lost its gold answer)", iid)
            if not _missing(r.attractor_label) and (
                    r.attractor_label not in labels
                    or options[labels.index(r.attractor_label)] != r.wrong_attractor):
                flag("attractor_label does not point at wrong_attractor", iid)
        elif not (_missing(r.gold_label) and _missing(r.attractor_label)):
            flag("gold_label/attractor_label set on an item without options", iid)
    problems += [f"{rule}: {_ids(ids)}" for rule, ids in bad.items()]
    if problems:
        raise ItemTableError(f"item table invalid ({len(df)} items):\n- " + "\n- ".join(problems))


def _missing(value: Any) -> bool:
    # Callers may hand in str-dtype frames, where a missing label is NaN, not None.
    return value is None or (isinstance(value, float) and np.isnan(value))


def _ids(ids: list[str], limit: int = 5) -> str:
    if not ids:
        return ""
    more = f" ... ({len(ids)} in all)" if len(ids) > limit else ""
    return "[" + ", ".join(map(str, ids[:limit])) + "]" + more


# --------------------------------------------------------------------------- build


def build_item_table(dataset: str, source: Mapping[str, Any], n_items: int | None,
                     sample_seed: int, attractor_seed: int | str,
                     balance_by: str | None = None, *, sample: Mapping[str, Any] | None = None,
                     peer_source: str = "generated") -> pd.DataFrame:
    """load -> normalise (checks every source row) -> attractors -> validate -> sample -> validate.

    Attractors are assigned on the full table before sampling; the rule makes that
    equivalent to assigning after, but it keeps the order of steps obviously safe.
    The whole table is validated before sampling, so a broken item fails the build
    whether or not the sample would take it.

    ``sample={"source": "release", "path": ...}`` takes exactly the items of a
    predecessor release file instead of a seeded sample (``conformity.release``;
    ``balance_by`` is then not used, and ``n_items`` below the file's count takes its
    first ``n_items`` in the release file's order). ``peer_source="release"`` also
    records the release's peer blocks of those items in ``attrs["release_blocks"]``;
    without released blocks (MMLU-Pro) it records blocks built with the release's design
    (``conformity.release_design``), and ``attrs["peer_source"]`` says which was used and why.
    """
    raw = load_raw(dataset, source)
    items = normalise(dataset, raw, attractor_seed=attractor_seed)
    validate_items(items, attractor_seed=attractor_seed)
    sample = dict(sample or {"source": "seeded"})
    rows = None
    if sample.get("source", "seeded") == "release":
        rows = release.read_release(sample["path"])
        chosen = release.match_items(dataset, items, rows, sample["path"])
        sample.update(chosen.attrs["release"])
        if n_items is not None and n_items < len(chosen):
            # A cut of the released sample (a smaller run of the paper's design): its first
            # n_items in the release file's order, kept in source order. The file's order is
            # the release's random draw, so a cut is a random subsample (not the lowest
            # source rows), and a larger cut holds every smaller one of the same file.
            keep = set(chosen.attrs["release_order"][:n_items])
            attrs = dict(chosen.attrs)
            chosen = chosen[chosen["item_id"].astype(str).isin(keep)].reset_index(drop=True)
            chosen.attrs = attrs
            sample["n_items_taken"] = int(n_items)
        chosen = assign_release_attractors(chosen, release.release_attractors(dataset, chosen, rows))
    elif sample.get("source", "seeded") == "seeded":
        chosen = sample_items(items, n_items, sample_seed, balance_by=balance_by)
    else:
        raise ValueError(f"{dataset}: sample source must be 'seeded' or 'release', got {sample.get('source')!r}")
    validate_items(chosen, attractor_seed=attractor_seed if follows_seeded_rule(chosen) else None)
    peers = _peer_source(dataset, chosen, rows, peer_source, sample_seed)
    chosen.attrs.update(
        dataset=dataset, source=describe_source(source),
        attractor_seed=attractor_seed if follows_seeded_rule(chosen) else None,
        sample_seed=sample_seed, n_items=n_items if rows is None else len(chosen),
        balance_by=balance_by if rows is None else None, n_available=len(items), sample=sample,
        # The generated panel is drawn once per item from the sample seed, never from an
        # execution label, so executions 42/43/44 see byte-identical prompts.
        panel_seed=sample_seed, **peers,
    )
    return chosen


def _peer_source(dataset: str, items: pd.DataFrame, rows: list | None, requested: str,
                 panel_seed: int) -> dict[str, Any]:
    if requested not in ("generated", "release"):
        raise ValueError(f"peer source must be 'generated' or 'release', got {requested!r}")
    if requested == "generated":
        return {"peer_source": {"requested": "generated", "used": "generated", "why": "configured"}}
    blocks = release.released_blocks(dataset, items, rows) if rows is not None else {}
    if not blocks:
        # No released rq1_rq3 blocks (MMLU-Pro): the release's own design builds them, so
        # every dataset gets the same manipulation (conformity.release_design).
        from context_effects.conformity import release_design

        blocks, why = release_design.design_blocks(dataset, items, rows, panel_seed)
        if rows is None:
            why = "the items are not from a release file; " + why
        log.info("%s: %s", dataset, why)
        return {"peer_source": {"requested": "release", "used": release_design.SOURCE, "why": why},
                "release_blocks": blocks}
    return {"peer_source": {"requested": "release", "used": "release", "why": "released blocks of every item"},
            "release_blocks": blocks}


# ------------------------------------------------------------------------------ io

_META_KEYS = ("dataset", "source", "attractor_seed", "sample_seed", "n_items", "balance_by",
              "n_available", "layout", "sample", "panel_seed", "peer_source", "release_blocks")


def write_items(df: pd.DataFrame, path: str | Path, *, attractor_seed: int | str | None = None,
                sample_seed: int | None = None, source: Mapping[str, Any] | None = None) -> None:
    """Validate, then write Parquet with ``ITEM_SCHEMA``.

    Seeds and the source description go into the schema metadata (keys prefixed
    ``context_effects.``); arguments override what ``df.attrs`` carries from
    ``build_item_table``.
    """
    meta = {k: df.attrs.get(k) for k in _META_KEYS}
    if attractor_seed is not None:
        meta["attractor_seed"] = attractor_seed
    if sample_seed is not None:
        meta["sample_seed"] = sample_seed
    if source is not None:
        meta["source"] = describe_source(source)
    seeded = follows_seeded_rule(df)
    validate_items(df, attractor_seed=meta["attractor_seed"] if seeded else None)
    table = pa.Table.from_pandas(df[list(COLUMNS)], schema=ITEM_SCHEMA, preserve_index=False)
    metadata = dict(table.schema.metadata or {})
    meta["item_table_version"] = ITEM_TABLE_VERSION
    meta["attractor_rule"] = ATTRACTOR_RULE if seeded else RELEASE_ATTRACTOR_RULE
    for k, v in meta.items():
        metadata[f"context_effects.{k}".encode()] = json.dumps(v, sort_keys=True).encode()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table.replace_schema_metadata(metadata), path)


def read_items(path: str | Path) -> pd.DataFrame:
    """Read an item table; its metadata (seeds, source) lands in ``df.attrs``."""
    table = pq.read_table(path)
    if not table.schema.equals(ITEM_SCHEMA, check_metadata=False):
        raise ItemTableError(f"{path}: schema differs from ITEM_SCHEMA; rebuild it with "
                             f"build_item_table()/write_items().\nfound:\n{table.schema}")
    df = _table_to_frame(table)
    meta = table.schema.metadata or {}
    for key, value in meta.items():
        k = key.decode()
        if k.startswith("context_effects."):
            name = k.removeprefix("context_effects.")
            try:
                df.attrs[name] = json.loads(value)
            except json.JSONDecodeError:
                df.attrs[name] = value.decode()
    return df
