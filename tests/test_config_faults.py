"""Broken configurations fail while the workflow is parsed, before any job, with a message
that names the problem and its fix; nothing is written.

The cases are files (tests/faults/configs/*.yaml, header format in the README there), run
through Snakemake itself, so that the strict YAML loader is shown to apply to a file given
with --configfile, which Snakemake parses before any of our code runs.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import REPO, run_snakemake
from context_effects.llm.secrets import MissingSecretError, check_env

FAULTS = REPO / "tests" / "faults" / "configs"
CASES = sorted(FAULTS.glob("*.yaml"))


def _header(path: Path) -> dict[str, list[str]]:
    head: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].strip().partition(": ")
        if sep and key in ("expect", "env", "dry-run"):
            head.setdefault(key, []).append(value)
    return head


def test_every_fault_file_says_what_it_expects():
    assert len(CASES) >= 15
    for path in CASES:
        assert _header(path).get("expect"), f"{path.name}: no '# expect:' line"


def test_the_readme_lists_every_fault_file():
    listed = set(re.findall(r"^\| `([\w.-]+\.yaml)` \|", (FAULTS / "README.md").read_text(), re.M))
    assert listed == {p.name for p in CASES}


@pytest.mark.parametrize("case", CASES, ids=[p.stem for p in CASES])
def test_fault_config_fails_before_any_job(case, workdir):
    head = _header(case)
    (workdir / "tests").symlink_to(REPO / "tests")  # fault configs name tests/faults/items/...
    env = {}
    for assignment in head.get("env", []):
        name, _, value = assignment.partition("=")
        env[name] = shlex.split(value)[0] if value.strip() else ""
    dry = head.get("dry-run", ["yes"])[0] != "no"
    mode = ["-n"] if dry else ["--cores", "1"]
    res = run_snakemake(*mode, "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                        f"--configfile={case}", env=env)
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-3000:]
    for expected in head["expect"]:
        assert expected in out, f"{case.name}: {expected!r} not in:\n{out[-3000:]}"
    assert not (workdir / "results").exists() and not (workdir / "logs").exists()


def test_whitespace_only_api_key_counts_as_missing():
    models = {"gpt": {"backend": "openai", "model_id": "gpt-4o"},
              "gemini": {"backend": "openai_compatible", "model_id": "g", "api_key_env": "GEMINI_API_KEY"}}
    with pytest.raises(MissingSecretError) as err:
        check_env(models, environ={"OPENAI_API_KEY": " \t", "GEMINI_API_KEY": "\n"})
    assert err.value.missing == {"OPENAI_API_KEY": ["gpt"], "GEMINI_API_KEY": ["gemini"]}
    assert check_env(models, environ={"OPENAI_API_KEY": " sk-x ", "GEMINI_API_KEY": "k"}) == [
        "GEMINI_API_KEY", "OPENAI_API_KEY"]


def test_a_valid_config_given_with_configfile_still_runs(workdir):
    """The strict re-read of --configfile files accepts the shipped configs."""
    for name in ("demo.yaml", "config.yaml"):
        res = run_snakemake("-n", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                            "--configfile=" + str(REPO / "config" / name))
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]


def test_the_faults_are_quiet_without_the_checks():
    """Each YAML fault is one Snakemake would otherwise take silently: plain PyYAML loads it."""
    import yaml

    for name in ("duplicate_key", "duplicate_section", "yaml11_boolean_yes", "leading_zero", "sexagesimal"):
        assert isinstance(yaml.safe_load((FAULTS / f"{name}.yaml").read_text()), dict)
