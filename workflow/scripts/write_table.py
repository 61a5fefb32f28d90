"""Write one registered table (CSV + LaTeX) of any study: the rule's `study` param and
`name` wildcard pick the entry of `context_effects.<study>.outputs.REGISTRY`."""

from context_effects.jobs import setup_job_logging
from context_effects.outputs import write_registered_table

log = setup_job_logging(snakemake.log[0])
study, name = snakemake.params.study, snakemake.wildcards.name
df = write_registered_table(
    study,
    name,
    dict(snakemake.input.items()),
    snakemake.params.settings,
    snakemake.output.csv,
    snakemake.output.tex,
)
log.info("%s/%s: %d rows -> %s", study, name, len(df), snakemake.output.csv)
