# Study H (seed 001): the history-anchoring benchmark.
# Judging tasks are built from the benchmark item tables.


def anchoring_targets():
    if not config["anchoring"]["enabled"]:
        return []
    return items_for(config["anchoring"]["benchmark_datasets"])
