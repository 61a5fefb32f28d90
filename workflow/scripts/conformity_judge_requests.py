"""Build one shard of Study C judge requests (seed 002 App. B)."""

from context_effects.conformity.judging import write_judge_shard
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
block = snakemake.params.block
tables = snakemake.params.tables
n = write_judge_shard(
    dict(tables["item_tables"]),
    dict(tables["answers"]),
    snakemake.output[0],
    blocks=[(d, int(i)) for d, i in snakemake.params.blocks],
    judge=snakemake.wildcards.judge,
    judge_cfg=snakemake.params.model,
    items_per_shard=int(block["items_per_shard"]),
    hosted=bool(block["hosted"]),
    primary_seed=int(snakemake.params.primary_seed),
    judging=snakemake.params.judging,
    seed=int(snakemake.params.seed),
)
log.info("wrote %d judge requests to %s", n, snakemake.output[0])
