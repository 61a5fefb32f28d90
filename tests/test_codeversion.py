"""The code version each rule passes as a param (context_effects.codeversion): an edit
changes the version of exactly the jobs that run the edited code, a comment or another
checkout changes none. Each case edits a copy of the sources, never the repository."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, edit_definition

#: Jobs whose versions are compared: scripts (one per rule family) and registry entries.
SCRIPTS = ["export_store.py", "conformity_requests.py", "conformity_judge_requests.py", "conformity_ratings.py", "amel_requests.py",
           "anchoring_requests.py", "fit_model.py", "run_manifest.py"]
ENTRIES = [("conformity", "table", "table2"), ("conformity", "table", "table5"), ("conformity", "table", "table3"),
           ("conformity", "figure", "rating_distributions"), ("amel", "table", "effects"),
           ("amel", "figure", "effects"), ("anchoring", "table", "pull")]

_PROBE = """
import json, sys
from context_effects import codeversion as cv
scripts, entries = json.loads(sys.argv[1])
out = {s: cv.of_script(s) for s in scripts}
out.update({"/".join(e): cv.of_entry(*e) for e in entries})
print(json.dumps(out))
"""


def _copy(root: Path, source: Path = REPO) -> Path:
    shutil.copytree(source / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(source / "workflow" / "scripts", root / "workflow" / "scripts")
    return root


def _versions(root: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    res = subprocess.run([sys.executable, "-c", _PROBE, json.dumps([SCRIPTS, ENTRIES])], env=env, cwd=root,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """One snapshot of the sources that every case copies and edits."""
    return _copy(tmp_path_factory.mktemp("pristine"))


@pytest.fixture(scope="module")
def baseline(pristine) -> dict[str, str]:
    return _versions(pristine)


def _changed(base: dict[str, str], edited: dict[str, str]) -> set[str]:
    return {k for k in base if base[k] != edited[k]}


def test_another_checkout_of_the_same_code_has_the_same_versions(baseline, pristine, tmp_path):
    assert _versions(_copy(tmp_path, pristine)) == baseline
    assert all(len(v) == 16 and int(v, 16) >= 0 for v in baseline.values())


def test_comments_blank_lines_and_reformatting_rerun_nothing(baseline, pristine, tmp_path):
    root = _copy(tmp_path, pristine)
    for rel in ("context_effects/conformity/prompts.py", "context_effects/jobs.py", "context_effects/outputs.py"):
        path = root / "src" / rel
        path.write_text("# an added comment\n\n" + path.read_text().replace("\n\n\n", "\n\n\n\n") + "\n# trailing\n")
    script = root / "workflow" / "scripts" / "fit_model.py"
    script.write_text(script.read_text() + "\n# a note\n")
    assert _changed(baseline, _versions(root)) == set()


ALL = set(SCRIPTS) | {"/".join(e) for e in ENTRIES}


@pytest.mark.parametrize(
    ("module", "name", "expected"),
    [
        # The blind judge's prompt: the judge requests, nothing that generates.
        ("conformity/prompts.py", "BLIND_JUDGE", {"conformity_judge_requests.py"}),
        # The Round 1 prompt: the generation requests, not the judges'.
        ("conformity/prompts.py", "ROUND1", {"conformity_requests.py"}),
        # Table 2's builder: Table 2, not Table 5 beside it in the same module.
        ("conformity/descriptive.py", "mean_blind_ratings", {"conformity/table/table2"}),
        # A function a fit table imports inside its builder (lazy import followed).
        ("measurement/report.py", "build_table", {"conformity/table/table3"}),
        # The sampler: the fits.
        ("measurement/fit.py", "fit_nuts", {"fit_model.py"}),
        # How a request is serialised: the jobs that write request shards and the store's
        # export (a method of the store class uses it), not the jobs that read answers.
        ("llm/store/rows.py", "request_json",
         {"conformity_requests.py", "conformity_judge_requests.py", "amel_requests.py", "anchoring_requests.py",
          "export_store.py"}),
        # How the store seals a file: of the jobs compared, the export only.
        ("llm/store/segments.py", "write_sealed", {"export_store.py"}),
        # The logging every job script sets up: every job.
        ("jobs.py", "setup_job_logging", ALL),
    ],
)
def test_an_edit_changes_exactly_the_jobs_that_run_it(baseline, pristine, tmp_path, module, name, expected):
    root = _copy(tmp_path, pristine)
    edit_definition(root / "src" / "context_effects" / module, name)
    assert _changed(baseline, _versions(root)) == expected


def test_a_plotting_function_changes_its_figures_only(baseline, pristine, tmp_path):
    root = _copy(tmp_path, pristine)
    edit_definition(root / "src" / "context_effects" / "conformity" / "descriptive.py", "plot_rating_distribution")
    assert _changed(baseline, _versions(root)) == {"conformity/figure/rating_distributions"}


def test_a_registry_declaration_counts_for_every_registered_entry(baseline, pristine, tmp_path):
    """Formats, labels and captions are declared in the registries, which the table and
    figure scripts look up by name (importlib): each registered entry follows them, and
    no job outside the registries does."""
    root = _copy(tmp_path, pristine)
    edit_definition(root / "src" / "context_effects" / "amel" / "outputs.py", "REGISTRY")
    assert _changed(baseline, _versions(root)) == {"/".join(e) for e in ENTRIES}


def test_a_module_named_in_a_string_is_followed(baseline, pristine, tmp_path):
    """The synthetic backend imports its simulators by name: editing one changes the
    jobs that answer with the synthetic backend or read its planted values."""
    root = _copy(tmp_path, pristine)
    edit_definition(root / "src" / "context_effects" / "conformity" / "synthetic.py", "validate")
    changed = _changed(baseline, _versions(root))
    assert {"conformity_requests.py", "conformity_judge_requests.py"} <= changed
    assert not changed & {"conformity/table/table2", "fit_model.py", "export_store.py"}


def test_an_unknown_script_is_named():
    from context_effects import codeversion

    with pytest.raises(FileNotFoundError, match="no job script .*nope.py"):
        codeversion.of_script("nope.py")


def _cache_files(root: Path) -> list[Path]:
    return sorted((root / ".cache" / "codeversion").glob("*.json"))


def _stored_form(versions: dict[str, str]) -> dict[str, str]:
    """``_versions``' labels as the cache file keys them."""
    out = {}
    for label, version in versions.items():
        study, kind, name = label.split("/") if "/" in label else ("", "script", label)
        out[f"script:{name}" if kind == "script" else f"{kind}:{study}:{name}"] = version
    return out


