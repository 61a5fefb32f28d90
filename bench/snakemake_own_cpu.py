"""Benchmark: the CPU of Snakemake's own process over a whole run of this workflow, with the
Snakefile's ``onstart`` (which takes Snakemake's job rate limiter out of a local run's
scheduler, ``context_effects.cluster.drop_local_job_rate_limit``) and without it
(``--no-hooks``: the limiter stays, as before). Prints figures; not a test.

The run is the test suite's shared synthetic run (``tests/conftest.py``,
``synthetic_run_config``: every study, table, figure, the paper PDF and the card, 161
jobs) in a fresh copy of the repository per run, ``--cores 2``, the variants
interleaved. On the synthetic backend the Snakefile's other ``onstart`` checks (API keys,
budget, served models, Slurm accounts) have nothing to check, so ``--no-hooks`` changes
only the limiter.

Per run: wall seconds; Snakemake's own CPU seconds (user + system, read by the process
itself at exit); the CPU of the jobs it ran (its reaped children); the most threads it had
at once (sampled every 0.2 s). Usage::

    .venv/bin/python bench/snakemake_own_cpu.py [--pairs 2] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from conftest import SUBPROCESS_SITE, copy_repo, synthetic_run_config  # noqa: E402

#: Runs Snakemake in this process and prints, at exit, what it used.
WRAPPER = """\
import atexit, json, resource, runpy, sys, threading, time
most = [0]
def watch():
    while True:
        most[0] = max(most[0], threading.active_count())
        time.sleep(0.2)
threading.Thread(target=watch, daemon=True).start()
t0 = time.perf_counter()
def report():
    own, jobs = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print("OWN-CPU " + json.dumps({"wall_s": round(time.perf_counter() - t0, 1),
          "snakemake_cpu_s": round(own.ru_utime + own.ru_stime, 1),
          "jobs_cpu_s": round(jobs.ru_utime + jobs.ru_stime, 1), "most_threads": most[0]}), file=sys.stderr)
atexit.register(report)
sys.argv = ["snakemake", *sys.argv[1:]]
runpy.run_module("snakemake", run_name="__main__")
"""

VARIANTS = {"limiter dropped (onstart)": [], "limiter kept (--no-hooks)": ["--no-hooks"]}
TARGETS = ["paper/paper.pdf", "card", "results/synthetic/planted.json"]


def run_once(extra: list[str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="sm-own-cpu-") as tmp:
        repo = copy_repo(Path(tmp) / "repo")
        config = repo / "config" / "synthetic-bench.yaml"
        config.write_text(yaml.safe_dump(synthetic_run_config(), sort_keys=False))
        # As the test suite runs it: one OpenMP thread per job, its processes without the
        # cyclic collector (tests/subprocess_site).
        env = {**os.environ, "OMP_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join(p for p in (str(SUBPROCESS_SITE), os.environ.get("PYTHONPATH")) if p)}
        cmd = [sys.executable, "-c", WRAPPER, "--snakefile", str(repo / "Snakefile"), "--directory", str(repo),
               f"--configfile={config}", "--workflow-profile", "none", "--cores", "2", *extra, *TARGETS]
        res = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
        if res.returncode:
            sys.exit(f"snakemake failed ({res.returncode}):\n{res.stderr[-3000:]}")
        line = next(x for x in res.stderr.splitlines() if x.startswith("OWN-CPU "))
        return json.loads(line.removeprefix("OWN-CPU "))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    print(f"{'variant':>27} {'wall s':>7} {'Snakemake CPU s':>16} {'jobs CPU s':>11} {'threads':>8}")
    for i in range(args.pairs):
        for name, extra in VARIANTS.items():
            r = {"variant": name, "pair": i + 1, **run_once(extra)}
            rows.append(r)
            print(f"{name:>27} {r['wall_s']:>7} {r['snakemake_cpu_s']:>16} {r['jobs_cpu_s']:>11} "
                  f"{r['most_threads']:>8}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
