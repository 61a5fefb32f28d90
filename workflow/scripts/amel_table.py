"""Write one AMEL analysis table as CSV and LaTeX."""

import pandas as pd

from context_effects.amel.analysis import ANALYSES, FORMATS, build_table
from context_effects.jobs import setup_job_logging
from context_effects.tables import run_notes, write_table

log = setup_job_logging(snakemake.log[0])
name = snakemake.wildcards.analysis
table = build_table(
    name,
    pd.read_parquet(snakemake.input.bias_scores),
    pd.read_parquet(snakemake.input.probabilities),
    snakemake.params.settings,
)
write_table(
    table,
    snakemake.output.csv,
    snakemake.output.tex,
    caption=ANALYSES[name].caption,
    label=f"tab:amel-{name}",
    formats=FORMATS,
    notes=run_notes(snakemake.params.run),
)
log.info("%s: %d rows", name, len(table))