def test_versions_are_kept_on_disk_per_state_of_the_sources(baseline, pristine, tmp_path):
    """Each process that parses the Snakefile versions every rule: the versions are kept in
    ``.cache/codeversion/``, in a file named by a digest of the sources. A second process
    reads them from there, a damaged file is computed again and replaced, and an edit
    reads and writes a file of its own."""
    root = _copy(tmp_path, pristine)
    assert _versions(root) == baseline
    [cache] = _cache_files(root)
    stored = json.loads(cache.read_text())
    assert stored == _stored_form(baseline)
    # read back, not recomputed: a value planted in the file is what the next process returns
    stored["script:fit_model.py"] = "0123456789abcdef"
    cache.write_text(json.dumps(stored))
    assert _versions(root) == {**baseline, "fit_model.py": "0123456789abcdef"}
    for damage in ("{not json", '{"script:fit_model.py": "not a version"}'):
        cache.write_text(damage)
        assert _versions(root) == baseline, damage
        assert json.loads(cache.read_text())["script:fit_model.py"] == baseline["fit_model.py"]
    # an edit: another file, computed afresh; the first state's file is left as it was
    edit_definition(root / "src" / "context_effects" / "measurement" / "fit.py", "fit_nuts")
    assert _changed(baseline, _versions(root)) == {"fit_model.py"}
    assert len(_cache_files(root)) == 2 and json.loads(cache.read_text()) == _stored_form(baseline)


def test_a_new_state_of_the_sources_keeps_the_most_recent_cache_files(baseline, pristine, tmp_path):
    """The folder keeps ``KEEP_STATES`` files (the newest, by modification time) and drops a
    writer's temporary file left for more than an hour; the current state's file is kept."""
    from context_effects.codeversion import KEEP_STATES

    root = _copy(tmp_path, pristine)
    folder = root / ".cache" / "codeversion"
    folder.mkdir(parents=True)
    now = time.time()
    old = []
    for i in range(KEEP_STATES + 5):
        f = folder / f"{i:032x}.json"
        f.write_text("{}")
        os.utime(f, (now - 86400 - i, now - 86400 - i))  # file 0 the newest of them
        old.append(f)
    left, fresh = folder / "left-by-a-killed-writer.tmp", folder / "being-written.tmp"
    left.write_text("{")
    os.utime(left, (now - 7200, now - 7200))
    fresh.write_text("{")
    assert _versions(root) == baseline
    kept = set(folder.glob("*.json"))
    assert len(kept) == KEEP_STATES and len(kept - set(old)) == 1  # the current state's, and
    assert set(old[:KEEP_STATES - 1]) <= kept  # the newest of the others
    assert not left.exists() and fresh.exists()


def test_an_unwritable_cache_only_costs_the_computation(baseline, pristine, tmp_path):
    root = _copy(tmp_path, pristine)
    (root / ".cache").write_text("a file where the cache folder would be")
    assert _versions(root) == baseline
