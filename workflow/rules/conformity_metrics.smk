# Rules of conformity_metrics; see the matching common_*.smk for their functions.
