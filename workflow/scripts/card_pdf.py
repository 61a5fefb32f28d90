"""Compile one card's PDF page (results/card/<model>.pdf) with latexmk."""

import sys

from context_effects.card import build_pdf
from context_effects.jobs import setup_job_logging
from context_effects.paper.build import BuildError

log = setup_job_logging(snakemake.log[0])
try:
    build_pdf(snakemake.input[0], snakemake.output[0], log=log.info)
except BuildError as exc:
    log.error("%s", exc)
    sys.exit(1)
