"""Where each rule's jobs run under a cluster executor: on the submitting host, or as
a scheduler job of their own.

A scheduler job costs a queue wait and a node start-up (often minutes) before it runs;
a job of seconds (a table, a figure, a request shard's prompts, a report) pays that
many times over, and hundreds of them crowd the queue. Those run on the host that runs
Snakemake (the Snakefile registers :data:`LOCAL_RULES` as `localrules`). The rest
hold a model, a GPU, a long API session or minutes of CPU, and are submitted.

Every rule of the workflow is in exactly one of the two mappings (the test suite
checks it against the parsed workflow), so a new rule is placed on purpose. Under the
local executor (`make demo`) both run alike.

The Snakefile's hooks that depend on where the run executes live here too: the Slurm
account check, the cancelling of a stopped run's leftover cluster jobs, and a local
run's scheduler without Snakemake's job rate limiter.
"""

from __future__ import annotations

import getpass
import subprocess
from typing import Any

# rule -> why it runs on the submitting host
LOCAL_RULES: dict[str, str] = {
    "all": "target rule, runs nothing",
    "fetch_dataset": "a small download at a pinned revision; compute nodes often have no network",
    "fetch_release": "three small files at a pinned commit; compute nodes often have no network",
    "build_items": "item tables from the downloaded splits, seconds",
    "metrics_nltk_data": "copies a few files of Debian's WordNet and the CMU dictionary",
    "amel_items": "item table, seconds",
    "amel_requests": "writes prompts, seconds",
    "amel_table": "one table from scored results",
    "amel_figure": "one figure from scored results",
    "anchoring_tasks": "task table, seconds",
    "anchoring_requests": "writes prompts, seconds",
    "anchoring_table": "one table from scored results",
    "anchoring_figure": "one figure from scored results",
    "answer_requests_synthetic": "the synthetic backend answers a shard from a formula, seconds",
    "estimate": "prints the cost estimate from the item tables, no model call",
    "conformity_round1_requests": "writes prompts, seconds",
    "conformity_round2_requests": "writes prompts, seconds",
    "conformity_anchor_requests": "writes prompts, seconds",
    "conformity_answers": "joins responses into the answers table",
    "conformity_judge_requests": "writes prompts, seconds",
    "conformity_injection_flags": "string checks over the answers",
    "conformity_ratings": "joins responses into the ratings table",
    "conformity_wrong_peer_revisions": "a filter over the answers table",
    "conformity_quality": "reads posterior means from a finished fit",
    "conformity_fit_table": "one table from finished fits",
    "conformity_fit_figure": "one figure from finished fits",
    "conformity_metrics_rows": "joins the per-answer metric rows",
    "conformity_metrics_table": "one table from the metric rows",
    "conformity_table": "one table from answers and ratings",
    "conformity_figure": "one figure from answers and ratings",
    "run_manifest": "a manifest of the run's settings and versions",
    "request_counts": "counts the rows of the run's shards (their footers) and sums its ledgers",
    "run_report": "the run report from finished tables",
    "reproduction_report": "compares finished tables with the seed papers' numbers",
    "card": "target rule, runs nothing",
    "card_write": "reads finished tables into each model's card and draws a figure per study",
    "card_pdf": "one LaTeX page, seconds",
    "paper_numbers": "writes the paper's number macros",
    "paper_deviations": "renders the deviations list",
    "paper_pdf": "one latexmk run on finished tables and figures",
    "synthetic_planted": "writes the planted values of a synthetic run",
    "recovery": "compares planted values with finished estimates",
}

# rule -> why it is a scheduler job of its own
CLUSTER_RULES: dict[str, str] = {
    "convert_gguf_model": "dequantises a model to safetensors: minutes of CPU and GBs of memory",
    "answer_requests_vllm": "loads a local model, on a GPU when the model's config gives one",
    "answer_requests_remote": "a long hosted-API session; the `api` resource caps how many run",
    "conformity_answer_metrics": "metric models (SBERT, BERTScore, NLI) over every answer, GPU-tagged",
    "conformity_fit": "NUTS sampling of the measurement model, up to a day",
    "amel_scores": "P(Yes) and bootstrap bias scores over every model, item and cell",
    "anchoring_score": "bootstrap confidence intervals over a model run",
    "export_store": "reads the whole response store into one file",
}


def unclassified(rule_names: list[str]) -> list[str]:
    """Rules of the workflow that are in neither mapping (each must be in one)."""
    return sorted(set(rule_names) - set(LOCAL_RULES) - set(CLUSTER_RULES))


