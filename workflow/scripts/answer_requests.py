"""Answer one request shard (see context_effects.llm.shards).

Everything runs under the __main__ guard: vLLM starts its engine in a spawned
process that re-runs this file by path, where Snakemake's `snakemake` object does
not exist; the guard keeps that re-run inert.

SIGTERM (Slurm at a time limit) or SIGINT: answer_shard sends nothing more, lets
the calls in flight come back, stores every answer and raises JobInterrupted; the
job then exits with 128 + the signal's number. What every attempt paid for stays in
params.attempts_log (not an output, so Snakemake does not delete it) and is
folded into the ledger of the run that finishes the shard. A second process on the
same shard waits for the first (answer_shard's shard lock) and names it in the log.
"""


def main(snakemake):
    from context_effects.jobs import bound_threads, setup_job_logging

    bound_threads(snakemake.threads)  # before torch/vLLM are imported
    log = setup_job_logging(snakemake.log[0])

    import sys

    from context_effects.llm.factory import make_backend
    from context_effects.llm.ledger import RunBudget
    from context_effects.llm.pricing import BILLED, batch_factor, effective_prices
    from context_effects.llm.runner import BudgetReached, OutputBudgetExhausted, WriteFailed
    from context_effects.llm.shards import JobInterrupted, answer_shard
    from context_effects.llm.store.responses import ResponseStore

    from context_effects.dag import with_speed_settings

    model = snakemake.wildcards.model
    store = ResponseStore("results/store")
    # The rule's params hold what changes an answer; how fast it comes (GPUs,
    # concurrency, engine memory) is read from the run's config and reruns nothing.
    settings = with_speed_settings(snakemake.params.model, snakemake.config, model)
    backend = make_backend(
        model,
        settings,
        store=store,
        state_dir=f"results/state/{model}",
        replay=snakemake.params.replay,
    )
    # run.budget_usd is read from the run's config, not passed as a param: raising it
    # changes no answer and must rerun nothing. Only calls billed per token count against
    # it; a local model's job is not stopped by what the hosted ones paid.
    budget_usd = snakemake.config.get("run", {}).get("budget_usd")
    budget = None
    if budget_usd is not None and settings["backend"] in BILLED and not snakemake.params.replay:
        # Prices bound each call a reservation holds (RunBudget.reserve).
        budget = RunBudget(budget_usd, "results/ledgers/.attempts", prices=effective_prices(settings),
                           factor=batch_factor(settings))
    try:
        with backend:
            ledger = answer_shard(
                snakemake.input.requests,
                snakemake.output.responses,
                snakemake.output.ledger,
                backend,
                store,
                attempts_log=snakemake.params.attempts_log,
                model_name=model,
                budget=budget,
            )
    except (BudgetReached, OutputBudgetExhausted, WriteFailed) as exc:
        # Stopped on purpose: the cause, not a traceback (the run's closing summary
        # repeats it, from the attempts log).
        log.error("%s: %s", model, exc)
        print(f"{model}: {exc}", file=sys.stderr)
        sys.exit(1)
    except JobInterrupted as exc:
        log.error("%s: interrupted (%s); the answers received are stored, a rerun asks only the rest", model, exc)
        sys.exit(128 + exc.signum)
    log.info(
        "%s: %d calls (over %d attempts), %d cache hits, %d failures",
        model,
        ledger.calls,
        ledger.runs,
        ledger.cache_hits,
        ledger.failures,
    )


if __name__ == "__main__":
    main(snakemake)  # noqa: F821 - injected by Snakemake
