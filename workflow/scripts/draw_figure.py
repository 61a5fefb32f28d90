"""Draw one registered figure of any study, in every format the rule lists: the rule's
`study` param and `name` wildcard pick the entry of `context_effects.<study>.outputs.REGISTRY`."""

from context_effects.jobs import setup_job_logging
from context_effects.outputs import draw_registered_figure

log = setup_job_logging(snakemake.log[0])
study, name = snakemake.params.study, snakemake.wildcards.name
draw_registered_figure(
    study, name, dict(snakemake.input.items()), snakemake.params.settings, dict(snakemake.output.items())
)
log.info("%s/%s: figure written", study, name)
