"""Pair each all-wrong revision of one dataset with its Round-1 answer (flip indicator, ratings)."""

import pandas as pd

from context_effects.conformity.descriptive import wrong_peer_revisions
from context_effects.datasets import read_items
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
revisions = wrong_peer_revisions(
    pd.read_parquet(snakemake.input.answers),
    pd.read_parquet(snakemake.input.ratings),
    read_items(snakemake.input.item_table),
    int(snakemake.params.primary_seed),
)
revisions.to_parquet(snakemake.output[0], index=False)
log.info("%d all-wrong revisions -> %s", len(revisions), snakemake.output[0])
