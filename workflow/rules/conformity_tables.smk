# Study C's model-free results (seed 002, "Results"): every table and figure of the
# registry's `descriptive` stage (context_effects.conformity.outputs), by one wildcard
# rule each, from the ratings, answers and revisions tables.


rule conformity_table:
    """One model-free table (CSV + LaTeX) of the registry's descriptive stage."""
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
        name=dag.name_regex(registry("conformity").names(TableSpec, "descriptive")),
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "conformity_table", runtime=10, mem_mb=4000),
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


rule conformity_figure:
    """One figure of the registry's descriptive stage, with the numbers it plots."""
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
        name=dag.name_regex(registry("conformity").names(FigureSpec, "descriptive")),
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "conformity_figure", runtime=10, mem_mb=4000),
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
