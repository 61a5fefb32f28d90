"""Build the Study H task table: benchmark tasks, task-file tasks and the prior-score design."""

from context_effects.anchoring.tasks import build_tasks, prior_gold_correlation
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
    "%d tasks (gold %s; prior sides %s; r(prior, gold) %s) -> %s",
    len(tasks),
    tasks["gold_score"].value_counts().sort_index().to_dict(),
    tasks["prior_side"].value_counts().to_dict(),
    prior_gold_correlation(tasks)["r"],
    snakemake.output[0],
)
