"""Download one predecessor release file at the pinned commit and check its sha256."""

from context_effects.conformity.release import fetch
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
name = snakemake.wildcards.release_file
log.info("fetching %s from %s (sha256 %s)", name, snakemake.params.url, snakemake.params.sha256)
fetch(name, snakemake.output[0])
log.info("wrote %s", snakemake.output[0])
