"""Study H — the history-anchoring benchmark (seed 001, "Does Evaluation History Change an
AI Judge's Verdict?"; docs/architecture.md, "The three studies").

A fixed answer and a 5-point rubric are judged blind, with a history framing
("reviewed before"), or with an experimentally assigned prior score and verdict;
the scorer measures how far the judgment moves toward the displayed prior.

Modules, in pipeline order: ``tasks`` (stratified task draw, gold rule, prior design
independent of gold),
``prompts`` (fixed templates), ``requests`` (one model run as a request shard),
``judging`` (``{"score": n}`` reply validation), ``scoring`` (pull and secondary
metrics), ``results`` (result file per model run, tables, figure).
"""
