# Study H (seed 001): input functions and targets of workflow/rules/anchoring.smk.
# (Snakemake's linter wants functions and rules in separate files.)


def anchoring_targets():
    if not config["anchoring"]["enabled"]:
        return []
    return items_for(config["anchoring"]["benchmark_datasets"])
