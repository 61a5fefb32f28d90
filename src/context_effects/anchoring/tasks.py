"""Study H tasks: a fixed answer, a 5-point rubric and a constructed gold score (seed 001).

Tasks from the benchmarks
-------------------------
Each benchmark's item table (``results/items/<dataset>.parquet``, already a seeded
sample) gives ``tasks_per_dataset`` tasks, one per drawn item, so tasks never share a
question. The draw is stratified, never the head of the table; a generator
``numpy.random.default_rng([seed, sha256("<dataset>:tasks")[:8]])`` decides, in order:

1. **Category quotas** (source category, the item table's ``category``; items without
   one form the stratum ``(none)``): proportional to the table's category counts,
   largest remainder, equal remainders ordered by one random permutation of the categories.
2. **Items**: per category (sorted by name) a random permutation of its items in table
   order; the first quota items are drawn.
3. **Gold levels** (answer kinds): a random permutation of the configured kinds gives
   the tie-break rank. Items are visited category by category in draw order; each gets,
   among the kinds it supports, the one used least so far *in its category*, then least
   *in its dataset*, then lowest rank. So every gold level is as frequent as the others
   (within one, when every item supports every kind) overall and within each category.

The same seed and item table give the same tasks; ``category`` is recorded per task.
The answer and the gold score follow this stated rule:

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
``answer_kind``, ``source`` and ``category``. Task files are taken whole.

Prior-score design (the anchor condition)
-----------------------------------------
The displayed prior is experimentally assigned and independent of the gold score
(design ``PRIOR_DESIGN``). The scale's midpoint 3 splits it into a low side {1, 2}
and a high side {4, 5}; the prior never depends on a judge's scores. Tasks are
taken in ``task_id`` order, grouped by gold score (1-5), and a generator
``numpy.random.default_rng(seed)`` decides, in this order:

1. of the gold levels with an odd number of tasks, which put their extra task on the
   high side: a random permutation of them, the first half (rounded by one coin flip
   when their number is odd) high;
2. per gold level, ascending, which tasks are high: a random permutation, the first
   ``n_high`` of it;
3. per task, in ``task_id`` order, the prior: uniform over the two scores of its side.

So within every gold level half the priors are high and half low (up to one task),
and the overall split differs by at most one: the prior's distribution is the same
at every gold level, which makes it uninformative about quality. The prior verdict is
``pass`` when the prior is at or above the verdict threshold. Recorded per task:
``prior_design``, ``prior_side`` (high / low), ``prior_direction`` (above / equal /
below gold, for reading results), ``prior_score``, ``prior_verdict``. One design
serves every judge of a run and is stored in the task table and every result file.
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

#: The prior-score design's name, recorded per task (module docstring).
PRIOR_DESIGN = "midpoint-balanced-within-gold"
SCALE_MIDPOINT = 3
PRIOR_SIDES = {"low": (1, 2), "high": (4, 5)}
NO_CATEGORY = "(none)"

TASK_COLUMNS = (
    "task_id",
    "source",
    "category",
    "item_id",
    "answer_kind",
    "question",
    "answer",
    "rubric",
    "gold_score",
    "prior_design",
    "prior_side",
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


def _stream_seed(seed: int, name: str) -> list[int]:
    return [int(seed), int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big")]


def _category(value: Any) -> str:
    missing = value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)) or not str(value).strip()
    return NO_CATEGORY if missing else str(value)


def category_quotas(counts: Mapping[str, int], n: int, rng: np.random.Generator) -> dict[str, int]:
    """``n`` split over categories in proportion to ``counts`` (largest remainder, random tie order)."""
    cats = sorted(counts)
    total = sum(counts[c] for c in cats)
    # Integer arithmetic: float round-off must not reorder equal remainders.
    quota = {c: (n * counts[c]) // total for c in cats}
    tie = dict(zip(cats, rng.permutation(len(cats))))
    rest = sorted(cats, key=lambda c: (-((n * counts[c]) % total), tie[c]))
    for c in rest[: n - sum(quota.values())]:
        quota[c] += 1
    return quota


def benchmark_tasks(
    items: pd.DataFrame,
    n_tasks: int,
    *,
    kinds: Sequence[str] = ANSWER_KINDS,
    seed: int = 42,
    source: str | None = None,
) -> pd.DataFrame:
    """``n_tasks`` tasks from one benchmark's item table (module docstring: stratified draw, gold rule)."""
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
    rng = np.random.default_rng(_stream_seed(seed, f"{source}:tasks"))
    records = items.to_dict("records")
    by_cat: dict[str, list[dict[str, Any]]] = {}
    for item in records:
        by_cat.setdefault(_category(item.get("category")), []).append(item)
    quota = category_quotas({c: len(v) for c, v in by_cat.items()}, n_tasks, rng)
    drawn = [
        (cat, by_cat[cat][int(k)]) for cat in sorted(by_cat) for k in rng.permutation(len(by_cat[cat]))[: quota[cat]]
    ]
    rank = {k: int(r) for k, r in zip(kinds, rng.permutation(len(kinds)))}
    used = dict.fromkeys(kinds, 0)
    used_in: dict[str, dict[str, int]] = {}
    rows = []
    for cat, item in drawn:
        answers = {k: _answer_for(k, item, seed) for k in kinds}
        supported = [k for k in kinds if answers[k] is not None]
        if not supported:
            raise TaskError(f"{item['item_id']}: supports none of the answer kinds {kinds}")
        in_cat = used_in.setdefault(cat, dict.fromkeys(kinds, 0))
        kind = min(supported, key=lambda k: (in_cat[k], used[k], rank[k]))
        used[kind] += 1
        in_cat[kind] += 1
        rows.append(
            {
                "task_id": f"{item['item_id']}:{kind}",
                "source": source,
                "category": cat,
                "item_id": str(item["item_id"]),
                "answer_kind": kind,
                "question": _question_text(item),
                "answer": answers[kind],
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
                "category": _category(rec.get("category")),
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
    """Add the prior-score design's columns (module docstring: ``PRIOR_DESIGN``)."""
    out = tasks.sort_values("task_id", kind="stable").reset_index(drop=True)
    gold = out["gold_score"].astype(int).to_numpy()
    rng = np.random.default_rng(seed)
    levels = sorted(set(gold.tolist()))
    odd = [g for g in levels if (gold == g).sum() % 2]
    n_extra_high = len(odd) // 2 + (int(rng.integers(2)) if len(odd) % 2 else 0)
    extra_high = {odd[int(k)] for k in rng.permutation(len(odd))[:n_extra_high]}
    high = np.zeros(len(out), dtype=bool)
    for g in levels:
        idx = np.flatnonzero(gold == g)
        n_high = len(idx) // 2 + (1 if g in extra_high else 0)
        high[idx[rng.permutation(len(idx))[:n_high]]] = True
    priors = np.array([int(rng.choice(PRIOR_SIDES["high" if h else "low"])) for h in high])
    out["prior_design"] = PRIOR_DESIGN
    out["prior_side"] = np.where(high, "high", "low")
    out["prior_direction"] = np.select([priors > gold, priors < gold], ["above", "below"], "equal")
    out["prior_score"] = priors.astype(int)
    out["prior_verdict"] = [verdict(int(p), threshold) for p in priors]
    return out


def prior_gold_correlation(tasks: pd.DataFrame, confidence: float = 0.95) -> dict[str, Any]:
    """Pearson r of the assigned prior with the gold score and its Fisher-z interval (the design check).

    The interval assumes independent tasks; under the design it should contain 0.
    """
    x = tasks["gold_score"].to_numpy(float)
    y = tasks["prior_score"].to_numpy(float)
    n = len(x)
    out: dict[str, Any] = {"n": n, "r": None, "ci_low": None, "ci_high": None, "confidence": confidence}
    if n < 4 or x.std() == 0 or y.std() == 0:
        return out
    from scipy.stats import norm

    r = float(np.corrcoef(x, y)[0, 1])
    half = float(norm.ppf(0.5 + confidence / 2)) / np.sqrt(n - 3)
    z = np.arctanh(np.clip(r, -0.999999, 0.999999))
    out.update(r=r, ci_low=float(np.tanh(z - half)), ci_high=float(np.tanh(z + half)))
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
