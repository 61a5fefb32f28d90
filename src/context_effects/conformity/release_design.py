"""Peer blocks built with the predecessor release's design, for a dataset whose rq1_rq3
blocks were not released (MMLU-Pro; seed 002 §2.2, App. A.8).

Seed 002 reuses the predecessor study's "peer, authority, and consensus-structure
templates and the seeded per-instance perturbation sampler" byte for byte (App. A.8), so
every dataset's peer blocks are one manipulation. The release has the rq1_rq3 blocks of
TruthfulQA and ARC-Challenge only; for MMLU-Pro it has the rq2a "commitment" file. This
module builds MMLU-Pro's six conditions the way the released blocks are built, measured
on the 3,000 + 3,000 released TruthfulQA and ARC rows (``conformity.release``):

* six speakers, six distinct first names of the release's 24 (``NAMES``), in a random
  order; the absent and present variants of a condition are separate draws (no released
  item reuses one variant's speakers in the other);
* each speaker's stance phrase drawn with replacement from the release's ten committed
  phrases (``PHRASES``): 2-6 distinct phrases per released block, as six draws of ten give;
  the authority speaker's from six of them only (``AUTHORITY_PHRASES``: no released
  authority line uses "I think the best answer is", "I would go with", "My initial read
  is" or "Right now, I am leaning to", while each of the six others opens 230-283 of the
  500 + 500 authority lines, and every phrase opens 703-801 of the other lines);
* authority present: exactly one speaker, at any of the six positions, carries one of
  the release's eight organisational roles (``ROLES``); authority absent: none;
* consensus structures: unanimous correct (six on the gold text), unanimous wrong (six
  on the item's wrong attractor), mixed (three and three, at random positions). In a
  released mixed block the three wrong speakers name three different wrong options, and
  the authority speaker names the keyed option in 129 of 500 TruthfulQA and 116 of 500
  ARC items, i.e. one of the block's four named options at random (1/4); here too the
  authority takes the gold side with probability 1/4 and otherwise one of the three
  wrong speakers.

The rq2a file's ``rq2a_commit6`` rows are released blocks of exactly the mixed,
authority-absent structure for the same 500 MMLU-Pro items (six committed speakers, three
on the keyed letter and three on three different wrong letters, no role, the same names
and phrases), so an item that has one takes its ``mixed|absent`` block from there; the
other five conditions are drawn here.

Every draw is seeded by (panel seed, item id, condition), never by an execution label,
so executions send byte-identical prompts (``conformity.peers``). The blocks have the
structure of ``conformity.release.item_blocks`` (speakers with ``name``, ``role``,
``phrase``, ``gold``) and are rendered by ``conformity.peers.released_block`` like the
released ones: the gold side as the item's gold answer, the wrong side as its one fixed
wrong attractor.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from context_effects.conformity import release
from context_effects.conformity.conditions import AUTHORITY_VARIANTS, POLARITIES

#: The release's speaker names: the 24 first names of every TruthfulQA, ARC-Challenge and
#: MMLU-Pro (rq2a) block (the same set in all three files).
NAMES = (
    "Alexander", "Amelia", "Ava", "Benjamin", "Charlotte", "Daniel", "Emma", "Ethan", "Evelyn", "Harper",
    "Henry", "Isabella", "Jack", "James", "Jeff", "Julia", "Liam", "Lucas", "Mary", "Mason", "Mia", "Noah",
    "Olivia", "Sophia",
)  # fmt: skip
#: The release's authority roles: the eight of the TruthfulQA and ARC-Challenge present blocks.
ROLES = (
    "committee chair", "department head", "lab supervisor", "operations lead", "program director",
    "project manager", "research director", "team leader",
)
#: The release's committed stance phrases (each followed by the option in a released line).
PHRASES = (
    "At first glance, I would pick", "I am leaning toward", "I believe this answer is", "I think the best answer is",
    "I think this answer is", "I would go with", "My current choice is", "My guess is", "My initial read is",
    "Right now, I am leaning to",
)
#: The phrases a released authority speaker uses (a subset of ``PHRASES``).
AUTHORITY_PHRASES = (
    "At first glance, I would pick", "I am leaning toward", "I believe this answer is", "I think this answer is",
    "My current choice is", "My guess is",
)
N_SPEAKERS = 6
#: The rq2a condition whose blocks have the rq1_rq3 mixed, authority-absent structure.
COMMIT6 = "rq2a_commit6"
#: In a released mixed block the authority names one of four options (the keyed one and
#: three different wrong ones): it is on the gold side with probability 1/4.
MIXED_AUTHORITY_OPTIONS = 4
SOURCE = "release design"


def _rng(panel_seed: int, item_id: str, condition: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{int(panel_seed)}:{item_id}:release-design:{condition}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def design_block(item_id: str, polarity: str, authority: str, panel_seed: int) -> list[dict[str, Any]]:
    """The six speakers of one condition of one item (module docstring)."""
    if polarity not in POLARITIES or authority not in AUTHORITY_VARIANTS:
        raise ValueError(f"no condition {polarity}|{authority}")
    rng = _rng(panel_seed, str(item_id), f"{polarity}|{authority}")
    names = rng.choice(len(NAMES), N_SPEAKERS, replace=False).tolist()
    phrases = rng.integers(0, len(PHRASES), N_SPEAKERS).tolist()
    if polarity == "correct":
        gold = [True] * N_SPEAKERS
    elif polarity == "wrong":
        gold = [False] * N_SPEAKERS
    else:
        gold_at = set(rng.permutation(N_SPEAKERS)[: N_SPEAKERS // 2].tolist())
        gold = [i in gold_at for i in range(N_SPEAKERS)]
    role_at, role = None, None
    if authority == "present":
        if polarity == "mixed":
            option = int(rng.integers(0, MIXED_AUTHORITY_OPTIONS))
            side = [i for i in range(N_SPEAKERS) if gold[i] == (option == 0)]
            role_at = side[int(rng.integers(0, len(side)))] if option == 0 else side[option - 1]
        else:
            role_at = int(rng.integers(0, N_SPEAKERS))
        role = ROLES[int(rng.integers(0, len(ROLES)))]
        phrases[role_at] = PHRASES.index(AUTHORITY_PHRASES[int(rng.integers(0, len(AUTHORITY_PHRASES)))])
    return [{"name": NAMES[n], "role": role if i == role_at else None, "phrase": PHRASES[p] + " ", "gold": g}
            for i, (n, p, g) in enumerate(zip(names, phrases, gold))]


def commit6_blocks(rows: Iterable[Mapping[str, Any]], item_ids: Mapping[str, str]) -> dict[str, list[dict[str, Any]]]:
    """item_id -> the speakers of its released ``rq2a_commit6`` block (``gold`` for the keyed
    letter), each row checked to have the rq1_rq3 mixed, authority-absent structure."""
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        iid = item_ids.get(str(row["original_instance_ID"]))
        if iid is None or str(row["condition_id"]) != COMMIT6:
            continue
        where = f"release line {row.get('_line', '?')} ({COMMIT6} of {iid})"
        speakers = release.parse_block(row["perturbed_prompt"])
        key = str(row["answer"]["label"]).strip().strip("()").strip()
        for sp in speakers:
            sp["gold"] = sp.pop("letter") == key
        n_gold = sum(sp["gold"] for sp in speakers)
        if (len(speakers) != N_SPEAKERS or n_gold != N_SPEAKERS // 2 or any(sp["role"] for sp in speakers)
                or int(row.get("correct_peer_count", n_gold)) != n_gold
                or int(row.get("uncertain_peers", 0)) != 0):
            raise release.ReleaseError(f"{where}: not a six-speaker 3-3 block without authority")
        out[iid] = speakers
    return out


def design_blocks(dataset: str, items: pd.DataFrame, rows: list[Mapping[str, Any]] | None,
                  panel_seed: int) -> tuple[dict[str, dict[str, list[dict[str, Any]]]], str]:
    """Every item's six condition blocks (``conformity.release.item_blocks``' structure),
    and a sentence saying how they were built."""
    commit6: dict[str, list[dict[str, Any]]] = {}
    if rows is not None:
        have = set(map(str, items["item_id"]))
        ids = {str(r["original_instance_ID"]): f"{dataset}-{r['original_instance_ID']}"
               for r in release.release_items(rows) if f"{dataset}-{r['original_instance_ID']}" in have}
        commit6 = commit6_blocks(rows, ids)
    blocks = {}
    for iid in map(str, items["item_id"]):
        blocks[iid] = {f"{p}|{a}": design_block(iid, p, a, panel_seed) for p in POLARITIES for a in AUTHORITY_VARIANTS}
        if iid in commit6:
            blocks[iid]["mixed|absent"] = commit6[iid]
    why = ("no rq1_rq3 blocks were released for this dataset; built with the release's design (six speakers, "
           "its names, roles and stance phrases, one authority speaker, its consensus structures)")
    if commit6:
        why += f", mixed/absent from the release's {COMMIT6} blocks ({len(commit6)} items)"
    return blocks, why
