# Study C external validation (seed 002 App. E, F.1, F.2) and the model, package and
# budget tables (Tables 6-8): per-answer metric rows per dataset, then every table of
# the registry's `metrics` stage (context_effects.conformity.outputs) by one rule.


rule metrics_nltk_data:
    """Offline NLTK data: Debian's WordNet 3.0 (METEOR) and the CMU dictionary (textstat)."""
    output:
        directory("resources/nltk_data"),
    log:
        "logs/conformity_metrics/nltk_data.log",
    conda:
        "../../envs/metrics.yaml"
    resources:
        **dag.rule_resources(config, "metrics_nltk_data", runtime=10, mem_mb=2000),
    params:
        code=codeversion.of_script("metrics_nltk_data.py"),
        wordnet_dir=config["conformity"]["validation"]["wordnet_dir"],
    script:
        "../scripts/metrics_nltk_data.py"


rule conformity_answer_metrics:
    """Per-answer metrics of one kind for every answer of a dataset: text (ROUGE-L, METEOR,
    BLEU, readability), neural (SBERT similarity, BERTScore F1) or classifiers (NLI false
    endorsement, TruthfulQA truth/info judges; GPU-tagged with neural)."""
    input:
        unpack(
            lambda wildcards: conformity_dag.metric_inputs(
                config, wildcards.kind, wildcards.dataset
            )
        ),
    output:
        rows="results/conformity/metrics/{kind}/{dataset}.parquet",
        info="results/conformity/metrics/{kind}/{dataset}.json",
    log:
        "logs/conformity_metrics/{kind}/{dataset}.log",
    benchmark:
        "benchmarks/conformity_metrics/{kind}/{dataset}.tsv"
    wildcard_constraints:
        kind=dag.name_regex(conformity_dag.METRIC_KINDS),
    conda:
        "../../envs/metrics.yaml"
    threads: lambda wildcards: conformity_dag.metric_threads(config, wildcards.kind)
    resources:
        runtime=conformity_dag.metric_resource(config, "runtime"),
        mem_mb=conformity_dag.metric_resource(config, "mem_mb"),
        gpu=conformity_dag.metric_resource(config, "gpu"),
        gpu_model=conformity_dag.metric_resource(config, "gpu_model"),
    params:
        code=codeversion.of_script("metrics_score.py"),
        validation=config["conformity"]["validation"],
    script:
        "../scripts/metrics_score.py"


rule conformity_metrics_rows:
    """Every metric of every answer of a dataset, with dataset/generator/seed/condition/anchor columns."""
    input:
        "results/conformity/metrics/text/{dataset}.parquet",
        "results/conformity/metrics/neural/{dataset}.parquet",
        "results/conformity/metrics/classifiers/{dataset}.parquet",
    output:
        "results/conformity/metrics/{dataset}.parquet",
    log:
        "logs/conformity_metrics/rows/{dataset}.log",
    conda:
        "../../envs/metrics.yaml"
    resources:
        **dag.rule_resources(config, "conformity_metrics_rows", runtime=10, mem_mb=4000),
    params:
        code=codeversion.of_script("metrics_merge.py"),
    script:
        "../scripts/metrics_merge.py"


rule conformity_metrics_table:
    """One table of the metrics stage (6-8, 13-16, 18, 19)."""
    input:
        unpack(
            lambda wildcards: registry("conformity")
            .table(wildcards.name)
            .inputs(config)
        ),
    output:
        csv=report(
            "results/tables/conformity/{name}.csv",
            caption="../report/registry_caption.rst",
            category="Study C: open-ended conformity",
            subcategory="Tables",
        ),
        tex="results/tables/conformity/{name}.tex",
    log:
        "logs/conformity_metrics/{name}.log",
    wildcard_constraints:
        name=dag.name_regex(registry("conformity").names(TableSpec, "metrics")),
    conda:
        "../../envs/metrics.yaml"
    resources:
        **dag.rule_resources(
            config, "conformity_metrics_table", runtime=10, mem_mb=4000
        ),
    params:
        code=lambda wildcards: codeversion.of_entry(
            "conformity", "table", wildcards.name
        ),
        study="conformity",
        caption=lambda wildcards: report_caption(
            registry("conformity").table(wildcards.name), config
        ),
        settings=lambda wildcards: registry("conformity")
        .table(wildcards.name)
        .settings(config),
    script:
        "../scripts/write_table.py"
