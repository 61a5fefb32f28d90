"""Write results/tables/run/request_counts.{csv,tex}: requests, answers and paid calls per
study, stage and model, from every shard the run answered (context_effects.request_counts)."""

from context_effects.jobs import setup_job_logging
from context_effects.outputs import write_registered_table

log = setup_job_logging(snakemake.log[0])
df = write_registered_table(
    "run",
    "request_counts",
    dict(snakemake.input.items()),
    snakemake.params.settings,
    snakemake.output.csv,
    snakemake.output.tex,
)
log.info("request counts: %d rows from %d response shards -> %s", len(df), len(snakemake.input.responses),
         snakemake.output.csv)
