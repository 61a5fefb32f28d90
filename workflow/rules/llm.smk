# The LLM execution layer as rules: model preparation and answering request shards.
# Study rules write request shards to results/requests/<study>/<stage>/<model>/<shard>.parquet
# and read the answers from results/responses/...; every paid call also lands in the
# shared response store (results/store), which makes reruns free and resumable.
# Rule request_counts counts what every shard asked, got and paid (results/tables/run/).


rule convert_gguf_model:
    """Convert a GGUF shipped in a PyPI package into a directory vLLM loads directly."""
    output:
        directory("resources/models/{model}"),
    log:
        "logs/convert_gguf_model/{model}.log",
    benchmark:
        "benchmarks/convert_gguf_model/{model}.tsv"
    wildcard_constraints:
        model=dag.name_regex(dag.gguf_models(config)),
    conda:
        "../../envs/vllm.yaml"
    threads: config["run"]["threads_per_job"]
    resources:
        **dag.rule_resources(config, "convert_gguf_model", runtime=30, mem_mb=8000),
    params:
        code=codeversion.of_script("convert_gguf_model.py"),
        package=lambda wildcards: config["models"][wildcards.model]["source"]["package"],
    script:
        "../scripts/convert_gguf_model.py"


rule answer_requests_vllm:
    """Answer one request shard with a local model on vLLM: one model load per job."""
    input:
        requests="results/requests/{study}/{stage}/{model}/{shard}.parquet",
        model=lambda wildcards: dag.model_files(config, wildcards.model),
    output:
        responses="results/responses/{study}/{stage}/{model}/{shard}.parquet",
        ledger="results/ledgers/{study}/{stage}/{model}/{shard}.json",
    log:
        "logs/answer_requests/{study}/{stage}/{model}/{shard}.log",
    benchmark:
        "benchmarks/answer_requests/{study}/{stage}/{model}/{shard}.tsv"
    wildcard_constraints:
        model=dag.name_regex(dag.vllm_models(config)),
        study="[a-z_]+",
        stage="[A-Za-z0-9_.-]+",
        shard="[A-Za-z0-9_.+-]+",
    conda:
        "../../envs/vllm.yaml"
    threads: config["run"]["threads_per_job"]
    resources:
        **dag.rule_resources(config, "answer_requests_vllm", runtime=240, mem_mb=32000),
        gpu=lambda wildcards: dag.model_gpus(config, wildcards.model),
        gpu_model=lambda wildcards: dag.model_gpu_type(config, wildcards.model),
    params:
        code=codeversion.of_script("answer_requests.py"),
        model=lambda wildcards: dag.model_settings(config, wildcards.model),
        replay=config["run"]["replay"],
        # What a killed or failed attempt paid for; not an output, so Snakemake keeps it.
        attempts_log="results/ledgers/.attempts/{study}/{stage}/{model}/{shard}.jsonl",
    script:
        "../scripts/answer_requests.py"


rule answer_requests_remote:
    """Answer one request shard through a hosted API or an HTTP server."""
    input:
        requests="results/requests/{study}/{stage}/{model}/{shard}.parquet",
    output:
        responses="results/responses/{study}/{stage}/{model}/{shard}.parquet",
        ledger="results/ledgers/{study}/{stage}/{model}/{shard}.json",
    log:
        "logs/answer_requests/{study}/{stage}/{model}/{shard}.log",
    benchmark:
        "benchmarks/answer_requests/{study}/{stage}/{model}/{shard}.tsv"
    wildcard_constraints:
        model=dag.name_regex(dag.remote_models(config)),
        study="[a-z_]+",
        stage="[A-Za-z0-9_.-]+",
        shard="[A-Za-z0-9_.+-]+",
    conda:
        "../../envs/llm-api.yaml"
    resources:
        **dag.rule_resources(config, "answer_requests_remote", runtime=720, mem_mb=4000),
        # A global counter: `--resources api=N` bounds concurrent API jobs.
        api=1,
    params:
        code=codeversion.of_script("answer_requests.py"),
        model=lambda wildcards: dag.model_settings(config, wildcards.model),
        replay=config["run"]["replay"],
        # What a killed or failed attempt paid for; not an output, so Snakemake keeps it.
        attempts_log="results/ledgers/.attempts/{study}/{stage}/{model}/{shard}.jsonl",
    script:
        "../scripts/answer_requests.py"


# The synthetic backend's shards: the same script, but a reply is a formula (milliseconds,
# nothing loaded, no API), so under a cluster executor they run on the submitting host
# instead of paying a queue wait, a job start-up and a status poll for seconds of work.
use rule answer_requests_remote as answer_requests_synthetic with:
    wildcard_constraints:
        model=dag.name_regex(dag.synthetic_models(config)),
        study="[a-z_]+",
        stage="[A-Za-z0-9_.-]+",
        shard="[A-Za-z0-9_.+-]+",
    resources:
        **dag.rule_resources(
            config, "answer_requests_synthetic", runtime=30, mem_mb=4000
        ),


rule estimate:
    """What the run's model calls will cost, printed before any is paid (docs/costs.md).

    `snakemake estimate` builds the item tables (no model call) and prints requests,
    tokens, USD and GPU-hours per model and stage; it has no output, so it runs each
    time it is asked for."""
    input:
        costs.estimate_inputs(config),
    log:
        "logs/estimate.log",
    conda:
        "../../envs/data.yaml"
    params:
        code=codeversion.of_script("estimate.py"),
        # The estimate reads every study's design and every model's settings.
        config=config,
    script:
        "../scripts/estimate.py"


rule export_store:
    """All raw responses as one plain Parquet file, for release and replay."""
    output:
        "results/release/responses.parquet",
    log:
        "logs/export_store.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "export_store", runtime=30, mem_mb=8000),
    params:
        code=codeversion.of_script("export_store.py"),
    script:
        "../scripts/export_store.py"


rule request_counts:
    """Requests, answers and paid calls per study, stage and model, from every shard the run answered."""
    input:
        **registry("run").table("request_counts").inputs(config),
    output:
        csv=report(
            "results/tables/run/request_counts.csv",
            caption="../report/registry_caption.rst",
            category="Requests and calls",
        ),
        tex="results/tables/run/request_counts.tex",
    log:
        "logs/request_counts.log",
    conda:
        "../../envs/data.yaml"
    resources:
        **dag.rule_resources(config, "request_counts", runtime=10, mem_mb=4000),
    params:
        code=codeversion.of_script("request_counts.py"),
        caption=report_caption(registry("run").table("request_counts"), config),
        settings=registry("run").table("request_counts").settings(config),
    script:
        "../scripts/request_counts.py"
