# The context-effects card (docs/card.md): `snakemake card` builds, for each model of
# card.models, its headline numbers in every study beside the seed papers' models, and
# only what those numbers need (no text metrics, no paper). The run's other targets are
# untouched; a model added to a finished run adds only its own requests and fits.


rule card:
    """Target: every card, the comparison and, when paper.pdf is on, each card's PDF page."""
    input:
        *card.outputs(config)["cards"],
        *card.outputs(config)["comparison"],
        *card.pdfs(config),


rule card_write:
    """Each card model's card (Markdown, CSV, LaTeX page, one figure per study) and the comparison of all of them."""
    input:
        **card.inputs(config, workflow.basedir),
    output:
        **card.outputs(config),
    log:
        "logs/card.log",
    conda:
        "../../envs/amel.yaml"
    resources:
        **dag.rule_resources(config, "card_write", runtime=5, mem_mb=2000),
    params:
        code=codeversion.of_script("card.py"),
    script:
        "../scripts/card.py"


rule card_pdf:
    """One card's PDF page (latexmk, as the paper is built)."""
    input:
        lambda wildcards: card.pdf_inputs(wildcards.model, config),
    output:
        "results/card/{model}.pdf",
    log:
        "logs/card/{model}_pdf.log",
    wildcard_constraints:
        model=dag.name_regex(card.card_models(config)),
    conda:
        "../../envs/latex.yaml"
    resources:
        **dag.rule_resources(config, "card_pdf", runtime=10, mem_mb=2000),
    params:
        code=codeversion.of_script("card_pdf.py"),
    script:
        "../scripts/card_pdf.py"
