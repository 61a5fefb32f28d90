"""Benchmark: what Snakemake's main process spends re-evaluating its schedule while jobs wait
for a free core. Prints figures; not a test.

A minimal workflow, independent of this project: ``--jobs`` rules that each sleep
``--sleep`` seconds, all ready at once, run on ``--cores 1``. While ready jobs wait for a
core, each pass of Snakemake's scheduling loop (``JobScheduler.schedule``) that selects
nothing starts a ``threading.Timer`` of the rate limiter's timespan (``--max-jobs-per-timespan``,
default ``100/1s``) whose only action is to wake the loop again, which starts another. Every
finished job wakes the loop once more, so every finished job starts a chain of its own: the
loop runs about once per second per finished job, each pass recomputing every ready job's
params and resources. The main process's CPU then grows with the square of the jobs run.

Per setting, one run: wall seconds, the main process's CPU seconds (its own and its
finished children's: the ``sleep`` jobs cost about none), the most threads it had at once
(sampled every 0.1 s from /proc) and the scheduling passes it logged. Usage::

    .venv/bin/python bench/snakemake_scheduler_timers.py [--jobs 100 200] [--sleep 1]
        [--settings 100/1s 100000/1d] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SNAKEFILE = """\
rule all:
    input: expand("out/{i}.txt", i=range(config["count"]))

rule one:
    output: "out/{i}.txt"
    shell: "sleep %s; touch {output}"
"""


def threads_of(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def run_once(snakemake: str, jobs: int, sleep: float, setting: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="sm-timers-") as tmp:
        Path(tmp, "Snakefile").write_text(SNAKEFILE % sleep)
        cmd = [snakemake, "--cores", "1", "--max-jobs-per-timespan", setting, "--verbose", "--nolock",
               "--config", f"count={jobs}"]
        log = open(Path(tmp, "log.txt"), "w")
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=tmp, stdout=log, stderr=subprocess.STDOUT)
        most, usage = 0, None
        while usage is None:  # os.wait4 reaps the process and gives its CPU (and its children's)
            most = max(most, threads_of(proc.pid))
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                proc.returncode, usage = os.waitstatus_to_exitcode(status), rusage
            else:
                time.sleep(0.1)
        wall = time.perf_counter() - t0
        log.close()
        text = Path(tmp, "log.txt").read_text()
        if proc.returncode:
            sys.exit(f"snakemake failed ({proc.returncode}):\n{text[-3000:]}")
        passes = text.count("Resources before job selection")
        cpu = usage.ru_utime + usage.ru_stime
        return {"jobs": jobs, "sleep_s": sleep, "max_jobs_per_timespan": setting, "wall_s": round(wall, 1),
                "cpu_s": round(cpu, 1), "cpu_share_of_wall": round(cpu / wall, 3), "most_threads": most,
                "scheduling_passes": passes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, nargs="+", default=[100, 200])
    ap.add_argument("--sleep", type=float, default=1.0)
    ap.add_argument("--settings", nargs="+", default=["100/1s", "100000/1d"])
    ap.add_argument("--json")
    args = ap.parse_args()
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    version = subprocess.run([snakemake, "--version"], capture_output=True, text=True).stdout.strip()
    rows = []
    print(f"snakemake {version}, --cores 1, jobs sleeping {args.sleep} s")
    print(f"{'jobs':>5} {'--max-jobs-per-timespan':>24} {'wall s':>7} {'CPU s':>6} {'CPU/wall':>8} "
          f"{'threads':>7} {'passes':>7}")
    for jobs in args.jobs:
        for setting in args.settings:
            r = run_once(snakemake, jobs, args.sleep, setting)
            rows.append(r)
            print(f"{jobs:>5} {setting:>24} {r['wall_s']:>7} {r['cpu_s']:>6} {r['cpu_share_of_wall']:>8} "
                  f"{r['most_threads']:>7} {r['scheduling_passes']:>7}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"snakemake": version, "runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
