"""Collect the judge responses of one dataset into its ratings table."""

from context_effects.conformity.judging import check_d, ratings_frame
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
ratings = ratings_frame(list(snakemake.input.responses), snakemake.params.hosted_judges)
check_d(ratings)
ratings.to_parquet(snakemake.output[0], index=False)
missing = ratings["status"] == "missing"
log.info("%d ratings, %d missing (%.1f%%) -> %s", len(ratings), missing.sum(), 100 * missing.mean(), snakemake.output[0])
for (judge, reason), n in ratings[missing].groupby(["judge", "error"]).size().items():
    log.info("missing: judge=%s reason=%s n=%d", judge, reason, n)