class AccountError(Exception):
    """A job's `slurm_account` that the cluster does not list for this user."""


def require_known_accounts(workflow: Any) -> None:
    """Under the slurm executor, stop before any job is submitted when a cluster job of
    this run names a `slurm_account` that `sacctmgr` does not list for the user, or that
    cannot be checked. The slurm executor plugin (2.6.1) checks the account only as it
    submits, and its error there leaves Snakemake waiting with no message. Call it from
    ``onstart`` (a real run, the DAG built)."""
    plugin = getattr(workflow, "executor_plugin", None)
    if plugin is None or plugin.name != "slurm":
        return
    named = sorted({str(job.resources.get("slurm_account")) for job in workflow.dag.needrun_jobs()
                    if not workflow.is_local(job.rule) and job.resources.get("slurm_account")})
    if not named:
        return
    user = getpass.getuser()
    cmd = ["sacctmgr", "-n", "-s", "list", "user", user, "format=account%256"]
    fix = ("remove `slurm_account` from profiles/slurm/config.yaml (sbatch then charges your default "
           "account) or set it to one of yours, e.g. --default-resources slurm_account=<account>")
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise AccountError(f"cannot check slurm_account {', '.join(named)}: `{' '.join(cmd)}` failed ({err}); {fix}")
    if res.returncode != 0:
        raise AccountError(f"cannot check slurm_account {', '.join(named)}: `{' '.join(cmd)}` said "
                           f"{res.stderr.strip() or res.returncode!r}; {fix}")
    listed = {line.strip().lower() for line in res.stdout.splitlines() if line.strip()}
    unknown = [a for a in named if a.lower() not in listed]
    if unknown:
        raise AccountError(f"slurm_account {', '.join(unknown)} is not an account of user {user} "
                           f"(sacctmgr lists: {', '.join(sorted(listed)) or 'none'}); {fix}")


#: Snakemake's default job rate limit (``--max-jobs-per-timespan 100/1s``): jobs started, seconds.
DEFAULT_JOB_RATE = (100, 1)


def drop_local_job_rate_limit(workflow: Any) -> bool:
    """In a local run, take Snakemake's job rate limiter out of its scheduler, unless the
    user set a limit of their own; returns whether it was taken out. Call it from
    ``onstart`` (the scheduler exists, no job has been selected yet).

    The limiter (``--max-jobs-per-timespan``) paces submissions to a cluster. Locally it
    only costs: each scheduling pass that finds ready jobs waiting for a core starts a
    timer that wakes the scheduler again a timespan later, and every finished job starts
    one more such chain, so while jobs wait for cores the passes grow with the square of
    the jobs run, each pass re-reading every ready job's input sizes and params
    (docs/benchmarks.md, "Snakemake's own process": the test suite's shared synthetic run,
    161 jobs on two cores: about 25 CPU-s of Snakemake's process and up to 159 threads with
    it, about 10 and 7 without). Without a limiter the scheduler wakes when a job finishes, which is when a
    core frees; Snakemake's own Python API runs that way by default."""
    scheduler = getattr(workflow, "scheduler", None)
    limiter = getattr(scheduler, "job_rate_limiter", None)
    if limiter is None or not workflow.local_exec:
        return False
    if (limiter.max_jobs, limiter.timespan) != DEFAULT_JOB_RATE:
        return False
    scheduler.job_rate_limiter = None
    return True


def cancel_jobs_left_in_queue(workflow: Any) -> list[str]:
    """Under the slurm executor, once the run has stopped (``onerror``: Ctrl-C, or a
    failure): cancel every job of this run still queued or running, and return their ids.

    Snakemake cancels the jobs its executor holds as active when it is interrupted, but
    the remote executor (snakemake-interface-executor-plugins 9.x, ``_wait_for_jobs``)
    takes every job out of that list for the length of each status check: a Ctrl-C
    during a check leaves those jobs running, with no Snakemake left to collect them.
    The slurm plugin names each job of a run by the run's id, so ``squeue --name`` finds
    exactly this run's."""
    plugin = getattr(workflow, "executor_plugin", None)
    if plugin is None or plugin.name != "slurm":
        return []
    executor = getattr(getattr(workflow, "scheduler", None), "_executor", None)
    run_id = getattr(executor, "run_uuid", None)
    if not run_id:
        return []
    try:
        listed = subprocess.run(["squeue", "--noheader", f"--name={run_id}", "--format=%i"], capture_output=True,
                                text=True, timeout=60)
        ids = sorted(set(listed.stdout.split())) if listed.returncode == 0 else []
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return ids
