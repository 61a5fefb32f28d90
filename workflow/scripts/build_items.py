"""Build the normalised, sampled (or release-taken) item table of one dataset."""

from context_effects.datasets import build_item_table, write_items
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
dataset = snakemake.wildcards.dataset
items = build_item_table(
    dataset,
    {"kind": "local", "path": snakemake.input.raw},
    n_items=snakemake.params.n_items,
    sample_seed=snakemake.params.sample_seed,
    attractor_seed=snakemake.params.attractor_seed,
    balance_by=snakemake.params.balance_by,
    sample=snakemake.params.sample,
    peer_source=snakemake.params.peer_source,
)
write_items(items, snakemake.output.table)
log.info("wrote %d %s items to %s (items: %s; peer blocks: %s)", len(items), dataset, snakemake.output.table,
         items.attrs["sample"].get("source"), items.attrs["peer_source"]["used"])
