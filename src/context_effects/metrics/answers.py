"""The answers every metric scores, and the pass-through columns of every metric row.

Every answer with a non-empty text is scored (main and decomposition corpora, Round 1
and Round 2, anchors), so any table can be cut by cell; the tables choose their rows
(Table 13 etc.: main corpus, Round 2 arms). Each metric row carries
``PASS_THROUGH`` (dataset, corpus, seed, generator, item, condition, authority and the
anchor flag) so it never needs a join back to the answers to be sliced.
"""

from __future__ import annotations

import pandas as pd

from context_effects.conformity.conditions import ANCHOR_CONDITIONS, DATASET_LABELS  # noqa: F401 (re-exported)

PASS_THROUGH = (
    "answer_id", "dataset", "corpus", "seed", "generator", "item_id", "condition", "authority", "is_anchor",
)
#: Round 2 arms of Tables 13, 14, 16, 18 in the paper's order, with their labels.
TABLE_CONDITIONS = {
    "no_peer": "No-Peer",
    "peer_correct": "All-Correct",
    "peer_mixed": "Mixed",
    "peer_wrong": "All-Wrong",
}
#: The block an answer shown no block is compared with (``scoring_frame``).
EMPTY_BLOCK = ""


def _text(v) -> str | None:
    return v if isinstance(v, str) and v.strip() else None


def scoring_frame(answers: pd.DataFrame, items: pd.DataFrame) -> pd.DataFrame:
    """Answers with text, joined to their item's question, gold answer and wrong attractor.

    ``shown_block`` is what the generator saw besides the question: the peer block for
    peer arms, the content block for content-only arms, and the empty block ``""`` for
    answers shown none (Round 1, no-peer); anchors, which no generator wrote, get None.

    The empty block is what seed 002's Table 14 compares no-peer answers with: its No-Peer
    sim_peer cells are -0.005, 0.009 and -0.019, the cosine of an answer with an empty
    text, while an item's own peer block scores far from zero
    (docs/deviations.yaml#similarity-to-shown-block).
    """
    need = {"answer_id", "dataset", "item_id", "condition", "text"}
    if missing := need - set(answers.columns):
        raise ValueError(f"answers table lacks columns {sorted(missing)} (see conformity.requests.ANSWER_COLUMNS)")
    if missing := {"item_id", "question", "gold_answer", "wrong_attractor"} - set(items.columns):
        raise ValueError(f"items table lacks columns {sorted(missing)}")
    df = answers.copy()
    for col in ("corpus", "seed", "generator", "authority", "peer_block", "content_block"):
        if col not in df:
            df[col] = None
    df["text"] = df["text"].map(_text)
    df = df[df["text"].notna()].copy()
    item_cols = items.set_index("item_id")[["gold_answer", "wrong_attractor"]]
    unknown = set(df["item_id"]) - set(item_cols.index)
    if unknown:
        raise ValueError(f"answers refer to items missing from the items table: {sorted(unknown)[:5]}")
    df = df.join(item_cols, on="item_id")
    if "question" not in df:
        df = df.join(items.set_index("item_id")["question"], on="item_id")
    df["is_anchor"] = df["condition"].isin(ANCHOR_CONDITIONS)
    df["shown_block"] = [
        None if anchor else (_text(p) or _text(c) or EMPTY_BLOCK)
        for p, c, anchor in zip(df["peer_block"], df["content_block"], df["is_anchor"])
    ]
    return df.reset_index(drop=True)


def pass_through(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[list(PASS_THROUGH)].copy()
