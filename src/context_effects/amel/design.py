"""AMEL cells, constructed verdict sequences and chat messages.

A *cell* is one way of asking a test item: its framing, its history condition
(baseline, yes_saturated, no_saturated), the history length ``k``, and for
position runs where the biased turns sit. Per test item and model the design is:

* baseline (standard framing): the item right after the system prompt;
* saturated histories, for each k in ``history_lengths`` and each polarity:
  ``round(saturation_share * k)`` turns carry the prevailing verdict, the others
  the opposite one, at seeded positions shared by both polarities (so yes- and
  no-saturated histories are mirror images);
* every history is drawn per test item: its items (a seeded order of the items
  outside the test item's group, the first k of it) and its verdict positions are
  seeded by the item, so two test items see different histories and the intervals
  carry history-to-history variance, while one item's cells stay comparable (its
  histories of every k start alike; its polarities mirror each other);
* position runs: ``position_biased_turns`` consecutive turns carrying the
  polarity, inserted at the start, middle or end of one seeded, balanced
  sequence of the other turns (half Yes, half No; the odd one out is "No"),
  ``position_history_length`` turns in all;
* balanced histories, for each k in ``balanced_history_lengths``: k turns of one
  seeded sequence, half Yes and half No (the odd one out is "No"), with the
  history items of the saturated cells of that k. The seed's mitigation
  ("balancing the history helps") is read as: the shift of P(Yes) after a
  balanced history is smaller than the bias after a saturated one;
* framing swap: every turn asks the question with Yes and No trading meanings
  (``question_swapped``), for the baseline and both polarities at each k in
  ``framing_history_lengths`` (their standard-framing counterparts are in the
  design too). The history verdict *tokens* stay those of the polarity, so a
  yes-saturated history in the swapped framing says "Yes" and means "incorrect":
  this separates a token-level from a semantic asymmetry.

Only the assistant verdicts are manipulated. For one test item, all cells with
the same k and framing share the same history items, the same user turns and
the same system prompt byte for byte; baseline and treatment share the system
prompt and the final user turn. Verdicts in the history are constructed, not
generated, and independent of the items' correct answers (a yes-saturated
history says "Yes" whether or not the proposed answer was right).

Messages are real multi-turn chat messages (system, then user/assistant pairs,
then the test item as the last user turn); each backend renders them with the
model's own chat template. Base models (``mode: completion``) get the same
turns as one plain-text transcript.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd

from context_effects.amel.items import seeded_rng

SYSTEM_PROMPT = (
    "You are a careful evaluator. You will be shown items one at a time. "
    "Answer each question with a single word: Yes or No."
)
ANSWER_INSTRUCTION = "Answer Yes or No."
CONDITIONS = ("baseline", "yes_saturated", "no_saturated", "balanced")
SATURATED = ("yes_saturated", "no_saturated")
POSITIONS = ("start", "middle", "end")
#: How P(Yes) of a cell is measured, in the tables' order: the primary analysis first.
METHOD_ORDER = ("single_call", "samples", "first_token")
PRIMARY = METHOD_ORDER[0]
FRAMINGS = ("standard", "swapped")
POLARITY_TOKEN = {"yes_saturated": "Yes", "no_saturated": "No"}


@dataclass(frozen=True, order=True)
class Cell:
    framing: str
    condition: str
    k: int = 0
    position: str | None = None
    n_biased: int = 0

    @property
    def label(self) -> str:
        """Stable, file-safe name of the cell."""
        if self.condition == "baseline":
            return f"{self.framing}:baseline"
        tail = f":{self.position}{self.n_biased}" if self.position else ""
        return f"{self.framing}:{self.condition}:k{self.k}{tail}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def design_cells(amel_cfg: Mapping[str, Any]) -> list[Cell]:
    """Every cell asked of each test item (see module docstring), sorted."""
    share = float(amel_cfg["saturation_share"])
    cells = {Cell("standard", "baseline")}

    def saturated(framing: str, k: int) -> None:
        for cond in SATURATED:
            cells.add(Cell(framing, cond, int(k), None, n_prevailing(k, share)))

    for k in amel_cfg["history_lengths"]:
        saturated("standard", k)
    for k in amel_cfg.get("balanced_history_lengths", ()):
        cells.add(Cell("standard", "balanced", int(k)))
    if amel_cfg["positions"]:
        hl, nb = int(amel_cfg["position_history_length"]), int(amel_cfg["position_biased_turns"])
        if nb > hl:
            raise ValueError(
                f"`amel.position_biased_turns` = {nb} must not exceed `amel.position_history_length` = {hl} "
                f"(the biased turns sit inside that history): lower the one or raise the other"
            )
        for pos in amel_cfg["positions"]:
            for cond in SATURATED:
                cells.add(Cell("standard", cond, hl, pos, nb))
    if amel_cfg["framing_swap"]:
        cells.add(Cell("swapped", "baseline"))
        for k in amel_cfg["framing_history_lengths"]:
            saturated("standard", k)
            saturated("swapped", k)
    return sorted(cells, key=lambda c: (c.framing, CONDITIONS.index(c.condition), c.k, c.position or "", c.n_biased))


def n_prevailing(k: int, share: float) -> int:
    """Turns carrying the prevailing verdict in a saturated history of length k (at least a majority)."""
    n = int(round(share * k))
    return max(n, k // 2 + 1) if k > 0 else 0


def verdicts(cell: Cell, *, seed: int, domain: str, item_id: str) -> list[str]:
    """The constructed assistant verdicts of the cell's history for one test item, turn by turn."""
    return list(_verdicts(cell, seed, domain, item_id))


