# The context-effects card (docs/card.md): `snakemake card` builds, for each model of
# card.models, its headline numbers in every study beside the seed papers' models, and
# only what those numbers need (no text metrics, no paper). The run's other targets are
# untouched; a model added to a finished run adds only its own requests and fits.


rule card:
    """Each card model's card (Markdown, CSV, one figure per study) and the comparison of all of them."""
    input:
        **card.inputs(config, workflow.basedir),
    output:
        **card.outputs(config),
    log:
        "logs/card.log",
    conda:
        "../../envs/amel.yaml"
    resources:
        **dag.rule_resources(config, "card", runtime=5, mem_mb=2000),
    params:
        code=codeversion.of_script("card.py"),
    script:
        "../scripts/card.py"
