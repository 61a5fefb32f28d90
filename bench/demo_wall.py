"""Benchmark: wall time of `make demo` from clean outputs, and where it goes.

Each run deletes the workflow's outputs (results/, logs/, benchmarks/, figures/,
paper/*.pdf, Snakemake's metadata and the JAX compilation cache) but keeps
resources/, so the packaged models stay converted, then runs the demo exactly as `make demo` does and reads Snakemake's
own log back: wall time, jobs, and per rule the number of jobs, their summed and
longest wall time. Runs are appended to a JSON file after each one, so a long series
can be stopped and resumed; the summary prints min and median over all runs in it.

    .venv/bin/python bench/demo_wall.py --runs 2 --json bench/results/demo_wall.json
    .venv/bin/python bench/demo_wall.py --log .snakemake/log/<run>.snakemake.log   # read one log

Run it on a quiet machine: the demo uses both cores, and anything beside it shows
up in its wall time.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEMO_COMMAND = [
    str(REPO / ".venv" / "bin" / "snakemake"),
    "--configfile",
    "config/demo.yaml",
    "--cores",
    "2",
    "--workflow-profile",
    "profiles/local",
]
# Everything a demo run writes except resources/ (the converted models), and the JAX
# compilation cache, which a fresh clone does not have either.
OUTPUTS = ["results", "logs", "benchmarks", ".snakemake", ".cache/jax"]
OUTPUT_GLOBS = ["figures/*/", "paper/*.pdf", "paper/*.aux", "paper/*.log"]

_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_START = re.compile(r"^(?:local)?rule (\w+):$")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\w+)\)$")


def parse_log(text: str) -> list[dict]:
    """Jobs of one Snakemake log: rule, start and end (seconds since the first start).

    Snakemake stamps each job start and finish to the second; a job still running when
    the log ends (a failed or killed run) has no end and is left out.
    """
    stamp: datetime | None = None
    pending_rule: str | None = None
    starts: dict[str, tuple[str, datetime]] = {}
    jobs = []
    for line in text.splitlines():
        m = _STAMP.match(line)
        if m:
            stamp = datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y")
            continue
        m = _START.match(line)
        if m:
            pending_rule = m.group(1)
            continue
        m = _JOBID.match(line)
        if m and pending_rule is not None and stamp is not None:
            starts[m.group(1)] = (pending_rule, stamp)
            pending_rule = None
            continue
        m = _FINISHED.match(line)
        if m and stamp is not None and m.group(1) in starts:
            rule, began = starts.pop(m.group(1))
            jobs.append({"rule": rule, "start": began, "end": stamp})
    if not jobs:
        return []
    t0 = min(j["start"] for j in jobs)
    return [
        {"rule": j["rule"], "start": (j["start"] - t0).total_seconds(), "end": (j["end"] - t0).total_seconds()}
        for j in jobs
    ]


def summarise_jobs(jobs: list[dict]) -> dict:
    per_rule: dict[str, dict] = defaultdict(lambda: {"jobs": 0, "job_seconds": 0.0, "longest": 0.0})
    for job in jobs:
        row = per_rule[job["rule"]]
        took = job["end"] - job["start"]
        row["jobs"] += 1
        row["job_seconds"] += took
        row["longest"] = max(row["longest"], took)
    return {
        "jobs": len(jobs),
        "span_seconds": max((j["end"] for j in jobs), default=0.0),
        "per_rule": dict(sorted(per_rule.items(), key=lambda kv: -kv[1]["job_seconds"])),
    }


def print_rules(summary: dict, top: int) -> None:
    total = sum(r["job_seconds"] for r in summary["per_rule"].values()) or 1.0
    print(f"  {'rule':34s} {'jobs':>5s} {'job-s':>8s} {'share':>6s} {'longest':>8s}")
    for rule, row in list(summary["per_rule"].items())[:top]:
        print(
            f"  {rule:34s} {row['jobs']:5d} {row['job_seconds']:8.0f} "
            f"{row['job_seconds'] / total:6.1%} {row['longest']:8.0f}"
        )
    print(f"  {'all':34s} {summary['jobs']:5d} {total:8.0f}")


def clean_outputs() -> None:
    for name in OUTPUTS:
        shutil.rmtree(REPO / name, ignore_errors=True)
    for pattern in OUTPUT_GLOBS:
        for path in REPO.glob(pattern):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def one_run() -> dict:
    if not (REPO / "resources" / "models").is_dir():
        sys.exit("resources/models/ is missing: run `make demo` once first (the timing counts converted models)")
    clean_outputs()
    started = time.monotonic()
    proc = subprocess.run(DEMO_COMMAND, cwd=REPO, capture_output=True, text=True)
    wall = time.monotonic() - started
    logs = sorted((REPO / ".snakemake" / "log").glob("*.snakemake.log"))
    summary = summarise_jobs(parse_log(logs[-1].read_text())) if logs else {"jobs": 0, "per_rule": {}}
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        sys.exit(f"the demo failed (exit {proc.returncode}) after {wall:.0f} s; the run is not recorded")
    return {"wall_seconds": wall, "finished": datetime.now().isoformat(timespec="seconds"), **summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2, help="demo runs from clean outputs")
    parser.add_argument("--json", type=Path, help="append each run here (and summarise all runs in it); with --log, "
                        "write that log's summary here")
    parser.add_argument("--log", type=Path, help="only read this Snakemake log and print where its time went")
    parser.add_argument("--top", type=int, default=12, help="rules to print, by summed job time")
    args = parser.parse_args()

    if args.log:
        summary = summarise_jobs(parse_log(args.log.read_text()))
        print(f"{summary['jobs']} jobs over {summary['span_seconds']:.0f} s")
        print_rules(summary, args.top)
        if args.json:
            args.json.write_text(json.dumps({"log": args.log.name, **summary}, indent=1))
        return

    runs = json.loads(args.json.read_text())["runs"] if args.json and args.json.exists() else []
    for i in range(args.runs):
        run = one_run()
        runs.append(run)
        print(f"run {i + 1}/{args.runs}: {run['wall_seconds']:.0f} s, {run['jobs']} jobs")
        print_rules(run, args.top)
        if args.json:
            args.json.write_text(json.dumps({"command": " ".join(DEMO_COMMAND[1:]), "runs": runs}, indent=1))
    walls = [r["wall_seconds"] for r in runs]
    print(
        f"demo from clean outputs, {len(walls)} runs: min {min(walls) / 60:.1f} min, "
        f"median {statistics.median(walls) / 60:.1f} min"
    )


if __name__ == "__main__":
    main()
