"""Build one AMEL domain's item table (test items and history pool) from a benchmark or an item file."""

from context_effects.amel.items import build_domain_items
from context_effects.datasets import read_items
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
settings = snakemake.params.settings
domain = snakemake.wildcards.domain
common = dict(
    items_per_domain=settings["items_per_domain"],
    answers_per_question=settings["answers_per_question"],
    seed=settings["seed"],
)
if "item_file" in snakemake.input.keys():
    items = build_domain_items(domain, item_file=snakemake.input.item_file, **common)
else:
    items = build_domain_items(domain, benchmark_items=read_items(snakemake.input.item_table), **common)
items.to_parquet(snakemake.output[0], index=False)
n_test = int(items["is_test"].sum())
log.info("%s: %d items, %d test items (%d with answer Yes)", domain, len(items), n_test,
         int((items["is_test"] & (items["answer"] == "Yes")).sum()))
if n_test < settings["items_per_domain"]:
    log.warning("%s: only %d test items available (items_per_domain = %d)", domain, n_test,
                settings["items_per_domain"])
