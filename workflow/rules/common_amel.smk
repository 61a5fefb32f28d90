# Study A (seed 000): input functions and targets of workflow/rules/amel.smk.
# (Snakemake's linter wants functions and rules in separate files.)

from context_effects.amel import ANALYSIS_NAMES as AMEL_ANALYSES

AMEL_FIGURE_FORMATS = ("pdf", "png")


def amel_domains():
    """Benchmark domains (answer verification) and item-file domains, in config order."""
    a = config["amel"]
    clash = sorted(set(a["benchmark_datasets"]) & set(a["item_files"]))
    if clash:
        raise ValueError(
            f"amel.item_files uses the benchmark name(s) {clash} as domain names; "
            "rename those domains (benchmark domains are built from results/items/)"
        )
    return list(a["benchmark_datasets"]) + list(a["item_files"])


AMEL_ITEM_KEYS = ("items_per_domain", "answers_per_question", "seed")
AMEL_DESIGN_KEYS = (
    "history_lengths",
    "saturation_share",
    "position_history_length",
    "position_biased_turns",
    "positions",
    "framing_swap",
    "framing_history_lengths",
    "probability_method",
    "n_samples",
    "seed",
)


def amel_settings(keys):
    """Only the settings a rule uses, so changing another one does not rerun it."""
    return {k: config["amel"][k] for k in keys}


def amel_models():
    return config["amel"]["models"]


def amel_domain_source(wildcards):
    """The benchmark item table or the item file a domain is built from."""
    if wildcards.domain in config["amel"]["item_files"]:
        return {"item_file": config["amel"]["item_files"][wildcards.domain]}
    return {"item_table": items_path(wildcards.domain)}


def amel_response_shards(wildcards):
    return expand(
        "results/responses/amel/judge/{model}/{domain}.parquet",
        model=amel_models(),
        domain=amel_domains(),
    )


def amel_table_outputs(name):
    return {
        "csv": f"results/tables/amel/{name}.csv",
        "tex": f"results/tables/amel/{name}.tex",
    }


def amel_targets():
    """Every AMEL table (CSV + LaTeX) and figure (PDF + PNG)."""
    if not config["amel"]["enabled"] or not amel_models():
        return []
    return expand(
        "results/tables/amel/{name}.{ext}", name=AMEL_ANALYSES, ext=("csv", "tex")
    ) + expand(
        "results/figures/amel/{name}.{ext}", name=AMEL_ANALYSES, ext=AMEL_FIGURE_FORMATS
    )
