# Study C measurement model (seed 002, "Measurement model", App. C): one fit per
# (dataset, variant) from the ratings table, posterior draws + summary + diagnostics
# per fit, and the registry's `fit` tables and forest plots from the summaries. Which
# fits exist is decided once, by context_effects.measurement.pipeline.fit_plan.


rule conformity_fit:
    """Fit the hierarchical ordinal model (seed 002 Eq. 6-8) for one dataset and variant
    (the generator-mean variants: this project's per-generator baseline means; the
    reference-free variant: anchors scored without the gold answer, seed 002 §3.4; the
    blind-quality variant: Table 15's blind ratings of every execution). Every output
    records spec, settings and families; each reader checks them (measurement.records).
    """
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
        variant=dag.name_regex(conformity_dag.fit_variants(config)),
    conda:
        "../../envs/measurement.yaml"
    threads: conformity_dag.fit_threads(config)
    resources:
        **dag.rule_resources(config, "conformity_fit", runtime=1440, mem_mb=8000),
    params:
        code=codeversion.of_script("fit_model.py"),
        spec=lambda wildcards: conformity_dag.fit_spec(
            config, wildcards.dataset, wildcards.variant
        ),
        settings=conformity_dag.fit_settings(config),
        families=lambda wildcards: conformity_dag.fit_families(
            config, wildcards.dataset, wildcards.variant
        ),
    script:
        "../scripts/fit_model.py"


rule conformity_quality:
    """Per-answer blind latent quality θ of every execution's answers (the blind-quality fit),
    for the convergent-validity table (seed 002 Table 15)."""
    input:
        "results/conformity/fits/{dataset}/blind-quality/quality.parquet",
    output:
        "results/conformity/quality/{dataset}.parquet",
    log:
        "logs/conformity/quality/{dataset}.log",
    conda:
        "../../envs/measurement.yaml"
    resources:
        **dag.rule_resources(config, "conformity_quality", runtime=10, mem_mb=2000),
    params:
        code=codeversion.of_script("fit_quality.py"),
        made_with=lambda wildcards: conformity_dag.fit_key(
            config, wildcards.dataset, "blind-quality"
        ),
    script:
        "../scripts/fit_quality.py"


rule conformity_fit_table:
    """One model-based table (3, 4, 9, 10-12, 17, 20, table3_generator_mean, table3_reference_free,
    table4_by_dataset) from the summaries of its fits."""
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
        "logs/conformity/tables/{name}.log",
    wildcard_constraints:
        name=dag.name_regex(registry("conformity").names(TableSpec, "fit")),
    conda:
        "../../envs/measurement.yaml"
    resources:
        **dag.rule_resources(config, "conformity_fit_table", runtime=10, mem_mb=2000),
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


rule conformity_fit_figure:
    """One model-based figure (the forest plots of Tables 3 and 4), with the numbers it plots."""
    input:
        unpack(
            lambda wildcards: registry("conformity")
            .figure(wildcards.name)
            .inputs(config)
        ),
    output:
        csv="results/figures/conformity/{name}.csv",
        pdf="figures/conformity/{name}.pdf",
        png=report(
            "figures/conformity/{name}.png",
            caption="../report/registry_caption.rst",
            category="Study C: open-ended conformity",
            subcategory="Figures",
        ),
    log:
        "logs/conformity/figures/{name}.log",
    wildcard_constraints:
        name=dag.name_regex(registry("conformity").names(FigureSpec, "fit")),
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "conformity_fit_figure", runtime=10, mem_mb=2000),
    params:
        code=lambda wildcards: codeversion.of_entry(
            "conformity", "figure", wildcards.name
        ),
        study="conformity",
        caption=lambda wildcards: report_caption(
            registry("conformity").figure(wildcards.name), config
        ),
        settings=lambda wildcards: registry("conformity")
        .figure(wildcards.name)
        .settings(config),
    script:
        "../scripts/draw_figure.py"
