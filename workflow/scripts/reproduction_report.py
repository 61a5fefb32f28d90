"""Write results/report/reproduction.{csv,md,tex}: every published number beside this run's."""

from context_effects.jobs import setup_job_logging
from context_effects.paper.reproduction import summary, write_report

log = setup_job_logging(snakemake.log[0])
report = write_report(
    list(snakemake.input.published),
    snakemake.input.manifest,
    "results",
    snakemake.output.csv,
    snakemake.output.md,
    snakemake.output.tex,
)
for row in summary(report).to_dict("records"):
    log.info("%s", row)
