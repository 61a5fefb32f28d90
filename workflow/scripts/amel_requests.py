"""Write a model's AMEL request shard: every cell of every test item of every domain."""

from context_effects.amel.requests import write_model_shard
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
n = write_model_shard(
    list(snakemake.input.item_tables),
    snakemake.output[0],
    model_name=snakemake.wildcards.model,
    model_cfg=snakemake.params.model,
    amel_cfg=snakemake.params.settings,
    logprobs=snakemake.params.logprobs,
)
log.info("wrote %d requests to %s", n, snakemake.output[0])
