"""Write one Study H model run (every task x condition x repetition) as a request shard."""

from context_effects.anchoring.requests import write_judge_shard
from context_effects.anchoring.tasks import read_tasks
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
n = write_judge_shard(
    read_tasks(snakemake.input.tasks),
    snakemake.output[0],
    snakemake.wildcards.judge,
    snakemake.params.model,
    snakemake.params.settings,
)
log.info("wrote %d judgment requests to %s", n, snakemake.output[0])
