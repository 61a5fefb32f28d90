"""Write one of seed 002's model-based tables from the summaries and diagnostics of its fits."""

from context_effects.jobs import setup_job_logging
from context_effects.measurement.pipeline import fit_dir
from context_effects.measurement.report import table_fits, write_model_table

log = setup_job_logging(snakemake.log[0])
config = {"conformity": snakemake.params.conformity, "models": snakemake.params.models, "run": snakemake.params.run}
number = snakemake.wildcards.table
dirs = {(s.dataset, s.variant): fit_dir(s) for s in table_fits(config, number)}
table = write_model_table(config, number, dirs, snakemake.output.csv, snakemake.output.tex)
flagged = int((table.df.get("Diagnostics", "") == "FAILED").sum()) if "Diagnostics" in table.df else 0
log.info("table %s: %d rows (%d from fits failing diagnostics) -> %s", number, len(table.df), flagged,
         snakemake.output.csv)
