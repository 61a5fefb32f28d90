"""The workflow as Snakemake sees it: lint, formatting, DAG shape, config validation at parse time."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import BIN, REPO, run_snakemake


def test_snakemake_lint_is_clean():
    res = run_snakemake("--lint")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Congratulations, your workflow is in a good condition" in res.stdout + res.stderr


def test_snakefmt_check_is_clean():
    exe = BIN / "snakefmt"
    res = subprocess.run([str(exe), "--check", "Snakefile", "workflow/rules"], cwd=REPO, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def _job_counts(stdout: str) -> dict[str, int]:
    block = stdout.split("Job stats:", 1)[1]
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", block, re.M)}


def test_dry_run_paper_config(workdir):
    t0 = time.perf_counter()
    res = run_snakemake("-n", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir))
    assert res.returncode == 0, res.stdout + res.stderr
    counts = _job_counts(res.stdout)
    # The paper config reads the hub: one download and one item table per dataset.
    assert counts["fetch_dataset"] == 3 and counts["build_items"] == 3
    assert counts["all"] == 1
    # Seed 000's roster, each model with what its API will be sent.
    out = res.stdout + res.stderr
    for name, profile in [("gpt-5-nano", "gpt-5"), ("gpt-5.2", "gpt-5.2"), ("claude-haiku", "claude-haiku-4-5"),
                          ("claude-sonnet", "claude-sonnet-4-6"), ("claude-opus", "claude-opus-4-7"),
                          ("gemini-flash", "gemini-3-flash"), ("gemini-pro", "gemini-3-pro"),
                          ("qwen2.5-7b", "vllm"), ("mistral-7b", "vllm"), ("gemma-2-9b", "vllm"),
                          ("llama-3.1-8b", "vllm")]:
        assert re.search(rf"^  {re.escape(name)} \(.*\): {profile}[;\n]", out + "\n", re.M), name
    assert time.perf_counter() - t0 < 120


def test_dry_run_demo_config(workdir):
    res = run_snakemake(
        "-n", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile=" + str(REPO / "config" / "demo.yaml"),
    )
    assert res.returncode == 0, res.stdout + res.stderr
    counts = _job_counts(res.stdout)
    assert "fetch_dataset" not in counts  # the embedded default never touches the network
    assert counts["build_items"] == 3


def test_rule_all_collects_every_study(workdir):
    res = run_snakemake(
        "--list-target-rules", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
    )
    assert res.returncode == 0, res.stdout + res.stderr
    rules_dir = REPO / "workflow" / "rules"
    for study_file in ("conformity_generate.smk", "amel.smk", "anchoring.smk", "paper.smk", "common.smk"):
        assert (rules_dir / study_file).exists()
    snakefile = (REPO / "Snakefile").read_text()
    # rule all: every study's outputs (context_effects.targets.study_outputs) and the paper's.
    for target in ("targets.study_outputs(config)", "targets.paper_targets(config)"):
        assert target in snakefile


def test_bad_config_fails_before_any_job(workdir, tmp_path):
    cfg = yaml.safe_load((REPO / "config" / "demo.yaml").read_text())
    cfg["conformity"]["generation"]["temprature"] = 0.7
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    res = run_snakemake(
        "--cores", "1", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir), "--configfile=" + str(bad),
    )
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "unknown key `conformity.generation.temprature`" in out
    assert "allowed keys here:" in out and "temperature" in out
    # Nothing ran: no job log, no output.
    assert not (workdir / "results").exists() and not (workdir / "logs").exists()


DATA_TARGETS = ("results/items/truthfulqa.parquet", "results/items/mmlu_pro.parquet",
                "results/items/arc_challenge.parquet", "results/run/manifest.json")
#: What the Snakefile's onstart says (at debug level) when it takes out the job rate limiter.
NO_RATE_LIMIT = "local run: no job rate limit"


def test_demo_data_rules_run(workdir):
    """The data rules of the embedded default run for real and produce valid item tables.
    (With a job rate limit of the user's own, which a local run keeps.)"""
    from context_effects.datasets import read_items, validate_items

    res = run_snakemake(
        "--cores", "2", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile=" + str(REPO / "config" / "demo.yaml"), "--max-jobs-per-timespan", "1000/1s", "--verbose",
        *DATA_TARGETS,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Submitting maximum 1000 job(s) over 1.0 second(s)" in res.stderr and NO_RATE_LIMIT not in res.stderr
    for ds in ("truthfulqa", "mmlu_pro", "arc_challenge"):
        items = read_items(workdir / "results" / "items" / f"{ds}.parquet")
        validate_items(items)
        assert len(items) == 4
    manifest = (workdir / "results" / "run" / "manifest.json").read_text()
    assert "not findings" in manifest and '"kind": "demo"' in manifest


def test_a_local_run_schedules_as_jobs_finish_not_on_a_timer(workdir):
    """With Snakemake's default job rate limit (100/1s) a local scheduler also woke once a
    second per finished job while jobs waited for a core, re-reading every ready job's
    inputs each time (docs/benchmarks.md, "Snakemake's own process"). Without it: four
    ready jobs on one core take exactly four passes, one at the start and one as each of
    the first three finishes (with the limiter kept, 5 and 8 in two runs)."""
    res = run_snakemake(
        "--cores", "1", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile=" + str(REPO / "config" / "demo.yaml"), "--verbose", *DATA_TARGETS,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert NO_RATE_LIMIT in res.stderr
    ready = [line for line in res.stderr.splitlines() if line.startswith("Ready jobs: ")]
    assert ready == [f"Ready jobs: {n}" for n in (4, 3, 2, 1)], ready


def test_resource_names_are_checked_after_every_rule_file():
    """The rule names are known only after every include, so the check is the Snakefile's last statement."""
    snakefile = (REPO / "Snakefile").read_text()
    statements = [line for line in snakefile.splitlines() if line and not line.startswith((" ", "#", ")"))]
    assert statements[-1] == "check_resource_names("
    last = snakefile[snakefile.rindex("check_resource_names("):]
    assert "[r.name for r in workflow.rules]" in last and "conformity_dag.RESOURCE_KEYS" in last
    assert snakefile.rindex("include:") < snakefile.rindex("check_resource_names(")


def test_configfiles_are_reread_strictly_before_validation():
    common = (REPO / "workflow" / "rules" / "common.smk").read_text()
    assert common.index("check_config_files(workflow.configfiles)") < common.index("validate_config(config")
