# Study A (seed 000): accumulated message effects. Per domain an item table (test
# items and the history pool) -> per model one request shard of every domain (answered by
# the generic rules of llm.smk) -> P(Yes) per cell and bias scores -> one table and
# one figure per analysis (context_effects.amel.outputs), each by its own job.
# Paths, targets and settings: context_effects.amel.dag.


rule amel_items:
    """One domain's Yes/No items: answer verification from a benchmark, or an item file."""
    input:
        unpack(lambda wildcards: amel_dag.domain_source(config, wildcards.domain)),
    output:
        "results/amel/items/{domain}.parquet",
    log:
        "logs/amel/items/{domain}.log",
    wildcard_constraints:
        domain=dag.name_regex(amel_dag.domains(config)),
    conda:
        "../../envs/amel.yaml"
    resources:
        **dag.rule_resources(config, "amel_items", runtime=10, mem_mb=2000),
    params:
        code=codeversion.of_script("amel_items.py"),
        settings=amel_dag.item_settings(config),
    script:
        "../scripts/amel_items.py"


rule amel_requests:
    """Every cell of every test item of every domain for one model, in prefix-sharing order."""
    input:
        item_tables=amel_dag.domain_item_tables(config),
    output:
        amel_dag.request_shard("{model}"),
    log:
        "logs/amel/requests/{model}.log",
    wildcard_constraints:
        model=dag.name_regex(amel_dag.models(config)),
    conda:
        "../../envs/amel.yaml"
    resources:
        **dag.rule_resources(config, "amel_requests", runtime=10, mem_mb=4000),
    params:
        code=codeversion.of_script("amel_requests.py"),
        model=lambda wildcards: dag.model_settings(config, wildcards.model),
        # Whether the model also gets the secondary, first-token measurement.
        logprobs=lambda wildcards: amel_dag.logprobs_available(config, wildcards.model),
        settings=amel_dag.design_settings(config),
    script:
        "../scripts/amel_requests.py"


rule amel_scores:
    """P(Yes) of every model x item x cell, and the bias score of every treatment cell."""
    input:
        responses=amel_dag.response_shards(config),
        # Each response shard is checked against the request shard it answers.
        requests=amel_dag.request_shards(config),
    output:
        probabilities="results/amel/probabilities.parquet",
        bias_scores="results/amel/bias_scores.parquet",
    log:
        "logs/amel/scores.log",
    conda:
        "../../envs/amel.yaml"
    resources:
        **dag.rule_resources(config, "amel_scores", runtime=20, mem_mb=8000),
    params:
        code=codeversion.of_script("amel_scores.py"),
        models=amel_dag.score_models(config),
        settings=amel_dag.score_settings(config),
    script:
        "../scripts/amel_scores.py"


rule amel_table:
    """One analysis table (CSV with full precision, LaTeX for the paper)."""
    input:
        unpack(lambda wildcards: registry("amel").table(wildcards.name).inputs(config)),
    output:
        csv=report(
            "results/tables/amel/{name}.csv",
            caption="../report/registry_caption.rst",
            category="Study A: accumulated message effects",
            subcategory="Tables",
        ),
        tex="results/tables/amel/{name}.tex",
    log:
        "logs/amel/table/{name}.log",
    wildcard_constraints:
        name=dag.name_regex(registry("amel").names(TableSpec, "analysis")),
    conda:
        "../../envs/amel.yaml"
    resources:
        **dag.rule_resources(config, "amel_table", runtime=10, mem_mb=4000),
    params:
        code=lambda wildcards: codeversion.of_entry("amel", "table", wildcards.name),
        study="amel",
        caption=lambda wildcards: report_caption(
            registry("amel").table(wildcards.name), config
        ),
        settings=lambda wildcards: registry("amel")
        .table(wildcards.name)
        .settings(config),
    script:
        "../scripts/write_table.py"


rule amel_figure:
    """One analysis figure, drawn from its table and the item-level scores."""
    input:
        unpack(lambda wildcards: registry("amel").figure(wildcards.name).inputs(config)),
    output:
        pdf="figures/amel/{name}.pdf",
        png=report(
            "figures/amel/{name}.png",
            caption="../report/registry_caption.rst",
            category="Study A: accumulated message effects",
            subcategory="Figures",
        ),
    log:
        "logs/amel/figure/{name}.log",
    wildcard_constraints:
        name=dag.name_regex(registry("amel").names(FigureSpec, "analysis")),
    conda:
        "../../envs/amel.yaml"
    resources:
        **dag.rule_resources(config, "amel_figure", runtime=10, mem_mb=4000),
    params:
        code=lambda wildcards: codeversion.of_entry("amel", "figure", wildcards.name),
        study="amel",
        caption=lambda wildcards: report_caption(
            registry("amel").figure(wildcards.name), config
        ),
        settings=lambda wildcards: registry("amel")
        .figure(wildcards.name)
        .settings(config),
    script:
        "../scripts/draw_figure.py"
