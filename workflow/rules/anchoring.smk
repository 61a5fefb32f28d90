# Study H (seed 001): the history-anchoring benchmark. Tasks (stratified draw, fixed
# answer, rubric, gold score, prior design independent of gold) -> one request shard per judge (the model run,
# answered by the generic rules of llm.smk) -> a result file per model run -> the
# summary tables and the pull-distribution figure (context_effects.anchoring.outputs).
# Paths, targets and settings: context_effects.anchoring.dag.


rule anchoring_tasks:
    """Tasks drawn from the benchmarks' items (stratified) and the task files, with the prior-score design."""
    input:
        **anchoring_dag.task_inputs(config),
    output:
        "results/anchoring/tasks.parquet",
    log:
        "logs/anchoring/tasks.log",
    conda:
        "../../envs/anchoring.yaml"
    resources:
        **dag.rule_resources(config, "anchoring_tasks", runtime=10, mem_mb=2000),
    params:
        code=codeversion.of_script("anchoring_tasks.py"),
        datasets=anchoring_dag.benchmark_datasets(config),
        settings=anchoring_dag.task_settings(config),
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
        judge=dag.name_regex(anchoring_dag.judges(config)),
    conda:
        "../../envs/anchoring.yaml"
    resources:
        **dag.rule_resources(config, "anchoring_requests", runtime=10, mem_mb=2000),
    params:
        code=codeversion.of_script("anchoring_requests.py"),
        model=lambda wildcards: dag.model_settings(config, wildcards.judge),
        settings=anchoring_dag.request_settings(config),
    script:
        "../scripts/anchoring_requests.py"


rule anchoring_score:
    """Score one model run and write its result file (settings, raw judgments, scorer output, limitations)."""
    input:
        tasks="results/anchoring/tasks.parquet",
        responses=lambda wildcards: anchoring_dag.response_shard(wildcards.judge),
        # The responses are checked against the run's request shard.
        requests=lambda wildcards: anchoring_dag.request_shard(wildcards.judge),
    output:
        "results/anchoring/runs/{judge}.json",
    log:
        "logs/anchoring/score/{judge}.log",
    wildcard_constraints:
        judge=dag.name_regex(anchoring_dag.judges(config)),
    conda:
        "../../envs/anchoring.yaml"
    resources:
        **dag.rule_resources(config, "anchoring_score", runtime=20, mem_mb=4000),
    params:
        code=codeversion.of_script("anchoring_score.py"),
        model=lambda wildcards: dag.model_settings(config, wildcards.judge),
        settings=anchoring_dag.score_settings(config),
        run=anchoring_dag.run_info(config),
    script:
        "../scripts/anchoring_score.py"


rule anchoring_table:
    """One summary table over every judge's result file (CSV + LaTeX)."""
    input:
        unpack(
            lambda wildcards: registry("anchoring")
            .table(wildcards.name)
            .inputs(config)
        ),
    output:
        csv=report(
            "results/tables/anchoring/{name}.csv",
            caption="../report/registry_caption.rst",
            category="Study H: history anchoring",
            subcategory="Tables",
        ),
        tex="results/tables/anchoring/{name}.tex",
    log:
        "logs/anchoring/table/{name}.log",
    wildcard_constraints:
        name=dag.name_regex(registry("anchoring").names(TableSpec, "report")),
    conda:
        "../../envs/anchoring.yaml"
    resources:
        **dag.rule_resources(config, "anchoring_table", runtime=10, mem_mb=2000),
    params:
        code=lambda wildcards: codeversion.of_entry(
            "anchoring", "table", wildcards.name
        ),
        study="anchoring",
        caption=lambda wildcards: report_caption(
            registry("anchoring").table(wildcards.name), config
        ),
        settings=lambda wildcards: registry("anchoring")
        .table(wildcards.name)
        .settings(config),
    script:
        "../scripts/write_table.py"


rule anchoring_figure:
    """The per-task pull distribution of every judge (PDF + PNG)."""
    input:
        unpack(
            lambda wildcards: registry("anchoring")
            .figure(wildcards.name)
            .inputs(config)
        ),
    output:
        pdf="figures/anchoring/{name}.pdf",
        png=report(
            "figures/anchoring/{name}.png",
            caption="../report/registry_caption.rst",
            category="Study H: history anchoring",
            subcategory="Figures",
        ),
    log:
        "logs/anchoring/figure/{name}.log",
    wildcard_constraints:
        name=dag.name_regex(registry("anchoring").names(FigureSpec, "report")),
    conda:
        "../../envs/anchoring.yaml"
    resources:
        **dag.rule_resources(config, "anchoring_figure", runtime=10, mem_mb=2000),
    params:
        code=lambda wildcards: codeversion.of_entry(
            "anchoring", "figure", wildcards.name
        ),
        study="anchoring",
        caption=lambda wildcards: report_caption(
            registry("anchoring").figure(wildcards.name), config
        ),
        settings=lambda wildcards: registry("anchoring")
        .figure(wildcards.name)
        .settings(config),
    script:
        "../scripts/draw_figure.py"
