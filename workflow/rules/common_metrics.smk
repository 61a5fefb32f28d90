# Study C external validation and text metrics (seed 002 App. E, F): input functions
# and targets of workflow/rules/conformity_metrics.smk.

METRIC_KINDS = ("text", "neural", "classifiers")
#: Tables of this stage: each is written by its own rule (conformity_<name>).
METRIC_TABLES = (
    "table6",
    "table7",
    "table8",
    "table13",
    "table14",
    "table15",
    "table16",
    "table18",
    "table19",
)


def metrics_datasets():
    return config["conformity"]["datasets"]


def metric_rows(kind):
    return [
        f"results/conformity/metrics/{kind}/{d}.parquet" for d in metrics_datasets()
    ]


def metric_infos(kinds=METRIC_KINDS):
    return [
        f"results/conformity/metrics/{kind}/{d}.json"
        for kind in kinds
        for d in metrics_datasets()
    ]


def merged_metrics():
    return [f"results/conformity/metrics/{d}.parquet" for d in metrics_datasets()]


def quality_tables():
    return [f"results/conformity/quality/{d}.parquet" for d in metrics_datasets()]


def ratings_tables():
    return [f"results/conformity/ratings/{d}.parquet" for d in metrics_datasets()]


def metrics_table_files(name):
    return {
        "csv": f"results/tables/conformity/{name}.csv",
        "tex": f"results/tables/conformity/{name}.tex",
    }


def has_producer(path):
    """Whether some rule of this workflow writes `path` (a stage still being built
    elsewhere in the DAG may not exist yet: its tables wait for it)."""
    return any(r.is_producer(path) for r in workflow.rules)


def metric_tables_available():
    needs = {
        "table15": quality_tables(),
        "table19": ratings_tables(),
    }
    return [
        name
        for name in METRIC_TABLES
        if all(has_producer(p) for p in needs.get(name, []))
    ]


def budget_inputs(wildcards):
    """Table 7 is a late rule: it runs after the outputs whose jobs it measures
    (answers, ratings, metric and quality tables, this stage's other tables), so the
    benchmark files of everything the run did are on disk when it reads them."""
    late = [
        f
        for name in metric_tables_available()
        if name not in ("table6", "table7", "table8")
        for f in metrics_table_files(name).values()
    ]
    answers = [f"results/conformity/answers/{d}.parquet" for d in metrics_datasets()]
    return answers + late


def model_gpus():
    """GPUs an answer_requests job of each local (vLLM) model holds."""
    return {
        name: m["gpu"]["count"]
        for name, m in config["models"].items()
        if m["backend"] == "vllm"
    }


def metric_stage_gpus():
    n = config["conformity"]["validation"]["gpu"]["count"]
    return {"conformity_metrics/neural": n, "conformity_metrics/classifiers": n}


def metric_gpu_type(wildcards):
    gpu = config["conformity"]["validation"]["gpu"]
    return (gpu["model"] or "") if gpu["count"] else ""


def metrics_targets():
    if not config["conformity"]["enabled"]:
        return []
    return [
        f
        for name in metric_tables_available()
        for f in metrics_table_files(name).values()
    ]
