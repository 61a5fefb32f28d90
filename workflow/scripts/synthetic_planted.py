"""Write results/synthetic/planted.json: every value the run's synthetic models plant (context_effects.recovery)."""

from context_effects.jobs import setup_job_logging
from context_effects.recovery import write_planted

log = setup_job_logging(snakemake.log[0])
values = write_planted(dict(snakemake.params.inputs), snakemake.output[0])
log.info("planted values of %d synthetic model(s): %s", len(values["models"]), ", ".join(values["models"]))
