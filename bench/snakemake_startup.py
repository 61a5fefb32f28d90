"""Benchmark: what starting Snakemake costs on this machine, and how much of it is the
Slurm executor plugin's question to the cluster.

Every `snakemake` process imports every installed executor plugin; the slurm plugin
(snakemake-executor-plugin-slurm) runs `scontrol show config` while its module is
imported, to word a help text. Where Slurm's client is installed and its configuration
names a controller that does not answer (a configless slurmd's /run/slurm/conf left by a
cluster that is gone), `scontrol` retries for ~9 s, and so every Snakemake start, dry
runs and `--version` included, waits that long; the test suite starts Snakemake dozens
of times.

Prints, each the median of ``--repeat`` runs: `scontrol show config` (if installed),
`snakemake --version`, and a dry run of the Snakefile on the default config
(parse, code versions, DAG), once with every rule's code version computed (the first
start after an edit: `.cache/codeversion/` emptied before each run) and once with the
versions kept from an earlier start. `--stale-conf` first writes a configless cache naming a
controller on a closed loopback port (as root; removed afterwards) to show the
penalty. It is not a test.

Usage::

    .venv/bin/python bench/snakemake_startup.py [--repeat 3] [--stale-conf]
"""

from __future__ import annotations

import argparse
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from slurm_cluster import CLUSTER_NAME, CONF_CACHE, remove_conf_cache  # noqa: E402


def _median_seconds(cmd: list[str], repeat: int, before=None) -> float:
    times = []
    for _ in range(repeat):
        if before is not None:
            before()
        start = time.perf_counter()
        subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=600)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--stale-conf", action="store_true",
                    help=f"measure with a stale configless {CONF_CACHE}/slurm.conf (root; removed afterwards)")
    args = ap.parse_args()
    snakemake = str(REPO / ".venv" / "bin" / "snakemake")
    if args.stale_conf:
        if CONF_CACHE.exists():
            sys.exit(f"{CONF_CACHE} exists already; not touching it")
        CONF_CACHE.mkdir(parents=True)
        (CONF_CACHE / "slurm.conf").write_text(
            f"ClusterName={CLUSTER_NAME}\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort={_closed_port()}\n"
            "AuthType=auth/munge\nNodeName=localhost CPUs=1\nPartitionName=cpu Nodes=localhost Default=YES\n")
    try:
        state = "stale configless slurm.conf" if args.stale_conf else (
            f"{CONF_CACHE} present" if CONF_CACHE.exists() else f"no {CONF_CACHE}")
        print(f"| command ({state}) | median s of {args.repeat} |")
        print("|---|---:|")
        if shutil.which("scontrol"):
            print(f"| `scontrol show config` | {_median_seconds(['scontrol', 'show', 'config'], args.repeat):.2f} |")
        print(f"| `snakemake --version` | {_median_seconds([snakemake, '--version'], args.repeat):.2f} |")
        dry = [snakemake, "-n", "--cores", "1", "-q"]
        versions = REPO / ".cache" / "codeversion"
        computed = _median_seconds(dry, args.repeat, before=lambda: shutil.rmtree(versions, ignore_errors=True))
        print(f"| `snakemake -n` (default config), code versions computed | {computed:.2f} |")
        print(f"| `snakemake -n` (default config), code versions kept | {_median_seconds(dry, args.repeat):.2f} |")
    finally:
        if args.stale_conf:
            remove_conf_cache()


if __name__ == "__main__":
    main()
