"""Build the offline NLTK data folder (WordNet 3.0 from Debian, CMU dict from PyPI)."""

from context_effects.jobs import setup_job_logging
from context_effects.metrics.resources import build_nltk_data

log = setup_job_logging(snakemake.log[0])
log.info("NLTK data -> %s: %s", snakemake.output[0], build_nltk_data(snakemake.output[0], snakemake.params.wordnet_dir))
