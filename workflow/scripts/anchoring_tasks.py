"""Build the Study H task table: benchmark tasks, task-file tasks and the balanced prior design."""

from context_effects.anchoring.tasks import build_tasks
from context_effects.jobs import setup_job_logging

log = setup_job_logging(snakemake.log[0])
s = snakemake.params.settings
tasks = build_tasks(
    dict(zip(snakemake.params.datasets, snakemake.input.item_tables)),
    list(snakemake.input.task_files),
    tasks_per_dataset=s["tasks_per_dataset"],
    answer_kinds=s["answer_kinds"],
    seed=s["seed"],
    verdict_threshold=s["verdict_threshold"],
)
tasks.to_parquet(snakemake.output[0], index=False)
log.info(
    "%d tasks (gold %s; priors %s) -> %s",
    len(tasks),
    tasks["gold_score"].value_counts().sort_index().to_dict(),
    tasks["prior_direction"].value_counts().to_dict(),
    snakemake.output[0],
)
