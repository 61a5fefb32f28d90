"""Study C — open-ended conformity (seed 002, The Evaluator Is Part of the Experiment;
docs/architecture.md, "The three studies").

``prompts``   the paper's generator and judge templates, verbatim, and their rendering;
``peers``     seeded peer panels, peer blocks and content blocks;
``requests``  LLM requests for Round 1, Round 2 (main and decomposition corpora),
              anchors and the blind / informed / anchor judge passes.

Submodules are imported explicitly (``from context_effects.conformity.requests
import ...``) so that importing the package stays cheap for the other stages.
"""
