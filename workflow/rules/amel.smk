# Study A (seed 000): accumulated message effects on Yes/No judgments.
# Answer-verification items are built from the benchmark item tables.


def amel_targets():
    if not config["amel"]["enabled"]:
        return []
    return items_for(config["amel"]["benchmark_datasets"])
