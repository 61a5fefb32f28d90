"""A one-node Slurm cluster from Debian's packages (munge, slurmctld, slurmd), started in a
folder of its own: the scheduler the slurm profile's tests and benchmark run against.

It has the profile's two partitions, `cpu` (the default) and `gpu`, and one node in both.
The node states 8 CPUs, one `a100` GPU and 64 GB, as a small GPU node of a real site would,
whatever this machine has (`SlurmdParameters=config_overrides`): the unedited profile asks
8 CPUs per GPU, and a job's memory request is checked, not enforced (no cgroups here). The
GPU is a name without a device (`/dev/null`): jobs on it run on the CPU.

There is no accounting database: `sacct` answers "accounting storage is disabled", so
Snakemake polls with `--slurm-status-command squeue`, and finished jobs stay visible to
squeue for `MinJobAge` seconds (docs/cluster.md, "What the plugin needs from the cluster").

    python tests/slurm_cluster.py start DIR    # prints the SLURM_CONF to export
    python tests/slurm_cluster.py stop DIR
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: What the small synthetic run makes: two model-free tables, one from a fit, and every
#: metric of every answer (the neural metrics are GPU-tagged: they go to `gpu`).
TARGETS = (
    "results/tables/conformity/table2.csv",
    "results/tables/conformity/table5.csv",
    "results/tables/conformity/table3.csv",
    "results/conformity/metrics/truthfulqa.parquet",
)

#: Debian's packages that provide the daemons and the client commands.
PACKAGES = ("munge", "slurmctld", "slurmd", "slurm-client")
DAEMONS = ("munged", "slurmctld", "slurmd")
NODE_CPUS = 8
NODE_MEMORY_MB = 64000
#: Where every Slurm command looks for munge: a slurmd without a config of its own (below)
#: cannot be told another place.
MUNGE_SOCKET = "/run/munge/munge.socket.2"
#: Where a configless slurmd leaves the controller's slurm.conf for every Slurm command on
#: the node (a link into its spool). It outlives the daemons: left behind, it sends every
#: later command (the Snakemake slurm plugin runs `scontrol show config` when Snakemake
#: starts) to a controller that is gone, and each waits ~9 s for it. ``stop`` removes it
#: when it is this cluster's.
CONF_CACHE = Path("/run/slurm/conf")
CLUSTER_NAME = "ce-test"
#: Long enough for squeue to see a finished job at the plugin's polls (it wants 3× the
#: first-poll delay).
MIN_JOB_AGE_S = 600


def missing() -> list[str]:
    """The daemons and commands this machine lacks (empty when a cluster can start)."""
    need = [*(f"/usr/sbin/{d}" for d in DAEMONS), "sbatch", "squeue", "scancel", "sinfo"]
    return [n for n in need if not (Path(n).exists() if n.startswith("/") else shutil.which(n))]


def small_synthetic_config(path: Path) -> Path:
    """config/synthetic.yaml on one dataset, Study C only, its neural metrics on a GPU."""
    import yaml

    from conftest import SYNTHETIC_RUN_FIT  # the shared synthetic test run's short chains

    cfg = yaml.safe_load((REPO / "config" / "synthetic.yaml").read_text())
    cfg["datasets"] = {"truthfulqa": cfg["datasets"]["truthfulqa"]}
    c = cfg["conformity"]
    c["datasets"] = ["truthfulqa"]
    c["fit"].update(SYNTHETIC_RUN_FIT)
    c["validation"]["gpu"] = {"count": 1, "model": "a100"}
    cfg["amel"]["enabled"] = cfg["anchoring"]["enabled"] = False
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def profile_command(workdir: Path, config: Path, *extra: str, profile: str = "slurm",
                    snakefile: Path = REPO / "Snakefile") -> list[str]:
    """`snakemake --profile <profile>` on the small config's targets in ``workdir``. No
    accounting on this cluster: squeue answers the status polls (docs/cluster.md, "What
    the plugin needs from the cluster")."""
    # ``extra`` before the named options: a list-valued option (--default-resources)
    # would take the targets as its values.
    return [str(Path(sys.executable).parent / "snakemake"), "--profile", profile, "--slurm-status-command", "squeue",
            *extra, "--snakefile", str(snakefile), "--directory", str(workdir), f"--configfile={config}", *TARGETS]


def _user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OneNodeSlurm:
    """Daemons, state and logs under ``root`` (kept short: slurmd names its job steps'
    Unix sockets under it). ``env`` is what a client needs: SLURM_CONF."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.conf = self.root / "slurm.conf"
        self.node = socket.gethostname().split(".")[0]

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def _write_config(self) -> None:
        r = self.root
        user = _user()
        self.ctld_port = _free_port()
        for d in ("state", "spool", "log"):
            (r / d).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(
            f"""ClusterName={CLUSTER_NAME}
SlurmctldHost={self.node}(127.0.0.1)
SlurmUser={user}
SlurmdUser={user}
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort={self.ctld_port}
SlurmdPort={_free_port()}
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
SlurmdParameters=config_overrides
SlurmctldParameters=enable_configless
MinJobAge={MIN_JOB_AGE_S}
ReturnToService=2
GresTypes=gpu
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={NODE_CPUS} RealMemory={NODE_MEMORY_MB} Gres=gpu:a100:1 State=UNKNOWN
PartitionName=cpu Nodes={self.node} Default=YES MaxTime=4320 State=UP
PartitionName=gpu Nodes={self.node} MaxTime=4320 State=UP
"""
        )
        (r / "gres.conf").write_text(f"NodeName={self.node} Name=gpu Type=a100 File=/dev/null\n")

    def _run(self, *cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=60)

    def start(self, timeout: float = 60) -> "OneNodeSlurm":
        gone = missing()
        if gone:
            raise RuntimeError(f"Slurm is not installed (missing {', '.join(gone)}): "
                               f"apt-get install {' '.join(PACKAGES)}")
        self._write_config()
        r = self.root
        Path(MUNGE_SOCKET).parent.mkdir(parents=True, exist_ok=True)
        key = r / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o600)
        # A munged already serving the socket (a machine with Slurm of its own) is used as
        # it is: the daemons only need one that all of them reach.
        steps = [] if self._munge_answers() else [
            ["munged", f"--key-file={key}", f"--socket={MUNGE_SOCKET}", f"--pid-file={r}/munged.pid",
             f"--log-file={r}/log/munged.log", f"--seed-file={r}/munge.seed", "--force"]]
        steps += [
            ["/usr/sbin/slurmctld", "-c"],
            # Configless: the node fetches slurm.conf from the controller and leaves it where
            # every Slurm command on the node finds it (/run/slurm/conf). A job's inner
            # `srun` cannot be pointed at this folder's slurm.conf: the slurm jobstep plugin
            # clears SLURM_* (SLURM_CONF too) from its environment.
            ["/usr/sbin/slurmd", "-N", self.node, "--conf-server", f"127.0.0.1:{self.ctld_port}"],
        ]
        for cmd in steps:
            res = self._run(*cmd)
            if res.returncode != 0:
                self.stop()
                raise RuntimeError(f"{cmd[0]} did not start ({res.returncode}): {res.stderr}{self._logs()}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self._run("sinfo", "-h", "-N", "-o", "%T").stdout.split()
            if state and all(s in ("idle", "mixed", "allocated") for s in state):
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"the node did not come up within {timeout:.0f} s: {state}{self._logs()}")

    def _munge_answers(self) -> bool:
        if not Path(MUNGE_SOCKET).exists():
            return False
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
        return cred.returncode == 0 and subprocess.run(["unmunge"], input=cred.stdout, capture_output=True,
                                                      timeout=10).returncode == 0

    def _logs(self) -> str:
        out = []
        for log in sorted((self.root / "log").glob("*.log")):
            out.append(f"\n--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
        return "".join(out)

    def jobs(self) -> list[dict[str, str]]:
        """Every job squeue still knows (finished ones for MinJobAge): id, name, state,
        partition, comment, the GPUs it asked for, and its submit, start and end times."""
        fields = ("JobID", "Name", "State", "Partition", "Comment", "tres-per-job", "SubmitTime", "StartTime",
                  "EndTime")
        res = self._run("squeue", "--states=all", "--noheader", "-O", ",".join(f"{f}:|" for f in fields))
        keys = ("id", "name", "state", "partition", "comment", "gres", "submit", "start", "end")
        return [dict(zip(keys, line.split("|"))) for line in res.stdout.splitlines() if line.strip()]

    def stop(self) -> None:
        """Stop the daemons (jobs still running are killed with slurmd)."""
        if self.conf.exists():
            self._run("scancel", "--user", _user())
        for name in ("slurmd", "slurmctld", "munged"):
            pid_file = self.root / f"{name}.pid"
            try:
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
            except (FileNotFoundError, ValueError, ProcessLookupError):
                continue
        time.sleep(1)
        remove_conf_cache()


def remove_conf_cache() -> bool:
    """Remove the node's configless slurm.conf if a cluster of this module left it (a
    machine's own Slurm names another cluster, and is left alone). True if removed."""
    try:
        ours = f"ClusterName={CLUSTER_NAME}" in (CONF_CACHE / "slurm.conf").read_text().split()
    except OSError:
        return False
    if ours:
        # slurmd makes it a link to its spool's conf-cache (older versions, a folder).
        if CONF_CACHE.is_symlink():
            CONF_CACHE.unlink()
        else:
            shutil.rmtree(CONF_CACHE)
    return ours


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print(__doc__.rsplit("\n\n", 1)[-1])
        return 2
    cluster = OneNodeSlurm(Path(argv[1]).resolve())
    if argv[0] == "start":
        cluster.start()
        print(f"export SLURM_CONF={cluster.conf}")
    else:
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
