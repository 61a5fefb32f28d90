"""The slurm profile under a real scheduler: a one-node Slurm from Debian's packages
(tests/slurm_cluster.py), the profile installed as the README says (`make
slurm-profile`, then `snakemake --profile slurm`), and a small synthetic config.

One run, as a user would live it: it starts, a job is cancelled under it with
`scancel`, the user presses Ctrl-C, and starts the same command again. Then the checks:
which partition each job went to, that the seconds-long rules never reached the queue,
that nothing finished was redone, and that the tables equal a local run's.

The stub-`sbatch` tests (tests/test_slurm_profile.py) keep what one node cannot show:
the paper config's GPU models, and a GPU on every rule that can hold one.
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import REPO, snakemake_cmd
from context_effects.cluster import CLUSTER_RULES, LOCAL_RULES
import slurm_cluster
from slurm_cluster import PACKAGES, TARGETS, OneNodeSlurm, missing, profile_command, small_synthetic_config

ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    gone = missing()
    if gone:
        msg = f"no Slurm here (missing {', '.join(gone)}; `apt-get install {' '.join(PACKAGES)}`, as `make test` does as root)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    # A short folder: munge and slurmd name sockets under it.
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="ce-slurm-"))
    slurm = OneNodeSlurm(root).start()
    yield slurm
    slurm.stop()
    # Nothing of this cluster's left where every later Slurm command looks.
    assert not slurm_cluster.remove_conf_cache(), f"stop left {slurm_cluster.CONF_CACHE}"


def _ctrl_c_as_default() -> None:
    """In the child, before it runs Snakemake: Ctrl-C's default action. A shell without job
    control starts a background command with SIGINT ignored (`make test &` in a script),
    pytest's workers inherit that, and so would this Snakemake, which then never sees the
    test's Ctrl-C (seen: the run went on to its end)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class ClusterRun:
    """`snakemake --profile slurm` in ``workdir``, as the README's cluster steps run it."""

    def __init__(self, workdir: Path, config: Path, env: dict[str, str]):
        self.workdir, self.config, self.env = workdir, config, env
        self.logs: list[str] = []

    def start(self) -> subprocess.Popen:
        log = open(self.workdir / f"snakemake-{len(self.logs)}.log", "w")
        self.logs.append(log.name)
        return subprocess.Popen(profile_command(self.workdir, self.config), cwd=self.workdir, env=self.env,
                                stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_ctrl_c_as_default)

    def log(self, i: int) -> str:
        return Path(self.logs[i]).read_text(errors="replace")


def _wait(what: str, predicate, timeout: float, proc: subprocess.Popen | None = None, log=lambda: ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"snakemake exited ({proc.returncode}) before {what}:\n{log()[-4000:]}")
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}:\n{log()[-4000:]}")


def _outputs(workdir: Path) -> dict[str, int]:
    """Every file under results/ with its modification time (ns)."""
    return {str(p.relative_to(workdir)): p.stat().st_mtime_ns for p in (workdir / "results").rglob("*") if p.is_file()}


def _incomplete(workdir: Path) -> set[str]:
    """Outputs Snakemake holds incomplete (a job of them was running when it stopped):
    its markers in .snakemake/incomplete/, each the URL-safe base64 of the output's
    path, cut into file-name-sized parts of which all but the last start with '@'."""
    root = workdir / ".snakemake" / "incomplete"
    paths = set()
    for marker in (p for p in root.rglob("*") if p.is_file()):
        encoded = "".join(part.removeprefix("@") for part in marker.relative_to(root).parts)
        path = Path(base64.urlsafe_b64decode(encoded).decode())
        paths.add(str(path.relative_to(workdir) if path.is_absolute() else path))
    return paths


def _rule(job: dict[str, str]) -> str:
    return job["comment"].removeprefix("rule_").split("_wildcards_")[0]


#: What Snakemake logs when a Ctrl-C reaches its scheduler.
TERMINATING = "Terminating processes on user request"


def press_ctrl_c(proc: subprocess.Popen, log, presses: int = 3) -> int:
    """Ctrl-C to a running ``snakemake``, pressed again, as a user would, while nothing
    says it arrived: Snakemake 9.27.1 now and then misses one (2 of 115 Ctrl-Cs at random
    moments of a local run of 400 short shell jobs went unanswered). A second press only
    when the first did nothing: one during the cancelling would cut it short. Returns the
    number of presses; the run has ended."""
    for press in range(1, presses + 1):
        proc.send_signal(signal.SIGINT)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and proc.poll() is None and TERMINATING not in log():
            time.sleep(0.2)
        if proc.poll() is not None or TERMINATING in log():
            proc.wait(timeout=120)
            return press
    raise AssertionError(f"snakemake went on after {presses} Ctrl-Cs:\n{log()[-3000:]}")


