"""The slurm profile through the executor plugin's real submit path.

Stub `sbatch`/`sacct`/... commands on PATH record their arguments; Snakemake with
`--profile profiles/slurm` submits the ready jobs through the plugin, and we assert
on the sbatch lines it produced (a dry run skips the plugin's submit-time logic).
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

from conftest import REPO, snakemake_cmd

STUB = """#!{python}
import json, os, sys
name = os.path.basename(sys.argv[0])
with open({log!r}, "a") as fh:
    fh.write(json.dumps({{"cmd": name, "argv": sys.argv[1:]}}) + "\\n")
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


def _submit(
    workdir: Path, configfile: Path, n_expected: int, extra: tuple[str, ...] = (), env_extra: dict | None = None
) -> list[list[str]]:
    log = workdir / "calls.jsonl"
    bindir = workdir / "stub-bin"
    _install_stubs(bindir, log)
    env = {
        **os.environ,
        "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
        "SNAKEMAKE_PROFILE": "",
        **(env_extra or {}),
    }
    cmd = snakemake_cmd(
        "--profile", str(REPO / "profiles" / "slurm"),
        "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(workdir),
        "--configfile=" + str(configfile),
        "--software-deployment-method=env-modules",  # no conda here; the profile default is conda
        *extra,
    )
    proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    sbatch: list[list[str]] = []
    try:
        while time.monotonic() < deadline:
            if log.exists():
                calls = [json.loads(line) for line in log.read_text().splitlines()]
                sbatch = [c["argv"] for c in calls if c["cmd"] == "sbatch"]
                if len(sbatch) >= n_expected:
                    break
            if proc.poll() is not None:
                break
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        output = proc.stdout.read() if proc.stdout else ""
    assert len(sbatch) >= n_expected, f"expected {n_expected} sbatch calls, got {len(sbatch)}:\n{output[-4000:]}"
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


def test_slurm_profile_submits_with_per_rule_resources(workdir):
    # Ready at once on the demo config: 3 item tables, the manifest, the model conversion,
    # the offline NLTK data and the AMEL code-review items (read from a file the project
    # ships); wait for all seven (submission order is not fixed).
    calls = _submit(workdir, REPO / "config" / "demo.yaml", n_expected=7)
    lines = _by_rule(calls)
    assert {"build_items", "run_manifest", "convert_gguf_model"} <= set(lines), lines
    for rule, line in lines.items():
        argv = shlex.split(line)
        # Site settings from the profile ...
        assert "-p" in argv and argv[argv.index("-p") + 1] == "cpu", line
        assert "-A" in argv and argv[argv.index("-A") + 1] == "myaccount", line
        # ... and per-rule runtime and memory from the rules.
        assert "-t" in argv and "--mem" in argv, line
    build = shlex.split(lines["build_items"])
    assert build[build.index("-t") + 1] == "15" and build[build.index("--mem") + 1] == "4000"
    manifest = shlex.split(lines["run_manifest"])
    assert manifest[manifest.index("-t") + 1] == "5" and manifest[manifest.index("--mem") + 1] == "1000"
    # The demo's CPU models carry no GPU request; conversion gets its cores from the profile.
    convert = shlex.split(lines["convert_gguf_model"])
    assert not any(a.startswith("--gpus") for a in convert) and "--cpus-per-task=4" in convert


def test_slurm_profile_config_resources_override(workdir, tmp_path):
    """`resources:` in config changes what is requested from the scheduler."""
    import yaml

    cfg = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    cfg["resources"] = {"build_items": {"runtime": 42, "mem_mb": 1234}}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    calls = _submit(workdir, path, n_expected=5)
    build = shlex.split(_by_rule(calls)["build_items"])
    assert build[build.index("-t") + 1] == "42" and build[build.index("--mem") + 1] == "1234"


def test_slurm_profile_gpu_tags_on_local_model_rules(workdir):
    """A shard for a local 7-9B model goes to the GPU partition with --gpus=<model>:<n>;
    a hosted-API shard goes to the CPU partition without GPUs."""
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
    calls = _submit(
        workdir, REPO / "config" / "config.yaml", n_expected=3, extra=tuple(targets),
        # Every hosted model of the paper config needs its key before any job starts.
        env_extra={"OPENAI_API_KEY": "sk-test-not-a-real-key", "ANTHROPIC_API_KEY": "sk-ant-test-not-a-real-key",
                   "GEMINI_API_KEY": "gm-test-not-a-real-key"},
    )
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
