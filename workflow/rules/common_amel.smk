# Study A (seed 000): input functions and targets of workflow/rules/amel.smk.
# (Snakemake's linter wants functions and rules in separate files.)


def amel_targets():
    if not config["amel"]["enabled"]:
        return []
    return items_for(config["amel"]["benchmark_datasets"])
