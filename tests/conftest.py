"""Shared fixtures: where the repository and the real dataset copies are."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


def snakemake_cmd(*args: str) -> list[str]:
    """The snakemake of the running interpreter's environment, never a random one on PATH."""
    exe = BIN / "snakemake"
    return [str(exe) if exe.exists() else shutil.which("snakemake") or "snakemake", *args]


def run_snakemake(*args: str, cwd: Path = REPO, env: dict | None = None, timeout: float = 300):
    return subprocess.run(
        snakemake_cmd(*args),
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A scratch working directory that sees the repo's data/ (demo items) read-only."""
    (tmp_path / "data").symlink_to(REPO / "data")
    return tmp_path


def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where converted test models live: reused across sessions when the repo has resources/models/."""
    override = os.environ.get("CONTEXT_EFFECTS_TEST_MODEL_CACHE")
    if override:
        return Path(override)
    if (REPO / "resources" / "models").is_dir():
        return REPO / "resources" / "models" / "_pytest"
    return tmp_path_factory.getbasetemp() / "models"


def edit_definition(path: Path, name: str, assignment: str = "{name} = {name}") -> None:
    """Change what the top-level function or assignment ``name`` of a source file does, by
    one statement: ``pass`` first in the function's body, or ``assignment`` after the
    assignment (the rerun tests edit copies of the sources this way)."""
    source = path.read_text()
    lines = source.splitlines()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            first = node.body[0]
            lines.insert(first.lineno - 1, " " * first.col_offset + "pass")
            break
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            lines.insert(node.end_lineno, assignment.format(name=name))
            break
    else:
        raise AssertionError(f"{path} has no top-level {name}")
    path.write_text("\n".join(lines) + "\n")
