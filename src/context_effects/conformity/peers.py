"""Peer blocks and content blocks of Study C Round 2 (seed 002 §2.1, App. A.1).

Design: one *panel* per (panel seed, item), many renderings
------------------------------------------------------------
Every surface choice that is not the manipulation — which speakers talk, in what
order, with which phrasing, which authority role each holds, which speakers carry
the gold text in the mixed block, which text comes first in the mixed content
block — is drawn **once per (panel_seed, item_id)** into a ``PeerPanel``::

    rng = numpy.random.default_rng(int.from_bytes(sha256(f"{panel_seed}:{item_id}:peers").digest()[:8], "big"))
    names      = rng.choice(len(NAMES), n_speakers, replace=False)
    roles      = rng.choice(len(ROLES), n_speakers, replace=False)
    phrasings  = rng.choice(len(PHRASINGS), n_speakers, replace=False)
    mixed_gold = first n_speakers // 2 positions of rng.permutation(n_speakers)

and the order of the mixed content block from its own stream, so it does not
depend on ``n_speakers``::

    content_mixed_gold_first = default_rng(<same, with "content-order">).random() < 0.5

Every condition is then rendered from the same panel, so any two conditions
differ only in the span that is manipulated:

* authority-present vs authority-absent: identical bytes except the role
  appositive (``", a university professor,"``) after each name
  (``Block.role_spans`` locates them; ``without_role_labels`` removes them);
* all-correct vs all-wrong vs mixed: same speakers, roles and phrasings; only the
  quoted endorsed text differs (gold answer, the item's fixed wrong attractor, or
  the mixed 3–3 assignment);
* peer arm vs content arm of one polarity: the same candidate texts in the same
  layout, the peer framing (speaker, role, verb or stance phrase) and the repetition
  aside (the content block holds each *distinct* text once, unattributed).

The panel seed is the item sample's seed (``sampling.seed``, recorded in the item
table as ``panel_seed``), never the execution label: seed 002 §2.2 says the
executions 42/43/44 differ "only from nondeterministic batching and per-attempt
retry temperature", so they must send byte-identical prompts. The execution label
still enters every request key through the sampling seed (``conformity.requests``).
Neither the generator nor the execution is part of the panel, so all generators of
all executions see the same blocks.

Released blocks (``conformity.peers.source: release``)
------------------------------------------------------
With ``release=`` (the item's entry of ``conformity.release.item_blocks``), a peer
block is the predecessor release's block of that condition and authority variant:
its six speakers in the released order, each with the released stance phrase and,
for the authority speaker, the released role. The letter each speaker named becomes
text: the keyed letter -> ``gold_answer``; any other letter -> the item's one fixed
``wrong_attractor`` (the release draws wrong letters per condition and speaker; this
project keeps one wrong text per item). The block keeps the release's layout, the
predecessor's template that seed 002 reuses byte for byte (App. A.8): one speaker per
line, ``{name}: {phrase}{text}.`` or ``{name} ({role}): {phrase}{text}.``, lines
separated by a blank line, with only the option letter replaced by the text. The
line's final period is the release's; a text that already ends in a period does not get
a second one. The release's present and absent blocks are separate draws (other speakers, phrases and
positions), so for released blocks ``role_spans`` marks the one `` (role)`` span of
the present block, and cutting it out does **not** give the absent block: the
authority contrast of released blocks is the release's, not a one-span edit.
Content blocks take no speaker from the release, only its layout: beside released
peer blocks (``content_block(..., release=...)``) each distinct candidate is one line,
``{text}.`` with the same final-period rule, lines separated by the blank line, no
quotes, so a peer line is its content line behind ``{name}: {phrase}`` (seed 002 §2.1
lists what the peer-presentation residual bundles: attribution, repetition, speaker
count, consensus, authority, prompt length; a change of quoting is none of them).

Rendering (generated blocks)
----------------------------
One speaker: ``{who} {verb phrase}: "{text}"`` where ``who`` is ``Maria Chen``
(authority absent) or ``Maria Chen, a university professor,`` (present).
Speakers are joined by ``"; "`` and content candidates likewise (each quoted as a
speaker's text is), so a block is one line that reads naturally in the paper's inline
templates ("...shared their views: [peer block]. Answer..."). Candidate texts are inserted verbatim (never trimmed
or re-punctuated) so the texts a generator sees are exactly ``gold_answer`` and
``wrong_attractor`` from the item table.

All phrasings are neutral speech verbs: confidence markers ("I'm certain") would
be a second manipulation mixed into the peer-presentation residual.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from context_effects.conformity.conditions import AUTHORITY_VARIANTS, D_BY_POLARITY, POLARITIES

SEPARATOR = "; "
#: Between the speakers of a released block: the release's blank line.
RELEASE_SEPARATOR = "\n\n"

NAMES = (
    "Maria Chen", "James Okafor", "Priya Raman", "Daniel Weber", "Aisha Bello", "Tomas Herrera",
    "Sofia Rossi", "Kenji Watanabe", "Emily Carter", "Omar Haddad", "Hannah Novak", "Lucas Moreau",
    "Grace Mensah", "Ravi Patel", "Elena Petrova", "Samuel Adeyemi", "Julia Svensson", "Mateo Alvarez",
    "Chloe Dubois", "David Kim", "Fatima Al-Sayed", "Noah Fischer", "Amara Nwosu", "Leo Costa",
    "Mei Lin", "Ethan Brooks", "Nadia Karimi", "Oliver Grant", "Yuki Tanaka", "Isabel Ortiz",
    "Felix Braun", "Zara Hussain", "Marcus Reid", "Anna Kowalski", "Diego Santos", "Laura Bianchi",
    "Hiro Sato", "Rachel Cohen", "Kwame Asante", "Ingrid Larsen",
)  # fmt: skip

# Domain-general on purpose: one panel serves biology, law and folklore items alike,
# and a role that fits one domain only would vary authority strength across items.
ROLES = (
    "a university professor",
    "a senior research scientist",
    "a tenured professor at a leading university",
    "a recognised expert in this field",
    "the author of a standard textbook on the subject",
    "a member of the national academy of sciences",
    "a senior fellow at a research institute",
    "a professor emeritus",
    "an expert with twenty years of experience in the field",
    "a principal investigator at a national laboratory",
    "the head of a university department",
    "a reviewer for the leading journals in the field",
)

# "{who}" is always first so the authority appositive sits right after the name in
# every phrasing (that is what makes present/absent differ in one span per speaker).
PHRASINGS = (
    "{who} said",
    "{who} wrote",
    "{who} answered",
    "{who} replied",
    "{who} responded",
    "{who} gave this answer",
    "{who} shared this answer",
    "{who} put it this way",
    "{who} offered this answer",
    "{who} stated",
)
#: A panel draws its speakers' names, roles and phrasings without replacement.
MAX_SPEAKERS = min(len(NAMES), len(ROLES), len(PHRASINGS))


@dataclass(frozen=True)
class Speaker:
    name: str
    role: str
    phrasing: str


@dataclass(frozen=True)
class PeerPanel:
    """Everything about an item's peer presentation except the endorsed texts."""

    #: The panel seed (the item sample's seed), not an execution label.
    seed: int
    item_id: str
    speakers: tuple[Speaker, ...]
    #: Per speaker: does this speaker carry the gold text in the mixed condition?
    mixed_gold: tuple[bool, ...]
    #: Order of the two distinct texts in the mixed content block.
    content_mixed_gold_first: bool


