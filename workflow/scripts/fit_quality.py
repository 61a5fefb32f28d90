"""Per-answer latent quality of a dataset's main fit, as the table other analyses read."""

import pandas as pd

from context_effects.jobs import setup_job_logging
from context_effects.measurement.pipeline import QUALITY_COLUMNS

log = setup_job_logging(snakemake.log[0])
quality = pd.read_parquet(snakemake.input[0])
missing = [c for c in QUALITY_COLUMNS if c not in quality.columns]
if missing:
    raise ValueError(f"{snakemake.input[0]} lacks column(s) {missing}; rerun the fit")
quality.loc[:, list(QUALITY_COLUMNS)].to_parquet(snakemake.output[0], index=False)
log.info("%d answers -> %s", len(quality), snakemake.output[0])
