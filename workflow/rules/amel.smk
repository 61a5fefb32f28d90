# Rules of amel; see the matching common_*.smk for their functions.
