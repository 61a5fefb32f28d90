"""Study A: accumulated message effects on LLM judgments (AMEL, seed 000; docs/architecture.md,
"The three studies"; the choices that fill the paper's gaps are listed in docs/deviations.yaml).

The same binary (Yes/No) judgment item is asked right after the system prompt
(baseline) or after k prior turns of other items of the same domain whose
assistant verdicts were constructed, not generated: predominantly "Yes"
(yes-saturated) or "No" (no-saturated). The seed paper's code is not public;
the design choices that fill its gaps are stated where they are made:

* ``items``: one item schema for every domain; answer-verification items from
  the benchmarks (a question with a proposed answer, right or wrong) and item
  files for other domains (code review ships with the project); which items
  are tested and in which order the others fill histories.
* ``design``: the cells (baseline, saturated and balanced histories of length
  k, position runs, framing swap), the constructed verdict sequences and the chat messages.
  Everything but the manipulated assistant turns is byte-identical across
  cells of one item.
* ``requests``: one request shard per model (every domain), ordered so that
  requests sharing a history prefix are adjacent (prefix-cache reuse): repeated
  samples for every model (the primary measurement) and first-token probe
  probabilities where the model's capabilities give logprobs (the secondary one).
* ``scores``: P(Yes) per cell, bias scores, baseline entropy.
* ``stats`` / ``analysis`` / ``plots``: the estimands of the paper, one table
  and one figure each; ``outputs`` registers them (captions, inputs, settings).
* ``dag``: the paths, targets and per-rule settings of workflow/rules/amel.smk.
"""
