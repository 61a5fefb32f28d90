# Study H (seed 001): the history-anchoring benchmark. Tasks (fixed answer, rubric,
# gold score, balanced prior design) -> one request shard per judge (the model run,
# answered by the generic rules of llm.smk) -> a result file per model run -> the
# summary tables and the pull-distribution figure.


rule anchoring_tasks:
    """Tasks from the benchmarks' items and the task files, with the prior-score design."""
    input:
        item_tables=items_for(config["anchoring"]["benchmark_datasets"]),
        task_files=config["anchoring"]["task_files"],
    output:
        "results/anchoring/tasks.parquet",
    log:
        "logs/anchoring/tasks.log",
    conda:
        "../../envs/anchoring.yaml"
    resources:
        **rule_resources("anchoring_tasks", runtime=10, mem_mb=2000),
    params:
        datasets=config["anchoring"]["benchmark_datasets"],
        settings=anchoring_settings(*ANCHORING_TASK_KEYS),
    script:
        "../scripts/anchoring_tasks.py"


rule anchoring_requests:
    """One model run: every task x condition x repetition, in a seeded random order."""
    input:
        tasks="results/anchoring/tasks.parquet",
    output:
        "results/requests/anchoring/judge/{judge}/tasks.parquet",
    log:
        "logs/anchoring/requests/{judge}.log",
    wildcard_constraints:
        judge=name_regex(config["anchoring"]["judges"]),
    conda:
        "../../envs/anchoring.yaml"
    resources:
        **rule_resources("anchoring_requests", runtime=10, mem_mb=2000),
    params:
        model=lambda wildcards: config["models"][wildcards.judge],
        settings=anchoring_settings(*ANCHORING_REQUEST_KEYS),
    script:
        "../scripts/anchoring_requests.py"


rule anchoring_score:
    """Score one model run and write its result file (settings, raw judgments, scorer output, limitations)."""
    input:
        tasks="results/anchoring/tasks.parquet",
        responses="results/responses/anchoring/judge/{judge}/tasks.parquet",
    output:
        "results/anchoring/runs/{judge}.json",
    log:
        "logs/anchoring/score/{judge}.log",
    wildcard_constraints:
        judge=name_regex(config["anchoring"]["judges"]),
    conda:
        "../../envs/anchoring.yaml"
    resources:
        **rule_resources("anchoring_score", runtime=20, mem_mb=4000),
    params:
        model=lambda wildcards: config["models"][wildcards.judge],
        settings=anchoring_settings(*ANCHORING_SCORE_KEYS),
        run=anchoring_run_info(),
    script:
        "../scripts/anchoring_score.py"


rule anchoring_report:
    """Summary tables (CSV + LaTeX) and the per-task pull distribution of every judge."""
    input:
        results=anchoring_results(),
    output:
        **anchoring_report_outputs(),
    log:
        "logs/anchoring/report.log",
    conda:
        "../../envs/anchoring.yaml"
    resources:
        **rule_resources("anchoring_report", runtime=10, mem_mb=2000),
    params:
        tables=ANCHORING_TABLES,
        run=anchoring_run_info(),
    script:
        "../scripts/anchoring_report.py"
