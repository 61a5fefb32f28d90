# Rules of anchoring; see the matching common_*.smk for their functions.
