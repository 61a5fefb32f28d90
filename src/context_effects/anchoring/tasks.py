"""Study H tasks: a fixed answer, a 5-point rubric and a constructed gold score (seed 001).

Tasks from the benchmarks
-------------------------
Each sampled item of a benchmark's item table (``results/items/<dataset>.parquet``,
already a seeded sample) gives one task, so tasks never share a question. Items are
taken in table order; each gets, among the configured ``answer_kinds`` it supports,
the kind used least so far in its dataset (ties in ``answer_kinds`` order), so the
kinds — and gold scores — are spread evenly. The answer and the gold score follow this stated rule:

=============  ==========================================================  =====
kind           answer                                                      gold
=============  ==========================================================  =====
best           the item's gold answer (TruthfulQA best answer, keyed        5
               option text)
other_correct  the shortest other correct answer with fewer words than      4
               the best answer (TruthfulQA only; "no comment" answers
               excluded) — correct but less complete
hedged         ``It is either "<x>" or "<y>"; I am not sure which.`` with   3
               the best answer and the item's wrong attractor, order by
               ``sha256("<seed>:<item_id>:hedge")[0]`` parity (even: correct
               first)
incorrect      the item's wrong attractor (the data layer's fixed rule)     1
=============  ==========================================================  =====

The rubric (``prompts.BENCHMARK_RUBRIC``) names the reference (best) answer, and its
levels 5/4/3/1 describe these kinds. Multiple-choice questions show their options
(``Options: a; b; c``) since the stems often say "which of these".

Task files
----------
JSON lines, a JSON list or CSV, one task per record: ``task_id``, ``question``,
``answer``, ``gold_score`` (integer 1-5) and either ``rubric`` (the full 5-point
rubric text) or ``reference_answer`` (then the benchmark rubric is used); optional
``answer_kind`` and ``source``.

Prior-score design (the anchor condition)
-----------------------------------------
The displayed prior is experimentally assigned and uninformative about quality:
its direction relative to gold is balanced. Tasks are taken in ``task_id`` order
and a generator ``numpy.random.default_rng(seed)`` decides, in this order:

1. if the number of tasks is odd, whether the extra task goes above (one draw);
2. which of the *free* tasks (gold 2-4) go above: a random permutation of them, the
   first ``k`` above, with ``k`` chosen so the totals above and below gold differ by
   at most one (gold 1 can only go above and gold 5 only below);
3. the prior score: uniform over the scores on the assigned side of gold.

The prior verdict is ``pass`` when the prior is at or above the verdict threshold.
The design is one per run (all judges see the same priors) and is recorded in the
task table and every result file. If the forced tasks make balance impossible
(e.g. nearly all gold 5), building the design fails and says so.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from context_effects.anchoring.prompts import render_rubric, verdict
from context_effects.datasets import read_items

ANSWER_KINDS = ("best", "other_correct", "hedged", "incorrect")
GOLD_BY_KIND = {"best": 5, "other_correct": 4, "hedged": 3, "incorrect": 1}
GOLD_RULE = (
    "best answer -> 5; another, shorter correct answer -> 4; "
    "hedge between the best answer and the wrong attractor -> 3; wrong attractor -> 1"
)
SCORE_MIN, SCORE_MAX = 1, 5

TASK_COLUMNS = (
    "task_id",
    "source",
    "item_id",
    "answer_kind",
    "question",
    "answer",
    "rubric",
    "gold_score",
    "prior_direction",
    "prior_score",
    "prior_verdict",
)

_NO_COMMENT = ("no comment",)


class TaskError(ValueError):
    """A task or task file breaks the Study H task rules."""


def _norm(text: str) -> str:
    return " ".join(str(text).casefold().rstrip(".").split())


def other_correct_answer(best: str, correct: Sequence[str]) -> str | None:
    """The shortest correct answer other than ``best`` with fewer words (module rule), or None."""
    n_best = len(best.split())
    pool = [
        c
        for c in correct
        if _norm(c) != _norm(best) and len(c.split()) < n_best and not any(p in _norm(c) for p in _NO_COMMENT)
    ]
    # min() keeps the first of equally short answers: source order breaks ties.
    return min(pool, key=lambda c: len(c.split())) if pool else None


def hedged_answer(correct: str, wrong: str, item_id: str, seed: int) -> str:
    correct_first = hashlib.sha256(f"{seed}:{item_id}:hedge".encode()).digest()[0] % 2 == 0
    x, y = (correct, wrong) if correct_first else (wrong, correct)
    return f'It is either "{x}" or "{y}"; I am not sure which.'


def _question_text(item: Mapping[str, Any]) -> str:
    raw = item.get("options")
    options = [] if raw is None else [str(o) for o in raw]
    if not options:
        return str(item["question"])
    return f"{item['question']}\nOptions: " + "; ".join(options)


def _answer_for(kind: str, item: Mapping[str, Any], seed: int) -> str | None:
    if kind == "best":
        return str(item["gold_answer"])
    if kind == "other_correct":
        return other_correct_answer(str(item["gold_answer"]), [str(c) for c in item["correct_answers"]])
    if kind == "hedged":
        return hedged_answer(str(item["gold_answer"]), str(item["wrong_attractor"]), str(item["item_id"]), seed)
    if kind == "incorrect":
        return str(item["wrong_attractor"])
    raise TaskError(f"unknown answer kind {kind!r}; expected one of {ANSWER_KINDS}")


def benchmark_tasks(
    items: pd.DataFrame,
    n_tasks: int,
    *,
    kinds: Sequence[str] = ANSWER_KINDS,
    seed: int = 42,
    source: str | None = None,
) -> pd.DataFrame:
    """``n_tasks`` tasks from one benchmark's item table (module docstring rule)."""
    kinds = list(kinds)
    bad = [k for k in kinds if k not in ANSWER_KINDS]
    if bad or not kinds:
        raise TaskError(f"answer kinds {bad or kinds} invalid; choose from {ANSWER_KINDS}")
    source = source or (str(items["dataset"].iloc[0]) if len(items) else "unknown")
    if n_tasks > len(items):
        raise TaskError(
            f"{source}: {n_tasks} tasks asked for (anchoring.tasks_per_dataset) but the item table has only "
            f"{len(items)} items; lower anchoring.tasks_per_dataset or raise datasets.{source}.n_items"
        )
    rows = []
    used = dict.fromkeys(kinds, 0)
    for item in items.head(n_tasks).to_dict("records"):
        answers = {k: _answer_for(k, item, seed) for k in kinds}
        supported = [k for k in kinds if answers[k] is not None]
        if not supported:
            raise TaskError(f"{item['item_id']}: supports none of the answer kinds {kinds}")
        # min() returns the first of equally used kinds: ties go in answer_kinds order.
        kind = min(supported, key=lambda k: used[k])
        used[kind] += 1
        answer = answers[kind]
        rows.append(
            {
                "task_id": f"{item['item_id']}:{kind}",
                "source": source,
                "item_id": str(item["item_id"]),
                "answer_kind": kind,
                "question": _question_text(item),
                "answer": answer,
                "rubric": render_rubric(str(item["gold_answer"])),
                "gold_score": GOLD_BY_KIND[kind],
            }
        )
    return pd.DataFrame(rows)


