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
        wordnet_dir=config["conformity"]["validation"]["wordnet_dir"],
    script:
        "../scripts/metrics_nltk_data.py"


rule conformity_text_metrics:
    """ROUGE-L, METEOR, sentence BLEU and readability of every answer of a dataset."""
    input:
        answers="results/conformity/answers/{dataset}.parquet",
        item_table="results/items/{dataset}.parquet",
        nltk_data="resources/nltk_data",
    output:
        rows="results/conformity/metrics/text/{dataset}.parquet",
        info="results/conformity/metrics/text/{dataset}.json",
    log:
        "logs/conformity_metrics/text/{dataset}.log",
    benchmark:
        "benchmarks/conformity_metrics/text/{dataset}.tsv"
    conda:
        "../../envs/metrics.yaml"
    threads: 1
    resources:
        **dag.rule_resources(
            config, "conformity_text_metrics", runtime=120, mem_mb=4000
        ),
    params:
        kind="text",
        validation=config["conformity"]["validation"],
    script:
        "../scripts/metrics_score.py"


rule conformity_neural_metrics:
    """SBERT similarity to gold and to the shown block, BERTScore F1 against gold."""
    input:
        answers="results/conformity/answers/{dataset}.parquet",
        item_table="results/items/{dataset}.parquet",
    output:
        rows="results/conformity/metrics/neural/{dataset}.parquet",
        info="results/conformity/metrics/neural/{dataset}.json",
    log:
        "logs/conformity_metrics/neural/{dataset}.log",
    benchmark:
        "benchmarks/conformity_metrics/neural/{dataset}.tsv"
    conda:
        "../../envs/metrics.yaml"
    threads: config["run"]["threads_per_job"]
    resources:
        **dag.rule_resources(
            config, "conformity_neural_metrics", runtime=120, mem_mb=8000
        ),
        gpu=config["conformity"]["validation"]["gpu"]["count"],
        gpu_model=conformity_dag.metric_gpu_type(config),
    params:
        kind="neural",
        validation=config["conformity"]["validation"],
    script:
        "../scripts/metrics_score.py"


rule conformity_classifier_metrics:
    """NLI gold entailment and false endorsement; TruthfulQA truth/info judge scores."""
    input:
        answers="results/conformity/answers/{dataset}.parquet",
        item_table="results/items/{dataset}.parquet",
    output:
        rows="results/conformity/metrics/classifiers/{dataset}.parquet",
        info="results/conformity/metrics/classifiers/{dataset}.json",
    log:
        "logs/conformity_metrics/classifiers/{dataset}.log",
    benchmark:
        "benchmarks/conformity_metrics/classifiers/{dataset}.tsv"
    conda:
        "../../envs/metrics.yaml"
    threads: config["run"]["threads_per_job"]
    resources:
        **dag.rule_resources(
            config, "conformity_classifier_metrics", runtime=240, mem_mb=32000
        ),
        gpu=config["conformity"]["validation"]["gpu"]["count"],
        gpu_model=conformity_dag.metric_gpu_type(config),
    params:
        kind="classifiers",
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
    script:
        "../scripts/metrics_merge.py"


rule conformity_metrics_table:
    """One table of the metrics stage (6-8, 13-16, 18, 19)."""
    input:
        unpack(lambda wildcards: registry("conformity")[wildcards.name].inputs(config)),
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
        study="conformity",
        caption=lambda wildcards: report_caption("conformity", wildcards.name, config),
        settings=lambda wildcards: registry("conformity")[wildcards.name].settings(
            config
        ),
    script:
        "../scripts/write_table.py"
