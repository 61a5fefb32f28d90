"""One per-answer metric table of a dataset: pass-through columns plus every metric."""

import pandas as pd

from context_effects.jobs import setup_job_logging
from context_effects.metrics.scoring import merge_metric_rows

log = setup_job_logging(snakemake.log[0])
merged = merge_metric_rows(*(pd.read_parquet(p) for p in snakemake.input))
merged.to_parquet(snakemake.output[0], index=False)
log.info("%d answers x %d columns -> %s", len(merged), merged.shape[1], snakemake.output[0])
