"""The slurm profile through the executor plugin's real submit path.

Stub `sbatch`/`sacct`/... commands on PATH record their arguments; Snakemake with
`--profile profiles/slurm` submits the ready jobs through the plugin, and we assert
on the sbatch lines it produced (a dry run skips the plugin's submit-time logic).

The four runs are started together (the ``runs`` fixture) and each test reads its own:
a run mostly waits (the plugin pauses 5 s before each `sbatch`, and a test waits a few
seconds more for submissions that should not come), so one after the other they held a
test worker about three times as long.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, run_snakemake, snakemake_cmd
from context_effects.cluster import CLUSTER_RULES
from test_cluster_rules import gpu_rules

STUB = """#!{python}
import json, os, sys, time
name = os.path.basename(sys.argv[0])
with open({log!r}, "a") as fh:
    fh.write(json.dumps({{"cmd": name, "argv": sys.argv[1:], "t": time.time()}}) + "\\n")
if name == "sbatch":
    # --parsable output: "<jobid>;<cluster>"
    n = sum(1 for _ in open({log!r}))
    print(f"{{1000 + n}};testcluster")
elif name == "sacctmgr":
    print("myaccount")
elif name == "sinfo":
    print("cpu*\\ngpu")
# sacct/squeue print nothing: jobs stay "unknown/pending" and the run waits until we stop it.
"""


def _install_stubs(bindir: Path, log: Path) -> None:
    bindir.mkdir()
    for name in ("sbatch", "sacct", "squeue", "scontrol", "sinfo", "sacctmgr", "scancel", "srun", "sshare"):
        path = bindir / name
        path.write_text(STUB.format(python=sys.executable, log=str(log)))
        path.chmod(0o755)


class Submission:
    """A run of Snakemake with ``profile`` against the stub commands, started at once;
    ``sbatch_calls()`` waits for its submissions."""

    def __init__(
        self,
        workdir: Path,
        configfile: Path,
        n_expected: int,
        extra: tuple[str, ...] = (),
        env_extra: dict | None = None,
        profile: str = str(REPO / "profiles" / "slurm"),
        settle: float = 0.0,
    ) -> None:
        self.n_expected, self.settle = n_expected, settle
        self.log = workdir / "calls.jsonl"
        bindir = workdir / "stub-bin"
        _install_stubs(bindir, self.log)
        env = {
            **os.environ,
            "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
            "SNAKEMAKE_PROFILE": "",
            **(env_extra or {}),
        }
        cmd = snakemake_cmd(
            "--profile", profile,
            "--snakefile", str(REPO / "Snakefile"),
            "--directory", str(workdir),
            "--configfile=" + str(configfile),
            "--local-cores=1",  # local rules run for real beside the stubbed submissions
            *extra,
        )
        # Its output goes to a file: a pipe nobody reads while the run waits could fill and stall it.
        self.output = workdir / "snakemake.log"
        with open(self.output, "w") as out:
            self.proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        self.deadline = time.monotonic() + 120

    def stop(self) -> str:
        """Kill the run, not stop it: only the sbatch lines are checked, and on SIGTERM or
        Ctrl-C Snakemake waits for the plugin's status thread to sleep out its poll
        interval (10 s, then 20 s) before it exits. The whole group goes: local jobs
        included. Returns what the run printed."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        return self.output.read_text(errors="replace")

    def sbatch_calls(self) -> list[list[str]]:
        """The sbatch argument lists of the run, once ``n_expected`` have been submitted
        and ``settle`` seconds more have passed (to catch submissions that should not happen)."""
        sbatch: list[list[str]] = []
        try:
            while time.monotonic() < self.deadline:
                if self.log.exists():
                    calls = [json.loads(line) for line in self.log.read_text().splitlines()]
                    submitted = [c for c in calls if c["cmd"] == "sbatch"]
                    sbatch = [c["argv"] for c in submitted]
                    nth = submitted[self.n_expected - 1]["t"] if len(sbatch) >= self.n_expected else None
                    if nth is not None and time.time() >= nth + self.settle:
                        break
                if self.proc.poll() is not None:
                    break
                time.sleep(0.5)
        finally:
            output = self.stop()
        assert len(sbatch) >= self.n_expected, (
            f"expected {self.n_expected} sbatch calls, got {len(sbatch)}:\n{output[-4000:]}")
        return sbatch


