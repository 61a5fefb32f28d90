"""Where the test suite's CPU goes, process by process: which kind of process (a fit job,
a Snakemake run, a synthetic answering shard, a pytest worker) and which test started it.

`bench/test_suite_times.py` says how long each test held a worker. That time includes
every process the test started (each `snakemake` and each of its jobs) and whatever the
other worker took from the shared cores meanwhile. This script counts CPU instead: it
runs a command with a ``sitecustomize`` module on ``PYTHONPATH`` that makes every Python
process the command starts append one line at exit (its argv, CPU seconds of its own
threads, wall seconds, and ``PYTEST_CURRENT_TEST``, which a test's subprocesses inherit),
then sums the lines by kind of process and by test file:

    .venv/bin/python bench/test_suite_processes.py --log procs.jsonl -- make test
    .venv/bin/python bench/test_suite_processes.py --print procs.jsonl --json bench/results/x.json

Not counted: processes that are not Python (LaTeX, the Slurm daemons), and Python
processes that end without running ``atexit`` (killed ones, multiprocessing children
such as vLLM's engine core, which leave by ``os._exit``). A ``sitecustomize`` already on
the interpreter's path is shadowed for the length of the run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

SITECUSTOMIZE = '''\
import atexit, json, os, resource, sys, time

_start, _pid = time.time(), os.getpid()


def _record():
    if os.getpid() != _pid:  # a forked child inherits the hook; its parent records itself
        return
    try:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        line = json.dumps({"argv": sys.argv[:4], "wall": time.time() - _start, "user": usage.ru_utime,
                           "sys": usage.ru_stime, "test": os.environ.get("PYTEST_CURRENT_TEST", "")})
        with open(os.environ["CONTEXT_EFFECTS_PROCESS_LOG"], "a") as log:
            log.write(line + "\\n")
    except Exception:
        pass


atexit.register(_record)
'''


def kind(argv: list[str]) -> str:
    """What a process was, from its argv: a Snakemake job by its script's name, a Snakemake
    run, a pytest worker (execnet starts it with ``-c``)."""
    joined = " ".join(argv)
    script = re.search(r"\.snakemake/scripts/tmp\w+\.(\w+)\.py", joined)
    if script:
        return f"job: {script.group(1)}"
    if argv and Path(argv[0]).name == "snakemake":
        return "snakemake"
    if "snakemake/__main__.py" in joined or argv[:2] == ["-m", "snakemake"]:
        return "snakemake (a cluster job's)"
    if argv and Path(argv[0]).name == "pytest":
        return "pytest"
    if argv[:1] == ["-c"]:
        return "python -c (pytest workers, tests' helpers)"
    return "other: " + (Path(argv[0]).name if argv else "?")


def summarize(log: Path) -> dict:
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    by_file: dict[str, float] = defaultdict(float)
    fits: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for r in rows:
        cpu = r["user"] + r["sys"]
        k = kind(r["argv"])
        by_kind[k][0] += 1
        by_kind[k][1] += cpu
        test = r["test"].split("::")[0] if r["test"] else "(no test: pytest workers, lint)"
        by_file[test] += cpu
        if k == "job: fit_model":
            fits[r["test"].split(" ")[0]][0] += 1
            fits[r["test"].split(" ")[0]][1] += cpu
    return {
        "processes": len(rows),
        "cpu_seconds": round(sum(r["user"] + r["sys"] for r in rows), 1),
        "by_kind": {k: {"processes": n, "cpu_seconds": round(s, 1)}
                    for k, (n, s) in sorted(by_kind.items(), key=lambda kv: -kv[1][1])},
        "by_test_file": {k: round(s, 1) for k, s in sorted(by_file.items(), key=lambda kv: -kv[1])},
        "fit_jobs_by_test": {k: {"fits": n, "cpu_seconds": round(s, 1)}
                             for k, (n, s) in sorted(fits.items(), key=lambda kv: -kv[1][1])},
    }


def show(summary: dict, top: int) -> None:
    print(f"{summary['processes']} Python processes, {summary['cpu_seconds']:.0f} CPU-s in all\n")
    print("| kind of process | processes | CPU-s | CPU-s each |\n|---|---:|---:|---:|")
    for k, v in list(summary["by_kind"].items())[:top]:
        print(f"| {k} | {v['processes']} | {v['cpu_seconds']:.0f} | {v['cpu_seconds'] / v['processes']:.2f} |")
    print("\n| test file (its subprocesses) | CPU-s |\n|---|---:|")
    for k, v in list(summary["by_test_file"].items())[:top]:
        print(f"| {k} | {v:.0f} |")
    print("\n| fit jobs of | fits | CPU-s |\n|---|---:|---:|")
    for k, v in summary["fit_jobs_by_test"].items():
        print(f"| {k} | {v['fits']} | {v['cpu_seconds']:.0f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--log", type=Path, help="record every Python process of the command here (appended)")
    ap.add_argument("--print", type=Path, metavar="LOG", help="only summarize a log this script recorded")
    ap.add_argument("--json", type=Path, help="write the summary here")
    ap.add_argument("--top", type=int, default=25, help="rows per table")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command, e.g. make test")
    args = ap.parse_args()
    log = args.print
    rc = 0
    if log is None:
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not (args.log and command):
            ap.error("give --log FILE -- COMMAND, or --print LOG")
        log = args.log.resolve()
        with tempfile.TemporaryDirectory() as hook:
            (Path(hook) / "sitecustomize.py").write_text(SITECUSTOMIZE)
            path = os.pathsep.join(p for p in (hook, os.environ.get("PYTHONPATH", "")) if p)
            rc = subprocess.run(command, env={**os.environ, "PYTHONPATH": path,
                                              "CONTEXT_EFFECTS_PROCESS_LOG": str(log)}).returncode
    summary = summarize(log)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    show(summary, args.top)
    sys.exit(rc)


if __name__ == "__main__":
    main()
