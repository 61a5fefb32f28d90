"""Write results/paper/numbers.tex: the paper's number macros (paper/numbers.yaml) from this run's results."""

from context_effects.jobs import setup_job_logging
from context_effects.paper.numbers import write_numbers

log = setup_job_logging(snakemake.log[0])
warnings = write_numbers(
    snakemake.input.spec,
    snakemake.output.tex,
    snakemake.output.warnings,
    results="results",
    manifest_path=snakemake.input.manifest,
)
for line in warnings:
    log.warning("%s", line)
log.info(
    "wrote %s; %d macro(s) n/a (listed in %s)", snakemake.output.tex, len(warnings), snakemake.output.warnings
)
