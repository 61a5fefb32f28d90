# Study C measurement model: one fit per (dataset, variant) from the ratings table,
# posterior draws + summary + diagnostics per fit, and the paper's model-based
# tables from the summaries.


rule conformity_fit:
    """Fit the hierarchical ordinal model (seed 002 Eq. 6-8) for one dataset and variant."""
    input:
        ratings="results/conformity/ratings/{dataset}.parquet",
    output:
        posterior="results/conformity/fits/{dataset}/{variant}/posterior.nc",
        summary="results/conformity/fits/{dataset}/{variant}/summary.csv",
        diagnostics="results/conformity/fits/{dataset}/{variant}/diagnostics.json",
        quality="results/conformity/fits/{dataset}/{variant}/quality.parquet",
    log:
        "logs/conformity/fits/{dataset}/{variant}.log",
    benchmark:
        "benchmarks/conformity_fit/{dataset}/{variant}.tsv"
    wildcard_constraints:
        variant=name_regex(FIT_VARIANTS),
    conda:
        "../../envs/measurement.yaml"
    threads: fit_threads()
    resources:
        **rule_resources("conformity_fit", runtime=1440, mem_mb=8000),
    params:
        spec=fit_spec,
        settings=fit_settings(),
        families=fit_families,
    script:
        "../scripts/fit_model.py"


rule conformity_quality:
    """Per-answer latent quality θ of the main fit, for the convergent-validity table."""
    input:
        "results/conformity/fits/{dataset}/main/quality.parquet",
    output:
        "results/conformity/quality/{dataset}.parquet",
    log:
        "logs/conformity/quality/{dataset}.log",
    conda:
        "../../envs/measurement.yaml"
    resources:
        **rule_resources("conformity_quality", runtime=10, mem_mb=2000),
    script:
        "../scripts/fit_quality.py"


rule conformity_fit_table:
    """One of seed 002's model-based tables (3, 4, 9, 10-12, 17, 20) from fit summaries."""
    input:
        fit_table_inputs,
    output:
        csv="results/tables/conformity/table{table}.csv",
        tex="results/tables/conformity/table{table}.tex",
    log:
        "logs/conformity/tables/table{table}.log",
    wildcard_constraints:
        table="|".join(TABLES),
    conda:
        "../../envs/measurement.yaml"
    resources:
        **rule_resources("conformity_fit_table", runtime=10, mem_mb=2000),
    params:
        conformity=config["conformity"],
        models=config["models"],
        run=config["run"],
    script:
        "../scripts/fit_tables.py"
