# Data layer: raw benchmark rows (hub or local file) -> one normalised,
# schema-validated item table per dataset, sampled once and reused by every study.

from context_effects.conformity import release as predecessor_release


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


rule fetch_release:
    """Download one predecessor release file (seed 002 §2.2: the items and peer blocks of
    Qu et al.) at the pinned commit and refuse it unless its sha256 is the pinned one.
    """
    output:
        "resources/release/{release_file}",
    log:
        "logs/fetch_release/{release_file}.log",
    wildcard_constraints:
        release_file=predecessor_release.FILE_PATTERN,
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "fetch_release", runtime=10, mem_mb=1000),
    params:
        code=codeversion.of_script("fetch_release.py"),
        url=lambda wildcards: predecessor_release.release_url(wildcards.release_file),
        sha256=lambda wildcards: predecessor_release.RELEASE_FILES[
            wildcards.release_file
        ]["sha256"],
    script:
        "../scripts/fetch_release.py"


rule build_items:
    """Normalise, attach the per-item wrong attractor, sample (or take a release's items) and validate."""
    input:
        raw=lambda wildcards: dag.raw_dataset_input(config, wildcards.dataset),
        # A release-sampled dataset also depends on its release file (fetched, or shipped).
        release=lambda wildcards: predecessor_release.sample_input(
            config, wildcards.dataset
        ),
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
        sample=lambda wildcards: dict(
            config["datasets"][wildcards.dataset].get("sample") or {}
        ),
        peer_source=config.get("conformity", {})
        .get("peers", {})
        .get("source", "generated"),
    script:
        "../scripts/build_items.py"
