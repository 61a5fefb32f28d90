"""Per-answer blind latent quality of a dataset (its blind-quality fit), as the table other
analyses read: refused unless the fit was made with the config's settings, and carrying
the fit's record on (measurement.records)."""

import pandas as pd

from context_effects.jobs import setup_job_logging
from context_effects.measurement.pipeline import QUALITY_COLUMNS, write_quality
from context_effects.measurement.records import check_quality

log = setup_job_logging(snakemake.log[0])
record = check_quality(snakemake.input[0], snakemake.params.made_with)
quality = pd.read_parquet(snakemake.input[0])
missing = [c for c in QUALITY_COLUMNS if c not in quality.columns]
if missing:
    raise ValueError(f"{snakemake.input[0]} lacks column(s) {missing}; rerun the fit")
write_quality(quality.loc[:, list(QUALITY_COLUMNS)], snakemake.output[0], record)
log.info("%d answers -> %s", len(quality), snakemake.output[0])
