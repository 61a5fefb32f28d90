# The paper: run manifest (resolved config, package versions), later every table,
# figure, the LaTeX build and the verification of printed numbers.


rule run_manifest:
    """Resolved configuration (all defaults filled) and installed package versions."""
    output:
        "results/run/manifest.json",
    log:
        "logs/run_manifest.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "run_manifest", runtime=5, mem_mb=1000),
    params:
        code=codeversion.of_script("run_manifest.py"),
        # Speed settings stay out: changing one rewrites no record and reruns nothing.
        config=dag.result_settings(config),
    script:
        "../scripts/run_manifest.py"


rule run_report:
    """The run report: caveats, parse failures, injection flags, failed diagnostics, then every table and figure."""
    input:
        manifest="results/run/manifest.json",
        tables=targets.report_tables(config),
        figures=targets.report_figures(config),
        injection=conformity_dag.injection_tables(config),
        reproduction="results/report/reproduction.csv",
        ledger=targets.deviations_ledger(workflow.basedir),
        recovery=targets.recovery_report_input(config),
        ledgers=targets.ledger_files(config),
    output:
        "results/report/report.md",
    log:
        "logs/run_report.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "run_report", runtime=5, mem_mb=2000),
    params:
        code=codeversion.of_script("run_report.py"),
    script:
        "../scripts/run_report.py"


rule reproduction_report:
    """Every number the seed papers print (paper/published) beside what this run reproduced."""
    input:
        manifest="results/run/manifest.json",
        published=targets.published_files(workflow.basedir),
        tables=targets.report_tables(config),
    output:
        csv=report(
            "results/report/reproduction.csv",
            caption="../report/reproduction.rst",
            category="Reproduction against the seed papers",
        ),
        md="results/report/reproduction.md",
        tex="results/report/reproduction.tex",
    log:
        "logs/reproduction_report.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "reproduction_report", runtime=5, mem_mb=2000),
    params:
        code=codeversion.of_script("reproduction_report.py"),
    script:
        "../scripts/reproduction_report.py"


rule paper_numbers:
    """The numbers the paper prints, as LaTeX macros (paper/numbers.yaml; a value this run lacks prints n/a)."""
    input:
        spec=f"{workflow.basedir}/paper/numbers.yaml",
        manifest="results/run/manifest.json",
        tables=targets.report_tables(config),
    output:
        tex="results/paper/numbers.tex",
        warnings="results/paper/numbers_warnings.txt",
    log:
        "logs/paper_numbers.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "paper_numbers", runtime=5, mem_mb=1000),
    params:
        code=codeversion.of_script("paper_numbers.py"),
    script:
        "../scripts/paper_numbers.py"


rule paper_deviations:
    """The deviations ledger (docs/deviations.yaml) as the paper's appendix tables."""
    input:
        ledger=targets.deviations_ledger(workflow.basedir),
    output:
        "results/paper/deviations.tex",
    log:
        "logs/paper_deviations.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "paper_deviations", runtime=5, mem_mb=1000),
    params:
        code=codeversion.of_script("paper_deviations.py"),
    script:
        "../scripts/paper_deviations.py"


rule paper_pdf:
    """The paper: the number check, then latexmk on paper/paper.tex with this run's numbers, tables and figures."""
    input:
        **targets.paper_inputs(config, workflow.basedir),
    output:
        pdf="paper/paper.pdf",
    log:
        "logs/paper_pdf.log",
    conda:
        "../../envs/latex.yaml"
    resources:
        **dag.rule_resources(config, "paper_pdf", runtime=15, mem_mb=2000),
    params:
        code=codeversion.of_script("paper_pdf.py"),
        build_dir="results/paper/build",
    script:
        "../scripts/paper_pdf.py"
