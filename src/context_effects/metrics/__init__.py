"""Study C external validation, text metrics and descriptive tables (seed 002 App. E,
F.1, F.2; Tables 6-8, 13-16, 18, 19).

Modules
-------
``resources``    offline NLTK data: Debian's WordNet 3.0 (METEOR) and the CMU
                 pronouncing dictionary (textstat's syllable counts) in one folder.
``lexical``      ROUGE-L (rouge-score), METEOR (NLTK), sentence/corpus BLEU (sacreBLEU).
``readability``  Flesch reading ease, Flesch-Kincaid grade, Gunning fog (textstat).
``semantic``     SBERT cosine similarity (sentence-transformers), BERTScore (bert-score).
``classifiers``  NLI entailment / false endorsement and the TruthfulQA truth/info judges
                 (transformers), loaded by name; tests run them on tiny local models.
``answers``      which answers are scored and the pass-through columns of every row.
``summaries``    per-cell tables (13, 14, 16, 18), convergent validity (15) and the
                 difficulty terciles with the question-level bootstrap (19).
``budget``       models (6), compute budget from Snakemake benchmark files (7) and
                 packages/checkpoints/settings (8).
"""
