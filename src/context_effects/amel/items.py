"""AMEL items: one Yes/No judgment schema for every domain.

An item is a block of material (``content``), a Yes/No question about it in the
standard framing (``question``), the same question asked so that Yes and No
trade meanings (``question_swapped``), and the correct verdict in the standard
framing (``answer``). Items that share a ``group`` (two answers proposed to the
same benchmark question, two versions of one function) never appear in each
other's history: the history must not leak the tested material.

Benchmark domains (answer verification)
---------------------------------------
Each sampled benchmark question (``results/items/<dataset>.parquet``) gives an
item whose proposed answer is its gold answer (correct: "Yes") and, with
``answers_per_question: 2`` (default), a second item whose proposed answer is
its fixed wrong attractor (incorrect: "No"), so the domain is balanced by
construction and small demo sets still hold enough items. With ``1``, each
question gives one of the two, chosen by a seeded balanced assignment.
Multiple-choice benchmarks (MMLU-Pro, ARC) show the question's options, each
with its label, and the proposed answer as one of them ("B. <text>"): without
the options a proposed answer such as "6" could not be checked against the
alternatives the benchmark gives.

Item files (other domains)
--------------------------
JSON lines, one item per line, fields ``id``, ``content``, ``question``,
``question_swapped``, ``answer`` ("Yes" or "No"), optional ``group`` (default:
the id). ``data/amel/code_review.jsonl`` (written for this project) is one.

Which items are tested, which fill histories
--------------------------------------------
``select_items`` marks ``items_per_domain`` test items, balanced between
correct verdicts Yes and No and spread over as many groups as possible, and
gives every item a ``pool_rank``: the order of the domain's items (non-test
items first, those of groups without a test item before the others; one per
group before any group's second item; then the test items). A test item's
history of length k is the first k items of a seeded order, drawn per test item,
of the items outside its own group (``context_effects.amel.design.DomainItems.history``;
cycling through them again only if the domain is too small, which
``history_repeats`` records), so different test items see different histories.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

VERDICTS = ("Yes", "No")
ITEM_COLUMNS = (
    "item_id",
    "domain",
    "group",
    "content",
    "question",
    "question_swapped",
    "answer",
    "source",
    "is_test",
    "pool_rank",
)
FILE_FIELDS = ("id", "content", "question", "question_swapped", "answer")

VERIFICATION_QUESTION = "Is the proposed answer correct?"
VERIFICATION_QUESTION_SWAPPED = "Is the proposed answer incorrect?"


class AmelItemError(ValueError):
    """An item file or item table breaks the AMEL item schema."""


def seeded_rng(*parts: Any) -> np.random.Generator:
    """A generator seeded by sha256 of ``parts``: stable across runs, machines and orderings."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return np.random.default_rng(int.from_bytes(hashlib.sha256(blob).digest()[:16], "little"))


def verification_content(
    question: str, proposed: str, labels: Any = (), options: Any = (), proposed_label: str | None = None
) -> str:
    """The material of one verification item; multiple-choice items list their options."""
    labels, options = list(labels if labels is not None else ()), list(options if options is not None else ())
    if not options:
        return f"Question: {question}\nProposed answer: {proposed}"
    listed = "\n".join(f"{lab}. {opt}" for lab, opt in zip(labels, options))
    shown = f"{proposed_label}. {proposed}" if isinstance(proposed_label, str) and proposed_label else proposed
    return f"Question: {question}\nOptions:\n{listed}\nProposed answer: {shown}"


