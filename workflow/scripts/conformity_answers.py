"""Collect every generated answer of one dataset, plus its anchors, into the answers table."""

from context_effects.conformity.stages import collect_answers
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
answers = collect_answers(
    snakemake.input.item_table,
    list(snakemake.input.responses),
    list(snakemake.input.anchors),
    settings=snakemake.params.generation,
    request_paths=list(snakemake.input.requests),
    anchor_request_paths=list(snakemake.input.anchor_requests),
)
missing = int(answers["text"].isna().sum())
answers.to_parquet(snakemake.output[0], index=False)
log.info("%d answers (%d without text after all retries) -> %s", len(answers), missing, snakemake.output[0])
