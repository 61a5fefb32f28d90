# Study C (seed 002 §2.1, App. B): every answer rated blind by every judge, every
# peer-presented answer rated again informed, anchors scored with and without the
# gold reference. Requests are answered by the generic rules of llm.smk.


rule conformity_judge_requests:
    """Judge requests for one block of items: blind, informed and anchor passes."""
    input:
        item_table="results/items/{dataset}.parquet",
        answers="results/conformity/answers/{dataset}.parquet",
    output:
        "results/requests/conformity/judge/{judge}/{dataset}-{shard}.parquet",
    log:
        "logs/conformity/requests/judge/{judge}/{dataset}-{shard}.log",
    wildcard_constraints:
        shard=r"\d{3}",
        judge=name_regex(
            config["conformity"]["judges"] + config["conformity"]["hosted_judges"]
        ),
    conda:
        "../../envs/data.yaml"
    resources:
        **rule_resources("conformity_judge_requests", runtime=10, mem_mb=4000),
    params:
        model=lambda wildcards: config["models"][wildcards.judge],
        conformity=config["conformity"],
        seed=config["sampling"]["seed"],
    script:
        "../scripts/conformity_judge_requests.py"


rule conformity_ratings:
    """The ratings table of a dataset: every judge request, misses recorded with their reason."""
    input:
        responses=judge_response_shards,
    output:
        "results/conformity/ratings/{dataset}.parquet",
    log:
        "logs/conformity/ratings/{dataset}.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **rule_resources("conformity_ratings", runtime=10, mem_mb=4000),
    params:
        hosted_judges=config["conformity"]["hosted_judges"],
    script:
        "../scripts/conformity_ratings.py"
