# Synthetic runs only (run.kind synthetic, or any synthetic model a study calls): the
# values the synthetic models plant, from the config alone, and the planted-vs-estimated
# table with coverage for every study (context_effects.recovery). For other runs
# targets.synthetic_targets is empty and nothing here is asked for.


rule synthetic_planted:
    """Every value the synthetic models plant, by study and model (the simulators' resolved values)."""
    output:
        "results/synthetic/planted.json",
    log:
        "logs/synthetic/planted.log",
    conda:
        "../../envs/amel.yaml"
    resources:
        **dag.rule_resources(config, "synthetic_planted", runtime=5, mem_mb=1000),
    params:
        code=codeversion.of_script("synthetic_planted.py"),
        inputs=targets.synthetic_planted_params(config),
    script:
        "../scripts/synthetic_planted.py"


rule recovery:
    """Planted values against the run's estimates (fits, AMEL analysis tables, Study H pull statistics), with coverage."""
    input:
        **targets.recovery_inputs(config),
    output:
        csv="results/synthetic/recovery.csv",
        md="results/synthetic/recovery.md",
    log:
        "logs/synthetic/recovery.log",
    conda:
        "../../envs/amel.yaml"
    resources:
        **dag.rule_resources(config, "recovery", runtime=10, mem_mb=2000),
    params:
        code=codeversion.of_script("recovery_table.py"),
        made_with=targets.recovery_fit_keys(config),
    script:
        "../scripts/recovery_table.py"
