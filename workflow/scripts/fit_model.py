"""Fit the measurement model for one (dataset, variant): draws, summary, diagnostics, per-answer θ."""

import os
import sys

from context_effects.jobs import bound_threads, setup_job_logging

# ArviZ compiles a numba ufunc while it is imported, and its ESS compiles another at its first
# call, where numba is installed (vLLM's CPU build brings it): about 0.7 CPU-s of each fit job, for
# none of the fit's numbers (its NumPy paths give the same ESS to 1e-13). The measurement
# environment (envs/measurement.yaml) has no numba; this makes every other one match it.
sys.modules.setdefault("numba", None)

settings = dict(snakemake.params.settings)
parallel = settings["method"] == "nuts" and settings["chain_method"] == "parallel" and settings["chains"] > 1
# JAX fixes its host devices when it starts: one device per chain lets numpyro run the
# chains in parallel (chain_method="parallel"), one core each (the rule's threads).
if parallel:
    # First: XLA stops reading XLA_FLAGS at a word that is not a flag (a common recipe's
    # "intra_op_parallelism_threads=1"), and a device count after it would be lost.
    flags = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={settings['chains']} {flags}".strip()
bound_threads(snakemake.threads)
log = setup_job_logging(snakemake.log[0])

from context_effects.measurement.cpu import start_cpu_backend  # noqa: E402 (after XLA_FLAGS)
from context_effects.measurement.pipeline import FitSpec, run_fit  # noqa: E402

# XLA's compute pool as large as the job's threads, not the machine's cores.
start_cpu_backend(snakemake.threads)

spec_d = dict(snakemake.params.spec)
spec = FitSpec(**{**spec_d, "judges": tuple(spec_d["judges"])})
run_fit(
    snakemake.input.ratings,
    spec,
    settings,
    dict(snakemake.params.families),
    os.path.dirname(snakemake.output.summary),
    chain_method="parallel" if parallel else "sequential",
    log=log,
)
