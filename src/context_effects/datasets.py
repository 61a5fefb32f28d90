"""The dataset layer: benchmark files or hub splits -> one normalised item table.

Study C (seed 002, The Evaluator Is Part of the Experiment, §2.2 "Datasets") asks
open-ended questions drawn from TruthfulQA (generation split), MMLU-Pro (test) and
ARC-Challenge (test). Whatever the source layout, every
item becomes one row of ``ITEM_SCHEMA``: question, gold answer text, correct and
incorrect answer texts, the item's own option labels (ARC uses '1'-'4' on some
items; never assume A-D), and one fixed wrong attractor.

Wrong-attractor rule (cited by the paper config)
------------------------------------------------
Each item gets exactly one wrong attractor, chosen once and reused by every
wrong-endorsing condition (an attractor drawn per condition would confound the
condition with the attractor)::

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
first option carrying that text.

Cleaning (stated so the counts can be checked against the source files)
---------------------------------------------------------------------------
- Answer and option texts are whitespace-stripped (140 MMLU-Pro options end in a
  space). TruthfulQA answer lists are split on ';' like the HF loading script,
  and empty pieces (trailing ';' in 29 rows) are dropped; the best answer is
  added to the correct answers if missing.
- MMLU-Pro "N/A" options are padding in the HF parquet: they are dropped and the
  options relabelled A, B, ... by position, as the official eval scripts do.
- Items left with no incorrect answer cannot carry an attractor and are dropped
  with a logged warning (none in the shared copies).

Missing values in the nullable string columns (``gold_label``, ``category``,
``attractor_label``) are ``None``, never NaN, so ``if row.gold_label:`` is safe.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger(__name__)

DATASETS = ("truthfulqa", "mmlu_pro", "arc_challenge")

# Bump when a cleaning rule changes: the rule decides incorrect_answers and hence
# every attractor, so old item tables must not be mistaken for new ones.
ITEM_TABLE_VERSION = "1"

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

_MMLU_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_MMLU_PADDING = "N/A"


class ItemTableError(ValueError):
    """An item table breaks the schema or an item invariant."""


# --------------------------------------------------------------------------- load


def _check_dataset(dataset: str) -> None:
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {DATASETS}")


def _read_json_records(path: Path) -> list[dict]:
    # The json module, not pandas.read_json: pandas coerces id-like and date-like
    # strings, which would corrupt ids such as ARC's.
    text = path.read_text(encoding="utf-8-sig")
    stripped = text.lstrip()
    if path.suffix == ".json" and stripped.startswith("["):
        return json.loads(stripped)
    records = []
    # split("\n"), not splitlines(): the latter also breaks at U+2028 etc. inside strings.
    for lineno, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not JSON lines ({exc})") from exc
    return records


def _read_local(path: Path) -> pd.DataFrame:
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return pd.DataFrame.from_records(_read_json_records(path))
    if suffix == ".csv":
        # utf-8-sig: the upstream TruthfulQA.csv starts with a BOM. No NA parsing:
        # answers such as "None" or "N/A" are text, not missing values.
        return pd.read_csv(path, encoding="utf-8-sig", dtype=str, keep_default_na=False)
    if suffix == ".parquet":
        return pd.read_parquet(path)
    raise ValueError(f"{path}: unsupported extension {suffix!r}; use .jsonl, .json, .csv or .parquet")


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
    return ds.to_pandas()


def detect_layout(dataset: str, raw: pd.DataFrame) -> str:
    """Name of the raw layout of ``raw`` (see ``LAYOUTS``); ValueError if none fits."""
    _check_dataset(dataset)
    cols = set(raw.columns)
    for name, required in LAYOUTS[dataset].items():
        if not set(required) <= cols:
            continue
        if name == "arc_raw_nested":
            first = raw["question"].iloc[0] if len(raw) else None
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
        desc["sha256"] = hashlib.sha256(Path(source["path"]).read_bytes()).hexdigest()
    return desc


# ---------------------------------------------------------------------- normalise


def _as_list(value: Any) -> list:
    # Parquet and Dataset.to_pandas give numpy arrays for list columns.
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return []
    if isinstance(value, (list, tuple, np.ndarray)):
        return list(value)
    raise TypeError(f"expected a list, got {type(value).__name__}: {value!r}")


def _text(value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
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


def _truthfulqa_records(raw: pd.DataFrame, layout: str) -> list[dict]:
    cols = (("Question", "Best Answer", "Correct Answers", "Incorrect Answers", "Category")
            if layout == "truthfulqa_csv"
            else ("question", "best_answer", "correct_answers", "incorrect_answers", "category"))
    q_col, best_col, corr_col, inc_col, cat_col = cols
    records, removed_overlap = [], 0
    for i, row in enumerate(raw.to_dict("records")):
        item_id = f"truthfulqa-{i:04d}"
        best = _text(row[best_col])
        if not best:
            raise ValueError(f"{item_id} (source row {i}): empty best answer; fix the source file")
        correct = _unique_texts(_split_answers(row[corr_col]))
        if best not in correct:
            correct.insert(0, best)
        raw_incorrect = _unique_texts(_split_answers(row[inc_col]))
        # A text listed as both correct and incorrect ("Unknown" in two rows) must
        # never become the wrong attractor, so the correct side wins.
        correct_set = set(correct)
        incorrect = [t for t in raw_incorrect if t not in correct_set]
        removed_overlap += len(raw_incorrect) - len(incorrect)
        category = _text(row.get(cat_col)) or None
        records.append(dict(
            item_id=item_id, dataset="truthfulqa", source_index=i, question=_text(row[q_col]),
            gold_answer=best, correct_answers=correct, incorrect_answers=incorrect,
            option_labels=[], options=[], gold_label=None, category=category,
        ))
    if removed_overlap:
        log.info("truthfulqa: removed %d incorrect answers that are also listed as correct",
                 removed_overlap)
    return records


def _mc_record(dataset: str, item_id: str, i: int, question: Any, labels: list[str],
               options: list[str], gold_label: str, category: str | None) -> dict:
    if len(labels) != len(options):
        raise ValueError(f"{item_id} (source row {i}): {len(labels)} labels for {len(options)} options")
    if gold_label not in labels:
        raise ValueError(f"{item_id} (source row {i}): answer key {gold_label!r} not among labels {labels}")
    gold = options[labels.index(gold_label)]
    if not gold:
        raise ValueError(f"{item_id} (source row {i}): the keyed option {gold_label!r} is empty")
    return dict(
        item_id=item_id, dataset=dataset, source_index=i, question=_text(question),
        gold_answer=gold, correct_answers=[gold],
        incorrect_answers=_unique_texts(
            (o for lab, o in zip(labels, options) if lab != gold_label), exclude=[gold]),
        option_labels=labels, options=options, gold_label=gold_label, category=category,
    )


def _mmlu_pro_records(raw: pd.DataFrame) -> list[dict]:
    records, padded, relettered = [], 0, 0
    for i, row in enumerate(raw.to_dict("records")):
        item_id = f"mmlu_pro-{int(row['question_id'])}"
        raw_options = [_text(o) for o in _as_list(row["options"])]
        gold_index = int(row["answer_index"])
        if not 0 <= gold_index < len(raw_options):
            raise ValueError(f"{item_id}: answer_index {gold_index} outside {len(raw_options)} options")
        letter = _text(row.get("answer")) or None
        if letter is not None and letter != _MMLU_LETTERS[gold_index]:
            raise ValueError(f"{item_id}: answer {letter!r} disagrees with answer_index {gold_index}; "
                             "fix the source before sampling")
        if raw_options[gold_index] == _MMLU_PADDING:
            raise ValueError(f"{item_id}: the keyed option is the 'N/A' padding; fix the source")
        keep = [j for j, o in enumerate(raw_options) if o != _MMLU_PADDING]
        padded += len(keep) < len(raw_options)
        options = [raw_options[j] for j in keep]
        new_gold = keep.index(gold_index)
        relettered += new_gold != gold_index
        labels = list(_MMLU_LETTERS[: len(options)])
        category = _text(row.get("category")) or None
        records.append(_mc_record("mmlu_pro", item_id, i, row["question"], labels, options,
                                  labels[new_gold], category))
    if padded:
        log.info("mmlu_pro: dropped 'N/A' padding options in %d items", padded)
    if relettered:
        log.warning("mmlu_pro: %d keyed options changed letter after dropping mid-list 'N/A' "
                    "options", relettered)
    return records


def _arc_records(raw: pd.DataFrame, layout: str) -> list[dict]:
    records = []
    for i, row in enumerate(raw.to_dict("records")):
        item_id = f"arc_challenge-{_text(row['id'])}"
        if layout == "arc_raw_nested":
            q = row["question"]
            question = q["stem"]
            choices = _as_list(q["choices"])
            labels = [_text(c["label"]) for c in choices]
            options = [_text(c["text"]) for c in choices]
        else:
            question, choices = row["question"], row["choices"]
            labels = [_text(x) for x in _as_list(choices["label"])]
            options = [_text(x) for x in _as_list(choices["text"])]
        records.append(_mc_record("arc_challenge", item_id, i, question, labels, options,
                                  _text(row["answerKey"]), None))
    return records


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


def assign_attractors(items: pd.DataFrame, attractor_seed: int | str) -> pd.DataFrame:
    """Fill ``wrong_attractor`` / ``attractor_label`` by the seeded rule."""
    out = items.copy()
    attractors, labels = [], []
    for row in out[["item_id", "incorrect_answers", "option_labels", "options",
                    "gold_label"]].itertuples(index=False):
        wrong = row.incorrect_answers[attractor_index(row.item_id, len(row.incorrect_answers),
                                                      attractor_seed)]
        attractors.append(wrong)
        label = None
        for lab, opt in zip(row.option_labels, row.options):
            if opt == wrong and lab != row.gold_label:
                label = lab
                break
        labels.append(label)
    out["wrong_attractor"] = pd.Series(attractors, index=out.index, dtype=out["question"].dtype)
    out["attractor_label"] = pd.Series(labels, index=out.index, dtype=object)
    out.attrs["attractor_seed"] = attractor_seed
    return out


def normalise(dataset: str, raw: pd.DataFrame,
              attractor_seed: int | str | None = None) -> pd.DataFrame:
    """Raw rows -> the normalised item table (``ITEM_SCHEMA`` columns, source order).

    Without ``attractor_seed`` the attractor columns are filled with placeholders
    ("" / None) for ``assign_attractors`` to replace; the result is then not yet
    valid for ``validate_items``.
    """
    layout = detect_layout(dataset, raw)
    if dataset == "truthfulqa":
        records = _truthfulqa_records(raw, layout)
    elif dataset == "mmlu_pro":
        records = _mmlu_pro_records(raw)
    else:
        records = _arc_records(raw, layout)
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
                     balance_by: str | None = None) -> pd.DataFrame:
    """load -> normalise -> attractors -> sample -> validate.

    Attractors are assigned on the full table before sampling; the rule makes that
    equivalent to assigning after, but it keeps the order of steps obviously safe.
    """
    raw = load_raw(dataset, source)
    items = normalise(dataset, raw, attractor_seed=attractor_seed)
    sample = sample_items(items, n_items, sample_seed, balance_by=balance_by)
    validate_items(sample, attractor_seed=attractor_seed)
    sample.attrs.update(
        dataset=dataset, source=describe_source(source), attractor_seed=attractor_seed,
        sample_seed=sample_seed, n_items=n_items, balance_by=balance_by,
        n_available=len(items),
    )
    return sample


# ------------------------------------------------------------------------------ io

_META_KEYS = ("dataset", "source", "attractor_seed", "sample_seed", "n_items", "balance_by",
              "n_available", "layout")


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
    validate_items(df, attractor_seed=meta["attractor_seed"])
    table = pa.Table.from_pandas(df[list(COLUMNS)], schema=ITEM_SCHEMA, preserve_index=False)
    metadata = dict(table.schema.metadata or {})
    meta["item_table_version"] = ITEM_TABLE_VERSION
    meta["attractor_rule"] = ATTRACTOR_RULE
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
