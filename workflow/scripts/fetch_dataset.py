"""Download one dataset split from the Hugging Face hub and store it as Parquet."""

from context_effects.datasets import load_raw
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
hub = dict(snakemake.params.hub)
log.info("loading %s (config=%s, split=%s, revision=%s)", hub["id"], hub.get("config"), hub["split"], hub["revision"])
raw = load_raw(snakemake.wildcards.dataset, {"kind": "hub", **hub})
raw.to_parquet(snakemake.output[0], index=False)
log.info("wrote %d rows to %s", len(raw), snakemake.output[0])