def _read_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise TaskError(f"task file {path} does not exist (anchoring.task_files)")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return pd.read_csv(path, dtype=str, keep_default_na=False).to_dict("records")
    text = path.read_text(encoding="utf-8")
    if suffix == ".json":
        data = json.loads(text)
        if not isinstance(data, list):
            raise TaskError(f"{path}: a .json task file must hold a list of task objects")
        return data
    if suffix in (".jsonl", ".ndjson"):
        records = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise TaskError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
        return records
    raise TaskError(f"{path}: unsupported task file type {suffix!r}; use .jsonl, .json or .csv")


def file_tasks(path: str | Path) -> pd.DataFrame:
    """Tasks from one task file (module docstring format), validated."""
    path = Path(path)
    rows = []
    for n, rec in enumerate(_read_records(path), 1):
        where = f"{path} task {n}"
        if not isinstance(rec, Mapping):
            raise TaskError(f"{where}: each task must be an object")
        missing = [k for k in ("task_id", "question", "answer", "gold_score") if not str(rec.get(k, "")).strip()]
        if missing:
            raise TaskError(f"{where}: missing field(s) {missing}")
        rubric = str(rec.get("rubric") or "").strip()
        reference = str(rec.get("reference_answer") or "").strip()
        if not rubric and not reference:
            raise TaskError(f"{where} ({rec['task_id']}): give a 'rubric' or a 'reference_answer'")
        try:
            gold = float(rec["gold_score"])
        except (TypeError, ValueError):
            gold = float("nan")
        if not (gold.is_integer() and SCORE_MIN <= gold <= SCORE_MAX):
            raise TaskError(f"{where} ({rec['task_id']}): gold_score must be an integer 1-5, got {rec['gold_score']!r}")
        rows.append(
            {
                "task_id": str(rec["task_id"]).strip(),
                "source": str(rec.get("source") or path.stem),
                "item_id": None,
                "answer_kind": str(rec.get("answer_kind") or "file"),
                "question": str(rec["question"]).strip(),
                "answer": str(rec["answer"]).strip(),
                "rubric": rubric or render_rubric(reference),
                "gold_score": int(gold),
            }
        )
    if not rows:
        raise TaskError(f"task file {path} holds no tasks")
    return pd.DataFrame(rows)


