"""Write every raw response of the store to one plain Parquet file (release and replay)."""

from context_effects.jobs import setup_job_logging
from context_effects.llm.store.responses import ResponseStore
from context_effects.llm.store.transfer import export

log = setup_job_logging(snakemake.log[0])
n = export(ResponseStore("results/store"), snakemake.output[0])
log.info("exported %d rows to %s", n, snakemake.output[0])
