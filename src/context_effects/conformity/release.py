"""The predecessor study's released item samples and peer blocks (seed 002 §2.2, App. A.2, A.8).

Seed 002 asks "500 questions sampled by Qu et al. (2026)" per dataset and reuses that
study's peer, authority and consensus-structure templates and its seeded per-instance
sampler byte for byte. That study released both, as JSON lines with one row per
(item, condition) at a pinned commit of its repository (``RELEASE_REPO`` at
``RELEASE_COMMIT``; files and checksums in ``RELEASE_FILES``). This module reads them.

Items (``datasets.<name>.sample: {source: release, path: ...}``)
-----------------------------------------------------------------
The item list is exactly the release's items, matched to the normalised item table
(``match_items``) and kept in the project's order (source order):

* TruthfulQA: the release's ``source_row_index`` counts rows of the ``multiple_choice``
  split, whose order is *not* the ``generation`` split's this project loads (in the
  shared copies 2 of 817 rows hold the same question at the same index). An item is
  therefore matched by its whitespace-stripped question text, which is unique in both
  splits. The gold answer stays the generation split's best answer: the release's gold
  is the multiple-choice sentence, a different text for the same fact.
* ARC-Challenge: by ``id`` (``original_instance_ID``), then the stem and the keyed
  option's text must agree. The release sampled the ARC-Challenge **train** split
  (its metadata: ``source_split`` train, 1,119 source rows), so the dataset must be
  loaded from that split.
* MMLU-Pro: by ``question_id``, then question and keyed option text must agree.

An item that does not match raises ``ReleaseMatchError`` naming the item and the fix.

Wrong attractor of a released item (``release_attractors``)
-----------------------------------------------------------
A released item's wrong attractor is its **first wrong option in the release's option
order**: the first option whose label is not the keyed one, taken as the item table's
incorrect-answer text it names (compared with whitespace collapsed and a final period
dropped: the multiple-choice sentences end in one, the generation split's answers do
not). An option the item table does not list as incorrect is passed over: the release's
"Unknown." of the absolute-pitch question is a correct answer in the generation split.
Seed 002's one printed attractor (Table 1, the magpie item: "Good morning, Mr. Magpie")
is option (A) of that item's release row; neither the source order of the generation
split (its first incorrect answer is "you will have bad luck"), the seeded hash of
``context_effects.datasets`` ("visitors will come to see you") nor the letters of the
release's own all-wrong blocks (B absent, C present) give it. For ARC-Challenge and
MMLU-Pro the release keeps the source's option order, so the rule is the source's first
incorrect option there (docs/deviations.yaml#wrong-attractor-rule).

Peer blocks (``conformity.peers.source: release``)
--------------------------------------------------
A release row's ``perturbed_prompt`` holds six lines ``Name: phrase LETTER.`` or, for
the authority speaker, ``Name (role): phrase LETTER.``, separated by blank lines.
``parse_block`` keeps each speaker's name, role, phrase and position and the letter.
The open-ended prompt needs text, not letters, so when rendered (``peers.peer_block``):

* the item's keyed letter (``answer.label``, "(D)" -> "D"; ARC's numeric labels
  "(1)".."(4)" -> "1".."4") becomes the item table's ``gold_answer``;
* **any** other letter becomes the item's one fixed ``wrong_attractor``. The release
  draws the wrong letter per condition (absent and present use different wrong
  options in about two thirds of the items) and per speaker in the mixed block; this
  project keeps one wrong text per item in every wrong-endorsing condition, so only
  the speakers, phrases, roles and positions come from the release, and the number of
  speakers endorsing the gold text (``correct_peer_count``) is checked to be kept.

Conditions map ``unanimous_correct`` / ``unanimous_wrong`` / ``mixed`` to the polarities
correct / wrong / mixed, and ``_present`` / ``_absent`` to the authority variants.
A dataset whose release file has none of the six rq1_rq3 conditions (MMLU-Pro: only the
rq2a "commitment" file was released) has no released blocks; its blocks are built with the
release's design (``conformity.release_design``); ``peer_source`` says which, and the item
table metadata records it.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects import pinned
from context_effects.conformity.conditions import AUTHORITY_VARIANTS, POLARITIES

RELEASE_REPO = "yibo-hu-lab/Easier-to-Mislead-Than-to-Correct"
RELEASE_COMMIT = "29feb84e37df8f08ecf9277d659dc5b3364e58c7"

#: File name (as fetched to ``resources/release/``) -> path in the repository, sha256.
#: The checksums (``context_effects.pinned``) are those of the copies described in the
#: release's PROVENANCE notes; every read checks them again (``read_release``).
_RELEASE_PATHS = {
    "truthfulqa_sample500.rq1_rq3.jsonl": "perturbed_dataset/rq1_rq3/data/truthfulqa_sample500.jsonl",
    "arc_challenge_sample500.rq1_rq3.jsonl": "perturbed_dataset/rq1_rq3/data/arc_challenge_sample500.jsonl",
    "mmlu_pro_sample500.rq2a.jsonl": "perturbed_dataset/rq2/rq2a/data/mmlu_pro_sample500.jsonl",
}
RELEASE_FILES: dict[str, dict[str, str]] = {
    name: {"path": path, "sha256": pinned.RELEASE_SHA256[name]} for name, path in _RELEASE_PATHS.items()
}
FETCH_DIR = "resources/release"
#: Wildcard constraint of the fetch_release rule: exactly the known file names.
FILE_PATTERN = "|".join(re.escape(name) for name in RELEASE_FILES)

#: Release condition id -> (polarity, authority variant).
CONDITIONS: dict[str, tuple[str, str]] = {
    f"{prefix}_{authority}": (polarity, authority)
    for prefix, polarity in (("unanimous_correct", "correct"), ("unanimous_wrong", "wrong"), ("mixed", "mixed"))
    for authority in AUTHORITY_VARIANTS
}
_REQUIRED = ("original_instance_ID", "source_row_index", "question", "answer", "condition_id")
_LINE = re.compile(r"^(?P<name>[^:()\n]+?)(?: \((?P<role>[^()\n]+)\))?: (?P<phrase>.*?)(?P<letter>[A-Z]|[0-9]+)\.$")


class ReleaseError(ValueError):
    """A release file breaks the row format."""


class ReleaseMatchError(ValueError):
    """A released item has no counterpart in the dataset table."""


def release_url(name: str) -> str:
    """Raw GitHub URL of a release file at the pinned commit."""
    return f"https://raw.githubusercontent.com/{RELEASE_REPO}/{RELEASE_COMMIT}/{RELEASE_FILES[name]['path']}"


def fetch(name: str, out: str | Path) -> None:
    """Download one release file at the pinned commit; refuse it unless its sha256 is the pinned one."""
    if name not in RELEASE_FILES:
        raise ValueError(f"unknown release file {name!r}; known: {sorted(RELEASE_FILES)}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".part")
    with urllib.request.urlopen(release_url(name), timeout=120) as resp, open(tmp, "wb") as fh:
        fh.write(resp.read())
    got, want = pinned.sha256_of(tmp), RELEASE_FILES[name]["sha256"]
    if got != want:
        tmp.unlink()
        raise ReleaseError(f"{release_url(name)}: sha256 {got} differs from the pinned {want}; the file at "
                           "that commit changed or the download is corrupt: do not use it")
    tmp.replace(out)


def sample_input(config: Mapping[str, Any], dataset: str) -> list[str]:
    """The release file a dataset's item table is built from ([] for a seeded sample)."""
    sample = config["datasets"][dataset].get("sample") or {}
    return [sample["path"]] if sample.get("source") == "release" else []