def assign_priors(tasks: pd.DataFrame, seed: int, threshold: int) -> pd.DataFrame:
    """Add ``prior_direction``, ``prior_score`` and ``prior_verdict`` (module docstring design)."""
    out = tasks.sort_values("task_id", kind="stable").reset_index(drop=True)
    gold = out["gold_score"].astype(int).to_numpy()
    rng = np.random.default_rng(seed)
    n = len(out)
    forced_above = gold <= SCORE_MIN
    forced_below = gold >= SCORE_MAX
    free = np.flatnonzero(~forced_above & ~forced_below)
    target_above = n // 2 + (int(rng.integers(2)) if n % 2 else 0)
    k = int(np.clip(target_above - forced_above.sum(), 0, len(free)))
    above = forced_above.copy()
    above[rng.permutation(free)[:k]] = True
    n_above = int(above.sum())
    if abs(n_above - (n - n_above)) > 1:
        raise TaskError(
            f"prior scores cannot be balanced above and below gold: {int(forced_above.sum())} task(s) with gold 1 "
            f"must go above, {int(forced_below.sum())} with gold 5 must go below, and only {len(free)} free task(s) "
            f"(gold 2-4) remain; add tasks with other gold scores or change anchoring.answer_kinds"
        )
    priors = [
        int(rng.integers(g + 1, SCORE_MAX + 1)) if up else int(rng.integers(SCORE_MIN, g)) for g, up in zip(gold, above)
    ]
    out["prior_direction"] = np.where(above, "above", "below")
    out["prior_score"] = priors
    out["prior_verdict"] = [verdict(p, threshold) for p in priors]
    return out


def build_tasks(
    item_tables: Mapping[str, str | Path],
    task_files: Sequence[str | Path],
    *,
    tasks_per_dataset: int,
    answer_kinds: Sequence[str],
    seed: int,
    verdict_threshold: int,
) -> pd.DataFrame:
    """The run's task table: benchmark tasks, task-file tasks and the prior design."""
    frames = [
        benchmark_tasks(read_items(path), tasks_per_dataset, kinds=answer_kinds, seed=seed, source=name)
        for name, path in item_tables.items()
    ]
    frames += [file_tasks(p) for p in task_files]
    if not frames:
        raise TaskError("no tasks: anchoring.benchmark_datasets and anchoring.task_files are both empty")
    tasks = pd.concat(frames, ignore_index=True)
    dup = tasks.loc[tasks["task_id"].duplicated(), "task_id"].tolist()
    if dup:
        raise TaskError(f"duplicate task id(s) {dup[:5]}: task ids must be unique across benchmarks and task files")
    return assign_priors(tasks, seed, verdict_threshold)[list(TASK_COLUMNS)]


def read_tasks(path: str | Path) -> pd.DataFrame:
    tasks = pd.read_parquet(path)
    missing = [c for c in TASK_COLUMNS if c not in tasks.columns]
    if missing:
        raise TaskError(f"{path}: not a Study H task table (missing column(s) {missing}); rebuild it")
    tasks["item_id"] = tasks["item_id"].astype(object).where(tasks["item_id"].notna(), None)
    return tasks
