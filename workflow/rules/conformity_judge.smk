# Rules of conformity_judge; see the matching common_*.smk for their functions.
