"""Benchmark: what a small synthetic config costs under the slurm profile on a real
one-node Slurm (tests/slurm_cluster.py: Debian's slurmctld, slurmd and munge, as root).

Runs the slurm tests' small config (config/synthetic.yaml on one dataset, Study C, its
neural metrics GPU-tagged) from scratch with `snakemake --profile <repo>/profiles/slurm
--slurm-status-command squeue`, and prints the wall time, the jobs that reached the
queue, their median time in the queue and on the node, and the wall time with no
cluster job running (polls, queue waits, host jobs). `--repo` runs another checkout's Snakefile and profile (a before/after pair);
extra arguments go to Snakemake (e.g. `--slurm-init-seconds-before-status-checks 40`).
It is not a test.

Usage::

    .venv/bin/python bench/slurm_overhead.py [--repo DIR] [-- SNAKEMAKE_ARGS...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from slurm_cluster import OneNodeSlurm, profile_command, small_synthetic_config  # noqa: E402


def _t(stamp: str) -> float | None:
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo", type=Path, default=REPO, help="checkout whose Snakefile and profile run")
    ap.add_argument("snakemake_args", nargs="*")
    args = ap.parse_args()
    repo = args.repo.resolve()
    cluster = OneNodeSlurm(Path(tempfile.mkdtemp(prefix="ce-slurm-"))).start()
    try:
        work = Path(tempfile.mkdtemp(prefix="ce-slurm-run-"))
        (work / "data").symlink_to(repo / "data")
        config = small_synthetic_config(work / "config.yaml")
        cmd = profile_command(work, config, *args.snakemake_args, profile=str(repo / "profiles" / "slurm"),
                              snakefile=repo / "Snakefile")
        env = {**os.environ, **cluster.env, "SNAKEMAKE_PROFILE": "", "PYTHONPATH": str(repo / "src")}
        t0 = time.time()
        res = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        wall = time.time() - t0
        if res.returncode != 0:
            sys.exit(f"snakemake failed ({res.returncode}):\n{res.stderr[-4000:]}")
        jobs = [j for j in cluster.jobs() if j["comment"].startswith("rule_")]
    finally:
        cluster.stop()
    spans = sorted((_t(j["start"]), _t(j["end"])) for j in jobs)
    queued = [_t(j["start"]) - _t(j["submit"]) for j in jobs]
    ran = [end - start for start, end in spans]
    # Stretches of the wall time with no cluster job running (host work, polls, queue).
    idle, cursor = [], t0
    for start, end in spans:
        if start > cursor:
            idle.append(start - cursor)
        cursor = max(cursor, end)
    idle.append(max(0.0, t0 + wall - cursor))
    print(f"repo: {repo}  extra: {' '.join(args.snakemake_args) or '-'}")
    print(f"wall: {wall:.0f} s   cluster jobs: {len(jobs)}")
    print(f"median per job: queued {statistics.median(queued):.0f} s, on the node {statistics.median(ran):.0f} s")
    print(f"no cluster job running: {sum(idle):.0f} s ({100 * sum(idle) / wall:.0f}% of the wall time), "
          f"in {len(idle)} stretches, median {statistics.median(idle):.0f} s")


if __name__ == "__main__":
    main()
