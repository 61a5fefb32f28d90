"""Answer one request shard (see context_effects.llm.shards)."""

import sys

sys.path.insert(0, f"{snakemake.scriptdir}/../../src")  # the project library, no install needed

from context_effects.jobs import bound_threads, setup_job_logging

bound_threads(snakemake.threads)
log = setup_job_logging(snakemake.log[0])

from context_effects.llm.factory import make_backend  # noqa: E402  (after thread bounds)
from context_effects.llm.shards import answer_shard  # noqa: E402
from context_effects.llm.store import ResponseStore  # noqa: E402


def main():
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


if __name__ == "__main__":  # vLLM spawns worker processes that re-import this file
    main()
