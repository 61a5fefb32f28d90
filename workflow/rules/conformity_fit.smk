# Rules of conformity_fit; see the matching common_*.smk for their functions.
