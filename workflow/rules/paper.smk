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
        config=config,
    script:
        "../scripts/run_manifest.py"


rule run_report:
    """The run report: caveats, parse failures, injection flags, failed diagnostics, then every table and figure."""
    input:
        manifest="results/run/manifest.json",
        tables=dag.report_tables(config),
        figures=dag.report_figures(config),
        injection=conformity_dag.injection_tables(config),
    output:
        "results/report/report.md",
    log:
        "logs/run_report.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "run_report", runtime=5, mem_mb=2000),
    script:
        "../scripts/run_report.py"