# --------------------------------------------------------------------------- rows


def read_release(path: str | Path) -> list[dict[str, Any]]:
    """Every row of a release file (JSON lines), checked against its pinned sha256 (a
    pinned name: ``context_effects.pinned``) and for the fields this module reads.

    A row is one condition of one item: a second row for the same
    (``original_instance_ID``, ``condition_id``) is refused, identical or not, as the
    item sources refuse a duplicate id (``context_effects.datasets``). Keeping either
    copy would pass silently (the peer blocks keep the last, the item list the first),
    and which copy is right is for a person to decide; the pinned files have none.
    """
    pinned.verify(path)
    rows: list[dict[str, Any]] = []
    first: dict[tuple[str, str], dict[str, Any]] = {}
    for lineno, line in enumerate(Path(path).read_text(encoding="utf-8").split("\n"), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReleaseError(f"{path}:{lineno}: not JSON ({exc.msg}); use the release file unchanged") from None
        missing = [k for k in _REQUIRED if k not in row]
        if missing:
            raise ReleaseError(f"{path}:{lineno}: fields {missing} missing; not a release row")
        key = (str(row["original_instance_ID"]), str(row["condition_id"]))
        if key in first:
            prior = first[key]
            differ = sorted(k for k in set(prior) | set(row) if k != "_line" and prior.get(k) != row.get(k))
            how = f"the rows differ in {differ}" if differ else "the two rows are identical"
            raise ReleaseError(f"{path}:{lineno}: item {key[0]} condition {key[1]} is already given at line "
                               f"{prior['_line']}; {how}. A release row is one condition of one item: delete "
                               "one of the two rows (or use the release file unchanged)")
        row["_line"] = lineno
        first[key] = row
        rows.append(row)
    if not rows:
        raise ReleaseError(f"{path}: no rows")
    return rows


def release_items(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per released item (first row of each ``original_instance_ID``), in file order."""
    seen: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = str(row["original_instance_ID"])
        if key not in seen:
            seen[key] = dict(row)
        elif str(seen[key]["question"]) != str(row["question"]):
            raise ReleaseError(f"release item {key}: rows disagree on the question (line {row['_line']})")
    return list(seen.values())


def _label(label: Any) -> str:
    """``"(D)"`` -> ``"D"``, ``"(1)"`` -> ``"1"``."""
    return str(label).strip().strip("()").strip()


def _norm(text: Any) -> str:
    return " ".join(str(text).split())


# -------------------------------------------------------------------------- items


def _describe(rel: Mapping[str, Any]) -> str:
    q = _norm(rel["question"])
    return (f"release item {rel['original_instance_ID']} (source_row_index {rel['source_row_index']}, "
            f"line {rel.get('_line', '?')}: {q[:60]!r}{'...' if len(q) > 60 else ''})")


def match_items(dataset: str, items: pd.DataFrame, rows: Iterable[Mapping[str, Any]],
                path: str | Path = "release file") -> pd.DataFrame:
    """The rows of the normalised ``items`` that are the release's items (see module docstring).

    Returns them in source order with ``attrs["release"]`` describing the match and
    ``attrs["release_order"]`` their item ids in the release file's order;
    ``ReleaseMatchError`` lists every released item without a counterpart.
    """
    released = release_items(rows)
    wrong_ds = {str(r.get("dataset_name")) for r in released} - {dataset, "None"}
    if wrong_ds:
        raise ReleaseMatchError(f"{path}: rows are for dataset(s) {sorted(wrong_ds)}, not {dataset}; "
                                f"point `datasets.{dataset}.sample.path` at the {dataset} release file")
    if dataset == "truthfulqa":
        index = {_norm(q): i for i, q in enumerate(items["question"])}
        key_of = lambda rel: _norm(rel["question"])  # noqa: E731
        how = "question text (the release's row index counts the multiple_choice split)"
    else:
        prefix = f"{dataset}-"
        index = {str(iid).removeprefix(prefix): i for i, iid in enumerate(items["item_id"])}
        key_of = lambda rel: str(rel["original_instance_ID"])  # noqa: E731
        how = "id (original_instance_ID), then question and gold text"
    positions: list[int] = []
    problems: list[str] = []
    split_hint = (" The release sampled the ARC-Challenge train split: load that split "
                  "(`hub.split: train`, or a local copy of ARC-Challenge-Train)." if dataset == "arc_challenge" else "")
    for rel in released:
        pos = index.get(key_of(rel))
        if pos is None:
            problems.append(f"{_describe(rel)}: not in the {dataset} table ({len(items)} items, matched by {how})")
            continue
        row = items.iloc[pos]
        if dataset != "truthfulqa":
            if _norm(row["question"]) != _norm(rel["question"]):
                problems.append(f"{_describe(rel)}: {row['item_id']} has another question "
                                f"({_norm(row['question'])[:60]!r}); the source copy differs from the release's")
                continue
            gold = _norm(rel["answer"]["text"])
            if _norm(row["gold_answer"]) != gold:
                problems.append(f"{_describe(rel)}: gold {gold!r} but {row['item_id']} is keyed "
                                f"{row['gold_answer']!r}; the source copy's answer key differs from the release's")
                continue
        positions.append(pos)
    if problems:
        shown = problems[:25] + ([f"... and {len(problems) - 25} more"] if len(problems) > 25 else [])
        raise ReleaseMatchError(f"{dataset}: {len(problems)} of {len(released)} items of {path} do not match "
                                "the dataset table. Fix: load the split and revision the release sampled, or "
                                f"remove those items from the release file.{split_hint}\n- " + "\n- ".join(shown))
    out = items.iloc[sorted(positions)].reset_index(drop=True)
    out.attrs = dict(items.attrs)
    # The release file's item order is its own random draw order: a cut of the sample
    # (``n_items`` below its count) takes a prefix of it (datasets.build_item_table).
    out.attrs["release_order"] = [str(items.iloc[pos]["item_id"]) for pos in positions]
    out.attrs["release"] = {
        "path": str(path), "repo": RELEASE_REPO, "commit": RELEASE_COMMIT, "n_items": len(positions),
        "matched_by": how,
        "sha256": pinned.sha256_of(path) if Path(str(path)).is_file() else None,
    }
    return out


def _option_key(text: Any) -> str:
    """An option or answer text compared across the release and the benchmark: the
    multiple-choice sentences add a final period that the generation split lacks."""
    return _norm(text).rstrip(".").rstrip()


def _table_ids(dataset: str, items: pd.DataFrame, rows: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The release's ``original_instance_ID`` (as str) -> the item table's id, for the
    released items the table holds (TruthfulQA by question text, the others by id)."""
    if dataset == "truthfulqa":
        by_q = {_norm(q): str(i) for q, i in zip(items["question"], items["item_id"])}
        return {str(r["original_instance_ID"]): by_q[_norm(r["question"])]
                for r in release_items(rows) if _norm(r["question"]) in by_q}
    have = set(map(str, items["item_id"]))
    return {str(r["original_instance_ID"]): f"{dataset}-{r['original_instance_ID']}"
            for r in release_items(rows) if f"{dataset}-{r['original_instance_ID']}" in have}


def first_wrong_option(row: Mapping[str, Any], incorrect_answers: Iterable[str]) -> str | None:
    """The item-table text of a release row's first wrong option that the item lists as
    incorrect (module docstring, "Wrong attractor"); None when no wrong option is one."""
    texts = {}
    for text in incorrect_answers:
        texts.setdefault(_option_key(text), str(text))
    key = _label(row["answer"]["label"])
    for option in row.get("options") or []:
        if _label(option["label"]) != key and _option_key(option["text"]) in texts:
            return texts[_option_key(option["text"])]
    return None


def release_attractors(dataset: str, items: pd.DataFrame, rows: list[Mapping[str, Any]]) -> dict[str, str]:
    """item_id -> wrong attractor of every released item of ``items`` (module docstring);
    ``ReleaseError`` names the items none of whose wrong options is an incorrect answer."""
    ids = _table_ids(dataset, items, rows)
    incorrect = dict(zip(map(str, items["item_id"]), items["incorrect_answers"]))
    out, problems = {}, []
    for rel in release_items(rows):
        iid = ids.get(str(rel["original_instance_ID"]))
        if iid is None:
            continue
        text = first_wrong_option(rel, incorrect[iid])
        if text is None:
            problems.append(f"{_describe(rel)} ({iid}): no wrong option is among its incorrect answers")
        else:
            out[iid] = text
    if problems:
        raise ReleaseError(f"{dataset}: {len(problems)} released items have no wrong option to take as the "
                           "attractor:\n- " + "\n- ".join(problems[:25]))
    return out


# ------------------------------------------------------------------------- blocks


def parse_block(text: str) -> list[dict[str, Any]]:
    """The speakers of one ``perturbed_prompt``: name, role (None when absent), phrase, letter."""
    speakers = []
    for line in str(text).split("\n\n"):
        m = _LINE.match(line.strip())
        if not m:
            raise ReleaseError(f"peer line {line!r} is not 'Name[ (role)]: phrase LETTER.'")
        speakers.append({"name": m["name"], "role": m["role"], "phrase": m["phrase"], "letter": m["letter"]})
    return speakers


def item_blocks(rows: Iterable[Mapping[str, Any]],
                item_ids: Mapping[str, str]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """item_id -> ``"<polarity>|<authority>"`` -> speakers with ``gold`` (bool) in place of the letter.

    ``item_ids`` maps the release's ``original_instance_ID`` (as str) to the item table's
    id; rows of other items and of conditions outside ``CONDITIONS`` are skipped. An item
    must then have all six conditions; the speaker lines must agree with the release's
    own counts (``correct_peer_count``, ``n_authority``).
    """
    out: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for row in rows:
        iid = item_ids.get(str(row["original_instance_ID"]))
        cond = CONDITIONS.get(str(row["condition_id"]))
        if iid is None or cond is None:
            continue
        gold = _label(row["answer"]["label"])
        speakers = parse_block(row["perturbed_prompt"])
        for sp in speakers:
            sp["gold"] = sp.pop("letter") == gold
        where = f"release line {row.get('_line', '?')} ({row['condition_id']} of {iid})"
        if "correct_peer_count" in row and sum(sp["gold"] for sp in speakers) != int(row["correct_peer_count"]):
            raise ReleaseError(f"{where}: {sum(sp['gold'] for sp in speakers)} speakers name the keyed label "
                               f"{gold!r}, the row says correct_peer_count={row['correct_peer_count']}")
        n_roles = sum(sp["role"] is not None for sp in speakers)
        if n_roles != int(row.get("n_authority", n_roles)) or (cond[1] == "absent" and n_roles):
            raise ReleaseError(f"{where}: {n_roles} authority roles, n_authority={row.get('n_authority')}")
        out.setdefault(iid, {})[f"{cond[0]}|{cond[1]}"] = speakers
    want = {f"{p}|{a}" for p in POLARITIES for a in AUTHORITY_VARIANTS}
    incomplete = {iid: sorted(want - set(b)) for iid, b in out.items() if set(b) != want}
    if incomplete:
        first = next(iter(incomplete.items()))
        raise ReleaseError(f"{len(incomplete)} item(s) lack released conditions, e.g. {first[0]}: {first[1]}")
    return out


def released_blocks(dataset: str, items: pd.DataFrame, rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The released blocks of the sampled ``items`` ({} if the file has no rq1_rq3 condition)."""
    if not any(str(r["condition_id"]) in CONDITIONS for r in rows):
        return {}
    blocks = item_blocks(rows, _table_ids(dataset, items, rows))
    missing = sorted(set(map(str, items["item_id"])) - set(blocks))
    if missing:
        raise ReleaseError(f"{dataset}: {len(missing)} sampled items have no released peer blocks "
                           f"(e.g. {missing[:3]}); sample the items from the same release file")
    return blocks
