"""The experimental conditions of Study C, named once for every module that uses them.

Generation, the synthetic model, the measurement model and the tables all index
answers by these names; keeping one definition means a renamed or added arm
cannot silently fall out of one of them.
"""

POLARITIES = ("correct", "wrong", "mixed")
AUTHORITY_VARIANTS = ("present", "absent")
#: Signed peer context d_i of the informed judge pass (seed 002 Eq. 8).
D_BY_POLARITY = {"correct": 1, "mixed": 0, "wrong": -1}

CONTENT_CONDITIONS = tuple(f"content_{p}" for p in POLARITIES)
PEER_CONDITIONS = tuple(f"peer_{p}" for p in POLARITIES)
ANCHOR_CONDITIONS = ("anchor_correct", "anchor_incorrect")
#: Round 2 arms, in the paper's order: regeneration, content-only, peer-presented.
ROUND2_CONDITIONS = ("no_peer", *CONTENT_CONDITIONS, *PEER_CONDITIONS)
#: Every answer an item can have.
CONDITIONS = ("round1", *ROUND2_CONDITIONS, *ANCHOR_CONDITIONS)
D_BY_CONDITION = {f"peer_{p}": d for p, d in D_BY_POLARITY.items()}

#: How every Study C table names a dataset (its config key -> the seed's name), so a
#: table row is selected the same way in every table (``Dataset=TruthfulQA``); the
#: pooled rows keep ``All``.
DATASET_LABELS = {"truthfulqa": "TruthfulQA", "mmlu_pro": "MMLU-Pro", "arc_challenge": "ARC-Challenge"}


def dataset_label(dataset: str) -> str:
    """A dataset's name in the tables (a key outside ``DATASET_LABELS``, such as ``All``, as it is)."""
    return DATASET_LABELS.get(dataset, dataset)
