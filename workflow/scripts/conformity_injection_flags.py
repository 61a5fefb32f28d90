"""Flag the answers of one dataset that address the judge (conformity.injection rules)."""

import pandas as pd

from context_effects.conformity.injection import condition_counts, flag_answers
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
flags = flag_answers(pd.read_parquet(snakemake.input.answers))
flags.to_parquet(snakemake.output[0], index=False)
log.info(
    "%d answers, %d flagged (rule set %s) -> %s",
    len(flags), int(flags["flagged"].sum()), snakemake.params.rules, snakemake.output[0],
)
counts = condition_counts(flags)
for rec in counts[counts["flagged"] > 0].to_dict("records"):
    log.info("flagged: corpus=%s condition=%s %d of %d", rec["corpus"], rec["condition"], rec["flagged"], rec["answers"])
