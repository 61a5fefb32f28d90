"""Build the offline NLTK data folder (WordNet 3.0 from Debian, CMU dict from PyPI)."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # the project library, no install needed

from context_effects.jobs import setup_job_logging
from context_effects.metrics.resources import build_nltk_data

log = setup_job_logging(snakemake.log[0])
log.info("NLTK data -> %s: %s", snakemake.output[0], build_nltk_data(snakemake.output[0], snakemake.params.wordnet_dir))
