# Study C (seed 002): Round 1 and Round 2 answers of every generator, for the main
# corpus (one execution per seed label) and the decomposition corpus. Requests are
# answered by the generic rules of llm.smk; this file builds them and collects the
# answers.


rule conformity_round1_requests:
    """Round-1 requests of one shard of items (seed 002 App. A.1)."""
    input:
        item_tables=lambda wildcards: list(
            conformity_dag.shard_item_tables(config, wildcards.shard).values()
        ),
    output:
        "results/requests/conformity/{corpus}-round1-s{seed}/{generator}/{shard}.parquet",
    log:
        "logs/conformity/requests/{corpus}-round1-s{seed}/{generator}/{shard}.log",
    wildcard_constraints:
        corpus="main|decomp",
        seed=r"\d+",
        shard=dag.name_regex(conformity_dag.generation_shards(config)),
        generator=dag.name_regex(conformity_dag.generators(config)),
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(
            config, "conformity_round1_requests", runtime=10, mem_mb=2000
        ),
    params:
        code=codeversion.of_script("conformity_requests.py"),
        model=lambda wildcards: dag.model_settings(config, wildcards.generator),
        generation=config["conformity"]["generation"],
        item_tables=lambda wildcards: conformity_dag.shard_item_tables(
            config, wildcards.shard
        ),
        blocks=lambda wildcards: conformity_dag.shard_blocks(config, wildcards.shard),
    script:
        "../scripts/conformity_requests.py"


rule conformity_round2_requests:
    """Round-2 arms branched from each realised Round-1 answer (seed 002 §2.1, App. A.1)."""
    input:
        item_tables=lambda wildcards: list(
            conformity_dag.shard_item_tables(config, wildcards.shard).values()
        ),
        round1="results/responses/conformity/{corpus}-round1-s{seed}/{generator}/{shard}.parquet",
    output:
        "results/requests/conformity/{corpus}-round2-s{seed}/{generator}/{shard}.parquet",
    log:
        "logs/conformity/requests/{corpus}-round2-s{seed}/{generator}/{shard}.log",
    wildcard_constraints:
        corpus="main|decomp",
        seed=r"\d+",
        shard=dag.name_regex(conformity_dag.generation_shards(config)),
        generator=dag.name_regex(conformity_dag.generators(config)),
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(
            config, "conformity_round2_requests", runtime=10, mem_mb=2000
        ),
    params:
        code=codeversion.of_script("conformity_requests.py"),
        model=lambda wildcards: dag.model_settings(config, wildcards.generator),
        generation=config["conformity"]["generation"],
        peers=config["conformity"]["peers"],
        item_tables=lambda wildcards: conformity_dag.shard_item_tables(
            config, wildcards.shard
        ),
        blocks=lambda wildcards: conformity_dag.shard_blocks(config, wildcards.shard),
    script:
        "../scripts/conformity_requests.py"


rule conformity_anchor_requests:
    """Synthetic runs only: tagged anchors at ±θ_a from the synthetic generator (see `anchor_requests`)."""
    input:
        item_tables=lambda wildcards: list(
            conformity_dag.shard_item_tables(config, wildcards.shard).values()
        ),
    output:
        "results/requests/conformity/anchors/{generator}/{shard}.parquet",
    log:
        "logs/conformity/requests/anchors/{generator}/{shard}.log",
    wildcard_constraints:
        shard=dag.name_regex(conformity_dag.generation_shards(config)),
        generator=dag.name_regex(conformity_dag.anchor_generator(config)),
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(
            config, "conformity_anchor_requests", runtime=10, mem_mb=2000
        ),
    params:
        code=codeversion.of_script("conformity_requests.py"),
        model=lambda wildcards: dag.model_settings(config, wildcards.generator),
        generation=config["conformity"]["generation"],
        seed=config["sampling"]["seed"],
        item_tables=lambda wildcards: conformity_dag.shard_item_tables(
            config, wildcards.shard
        ),
        blocks=lambda wildcards: conformity_dag.shard_blocks(config, wildcards.shard),
    script:
        "../scripts/conformity_requests.py"


rule conformity_answers:
    """Every answer of a dataset (all generators, executions, arms) plus the anchors."""
    input:
        item_table="results/items/{dataset}.parquet",
        responses=lambda wildcards: conformity_dag.response_shards(
            config, wildcards.dataset
        ),
        anchors=lambda wildcards: conformity_dag.anchor_response_shards(
            config, wildcards.dataset
        ),
        # Each response shard is checked against the request shard it answers.
        requests=lambda wildcards: conformity_dag.request_shards(
            config, wildcards.dataset
        ),
        anchor_requests=lambda wildcards: conformity_dag.anchor_request_shards(
            config, wildcards.dataset
        ),
    output:
        "results/conformity/answers/{dataset}.parquet",
    log:
        "logs/conformity/answers/{dataset}.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "conformity_answers", runtime=10, mem_mb=4000),
    params:
        code=codeversion.of_script("conformity_answers.py"),
        generation=config["conformity"]["generation"],
    script:
        "../scripts/conformity_answers.py"
