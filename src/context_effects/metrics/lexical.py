"""Reference-based lexical metrics of one answer against the gold answer (seed 002
App. E.1, Table 13; settings of Table 8).

* ROUGE-L recall, precision and F1: ``rouge_score.rouge_scorer.RougeScorer(["rougeL"],
  use_stemmer=True)`` (Porter stemming), the gold answer as the target.
* METEOR: ``nltk.translate.meteor_score.meteor_score`` with α, β, γ from config
  (paper: 0.9, 3, 0.5), WordNet synonyms from the offline reader
  (``resources.wordnet_reader``), on NLTK tokens.
* BLEU (0-100): sentence BLEU with exponential smoothing
  (``sacrebleu.sentence_bleu(..., smooth_method="exp")``) per answer, and corpus
  BLEU (``sacrebleu.corpus_bleu``, also exponential smoothing) per table cell.

Tokenisation for METEOR is NLTK's ``word_tokenize`` algorithm (sentences split by
Punkt, then ``NLTKWordTokenizer``) with an *untrained* Punkt model: the trained
English one is a download (``punkt_tab``). Untrained Punkt splits at sentence-final
punctuation like the trained one but knows no abbreviation list, so "Dr. Smith"
may split into two sentences; only where the final period of a sentence sticks to
its word does that change a token.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import sacrebleu
from nltk.stem.porter import PorterStemmer
from nltk.tokenize import NLTKWordTokenizer
from nltk.tokenize.punkt import PunktSentenceTokenizer
from nltk.translate.meteor_score import meteor_score
from rouge_score import rouge_scorer

LEXICAL_COLUMNS = ("rougeL_recall", "rougeL_precision", "rougeL_f1", "meteor", "bleu")


@lru_cache(maxsize=1)
def _tokenizers():
    return PunktSentenceTokenizer(), NLTKWordTokenizer()


def tokenize(text: str) -> list[str]:
    sentences, words = _tokenizers()
    return [tok for sent in sentences.tokenize(text) for tok in words.tokenize(sent)]


class LexicalScorer:
    """Scores (answer, gold) pairs; holds the WordNet reader and the stemmers."""

    def __init__(self, wordnet, alpha: float = 0.9, beta: float = 3.0, gamma: float = 0.5):
        self.wordnet = wordnet
        self.alpha, self.beta, self.gamma = float(alpha), float(beta), float(gamma)
        self._rouge = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
        self._stemmer = PorterStemmer()

    def rouge_l(self, answer: str, gold: str) -> tuple[float, float, float]:
        s = self._rouge.score(target=gold, prediction=answer)["rougeL"]
        return s.recall, s.precision, s.fmeasure

    def meteor(self, answer: str, gold: str) -> float:
        hyp, ref = tokenize(answer), tokenize(gold)
        if not hyp or not ref:
            return 0.0
        return float(
            meteor_score(
                [ref], hyp, stemmer=self._stemmer, wordnet=self.wordnet,
                alpha=self.alpha, beta=self.beta, gamma=self.gamma,
            )
        )

    @staticmethod
    def sentence_bleu(answer: str, gold: str) -> float:
        return float(sacrebleu.sentence_bleu(answer, [gold], smooth_method="exp").score)

    def score(self, answer: str, gold: str) -> dict[str, float]:
        recall, precision, f1 = self.rouge_l(answer, gold)
        return {
            "rougeL_recall": recall,
            "rougeL_precision": precision,
            "rougeL_f1": f1,
            "meteor": self.meteor(answer, gold),
            "bleu": self.sentence_bleu(answer, gold),
        }


def corpus_bleu(answers: Sequence[str], golds: Sequence[str]) -> float:
    """Corpus BLEU (0-100) of a cell: n-gram statistics pooled over its answers."""
    if len(answers) != len(golds):
        raise ValueError(f"{len(answers)} answers but {len(golds)} references")
    if not answers:
        return float("nan")
    return float(sacrebleu.corpus_bleu(list(answers), [list(golds)], smooth_method="exp").score)
