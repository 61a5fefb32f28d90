# Study A (seed 000): accumulated message effects. Per domain an item table (test
# items and the history pool) -> per model x domain one request shard (answered by
# the generic rules of llm.smk) -> P(Yes) per cell and bias scores -> one table and
# one figure per analysis, each by its own job.


rule amel_items:
    """One domain's Yes/No items: answer verification from a benchmark, or an item file."""
    input:
        unpack(amel_domain_source),
    output:
        "results/amel/items/{domain}.parquet",
    log:
        "logs/amel/items/{domain}.log",
    wildcard_constraints:
        domain=name_regex(amel_domains()),
    conda:
        "../../envs/amel.yaml"
    resources:
        **rule_resources("amel_items", runtime=10, mem_mb=2000),
    params:
        settings=amel_settings(AMEL_ITEM_KEYS),
    script:
        "../scripts/amel_items.py"


rule amel_requests:
    """Every cell of every test item of one domain for one model, in prefix-sharing order."""
    input:
        item_table="results/amel/items/{domain}.parquet",
    output:
        "results/requests/amel/judge/{model}/{domain}.parquet",
    log:
        "logs/amel/requests/{model}/{domain}.log",
    wildcard_constraints:
        domain=name_regex(amel_domains()),
        model=name_regex(amel_models()),
    conda:
        "../../envs/amel.yaml"
    resources:
        **rule_resources("amel_requests", runtime=10, mem_mb=4000),
    params:
        model=lambda wildcards: config["models"][wildcards.model],
        settings=amel_settings(AMEL_DESIGN_KEYS),
    script:
        "../scripts/amel_requests.py"


rule amel_scores:
    """P(Yes) of every model x item x cell, and the bias score of every treatment cell."""
    input:
        responses=amel_response_shards,
    output:
        probabilities="results/amel/probabilities.parquet",
        bias_scores="results/amel/bias_scores.parquet",
    log:
        "logs/amel/scores.log",
    conda:
        "../../envs/amel.yaml"
    resources:
        **rule_resources("amel_scores", runtime=20, mem_mb=8000),
    params:
        models={m: config["models"][m] for m in config["amel"]["models"]},
        settings=amel_settings(("entropy_threshold_bits",)),
    script:
        "../scripts/amel_scores.py"


rule amel_table:
    """One analysis table (CSV with full precision, LaTeX for the paper)."""
    input:
        probabilities="results/amel/probabilities.parquet",
        bias_scores="results/amel/bias_scores.parquet",
    output:
        csv="results/tables/amel/{analysis}.csv",
        tex="results/tables/amel/{analysis}.tex",
    log:
        "logs/amel/table/{analysis}.log",
    wildcard_constraints:
        analysis="|".join(AMEL_ANALYSES),
    conda:
        "../../envs/amel.yaml"
    resources:
        **rule_resources("amel_table", runtime=10, mem_mb=4000),
    params:
        settings=amel_settings(("framing_history_lengths",)),
        run=config["run"],
    script:
        "../scripts/amel_table.py"


rule amel_figure:
    """One analysis figure, drawn from its table and the item-level scores."""
    input:
        table="results/tables/amel/{analysis}.csv",
        probabilities="results/amel/probabilities.parquet",
        bias_scores="results/amel/bias_scores.parquet",
    output:
        pdf="results/figures/amel/{analysis}.pdf",
        png="results/figures/amel/{analysis}.png",
    log:
        "logs/amel/figure/{analysis}.log",
    wildcard_constraints:
        analysis="|".join(AMEL_ANALYSES),
    conda:
        "../../envs/amel.yaml"
    resources:
        **rule_resources("amel_figure", runtime=10, mem_mb=4000),
    params:
        settings=amel_settings(("entropy_threshold_bits",)),
        run=config["run"],
    script:
        "../scripts/amel_figure.py"