@pytest.fixture(scope="module")
def local_run(cluster, tmp_path_factory):
    """The same config and targets with the local executor, for the tables to compare. It
    is started before the cluster run and runs beside it: the cluster run mostly waits
    (the plugin's pause before each submission, its polls), so the cores are there.
    Yields its folder and its process; the comparing test waits for it."""
    workdir = tmp_path_factory.mktemp("local-run")
    (workdir / "data").symlink_to(REPO / "data")
    config = small_synthetic_config(workdir / "config.yaml")
    with open(workdir / "snakemake.log", "w") as log:
        proc = subprocess.Popen(snakemake_cmd("--cores", "1", "--snakefile", str(REPO / "Snakefile"), "--directory",
                                              str(workdir), f"--configfile={config}", *TARGETS),
                                cwd=workdir, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield workdir, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture(scope="module")
def slurm_run(cluster, local_run, tmp_path_factory):
    """The interrupted and resumed run; returns what the checks read. (``local_run`` is
    named only to start it first.)"""
    workdir = tmp_path_factory.mktemp("slurm-run")
    (workdir / "data").symlink_to(REPO / "data")
    config = small_synthetic_config(workdir / "config.yaml")
    xdg = workdir / "xdg"
    subprocess.run(["make", "-s", "-C", str(REPO), "slurm-profile", f"XDG_CONFIG_HOME={xdg}"], check=True)
    env = {**os.environ, **cluster.env, "XDG_CONFIG_HOME": str(xdg), "SNAKEMAKE_PROFILE": ""}
    run = ClusterRun(workdir, config, env)

    first = run.start()
    try:
        # A job of the run is cancelled under it, as a user or an admin would (a job that
        # ends between the look and the scancel is not cancelled: take another).
        def ended_as(job_id: str) -> str:
            return _wait("the job's end", lambda: next((j["state"] for j in cluster.jobs()
                                                        if j["id"] == job_id and j["state"] not in ACTIVE), ""), 30)

        def cancel_one() -> dict[str, str] | None:
            for job in [j for j in cluster.jobs() if j["state"] == "RUNNING"]:
                subprocess.run(["scancel", job["id"]], env=env, check=True)
                if ended_as(job["id"]) == "CANCELLED":
                    return job
            return None

        cancelled = _wait("a running cluster job, cancelled", cancel_one, 300, first, lambda: run.log(0))
        # Snakemake sees it fail (it does not poll it for ever) and submits it again.
        _wait("the cancelled job's failure and resubmission", lambda: (
            f"SLURM-job '{cancelled['id']}' failed" in run.log(0)
            and sum(j["comment"] == cancelled["comment"] for j in cluster.jobs()) >= 2
        ), 180, first, lambda: run.log(0))
        # Ctrl-C once Snakemake has seen a cluster job finish: it cancels what it has in
        # the queue.
        _wait("a finished cluster job", lambda: "(Rule: conformity_answer_metrics)" in run.log(0),
              300, first, lambda: run.log(0))
        ctrl_c = datetime.now().replace(microsecond=0)  # Slurm's times: local, to the second
        presses = press_ctrl_c(first, lambda: run.log(0))
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    left = [j for j in cluster.jobs() if j["state"] in ACTIVE and j["name"] != "wrap"]
    before, incomplete = _outputs(workdir), _incomplete(workdir)

    second = run.start()
    try:
        assert second.wait(timeout=900) == 0, run.log(1)[-6000:]
    finally:
        if second.poll() is None:
            os.killpg(second.pid, signal.SIGKILL)
    return {"workdir": workdir, "config": config, "cancelled": cancelled, "ctrl_c": ctrl_c, "presses": presses,
            "left_after_ctrl_c": left, "before": before, "incomplete": incomplete, "after": _outputs(workdir),
            "jobs": cluster.jobs(), "run": run}


def test_a_cancelled_job_fails_and_is_retried_and_ctrl_c_leaves_no_job(slurm_run):
    """`scancel` under a run: the job is reported failed and resubmitted (the profile's
    retries), not polled as running for ever; Ctrl-C cancels the run's queued jobs."""
    cancelled = slurm_run["cancelled"]
    assert "CANCELLED" in slurm_run["run"].log(0)
    assert TERMINATING in slurm_run["run"].log(0), f"the run ended before its Ctrl-C ({slurm_run['presses']} pressed)"
    assert not slurm_run["left_after_ctrl_c"], slurm_run["left_after_ctrl_c"]
    same = sorted((j for j in slurm_run["jobs"] if j["comment"] == cancelled["comment"]), key=lambda j: int(j["id"]))
    assert len(same) >= 2 and same[0]["id"] == cancelled["id"] and same[0]["state"] == "CANCELLED", same
    # Each resubmission ran to the end, unless the Ctrl-C cancelled it (one ending just as
    # Ctrl-C came is: seen, its work done and Slurm not yet told); the resumed run's
    # outputs are checked below.
    for job in same[1:]:
        ended_by_ctrl_c = job["state"] == "CANCELLED" and datetime.fromisoformat(job["end"]) >= slurm_run["ctrl_c"]
        assert job["state"] == "COMPLETED" or ended_by_ctrl_c, (slurm_run["ctrl_c"], same)


def test_the_resumed_run_redoes_nothing_finished(slurm_run):
    """What finished before Ctrl-C is kept as it is; what a job was still writing when
    Ctrl-C came (Snakemake's incomplete markers) is made again, not trusted."""
    before, after, incomplete = slurm_run["before"], slurm_run["after"], slurm_run["incomplete"]
    finished = {p: mtime for p, mtime in before.items() if p not in incomplete}
    assert any(p.startswith("results/conformity/metrics/") for p in finished), "no cluster job finished before Ctrl-C"
    redone = [p for p, mtime in finished.items() if after.get(p) != mtime]
    assert not redone, f"the resumed run remade finished outputs: {redone}"
    kept = [p for p in incomplete if p in before and after.get(p) == before[p]]
    assert not kept, f"the resumed run kept outputs left incomplete by Ctrl-C: {kept}"
    for target in TARGETS:
        assert target in after


def test_jobs_go_to_the_partition_their_resources_name_and_local_rules_stay_local(slurm_run):
    """Only cluster rules were submitted; the GPU-tagged neural metrics went to `gpu`
    holding its GPU, every other job to `cpu`; the seconds-long rules (requests, the
    synthetic backend's answers, tables) ran on the host."""
    jobs = [j for j in slurm_run["jobs"] if j["comment"].startswith("rule_")]
    rules = {_rule(j) for j in jobs}
    assert rules <= set(CLUSTER_RULES), sorted(rules - set(CLUSTER_RULES))
    assert {"conformity_answer_metrics", "conformity_fit"} <= rules, sorted(rules)
    for job in jobs:
        gpu = job["comment"] == "rule_conformity_answer_metrics_wildcards_neural_truthfulqa"
        assert job["partition"] == ("gpu" if gpu else "cpu"), job
        assert ("gpu:a100:1" in job["gres"]) == gpu, job
    # The local rules' outputs exist, and no job of theirs reached the queue.
    log = slurm_run["run"].log(1) + slurm_run["run"].log(0)
    for rule in ("answer_requests_synthetic", "conformity_round1_requests", "conformity_table"):
        assert f"localrule {rule}:" in log, rule
    assert not rules & set(LOCAL_RULES)


def _frame(path: Path) -> pd.DataFrame:
    return pd.read_csv(path) if path.suffix == ".csv" else pd.read_parquet(path)


def test_the_cluster_run_makes_the_tables_a_local_run_makes(slurm_run, local_run):
    """The same config and targets with the local executor: equal tables (the fit's to
    float precision: the sampler's arithmetic may differ with the job's threads)."""
    workdir, proc = local_run
    assert (workdir / "config.yaml").read_bytes() == slurm_run["config"].read_bytes()
    assert proc.wait(timeout=900) == 0, (workdir / "snakemake.log").read_text(errors="replace")[-6000:]
    for target in TARGETS:
        local, cluster = _frame(workdir / target), _frame(slurm_run["workdir"] / target)
        assert list(local.columns) == list(cluster.columns) and len(local) == len(cluster), target
        numeric = local.select_dtypes("number").columns
        pd.testing.assert_frame_equal(local.drop(columns=numeric), cluster.drop(columns=numeric), obj=target)
        assert np.allclose(local[numeric].to_numpy(float), cluster[numeric].to_numpy(float),
                           rtol=1e-5, atol=1e-8, equal_nan=True), target


def test_an_account_the_cluster_cannot_confirm_stops_before_any_submission(cluster, tmp_path):
    """`slurm_account` that sacctmgr cannot confirm (this cluster keeps no accounts):
    the run stops at once, naming the account and the fix, and submits nothing. (The
    plugin alone would fail inside its submission and leave the run waiting.)"""
    (tmp_path / "data").symlink_to(REPO / "data")
    config = small_synthetic_config(tmp_path / "config.yaml")
    before = {j["id"] for j in cluster.jobs()}
    cmd = profile_command(tmp_path, config, "--default-resources", "slurm_account=no-such-account", "runtime=60",
                          "mem_mb=4000", profile=str(REPO / "profiles" / "slurm"))
    res = subprocess.run(cmd, cwd=tmp_path, env={**os.environ, **cluster.env, "SNAKEMAKE_PROFILE": ""},
                         capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-3000:]
    assert "slurm_account no-such-account" in out and "sacctmgr" in out and "--default-resources" in out, out[-3000:]
    assert {j["id"] for j in cluster.jobs()} == before
    assert not (tmp_path / "results" / "responses").exists(), "a job ran before the check"


def test_stop_removes_the_configless_slurm_conf_it_left_and_no_other(tmp_path, monkeypatch):
    """A configless slurmd leaves the controller's slurm.conf on the node after it stops;
    left there, every later Slurm command (and so every `snakemake` start, whose slurm
    plugin asks `scontrol show config`) waits ~9 s for a controller that is gone. Only
    this module's cluster's is removed: a machine's own Slurm configuration stays."""
    cache = tmp_path / "run" / "slurm" / "conf"
    monkeypatch.setattr(slurm_cluster, "CONF_CACHE", cache)
    assert not slurm_cluster.remove_conf_cache()  # nothing there
    cache.mkdir(parents=True)
    (cache / "slurm.conf").write_text("ClusterName=site-cluster\nSlurmctldHost=head\n")
    assert not slurm_cluster.remove_conf_cache() and (cache / "slurm.conf").exists()
    (cache / "slurm.conf").write_text(f"ClusterName={slurm_cluster.CLUSTER_NAME}\nSlurmctldHost=vm(127.0.0.1)\n")
    (cache / "gres.conf").write_text("NodeName=vm Name=gpu\n")
    assert slurm_cluster.remove_conf_cache() and not cache.exists()
    # As slurmd leaves it: a link to its spool's conf-cache, which stays.
    spool = tmp_path / "spool" / "conf-cache"
    spool.mkdir(parents=True)
    (spool / "slurm.conf").write_text(f"ClusterName={slurm_cluster.CLUSTER_NAME}\n")
    cache.symlink_to(spool)
    assert slurm_cluster.remove_conf_cache() and not cache.is_symlink() and not cache.exists()
    assert (spool / "slurm.conf").exists()


def test_jobs_of_a_stopped_run_left_in_the_queue_are_cancelled_and_no_others(cluster, monkeypatch):
    """Snakemake's remote executor holds no job as active while it checks their status, so
    a Ctrl-C then cancels none of them; ``onerror`` cancels what the run left queued or
    running, found by the run id the slurm plugin names each job with, and no other job."""
    from types import SimpleNamespace

    from context_effects.cluster import cancel_jobs_left_in_queue

    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)

    def submit(name: str) -> str:
        res = subprocess.run(["sbatch", "--parsable", f"--job-name={name}", "--partition=cpu", "--wrap", "sleep 300"],
                             capture_output=True, text=True, check=True)
        return res.stdout.strip().split(";")[0]

    ours, other = submit("run-under-test"), submit("another-run")
    workflow = SimpleNamespace(executor_plugin=SimpleNamespace(name="slurm"),
                               scheduler=SimpleNamespace(_executor=SimpleNamespace(run_uuid="run-under-test")))
    try:
        assert cancel_jobs_left_in_queue(workflow) == [ours]
        state = {j["id"]: j["state"] for j in cluster.jobs()}
        assert state[ours] not in ("PENDING", "CONFIGURING", "RUNNING"), state
        assert state[other] in ACTIVE, state
        local = SimpleNamespace(executor_plugin=SimpleNamespace(name="local"), scheduler=workflow.scheduler)
        assert cancel_jobs_left_in_queue(local) == []
    finally:
        subprocess.run(["scancel", ours, other], env={**os.environ, **cluster.env})
