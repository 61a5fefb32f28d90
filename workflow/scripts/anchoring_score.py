"""Score one Study H model run and write its result file."""

from context_effects.anchoring.results import result_record, write_result
from context_effects.jobs import setup_job_logging
from context_effects.tables import run_notes

log = setup_job_logging(snakemake.log[0])
record = result_record(
    snakemake.input.tasks,
    snakemake.input.responses,
    judge=snakemake.wildcards.judge,
    model_cfg=snakemake.params.model,
    settings=snakemake.params.settings,
    run_cfg=snakemake.params.run,
    notes=run_notes(snakemake.params.run["kind"]),
    requests_path=snakemake.input.requests,
)
write_result(record, snakemake.output[0])
pull = record["scorer"]["summary"]["pull"]
log.info(
    "%s: mean pull %s over %d tasks (%d ties scored 0, %d missing; ties excluded: %s) -> %s",
    snakemake.wildcards.judge,
    pull["mean"]["estimate"],
    pull["n_used"],
    pull["n_ties"],
    pull["n_missing"],
    record["scorer"]["summary"]["pull_ties_excluded"]["mean"]["estimate"],
    snakemake.output[0],
)
