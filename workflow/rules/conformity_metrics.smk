# Rules of conformity_metrics; see the matching common_*.smk for their functions.
# Study C external validation (seed 002 App. E, F.1, F.2) and the model, package and
# budget tables (Tables 6-8): per-answer metric rows per dataset, then one rule per table.


rule metrics_nltk_data:
    """Offline NLTK data: Debian's WordNet 3.0 (METEOR) and the CMU dictionary (textstat)."""
    output:
        directory("resources/nltk_data"),
    log:
        "logs/conformity_metrics/nltk_data.log",
    conda:
        "../../envs/metrics.yaml"
    resources:
        **rule_resources("metrics_nltk_data", runtime=10, mem_mb=2000),
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
        **rule_resources("conformity_text_metrics", runtime=120, mem_mb=4000),
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
        **rule_resources("conformity_neural_metrics", runtime=120, mem_mb=8000),
        gpu=config["conformity"]["validation"]["gpu"]["count"],
        gpu_model=metric_gpu_type,
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
        **rule_resources("conformity_classifier_metrics", runtime=240, mem_mb=32000),
        gpu=config["conformity"]["validation"]["gpu"]["count"],
        gpu_model=metric_gpu_type,
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
        **rule_resources("conformity_metrics_rows", runtime=10, mem_mb=4000),
    script:
        "../scripts/metrics_merge.py"


rule conformity_table13:
    """Table 13: ROUGE-L recall/F1, METEOR and BLEU of Round 2 answers."""
    input:
        metrics=merged_metrics(),
    output:
        **metrics_table_files("table13"),
    log:
        "logs/conformity_metrics/table13.log",
    conda:
        "../../envs/metrics.yaml"
    resources:
        **rule_resources("conformity_table13", runtime=10, mem_mb=4000),
    params:
        table="table13",
    script:
        "../scripts/metrics_table.py"


rule conformity_table14:
    """Table 14: SBERT similarity to gold and peer block, BERTScore F1."""
    input:
        metrics=merged_metrics(),
        infos=metric_infos(["neural"]),
    output:
        **metrics_table_files("table14"),
    log:
        "logs/conformity_metrics/table14.log",
    conda:
        "../../envs/metrics.yaml"
    resources:
        **rule_resources("conformity_table14", runtime=10, mem_mb=4000),
    params:
        table="table14",
    script:
        "../scripts/metrics_table.py"


rule conformity_table15:
    """Table 15: Spearman rho of blind latent quality with each external metric."""
    input:
        metrics=merged_metrics(),
        quality=quality_tables(),
    output:
        **metrics_table_files("table15"),
    log:
        "logs/conformity_metrics/table15.log",
    conda:
        "../../envs/metrics.yaml"
    resources:
        **rule_resources("conformity_table15", runtime=10, mem_mb=4000),
    params:
        table="table15",
    script:
        "../scripts/metrics_table.py"


rule conformity_table16:
    """Table 16: NLI false endorsement and TruthfulQA truth/info judge scores."""
    input:
        metrics=merged_metrics(),
    output:
        **metrics_table_files("table16"),
    log:
        "logs/conformity_metrics/table16.log",
    conda:
        "../../envs/metrics.yaml"
    resources:
        **rule_resources("conformity_table16", runtime=10, mem_mb=4000),
    params:
        table="table16",
    script:
        "../scripts/metrics_table.py"


rule conformity_table18:
    """Table 18: readability of Round 2 answers."""
    input:
        metrics=merged_metrics(),
    output:
        **metrics_table_files("table18"),
    log:
        "logs/conformity_metrics/table18.log",
    conda:
        "../../envs/metrics.yaml"
    resources:
        **rule_resources("conformity_table18", runtime=10, mem_mb=4000),
    params:
        table="table18",
    script:
        "../scripts/metrics_table.py"


rule conformity_table19:
    """Table 19: difficulty terciles, condition shifts, question-level bootstrap CI."""
    input:
        ratings=ratings_tables(),
    output:
        **metrics_table_files("table19"),
    log:
        "logs/conformity_metrics/table19.log",
    conda:
        "../../envs/metrics.yaml"
    resources:
        **rule_resources("conformity_table19", runtime=10, mem_mb=4000),
    params:
        table="table19",
    script:
        "../scripts/metrics_table.py"


rule conformity_table6:
    """Table 6: models with parameter counts (config; validation models as loaded)."""
    input:
        infos=metric_infos(),
    output:
        **metrics_table_files("table6"),
    log:
        "logs/conformity_metrics/table6.log",
    conda:
        "../../envs/metrics.yaml"
    resources:
        **rule_resources("conformity_table6", runtime=10, mem_mb=2000),
    params:
        table="table6",
    script:
        "../scripts/metrics_table.py"


rule conformity_table7:
    """Table 7: compute budget per stage from every benchmark file (a late rule)."""
    input:
        budget_inputs,
    output:
        **metrics_table_files("table7"),
    log:
        "logs/conformity_metrics/table7.log",
    conda:
        "../../envs/metrics.yaml"
    resources:
        **rule_resources("conformity_table7", runtime=10, mem_mb=2000),
    params:
        table="table7",
        benchmark_root="benchmarks",
        model_gpus=model_gpus(),
        stage_gpus=metric_stage_gpus(),
    script:
        "../scripts/metrics_table.py"


rule conformity_table8:
    """Table 8: packages, checkpoints and settings as the jobs recorded them."""
    input:
        infos=metric_infos(),
        answers=expand(
            "results/conformity/answers/{dataset}.parquet", dataset=metrics_datasets()
        ),
    output:
        **metrics_table_files("table8"),
    log:
        "logs/conformity_metrics/table8.log",
    conda:
        "../../envs/metrics.yaml"
    resources:
        **rule_resources("conformity_table8", runtime=10, mem_mb=2000),
    params:
        table="table8",
        ledger_root="results/ledgers/conformity",
    script:
        "../scripts/metrics_table.py"
