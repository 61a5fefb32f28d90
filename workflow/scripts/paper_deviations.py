"""Write results/paper/deviations.tex: the deviations ledger as the paper's appendix tables."""

from pathlib import Path

from context_effects.jobs import setup_job_logging
from context_effects.paper.deviations import load_ledger, to_latex

log = setup_job_logging(snakemake.log[0])
entries = load_ledger(snakemake.input.ledger)
Path(snakemake.output[0]).write_text(to_latex(entries))
log.info("deviations ledger: %d entries", len(entries))
