"""Where each rule runs on a cluster, read from the parsed workflow (not from a list
kept beside it): every rule is classified as a local job or a scheduler job, the
Snakefile registers the local ones, GPU rules are scheduler jobs, hosted-API jobs are
capped, and the workflow profile holds nothing machine-specific."""

from __future__ import annotations

import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from context_effects.cluster import CLUSTER_RULES, LOCAL_RULES, unclassified

PROBE = """
import json, sys
from pathlib import Path
from snakemake.api import SnakemakeApi
from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

snakefile, configfile = Path(sys.argv[1]), Path(sys.argv[2])
with SnakemakeApi(OutputSettings()) as api:
    wf = api.workflow(
        resource_settings=ResourceSettings(),
        config_settings=ConfigSettings(configfiles=[configfile]),
        snakefile=snakefile,
        workdir=Path.cwd(),
    )
    workflow = wf._workflow
    rules = {
        r.name: {
            "resources": sorted(k for k in r.resources if not k.startswith("_")),
            # what Workflow.is_local decides under a cluster executor
            "local": r.group is None and (r.name in workflow._localrules or r.norun),
        }
        for r in workflow.rules
    }
print("RULES_JSON " + json.dumps(rules))
"""


@lru_cache(maxsize=None)
def _probe(configfile: str, workdir: str) -> dict[str, dict]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(REPO / "Snakefile"), configfile],
        cwd=workdir, capture_output=True, text=True, timeout=300,
    )
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RULES_JSON ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RULES_JSON "))


def workflow_rules(workdir: Path, configfile: Path = REPO / "config" / "demo.yaml") -> dict[str, dict]:
    """Every rule of the parsed workflow: its declared resource names and whether it
    runs on the submitting host. ``workdir`` needs the repository's data/."""
    return _probe(str(configfile), str(workdir))


def gpu_rules(workdir: Path) -> list[str]:
    """Rules that declare a `gpu` resource: their jobs may hold a GPU, depending on config."""
    return sorted(name for name, r in workflow_rules(workdir).items() if "gpu" in r["resources"])


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rules")
    (path / "data").symlink_to(REPO / "data")
    return path


def test_every_rule_is_classified_once(probe_dir):
    rules = workflow_rules(probe_dir)
    assert not unclassified(list(rules)), (
        f"rules {unclassified(list(rules))} are neither in context_effects.cluster.LOCAL_RULES "
        "(seconds of work: run on the submitting host) nor in CLUSTER_RULES (a scheduler job "
        "of their own): add each to one of them, with the reason"
    )
    assert not set(LOCAL_RULES) & set(CLUSTER_RULES)
    stale = (set(LOCAL_RULES) | set(CLUSTER_RULES)) - set(rules)
    assert not stale, f"classified rules the workflow does not have: {sorted(stale)}"
    assert all(LOCAL_RULES.values()) and all(CLUSTER_RULES.values()), "every entry gives its reason"


def test_the_snakefile_registers_the_local_rules(probe_dir):
    rules = workflow_rules(probe_dir)
    assert {name for name, r in rules.items() if r["local"]} == set(LOCAL_RULES)


def test_gpu_and_api_rules_are_scheduler_jobs(probe_dir):
    rules = workflow_rules(probe_dir)
    gpu = gpu_rules(probe_dir)
    api = sorted(name for name, r in rules.items() if "api" in r["resources"])
    assert {"answer_requests_vllm", "conformity_answer_metrics"} <= set(gpu)
    assert api == ["answer_requests_remote"]
    assert set(gpu) | set(api) <= set(CLUSTER_RULES)


def _profile(name: str) -> dict:
    return yaml.safe_load((REPO / "profiles" / name / "config.yaml").read_text())


def test_the_slurm_profile_caps_hosted_api_jobs():
    """Each hosted-API job holds `api=1`; without a global cap a cluster would run as
    many at once as it has slots, each with its own client and concurrency."""
    resources = _profile("slurm")["resources"]
    assert isinstance(resources, dict) and isinstance(resources["api"], int) and 1 <= resources["api"] <= 16


def test_profiles_share_rerun_triggers_and_the_workflow_profile_is_machine_neutral():
    triggers = ["mtime", "params", "input", "software-env"]
    for name in ("default", "local", "slurm"):
        assert _profile(name)["rerun-triggers"] == triggers, name
    # profiles/default is read on every run from the repository, on top of --profile,
    # and its keys win: anything about the machine would override the cluster profile.
    assert set(_profile("default")) == {"rerun-triggers"}


def test_the_slurm_partitions_file_routes_by_gpu():
    """The shipped partition file: a GPU partition that only GPU jobs can score on, and
    a CPU partition that cannot take a GPU job (see its comments)."""
    slurm = _profile("slurm")
    assert "slurm_partition" not in slurm["default-resources"], "a fixed partition disables the selection"
    assert not any("slurm_partition" in r for r in slurm.get("set-resources", {}).values())
    parts = yaml.safe_load((REPO / "profiles" / "slurm" / slurm["slurm-partition-config"]).read_text())["partitions"]
    gpu = [p for p in parts.values() if p.get("max_gpu", 0) > 0]
    cpu = [p for p in parts.values() if p.get("max_gpu", 0) == 0]
    assert len(gpu) == 1 and len(cpu) == 1
    assert set(gpu[0]) <= {"max_gpu", "available_gpu_models", "max_cpus_per_gpu"}