def verification_items(
    items: pd.DataFrame, domain: str, *, answers_per_question: int = 2, seed: int = 42
) -> pd.DataFrame:
    """Answer-verification items from a benchmark item table (see module docstring)."""
    if answers_per_question not in (1, 2):
        raise AmelItemError(f"answers_per_question must be 1 or 2, got {answers_per_question!r}")
    rows = []
    order = items["item_id"].tolist()
    # With one answer per question, half the questions (seeded) show the gold answer.
    shown_gold = set()
    if answers_per_question == 1:
        perm = seeded_rng("verification", seed, domain).permutation(len(order))
        shown_gold = {order[i] for i in perm[: (len(order) + 1) // 2]}
    for r in items.itertuples(index=False):
        labels = getattr(r, "option_labels", None)
        options = getattr(r, "options", None)
        versions = [
            ("correct", r.gold_answer, "Yes", getattr(r, "gold_label", None)),
            ("wrong", r.wrong_attractor, "No", getattr(r, "attractor_label", None)),
        ]
        if answers_per_question == 1:
            versions = [versions[0] if r.item_id in shown_gold else versions[1]]
        for tag, proposed, answer, label in versions:
            rows.append(
                {
                    "item_id": f"{r.item_id}:{tag}",
                    "domain": domain,
                    "group": r.item_id,
                    "content": verification_content(r.question, proposed, labels, options, label),
                    "question": VERIFICATION_QUESTION,
                    "question_swapped": VERIFICATION_QUESTION_SWAPPED,
                    "answer": answer,
                    "source": r.dataset,
                }
            )
    if not rows:
        raise AmelItemError(f"domain {domain!r}: the benchmark item table is empty")
    return pd.DataFrame(rows)


def load_item_file(path: str | Path, domain: str) -> pd.DataFrame:
    """Items of one domain from a JSON-lines file; every problem is named with its line."""
    path = Path(path)
    if not path.is_file():
        raise AmelItemError(
            f"AMEL item file {str(path)!r} (domain {domain!r}) does not exist; "
            "fix `amel.item_files` in the config (paths are relative to the working directory)"
        )
    rows, problems = [], []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"line {lineno}: not JSON ({exc})")
            continue
        if not isinstance(rec, Mapping):
            problems.append(f"line {lineno}: expected a JSON object")
            continue
        missing = [f for f in FILE_FIELDS if not isinstance(rec.get(f), str) or not rec[f].strip()]
        if missing:
            problems.append(f"line {lineno}: missing or empty field(s) {missing}")
            continue
        if rec["answer"] not in VERDICTS:
            problems.append(f"line {lineno}: answer must be 'Yes' or 'No', got {rec['answer']!r}")
            continue
        unknown = sorted(set(rec) - set(FILE_FIELDS) - {"group", "note"})
        if unknown:
            problems.append(f"line {lineno}: unknown field(s) {unknown}; allowed: {[*FILE_FIELDS, 'group', 'note']}")
            continue
        rows.append(
            {
                "item_id": rec["id"],
                "domain": domain,
                "group": str(rec.get("group") or rec["id"]),
                "content": rec["content"],
                "question": rec["question"],
                "question_swapped": rec["question_swapped"],
                "answer": rec["answer"],
                "source": path.name,
            }
        )
    if not rows and not problems:
        problems.append("no items")
    df = pd.DataFrame(rows)
    if rows:
        dup = df.loc[df["item_id"].duplicated(), "item_id"].tolist()
        if dup:
            problems.append(f"duplicate id(s) {dup[:5]}")
    if problems:
        raise AmelItemError(f"AMEL item file {path} (domain {domain!r}):\n- " + "\n- ".join(problems))
    return df


def select_items(df: pd.DataFrame, n_test: int, seed: int) -> pd.DataFrame:
    """Mark test items and rank the history pool (see module docstring)."""
    if df.empty:
        raise AmelItemError("no items to select from")
    domain = str(df["domain"].iloc[0])
    if df["group"].nunique() < 2:
        raise AmelItemError(
            f"domain {domain!r}: all items share one group, so no item can fill another's history; "
            "add items of other groups"
        )
    rng = seeded_rng("amel-select", seed, domain)
    df = df.sort_values("item_id", kind="stable").reset_index(drop=True)
    # Visit groups in a seeded order; within a group, items in a seeded order.
    groups = list(dict.fromkeys(df["group"]))
    group_order = [groups[i] for i in rng.permutation(len(groups))]
    members = {g: list(df.index[df["group"] == g]) for g in groups}
    for g in group_order:
        members[g] = [members[g][i] for i in rng.permutation(len(members[g]))]

    n_test = min(int(n_test), len(df))
    chosen: list[int] = []
    # Round r takes the r-th member of every group (groups before second items);
    # within a round, alternate the wanted verdict so the test set is balanced.
    want = 0
    depth = max(len(m) for m in members.values())
    for r in range(depth):
        pending = [members[g][r] for g in group_order if r < len(members[g])]
        while pending and len(chosen) < n_test:
            target = VERDICTS[want % 2]
            pick = next((i for i in pending if df.at[i, "answer"] == target), pending[0])
            pending.remove(pick)
            chosen.append(pick)
            want += 1
        if len(chosen) >= n_test:
            break
    is_test = np.zeros(len(df), dtype=bool)
    is_test[chosen] = True
    # History order: non-test items, every group's first before any group's second, then test items.
    # Groups without a test item come first: histories drawn from them are the same for every test item.
    rest = {g: [i for i in members[g] if not is_test[i]] for g in group_order}
    tested = {g for g in group_order if any(is_test[i] for i in members[g])}
    pool = []
    for part in ([g for g in group_order if g not in tested], [g for g in group_order if g in tested]):
        pool += [rest[g][r] for r in range(depth) for g in part if r < len(rest[g])]
    ranked = pool + chosen
    rank = np.empty(len(df), dtype=np.int64)
    rank[ranked] = np.arange(len(df))
    out = df.assign(is_test=is_test, pool_rank=rank)
    return out.sort_values("pool_rank", kind="stable").reset_index(drop=True)[list(ITEM_COLUMNS)]


def build_domain_items(
    domain: str,
    *,
    benchmark_items: pd.DataFrame | None = None,
    item_file: str | Path | None = None,
    items_per_domain: int,
    answers_per_question: int = 2,
    seed: int = 42,
) -> pd.DataFrame:
    """The selected item table of one domain, from a benchmark item table or an item file."""
    if (benchmark_items is None) == (item_file is None):
        raise AmelItemError(f"domain {domain!r}: give exactly one of a benchmark item table or an item file")
    if benchmark_items is not None:
        raw = verification_items(benchmark_items, domain, answers_per_question=answers_per_question, seed=seed)
    else:
        raw = load_item_file(item_file, domain)  # type: ignore[arg-type]
    return select_items(raw, items_per_domain, seed)


def read_domain_items(path: str | Path) -> pd.DataFrame:
    df = pd.read_parquet(path)
    missing = [c for c in ITEM_COLUMNS if c not in df.columns]
    if missing:
        raise AmelItemError(f"{path}: not an AMEL item table (missing columns {missing}); rebuild it with rule amel_items")
    return df.sort_values("pool_rank", kind="stable").reset_index(drop=True)