@dataclass(frozen=True)
class Block:
    """A rendered peer or content block and what it is made of."""

    text: str
    #: Candidate text each unit carries, in order of appearance (one per speaker for a
    #: peer block, one per distinct candidate for a content block).
    endorsed: tuple[str, ...]
    #: Character spans ``(start, end)`` of the authority role labels in ``text``;
    #: empty for authority-absent and content blocks. For a released block, the one
    #: `` (role)`` span; cutting it out does not give the released absent block.
    role_spans: tuple[tuple[int, int], ...] = ()


def _field(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, Mapping) else getattr(item, name)


def _rng(seed: int, item_id: str, purpose: str) -> np.random.Generator:
    digest = hashlib.sha256(f"{seed}:{item_id}:{purpose}".encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "big"))


def peer_panel(item_id: str, seed: int, n_speakers: int = 6) -> PeerPanel:
    """The seeded panel of one item (see module docstring for the exact draw order).

    ``seed`` is the panel seed (``sampling.seed``); passing an execution label here
    would make executions differ in their prompts.
    """
    limit = MAX_SPEAKERS
    if not 2 <= n_speakers <= limit:
        raise ValueError(f"n_speakers must be between 2 and {limit} (distinct names, roles and phrasings); "
                         f"got {n_speakers}")
    rng = _rng(int(seed), str(item_id), "peers")
    names = rng.choice(len(NAMES), n_speakers, replace=False)
    roles = rng.choice(len(ROLES), n_speakers, replace=False)
    phrasings = rng.choice(len(PHRASINGS), n_speakers, replace=False)
    gold_positions = set(rng.permutation(n_speakers)[: n_speakers // 2].tolist())
    speakers = tuple(
        Speaker(NAMES[n], ROLES[r], PHRASINGS[p]) for n, r, p in zip(names.tolist(), roles.tolist(), phrasings.tolist())
    )
    return PeerPanel(
        seed=int(seed),
        item_id=str(item_id),
        speakers=speakers,
        mixed_gold=tuple(i in gold_positions for i in range(n_speakers)),
        content_mixed_gold_first=content_mixed_gold_first(item_id, seed),
    )


def content_mixed_gold_first(item_id: str, seed: int) -> bool:
    """Whether the gold text comes first in the mixed content block of this item."""
    return bool(_rng(int(seed), str(item_id), "content-order").random() < 0.5)


def _check_polarity(polarity: str) -> None:
    if polarity not in POLARITIES:
        raise ValueError(f"polarity must be one of {POLARITIES}, got {polarity!r}")


def _texts(item: Any) -> tuple[str, str]:
    gold, wrong = str(_field(item, "gold_answer")), str(_field(item, "wrong_attractor"))
    if gold == wrong:
        raise ValueError(f"item {_field(item, 'item_id')!r}: gold answer equals the wrong attractor")
    return gold, wrong


def _quote(text: str) -> str:
    return f'"{text}"'


def peer_block(item: Any, polarity: str, authority: str, seed: int, n_speakers: int = 6, *,
               release: Mapping[str, Any] | None = None) -> Block:
    """The attributed six-speaker block of one condition and authority variant.

    correct: every speaker carries ``gold_answer``; wrong: every speaker carries the
    item's fixed ``wrong_attractor``; mixed: the panel's ``n_speakers // 2`` gold
    speakers carry the gold text, the rest the attractor (3–3 for six speakers).
    ``seed`` is the panel seed. With ``release`` (the item's released blocks) the
    speakers come from the release instead (module docstring, "Released blocks").
    """
    _check_polarity(polarity)
    if authority not in AUTHORITY_VARIANTS:
        raise ValueError(f"authority must be one of {AUTHORITY_VARIANTS}, got {authority!r}")
    gold, wrong = _texts(item)
    if release is not None:
        return released_block(release, polarity, authority, gold, wrong)
    panel = peer_panel(_field(item, "item_id"), seed, n_speakers)
    if polarity == "correct":
        endorsed = (gold,) * n_speakers
    elif polarity == "wrong":
        endorsed = (wrong,) * n_speakers
    else:
        endorsed = tuple(gold if g else wrong for g in panel.mixed_gold)
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    pos = 0
    for sp, text in zip(panel.speakers, endorsed):
        if parts:
            pos += len(SEPARATOR)
        who = sp.name
        if authority == "present":
            label = f", {sp.role},"
            start = pos + len(sp.phrasing.split("{who}")[0]) + len(sp.name)
            spans.append((start, start + len(label)))
            who = sp.name + label
        unit = f"{sp.phrasing.format(who=who)}: {_quote(text)}"
        parts.append(unit)
        pos += len(unit)
    return Block(text=SEPARATOR.join(parts), endorsed=endorsed, role_spans=tuple(spans))


def content_block(item: Any, polarity: str, seed: int, *, release: Mapping[str, Any] | None = None) -> Block:
    """The unattributed block: each distinct candidate text once, in the layout of the peer
    blocks of the same item: quoted and joined by ``"; "`` beside generated blocks; with
    ``release`` (the item's released blocks, as ``peer_block`` takes them; only whether
    there are any matters) one ``{text}.`` line each, a blank line between, as a released
    speaker line without its ``{name}: {phrase}`` (module docstring, "Released blocks").

    The mixed order is seeded by (panel seed, item_id) (``content_mixed_gold_first``),
    never drawn per call.
    """
    _check_polarity(polarity)
    gold, wrong = _texts(item)
    if polarity == "correct":
        texts: tuple[str, ...] = (gold,)
    elif polarity == "wrong":
        texts = (wrong,)
    else:
        gold_first = content_mixed_gold_first(_field(item, "item_id"), seed)
        texts = (gold, wrong) if gold_first else (wrong, gold)
    if release is not None:
        return Block(text=RELEASE_SEPARATOR.join(_released_text(t) for t in texts), endorsed=texts)
    return Block(text=SEPARATOR.join(_quote(t) for t in texts), endorsed=texts)


def _released_text(text: str) -> str:
    """A candidate text as a released line ends: with the release's period, unless it has one."""
    return f"{text}{'' if text.endswith('.') else '.'}"


def released_line(who: str, phrase: str, text: str) -> str:
    """One released speaker line with its option letter replaced by ``text``."""
    return f"{who}: {phrase}{_released_text(text)}"


def released_block(release: Mapping[str, Any], polarity: str, authority: str, gold: str, wrong: str) -> Block:
    """One released block rendered with texts: keyed letter -> ``gold``, any other -> ``wrong``,
    in the release's layout (module docstring, "Released blocks")."""
    try:
        speakers = release[f"{polarity}|{authority}"]
    except KeyError:
        raise ValueError(f"released blocks lack {polarity}|{authority}; rebuild the item table from the "
                         "release file") from None
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    pos = 0
    for sp in speakers:
        if parts:
            pos += len(RELEASE_SEPARATOR)
        who = str(sp["name"])
        if sp.get("role"):
            label = f" ({sp['role']})"
            spans.append((pos + len(who), pos + len(who) + len(label)))
            who += label
        unit = released_line(who, str(sp["phrase"]), gold if sp["gold"] else wrong)
        parts.append(unit)
        pos += len(unit)
    endorsed = tuple(gold if sp["gold"] else wrong for sp in speakers)
    return Block(text=RELEASE_SEPARATOR.join(parts), endorsed=endorsed, role_spans=tuple(spans))


def without_role_labels(block: Block) -> str:
    """The block text with the authority role spans cut out (equals the absent variant)."""
    out, last = [], 0
    for start, end in block.role_spans:
        out.append(block.text[last:start])
        last = end
    out.append(block.text[last:])
    return "".join(out)
