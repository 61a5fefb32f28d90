"""Write the planted-vs-estimated table with coverage (results/synthetic/recovery.csv, .md; context_effects.recovery)."""

from context_effects.jobs import setup_job_logging
from context_effects.recovery import coverage, write_recovery

log = setup_job_logging(snakemake.log[0])
table = write_recovery(
    snakemake.input.planted,
    list(snakemake.input.fits),
    list(snakemake.input.amel),
    list(snakemake.input.anchoring),
    snakemake.output.csv,
    snakemake.output.md,
    snakemake.params.made_with,
)
log.info("recovery: %d rows\n%s", len(table), coverage(table).to_string(index=False))
