# Context effects on LLM writers and judges: studies C (open-ended conformity),
# A (accumulated message effects) and H (history anchoring) in one DAG.
#
#   make demo                                   # embedded default (config/demo.yaml)
#   snakemake --profile slurm                   # paper configuration on a cluster (make slurm-profile once)
#
# The paper configuration is the default; pass --configfile to use another. (We do
# not use the `configfile:` directive: Snakemake deep-merges it with a file given on
# the command line, which would leak the paper's models into every other config.)

import os
import sys

from snakemake.utils import min_version

min_version("9.0")

# The library lives in src/. `make` installs it into .venv; the Snakefile also finds
# it here without an install, and jobs inherit the folder through PYTHONPATH, so a
# per-rule conda environment (clusters: --sdm conda) needs only the third-party
# dependencies and every job script imports the same library.
_SRC = os.path.join(workflow.basedir, "src")
sys.path.insert(0, _SRC)
_PATHS = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
if _SRC not in _PATHS:
    os.environ.update(PYTHONPATH=os.pathsep.join([_SRC, *_PATHS]))


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/llm.smk"
include: "workflow/rules/conformity_generate.smk"
include: "workflow/rules/conformity_judge.smk"
include: "workflow/rules/conformity_tables.smk"
include: "workflow/rules/conformity_fit.smk"
include: "workflow/rules/conformity_metrics.smk"
include: "workflow/rules/amel.smk"
include: "workflow/rules/anchoring.smk"
include: "workflow/rules/paper.smk"
include: "workflow/rules/recovery.smk"
include: "workflow/rules/card.smk"


# Jobs of seconds run on the host that runs Snakemake instead of waiting in a cluster
# queue each; context_effects.cluster classifies every rule, with its reason.
from context_effects import cluster

workflow.localrules(*cluster.LOCAL_RULES)


from context_effects.utc import utc_now_iso

# When this invocation began: its closing summary names the answering attempts that
# stopped since.
RUN_STARTED = utc_now_iso()


onstart:
    # Real runs only, with the DAG built: asks for the keys of the answering jobs
    # about to run, then each hosted provider whether it serves their models, and
    # fails before any of them starts.
    dag.require_api_keys(config, workflow)
    # run.budget_usd: a run whose cost estimate exceeds it stops here, before any job
    # and before any provider is asked anything (context_effects.costs).
    costs.require_within_budget(config, workflow)
    dag.require_served_models(config, workflow)
    # Under the slurm executor: an account sacctmgr does not list stops here, not at the
    # first submission (where the plugin's error leaves the run waiting, silent).
    cluster.require_known_accounts(workflow)
    # A local run's scheduler wakes when a job finishes, not on the job rate limiter's
    # timers as well (context_effects.cluster, drop_local_job_rate_limit).
    if cluster.drop_local_job_rate_limit(workflow):
        import logging

        logging.getLogger("snakemake.logging").debug(
            "local run: no job rate limit, the scheduler wakes as jobs finish"
        )


onerror:
    # A stopped answering job (the run's budget, the output budget, a full disk) fails in
    # Snakemake's summary without its cause; the cause is repeated here, last, from the
    # attempts logs of the attempts that ended during this run.
    import logging
    from context_effects.llm.shards import stopped_attempts

    for line in stopped_attempts("results/ledgers/.attempts", RUN_STARTED):
        # Formatted here: Snakemake's handlers print ``record.msg`` without its args.
        logging.getLogger("snakemake.logging").error(f"answering stopped: {line}")
    # Under Slurm: jobs of this run that Snakemake's own cancel missed (context_effects.cluster).
    left = cluster.cancel_jobs_left_in_queue(workflow)
    if left:
        logging.getLogger("snakemake.logging").warning(
            f"cancelled {len(left)} job(s) of this run left in the Slurm queue: {' '.join(left)}"
        )


# A dry run never calls onstart: it only warns about the keys its jobs would need.
dag.require_api_keys(config, workflow)
# What each model is sent (llm/capabilities.py), visible before anything runs.
dag.log_model_profiles(config)


rule all:
    default_target: True
    input:
        targets.study_outputs(config),
        targets.paper_targets(config),


# `resources:` may name only rules of this workflow (a typo would be ignored); the
# rule names are known only now, after every rule file is included.
check_resource_names(
    config, [r.name for r in workflow.rules] + list(conformity_dag.RESOURCE_KEYS)
)
