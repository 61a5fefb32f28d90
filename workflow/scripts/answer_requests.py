"""Answer one request shard (see context_effects.llm.shards).

Everything runs under the __main__ guard: vLLM starts its engine in a spawned
process that re-runs this file by path, where Snakemake's `snakemake` object does
not exist; the guard keeps that re-run inert.
"""


def main(snakemake):
    from context_effects.jobs import bound_threads, setup_job_logging

    bound_threads(snakemake.threads)  # before torch/vLLM are imported
    log = setup_job_logging(snakemake.log[0])

    from context_effects.llm.factory import make_backend
    from context_effects.llm.shards import answer_shard
    from context_effects.llm.store import ResponseStore

    model = snakemake.wildcards.model
    store = ResponseStore("results/store")
    backend = make_backend(
        model,
        snakemake.params.model,
        store=store,
        state_dir=f"results/state/{model}",
        replay=snakemake.params.replay,
    )
    with backend:
        ledger = answer_shard(
            snakemake.input.requests,
            snakemake.output.responses,
            snakemake.output.ledger,
            backend,
            store,
        )
    log.info("%s: %d calls, %d cache hits, %d failures", model, ledger.calls, ledger.cache_hits, ledger.failures)

if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake
