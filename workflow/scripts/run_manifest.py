"""Write the run manifest: resolved configuration and installed package versions."""

from context_effects.jobs import setup_job_logging
from context_effects.provenance import write_manifest

setup_job_logging(snakemake.log[0])
write_manifest(snakemake.output[0], dict(snakemake.params.config))
