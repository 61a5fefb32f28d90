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
        **dag.rule_resources(config, "fetch_dataset", runtime=30, mem_mb=4000),
    params:
        code=codeversion.of_script("fetch_dataset.py"),
        hub=lambda wildcards: config["datasets"][wildcards.dataset]["hub"],
    script:
        "../scripts/fetch_dataset.py"


rule build_items:
    """Normalise, attach the per-item wrong attractor, sample and validate."""
    input:
        raw=lambda wildcards: dag.raw_dataset_input(config, wildcards.dataset),
    output:
        table="results/items/{dataset}.parquet",
    log:
        "logs/build_items/{dataset}.log",
    benchmark:
        "benchmarks/build_items/{dataset}.tsv"
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "build_items", runtime=15, mem_mb=4000),
    params:
        code=codeversion.of_script("build_items.py"),
        n_items=lambda wildcards: config["datasets"][wildcards.dataset]["n_items"],
        balance_by=lambda wildcards: config["datasets"][wildcards.dataset]["balance_by"],
        sample_seed=config["sampling"]["seed"],
        attractor_seed=config["sampling"]["attractor_seed"],
    script:
        "../scripts/build_items.py"
