# Study H (seed 001): input functions and targets of workflow/rules/anchoring.smk.
# (Snakemake's linter wants functions and rules in separate files.)

ANCHORING_TABLES = ("pull", "conditions", "checks")
ANCHORING_FIGURE_FORMATS = ("pdf", "png")


def anchoring_judges():
    return config["anchoring"]["judges"]


def anchoring_settings(*keys):
    """Only the settings a rule uses, so changing another one reruns nothing here."""
    return {k: config["anchoring"][k] for k in keys}


def anchoring_run_info():
    return {k: config["run"][k] for k in ("label", "kind")}


ANCHORING_TASK_KEYS = ("tasks_per_dataset", "answer_kinds", "seed", "verdict_threshold")
ANCHORING_REQUEST_KEYS = (
    "temperature",
    "top_p",
    "max_tokens",
    "repetitions",
    "max_attempts",
    "seed",
)
ANCHORING_SCORE_KEYS = ANCHORING_REQUEST_KEYS + (
    "verdict_threshold",
    "bootstrap_resamples",
    "bootstrap_method",
    "confidence_level",
)


def anchoring_results():
    return expand("results/anchoring/runs/{judge}.json", judge=anchoring_judges())


def anchoring_report_outputs():
    return {
        **{
            f"{name}_{ext}": f"results/tables/anchoring/{name}.{ext}"
            for name in ANCHORING_TABLES
            for ext in ("csv", "tex")
        },
        **{
            f"figure_{ext}": f"results/figures/anchoring/pull_distribution.{ext}"
            for ext in ANCHORING_FIGURE_FORMATS
        },
    }


def anchoring_targets():
    """The result file of every judge's run, the summary tables and the pull figure."""
    if not config["anchoring"]["enabled"] or not anchoring_judges():
        return []
    return anchoring_results() + list(anchoring_report_outputs().values())
