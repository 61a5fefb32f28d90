"""Draw one AMEL analysis figure (PDF and PNG) from its table and the item-level scores."""

import pandas as pd

from context_effects.amel.plots import FIGURES
from context_effects.figures import save_figure
from context_effects.jobs import setup_job_logging
from context_effects.tables import run_notes

log = setup_job_logging(snakemake.log[0])
name = snakemake.wildcards.analysis
table = pd.read_csv(snakemake.input.table)
items = pd.read_parquet(snakemake.input.probabilities if name == "probabilities" else snakemake.input.bias_scores)
kwargs = {"threshold": snakemake.params.settings["entropy_threshold_bits"]} if name == "entropy" else {}
fig = FIGURES[name](table, items, note=" ".join(run_notes(snakemake.params.run)), **kwargs)
# save_figure closes the figure; a closed Agg figure still renders, so both formats come from one drawing.
save_figure(fig, snakemake.output.pdf)
save_figure(fig, snakemake.output.png)
log.info("%s: figure written", name)