@functools.lru_cache(maxsize=65536)
def _verdicts(cell: Cell, seed: int, domain: str, item_id: str) -> tuple[str, ...]:
    if cell.condition == "baseline":
        return ()
    k = cell.k
    if cell.condition == "balanced":
        return tuple(_balanced(k, "amel-balanced-history", seed, domain, item_id))
    token = POLARITY_TOKEN[cell.condition]
    other = "No" if token == "Yes" else "Yes"
    if cell.position is None:
        # Opposing turns at seeded positions that depend on the item and k only, so
        # the item's yes- and no-saturated histories of one k are exact mirror images.
        n_opp = k - cell.n_biased
        opp = set(seeded_rng("amel-opposing", seed, domain, item_id, k).permutation(k)[:n_opp].tolist())
        return tuple(other if i in opp else token for i in range(k))
    # Position run: the biased block inserted into one balanced seeded sequence of
    # the other k - b turns (the item's same sequence for every position and polarity).
    b = cell.n_biased
    rest = _position_rest(k, b, seed, domain, item_id)
    return _with_block(rest, b, token, cell.position)


def _with_block(rest: list[str], b: int, token: str, position: str) -> tuple[str, ...]:
    start = {"start": 0, "middle": len(rest) // 2, "end": len(rest)}[position]
    return tuple(rest[:start] + [token] * b + rest[start:])


@functools.lru_cache(maxsize=65536)
def _position_rest(k: int, b: int, seed: int, domain: str, item_id: str) -> list[str]:
    """The balanced k - b turns around a position run's block. Drawn again (seeded) while
    two positions would give the same history for either polarity (e.g. a block at the
    start and in the middle of "No No Yes ..." reads alike for "No"): such an item would
    be asked one prompt for two positions, and its position contrast would be void. A
    sequence too short to tell the positions apart is kept as drawn."""
    m = k - b
    for attempt in range(64):
        rest = _balanced(m, "amel-balanced", seed, domain, item_id, k, b, *([attempt] if attempt else []))
        if all(len({_with_block(rest, b, t, p) for p in POSITIONS}) == len(POSITIONS) for t in ("Yes", "No")):
            return rest
    return _balanced(m, "amel-balanced", seed, domain, item_id, k, b)


def _balanced(m: int, *tag: Any) -> list[str]:
    """m verdicts, half Yes and half No (the odd one out "No"), in an order seeded by ``tag``."""
    rest = ["Yes"] * (m // 2) + ["No"] * (m - m // 2)
    return [rest[i] for i in seeded_rng(*tag).permutation(m)]


def item_turn(content: str, question: str) -> str:
    """The user turn of one item: identical wherever the item appears."""
    return f"{content}\n\n{question} {ANSWER_INSTRUCTION}"


def question_of(row: Mapping[str, Any], framing: str) -> str:
    return row["question"] if framing == "standard" else row["question_swapped"]


def correct_verdict(answer: str, framing: str) -> str:
    """The correct verdict of an item in a framing (the swap trades the meanings of Yes and No)."""
    if framing == "standard":
        return answer
    return "No" if answer == "Yes" else "Yes"


class DomainItems:
    """One domain's item table, prepared for building many requests quickly.

    User turns are rendered once per item and framing, so the very same string
    object is reused wherever the item appears.
    """

    def __init__(self, items: pd.DataFrame) -> None:
        self.items = items.sort_values("pool_rank", kind="stable").reset_index(drop=True)
        self.rows = self.items.to_dict("records")
        self.index = {r["item_id"]: i for i, r in enumerate(self.rows)}
        self.domain = str(self.rows[0]["domain"]) if self.rows else ""
        self._turns = {
            framing: [item_turn(r["content"], question_of(r, framing)) for r in self.rows] for framing in FRAMINGS
        }
        self._eligible: dict[str, list[int]] = {}
        self._orders: dict[tuple[str, int], list[int]] = {}

    def row(self, item_id: str) -> dict[str, Any]:
        return self.rows[self.index[item_id]]

    def turn(self, position: int, framing: str) -> str:
        return self._turns[framing][position]

    def history(self, item_id: str, k: int, *, seed: int) -> tuple[list[int], int]:
        """Positions of the k history items of ``item_id``, and how many repeat an earlier one.

        The first k of a seeded order, drawn per test item, of the items outside its
        group, cycling through them again only when the domain is too small (see
        ``context_effects.amel.items``). One item's histories are nested (its k = 5
        history starts its k = 50 one); two items' histories differ.
        """
        order = self._orders.get((item_id, seed))
        if order is None:
            group = self.row(item_id)["group"]
            if group not in self._eligible:
                self._eligible[group] = [i for i, r in enumerate(self.rows) if r["group"] != group]
            eligible = self._eligible[group]
            if not eligible:
                raise ValueError(f"item {item_id!r}: no item outside its group to build a history from")
            perm = seeded_rng("amel-history", seed, self.domain, item_id).permutation(len(eligible))
            order = self._orders[(item_id, seed)] = [eligible[j] for j in perm]
        return [order[j % len(order)] for j in range(k)], max(0, k - len(order))


def build_messages(
    domain: DomainItems | pd.DataFrame, item_id: str, cell: Cell, *, seed: int
) -> tuple[tuple[tuple[str, str], ...], dict[str, Any]]:
    """The chat messages of one test item in one cell, and facts about its history."""
    if isinstance(domain, pd.DataFrame):
        domain = DomainItems(domain)
    msgs: list[tuple[str, str]] = [("system", SYSTEM_PROMPT)]
    repeats = 0
    if cell.condition != "baseline":
        picks, repeats = domain.history(item_id, cell.k, seed=seed)
        for pos, verdict in zip(picks, _verdicts(cell, seed, domain.domain, item_id)):
            msgs.append(("user", domain.turn(pos, cell.framing)))
            msgs.append(("assistant", verdict))
    msgs.append(("user", domain.turn(domain.index[item_id], cell.framing)))
    return tuple(msgs), {"history_repeats": repeats}


def as_transcript(messages: Sequence[tuple[str, str]]) -> str:
    """One plain-text prompt for a base model: the same turns, labelled, ending where the verdict goes."""
    parts = []
    for role, content in messages:
        if role == "system":
            parts.append(content)
        elif role == "user":
            parts.append(f"User: {content}")
        else:
            parts.append(f"Assistant: {content}")
    return "\n\n".join(parts) + "\n\nAssistant:"
