"""Compile paper/paper.pdf: the number check, the Unicode check, then latexmk (context_effects.paper.build)."""

import sys
from pathlib import Path

from context_effects.jobs import setup_job_logging
from context_effects.paper.build import BuildError, build_pdf

log = setup_job_logging(snakemake.log[0])
try:
    build_pdf(
        Path(snakemake.input.preamble).parent,
        snakemake.output.pdf,
        generated=[snakemake.input.numbers, snakemake.input.reproduction, *snakemake.input.tables],
        outdir=snakemake.params.build_dir,
        log=log.info,
    )
except BuildError as exc:
    log.error("%s", exc)
    sys.exit(1)
