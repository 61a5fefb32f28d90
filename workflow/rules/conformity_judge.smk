# Study C (seed 002, "Judging" and App. B): every answer rated blind by every judge,
# every peer-presented answer rated again informed, anchors scored with and without
# the gold reference. Requests are answered by the generic rules of llm.smk. The
# ratings table, and each all-wrong revision paired with its Round-1 answer, feed the
# study's tables.


rule conformity_judge_requests:
    """Judge requests for one block of items: blind, informed and anchor passes."""
    input:
        unpack(
            lambda wildcards: conformity_dag.judge_inputs(
                config, wildcards.judge, wildcards.shard
            )
        ),
    output:
        "results/requests/conformity/judge/{judge}/{shard}.parquet",
    log:
        "logs/conformity/requests/judge/{judge}/{shard}.log",
    wildcard_constraints:
        judge=dag.name_regex(conformity_dag.all_judges(config)),
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(
            config, "conformity_judge_requests", runtime=10, mem_mb=4000
        ),
    params:
        code=codeversion.of_script("conformity_judge_requests.py"),
        model=lambda wildcards: dag.model_settings(config, wildcards.judge),
        judging=config["conformity"]["judging"],
        block=lambda wildcards: conformity_dag.judge_block(config, wildcards.judge),
        blocks=lambda wildcards: conformity_dag.judge_blocks(
            config, wildcards.judge, wildcards.shard
        ),
        tables=lambda wildcards: conformity_dag.judge_tables(
            config, wildcards.judge, wildcards.shard
        ),
        primary_seed=config["conformity"]["primary_seed"],
        seed=config["sampling"]["seed"],
    script:
        "../scripts/conformity_judge_requests.py"


rule conformity_injection_flags:
    """Answers that address the judge (possible prompt injection): flagged, never altered."""
    input:
        answers="results/conformity/answers/{dataset}.parquet",
    output:
        "results/conformity/injection/{dataset}.parquet",
    log:
        "logs/conformity/injection/{dataset}.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(
            config, "conformity_injection_flags", runtime=10, mem_mb=2000
        ),
    params:
        code=codeversion.of_script("conformity_injection_flags.py"),
        rules=conformity_dag.injection_rules_id(),
    script:
        "../scripts/conformity_injection_flags.py"


rule conformity_ratings:
    """The ratings table of a dataset: every judge request, misses recorded with their reason."""
    input:
        responses=lambda wildcards: conformity_dag.judge_response_shards(
            config, wildcards.dataset
        ),
        # Each response shard is checked against the request shard it answers.
        requests=lambda wildcards: conformity_dag.judge_request_shards(
            config, wildcards.dataset
        ),
        injection="results/conformity/injection/{dataset}.parquet",
    output:
        "results/conformity/ratings/{dataset}.parquet",
    log:
        "logs/conformity/ratings/{dataset}.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "conformity_ratings", runtime=10, mem_mb=4000),
    params:
        code=codeversion.of_script("conformity_ratings.py"),
        hosted_judges=config["conformity"]["hosted_judges"],
    script:
        "../scripts/conformity_ratings.py"


rule conformity_wrong_peer_revisions:
    """Every all-wrong revision beside its Round-1 answer: flip indicator and blind ratings."""
    input:
        item_table="results/items/{dataset}.parquet",
        answers="results/conformity/answers/{dataset}.parquet",
        ratings="results/conformity/ratings/{dataset}.parquet",
    output:
        "results/conformity/revisions/{dataset}.parquet",
    log:
        "logs/conformity/revisions/{dataset}.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(
            config, "conformity_wrong_peer_revisions", runtime=10, mem_mb=4000
        ),
    params:
        code=codeversion.of_script("conformity_revisions.py"),
        primary_seed=config["conformity"]["primary_seed"],
    script:
        "../scripts/conformity_revisions.py"
