"""The contributor docs stay true to the repository: docs/architecture.md and the
deviations ledger docs/deviations.yaml.

Fast and light: PyYAML and the standard library only, no package import.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
LEDGER = ROOT / "docs" / "deviations.yaml"

#: Sections other documents cite by title; renaming one breaks those citations.
HEADINGS = (
    "The three studies",
    "The DAG",
    "The LLM execution layer",
    "The response store",
    "Reply validation",
    "The synthetic backend",
    "Study registries",
    "Settings",
    "DAG helpers",
    "Where to look",
)
WHERE_TO_LOOK_TASKS = (
    "add a table",
    "change a prompt",
    "add a backend",
    "change a default",
    "add a model to the paper config",
    "deviations ledger",
)

FIELDS = ("id", "study", "topic", "seed_says", "choice", "why", "where")
STUDIES = {"C", "A", "H", "all"}
KEBAB = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")

#: Study packages a `<study>` placeholder in a documented path stands for.
STUDY_PACKAGES = ("conformity", "amel", "anchoring")
#: Repository folders whose paths the architecture doc's inline code is checked for.
PATH_PREFIXES = ("workflow", "src", "config", "docs", "data", "tests", "bench")
INLINE_PATH = re.compile(r"`((?:%s)/[^`\s]*)`" % "|".join(PATH_PREFIXES))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
RULE_FILE = re.compile(r"\b([a-z_]+\.smk)\b")


def _expand(path: str) -> list[str]:
    """A documented path, with a `<study>` placeholder expanded to every study package."""
    if "<study>" in path:
        return [path.replace("<study>", study) for study in STUDY_PACKAGES]
    return [path]


def _missing(paths) -> list[str]:
    return sorted(p for p in paths if not (ROOT / p).exists())


# ----------------------------------------------------------------------- the ledger


@pytest.fixture(scope="module")
def entries() -> list[dict]:
    data = yaml.safe_load(LEDGER.read_text(encoding="utf-8"))
    assert isinstance(data, dict) and isinstance(data.get("entries"), list), (
        "docs/deviations.yaml must be a mapping with a list under `entries`"
    )
    return data["entries"]


def test_ledger_entries_have_every_field(entries):
    problems = []
    for n, entry in enumerate(entries):
        name = entry.get("id", f"entry #{n}") if isinstance(entry, dict) else f"entry #{n}"
        if not isinstance(entry, dict):
            problems.append(f"{name}: not a mapping")
            continue
        extra = set(entry) - set(FIELDS)
        if extra:
            problems.append(f"{name}: unknown field(s) {sorted(extra)}")
        for field in FIELDS:
            value = entry.get(field)
            if field == "where":
                if not isinstance(value, list) or not value:
                    problems.append(f"{name}: `where` must be a non-empty list of paths")
                elif not all(isinstance(p, str) and p.strip() for p in value):
                    problems.append(f"{name}: `where` holds an empty or non-string path")
            elif not isinstance(value, str) or not value.strip():
                problems.append(f"{name}: `{field}` is missing or empty")
        if entry.get("study") not in STUDIES:
            problems.append(f"{name}: study {entry.get('study')!r} is not one of {sorted(STUDIES)}")
    assert not problems, "\n".join(problems)


def test_ledger_ids_are_unique_kebab_case(entries):
    ids = [e.get("id") for e in entries]
    bad = [i for i in ids if not isinstance(i, str) or not KEBAB.match(i)]
    assert not bad, f"ids must be kebab-case: {bad}"
    dup = sorted({i for i in ids if ids.count(i) > 1})
    assert not dup, f"duplicate ids: {dup}"


def test_ledger_where_paths_exist(entries):
    problems = []
    for entry in entries:
        for path in entry["where"]:
            if Path(path).is_absolute() or ".." in Path(path).parts:
                problems.append(f"{entry['id']}: {path} is not a path inside the repository")
            elif not (ROOT / path).exists():
                problems.append(f"{entry['id']}: {path} does not exist")
    assert not problems, "\n".join(problems)


def test_ledger_covers_every_study(entries):
    assert {e["study"] for e in entries} == STUDIES


# ------------------------------------------------------------------ the architecture


@pytest.fixture(scope="module")
def architecture() -> str:
    assert ARCHITECTURE.is_file(), "docs/architecture.md is missing"
    return ARCHITECTURE.read_text(encoding="utf-8")


def test_architecture_has_the_cited_sections(architecture):
    found = {line[3:].strip() for line in architecture.splitlines() if line.startswith("## ")}
    missing = [h for h in HEADINGS if h not in found]
    assert not missing, f"docs/architecture.md lacks the section(s) {missing}"


def test_where_to_look_covers_the_common_tasks(architecture):
    section = architecture.split("## Where to look", 1)[1].split("\n## ", 1)[0]
    missing = [task for task in WHERE_TO_LOOK_TASKS if task not in section]
    assert not missing, f"'Where to look' has no row for {missing}"


def test_architecture_paths_exist(architecture):
    paths = [p for raw in INLINE_PATH.findall(architecture) for p in _expand(raw.rstrip("/"))]
    assert paths, "expected repository paths in docs/architecture.md"
    odd = [p for p in paths if "<" in p or "*" in p]
    assert not odd, f"unexpected placeholder in documented path(s) {odd}"
    missing = _missing(paths)
    assert not missing, f"docs/architecture.md names path(s) that do not exist: {missing}"


def test_architecture_links_resolve(architecture):
    targets = []
    for target in LINK.findall(architecture):
        if target.startswith(("http://", "https://", "mailto:", "#")):
            continue
        target = target.split("#", 1)[0]
        targets.append(str((ARCHITECTURE.parent / target).resolve().relative_to(ROOT)))
    missing = _missing(targets)
    assert not missing, f"docs/architecture.md links to missing file(s): {missing}"


def test_architecture_rule_files_exist(architecture):
    named = set(RULE_FILE.findall(architecture))
    assert named, "the DAG section should name the rule files"
    missing = sorted(n for n in named if not (ROOT / "workflow" / "rules" / n).is_file())
    assert not missing, f"docs/architecture.md names rule file(s) not in workflow/rules/: {missing}"


def test_docs_name_no_machine_paths():
    for path in (ARCHITECTURE, LEDGER):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(?<![\w.])/(?:work|home|root|tmp)/", text), (
            f"{path.name} names an absolute path of a particular machine"
        )
