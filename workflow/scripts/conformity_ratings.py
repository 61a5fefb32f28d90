"""Collect the judge responses of one dataset into its ratings table."""

import pandas as pd

from context_effects.conformity.injection import flags_by_answer
from context_effects.conformity.judging import check_d, ratings_frame
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
ratings = ratings_frame(
    list(snakemake.input.responses),
    snakemake.params.hosted_judges,
    request_paths=list(snakemake.input.requests),
    injection_flags=flags_by_answer(pd.read_parquet(snakemake.input.injection)),
    dataset=snakemake.wildcards.dataset,
)
check_d(ratings)
ratings.to_parquet(snakemake.output[0], index=False)
missing = ratings["status"] == "missing"
log.info("%d ratings, %d missing (%.1f%%) -> %s", len(ratings), missing.sum(), 100 * missing.mean(), snakemake.output[0])
for (judge, reason), n in ratings[missing].groupby(["judge", "error"]).size().items():
    log.info("missing: judge=%s reason=%s n=%d", judge, reason, n)
log.info("%d ratings of answers flagged as addressing the judge", int(ratings["injection_flag"].sum()))