def _by_rule(sbatch_calls: list[list[str]]) -> dict[str, str]:
    """Map rule name -> the sbatch command line (shell-joined) that submitted it."""
    out = {}
    for argv in sbatch_calls:
        line = " ".join(argv)
        for token in argv:
            if token.startswith("rule_"):
                out[token.split("_wildcards_")[0].removeprefix("rule_")] = line
        if "--comment" in argv:
            comment = argv[argv.index("--comment") + 1]
            out.setdefault(comment.split("_wildcards_")[0].removeprefix("rule_"), line)
    return out


def _arg(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _assert_cpu_job(line: str) -> None:
    argv = shlex.split(line)
    assert _arg(argv, "-p") == "cpu" and not any(a.startswith("--gpus") for a in argv), line


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every stub-`sbatch` run of the module, started together; a test reads its own with
    ``_started``. A run whose preparation failed is its own test's error, not the others'."""
    started: dict[str, dict | Exception] = {}
    try:
        for name, start in STARTS.items():
            workdir = tmp_path_factory.mktemp(name)
            (workdir / "data").symlink_to(REPO / "data")
            try:
                started[name] = start(workdir)
            except Exception as exc:  # noqa: BLE001 - raised again by the test that reads it
                started[name] = exc
        yield started
    finally:
        for run in started.values():
            if isinstance(run, dict) and "run" in run:
                run["run"].stop()


def _started(runs: dict, name: str) -> dict:
    run = runs[name]
    if isinstance(run, Exception):
        raise run
    return run


def _start_as_installed(workdir: Path) -> dict:
    """`make slurm-profile` into a scratch XDG_CONFIG_HOME, then `--profile slurm` on
    the demo config."""
    home = workdir / "xdg"
    subprocess.run(["make", "-s", "-C", str(REPO), "slurm-profile", f"XDG_CONFIG_HOME={home}"], check=True)
    # Ready at once on the demo config: the item tables, the manifest, the offline NLTK
    # data, the AMEL code-review items (all local) and the conversion of the packaged
    # model; the local ones would be submitted in the same pass, within seconds.
    run = Submission(workdir, REPO / "config" / "demo.yaml", n_expected=1, profile="slurm",
                     env_extra={"XDG_CONFIG_HOME": str(home)}, settle=8, extra=("--verbose",))
    return {"run": run, "home": home}


def test_slurm_profile_as_installed_submits_cluster_jobs_only(runs):
    """`make slurm-profile` links the profile where Snakemake looks a name up, so
    `snakemake --profile slurm` works from anywhere; of the demo's first ready jobs,
    the seconds-long ones run on the submitting host and only the model conversion
    reaches sbatch."""
    started = _started(runs, "as_installed")
    assert (started["home"] / "snakemake" / "slurm").resolve() == REPO / "profiles" / "slurm"
    calls = started["run"].sbatch_calls()
    lines = _by_rule(calls)
    assert "convert_gguf_model" in lines, sorted(lines)
    assert set(lines) <= set(CLUSTER_RULES), f"local rules submitted: {sorted(set(lines) - set(CLUSTER_RULES))}"
    for rule, line in lines.items():
        argv = shlex.split(line)
        # Site settings from the profile: the partition chosen by the job's resources ...
        _assert_cpu_job(line)
        # No account in the profile: none is sent, and sbatch charges the user's default one.
        assert "-A" not in argv, line
        # ... and per-rule runtime and memory from the rules.
        assert "-t" in argv and "--mem" in argv, line
    # The demo's CPU models carry no GPU request; conversion gets its cores from the profile.
    convert = shlex.split(lines["convert_gguf_model"])
    assert _arg(convert, "-t") == "30" and _arg(convert, "--mem") == "8000"
    assert "--cpus-per-task=4" in convert
    # The profile's submission rate is the one Snakemake applies (a `max-jobs-per-second`
    # key was overridden by the command line's default, 100/1s), and a cluster run keeps it.
    output = started["run"].output.read_text(errors="replace")
    assert "Submitting maximum 5 job(s) over 1.0 second(s)" in output, output[-4000:]
    assert "local run: no job rate limit" not in output


def test_slurm_profile_ships_no_account_and_no_conda():
    """A cluster user in the project venv must not die at `conda info`, and an unedited
    account must not be sent: both are opt-in (docs/cluster.md)."""
    import yaml

    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    assert "software-deployment-method" not in profile and "sdm" not in profile
    assert "slurm_account" not in profile["default-resources"]
    assert "# software-deployment-method: conda" in (REPO / "profiles" / "slurm" / "config.yaml").read_text()


def _start_resources_override(workdir: Path) -> dict:
    import yaml

    cfg = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    # A per-kind key of the metric rule is accepted beside rule names (docs/configuration.md).
    cfg["resources"] = {"convert_gguf_model": {"runtime": 42, "mem_mb": 1234},
                        "conformity_classifier_metrics": {"runtime": 9}}
    path = workdir / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return {"run": Submission(workdir, path, n_expected=1)}


def test_slurm_profile_config_resources_override(runs):
    """`resources:` in config changes what is requested from the scheduler."""
    calls = _started(runs, "resources_override")["run"].sbatch_calls()
    convert = shlex.split(_by_rule(calls)["convert_gguf_model"])
    assert _arg(convert, "-t") == "42" and _arg(convert, "--mem") == "1234"


def _gpu_config(path: Path) -> Path:
    """The demo configuration with every `gpu:` setting (each model's, the metric
    models') asking for one A100: every rule that can hold a GPU then does."""
    import yaml

    from context_effects.config import load_config, validate_config

    cfg = validate_config(load_config(REPO / "config" / "demo.yaml"))
    found = []

    def walk(node, where):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "gpu" and isinstance(value, dict) and "count" in value:
                    value.update(count=1, model="a100")
                    found.append(where)
                else:
                    walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for value in node:
                walk(value, where)

    walk(cfg, "config")
    assert found
    path.write_text(yaml.safe_dump(cfg))
    return path


def _dry_run_jobs(workdir: Path, configfile: Path) -> list[dict]:
    """Every job of the DAG as `snakemake -n` prints it: rule, input, output, resources."""
    proc = run_snakemake(
        "-n", "--profile", "none", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile=" + str(configfile), cwd=workdir,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    jobs: list[dict] = []
    for line in (proc.stdout + proc.stderr).splitlines():
        head = line.split()
        if len(head) == 2 and head[0] in ("rule", "localrule") and head[1].endswith(":"):
            jobs.append({"rule": head[1][:-1], "input": [], "output": [], "resources": {}})
        elif jobs and line.startswith("    ") and ": " in line:
            key, _, value = line.strip().partition(": ")
            if key in ("input", "output"):
                jobs[-1][key] = value.split(", ")
            elif key == "resources":
                jobs[-1]["resources"] = dict(item.partition("=")[::2] for item in value.split(", "))
    return jobs


def _start_gpu_partition(workdir: Path) -> dict:
    """The demo config with every GPU setting on; one job of each GPU rule with a GPU
    and, where the rule has them, one without, each from stand-in inputs."""
    rules = gpu_rules(workdir)
    config = _gpu_config(workdir / "gpu.yaml")
    chosen: dict[tuple[str, bool], dict] = {}
    for job in _dry_run_jobs(workdir, config):
        if job["rule"] in rules:
            chosen.setdefault((job["rule"], int(job["resources"].get("gpu") or 0) > 0), job)
    missing = [r for r in rules if (r, True) not in chosen]
    started = {"rules": rules, "chosen": chosen, "missing": missing, "config": config}
    if missing:
        return started
    # Only these jobs may run: their inputs exist (as stand-ins), nothing upstream is built.
    for job in chosen.values():
        for name in job["input"]:
            path = workdir / name
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.touch()
    targets = [job["output"][0] for job in chosen.values()]
    started["run"] = Submission(workdir, config, n_expected=len(chosen),
                                extra=("--allowed-rules", *rules, "--", *targets))
    return started


def test_every_gpu_rule_goes_to_a_gpu_partition(runs):
    """The rules that declare a `gpu` resource are read from the workflow, so a new one is
    covered without editing this test. With every GPU setting of the config on, each such
    rule's GPU jobs are submitted to the GPU partition with --gpus=<model>:<n>, and its
    jobs without a GPU (the text metrics of the metric rule) to the CPU partition with no
    GPU request: the partition follows the job's resources, not the rule's name."""
    started = _started(runs, "gpu_partition")
    rules, chosen = started["rules"], started["chosen"]
    assert {"answer_requests_vllm", "conformity_answer_metrics"} <= set(rules)
    assert not started["missing"], (
        f"no job of {started['missing']} holds a GPU under {started['config']}: extend _gpu_config")
    calls = started["run"].sbatch_calls()
    lines = [" ".join(c) for c in calls]
    for (rule, holds_gpu), job in chosen.items():
        submitted = [line for line, argv in zip(lines, calls) if rule in _by_rule([argv])]
        assert submitted, (rule, lines)
        n_gpu = sum(1 for l in submitted if _arg(shlex.split(l), "-p") == "gpu")
        assert n_gpu == (1 if (rule, True) in chosen else 0), (rule, submitted)
    for line in lines:
        argv = shlex.split(line)
        if _arg(argv, "-p") == "gpu":
            assert "--gpus=a100:1" in argv and "--cpus-per-gpu=8" in argv, line
        else:
            _assert_cpu_job(line)


def _start_gpu_tags(workdir: Path) -> dict:
    """One shard each of two local 7-9B models and a hosted one, under the paper config."""
    from context_effects.config import load_config, validate_config
    from context_effects.llm.factory import model_ref
    from context_effects.llm.shards import write_request_shard
    from context_effects.llm.types import LLMRequest, Sampling

    cfg = validate_config(load_config(REPO / "config" / "config.yaml"))
    targets = []
    for model in ("qwen2.5-7b", "gemma-2-9b", "gpt-4o"):
        req = LLMRequest(
            model=model_ref(model, cfg["models"][model]), messages=(("user", "Hi"),), sampling=Sampling(max_tokens=300)
        )
        write_request_shard(workdir / "results" / "requests" / "smoke" / "gen" / model / "0000.parquet", [req])
        targets.append(f"results/responses/smoke/gen/{model}/0000.parquet")
    # The paper config, with the served-model preflight off: no provider is reachable here
    # (the preflight has its own tests, tests/test_llm_preflight.py).
    import yaml

    paper = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    paper["run"]["preflight"] = False
    (workdir / "paper.yaml").write_text(yaml.safe_dump(paper))
    run = Submission(
        workdir, workdir / "paper.yaml", n_expected=3, extra=tuple(targets),
        # Every hosted model of the paper config needs its key before any job starts.
        env_extra={"OPENAI_API_KEY": "sk-test-not-a-real-key", "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key",
                   "GEMINI_API_KEY": "gm-test-not-a-real-key"},
    )
    return {"run": run}


#: The runs of this module (the ``runs`` fixture), each prepared and started in turn, then
#: left to run together. Cheapest preparation first, so the first runs are under way meanwhile.
STARTS = {"resources_override": _start_resources_override, "as_installed": _start_as_installed,
          "gpu_tags": _start_gpu_tags, "gpu_partition": _start_gpu_partition}


def test_slurm_profile_gpu_tags_on_local_model_rules(runs):
    """A shard for a local 7-9B model goes to the GPU partition with --gpus=<model>:<n>;
    a hosted-API shard goes to the CPU partition without GPUs."""
    calls = _started(runs, "gpu_tags")["run"].sbatch_calls()
    lines = [" ".join(c) for c in calls]
    gpu_lines = [l for l in lines if "rule_answer_requests_vllm" in l]
    api_lines = [l for l in lines if "rule_answer_requests_remote" in l]
    assert len(gpu_lines) == 2 and len(api_lines) == 1, lines
    for line in gpu_lines:
        argv = shlex.split(line)
        assert argv[argv.index("-p") + 1] == "gpu"
        assert "--gpus=a100:1" in argv
        assert "--cpus-per-gpu=8" in argv
        assert argv[argv.index("-t") + 1] == "240" and argv[argv.index("--mem") + 1] == "32000"
    api = shlex.split(api_lines[0])
    assert api[api.index("-p") + 1] == "cpu" and not any(a.startswith("--gpus") for a in api)
    # The key is in the environment of the run, never on a command line.
    assert not any(k in "\n".join(lines) for k in ("sk-test-not-a-real-key", "sk-ant-test", "gm-test"))
