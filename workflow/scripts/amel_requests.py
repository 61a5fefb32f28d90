"""Write one AMEL request shard: every cell of every test item of one domain, for one model."""

from context_effects.amel.requests import write_domain_shard
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
n = write_domain_shard(
    snakemake.input.item_table,
    snakemake.output[0],
    model_name=snakemake.wildcards.model,
    model_cfg=snakemake.params.model,
    amel_cfg=snakemake.params.settings,
    logprobs=snakemake.params.logprobs,
)
log.info("wrote %d requests to %s", n, snakemake.output[0])
