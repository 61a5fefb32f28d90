# Data layer: raw benchmark rows (hub or local file) -> one normalised,
# schema-validated item table per dataset, sampled once and reused by every study.


rule fetch_dataset:
    """Download one dataset split from the Hugging Face hub at a pinned revision."""
    output:
        "resources/datasets/{dataset}.parquet",
    log:
        "logs/fetch_dataset/{dataset}.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **rule_resources("fetch_dataset", runtime=30, mem_mb=4000),
    params:
        hub=lambda wildcards: dataset_config(wildcards.dataset)["hub"],
    script:
        "../scripts/fetch_dataset.py"


rule build_items:
    """Normalise, attach the per-item wrong attractor, sample and validate."""
    input:
        raw=raw_dataset_input,
    output:
        table="results/items/{dataset}.parquet",
    log:
        "logs/build_items/{dataset}.log",
    benchmark:
        "benchmarks/build_items/{dataset}.tsv"
    conda:
        "../../envs/data.yaml"
    resources:
        **rule_resources("build_items", runtime=15, mem_mb=4000),
    params:
        n_items=lambda wildcards: dataset_config(wildcards.dataset)["n_items"],
        balance_by=lambda wildcards: dataset_config(wildcards.dataset)["balance_by"],
        sample_seed=config["sampling"]["seed"],
        attractor_seed=config["sampling"]["attractor_seed"],
    script:
        "../scripts/build_items.py"
