"""The docs stay true to the repository: the README, every page under docs/ (the
contributor's map docs/architecture.md among them) and the deviations ledger
docs/deviations.yaml. Every link, repository path, `make` target, bench script and
config file they name exists, and the README stays short.

Fast and light: PyYAML and the standard library only, no package import.
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
ARCHITECTURE = DOCS / "architecture.md"
LEDGER = DOCS / "deviations.yaml"
MAKEFILE = ROOT / "Makefile"
#: The README and every Markdown page under docs/.
PAGES = (README, *sorted(DOCS.glob("*.md")))

#: The README stays an entry point; everything longer lives under docs/.
README_MAX_LINES = 250
#: The README's first code block: the two set-up commands (`.ci/run` calls `make test`).
README_COMMANDS = (
    "make demo    # the whole DAG on the embedded default: tiny local models on CPU, "
    "no GPU, no key, no network",
    "make test    # lint, format check and the test suite",
)
#: Headings that other documents and threads cite by their exact text.
CITED_DOC_HEADINGS = {"faults.md": ("Faults, on purpose",)}

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
#: The same for the README and every docs page, which also name profiles, environments
#: and the paper's sources. results/ and figures/ hold run outputs and are not checked.
PAGE_PATH_PREFIXES = (*PATH_PREFIXES, "profiles", "envs", "paper", ".ci")
PAGE_INLINE_PATH = re.compile(
    r"`((?:%s)/[^`\s]*)`" % "|".join(re.escape(p) for p in PAGE_PATH_PREFIXES)
)
#: Files under those folders that a run writes (ignored by git), not the repository.
BUILD_OUTPUTS = ("paper/*.pdf", "paper/*.aux", "paper/*.log")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
RULE_FILE = re.compile(r"\b([a-z_]+\.smk)\b")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE_CODE = re.compile(r"`([^`\n]+)`")
MAKE_TARGET = re.compile(r"(?:^|[\s;&|(])make((?:\s+[A-Za-z_][\w.-]*=\S*)*)\s+([a-z][\w.-]*)")
BENCH_SCRIPT = re.compile(r"(?<![\w/.])(bench/[\w/]+\.py)\b")
CONFIGFILE = re.compile(r"--configfile[= ]((?:\s*[^\s`]+\.ya?ml)+)")
BRACES = re.compile(r"\{([^{}]*,[^{}]*)\}")


def _expand(path: str) -> list[str]:
    """A documented path, with a `<study>` placeholder expanded to every study package."""
    if "<study>" in path:
        return [path.replace("<study>", study) for study in STUDY_PACKAGES]
    return [path]


def _missing(paths) -> list[str]:
    return sorted(p for p in paths if not (ROOT / p).exists())


def _braces(path: str) -> list[str]:
    """A documented path with shell braces (`a_{x,y}.json`) expanded to every alternative."""
    match = BRACES.search(path)
    if not match:
        return [path]
    head, tail = path[: match.start()], path[match.end() :]
    return [p for alt in match.group(1).split(",") for p in _braces(head + alt + tail)]


def _rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def _text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def _code(text: str) -> list[str]:
    """The code a page shows: its fenced blocks and its inline code spans."""
    blocks = FENCE.findall(text)
    prose = FENCE.sub("", text)
    return blocks + INLINE_CODE.findall(prose)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    heading = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", _text(page))
    return {_slug(m) for m in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M)}


def _make_targets() -> set[str]:
    """The targets the Makefile has a rule for (a name only listed in .PHONY has none)."""
    text = MAKEFILE.read_text(encoding="utf-8")
    targets = set()
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z_][\w. -]*?)\s*:(?!=)", line)
        if match:
            targets.update(match.group(1).split())
    return targets


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
    for path in (*PAGES, LEDGER):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"(?<![\w.])/(?:work|home|root|tmp)/", text), (
            f"{_rel(path)} names an absolute path of a particular machine"
        )


# ------------------------------------------------------- the README and every docs page


def test_readme_is_short():
    n = len(_text(README).splitlines())
    assert n <= README_MAX_LINES, (
        f"README.md has {n} lines (at most {README_MAX_LINES}): move detail into docs/"
    )


def test_readme_starts_with_the_two_commands():
    text = _text(README)
    first = FENCE.search(text)
    assert first, "README.md has no code block"
    lines = tuple(line.rstrip() for line in first.group(1).strip("\n").splitlines())
    assert lines == README_COMMANDS, (
        "README.md's first code block must be exactly the two set-up commands "
        f"{README_COMMANDS}, found {lines}"
    )
    section = re.search(r"^## ", text, re.M)
    assert section is None or first.start() < section.start(), (
        "the two commands must come before the README's first section"
    )


def test_readme_links_every_docs_page():
    linked = set()
    for target in LINK.findall(_text(README)):
        linked.add(target.split("#", 1)[0])
    pages = [_rel(p) for p in PAGES[1:]] + [_rel(LEDGER)]
    missing = sorted(p for p in pages if p not in linked)
    assert not missing, f"README.md does not link to {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_page_links_resolve(page):
    problems = []
    for target in LINK.findall(_text(page)):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        try:
            rel = str(resolved.relative_to(ROOT))
        except ValueError:
            problems.append(f"{target}: outside the repository")
            continue
        if not resolved.exists():
            problems.append(f"{target}: {rel} does not exist")
        elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
            problems.append(f"{target}: {rel} has no heading with the anchor #{anchor}")
    assert not problems, f"{_rel(page)} has broken link(s):\n" + "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_page_paths_exist(page):
    paths = []
    for raw in PAGE_INLINE_PATH.findall(FENCE.sub("", _text(page))):
        for expanded in _expand(raw.rstrip("/.,;:")):
            for path in _braces(expanded):
                if any(c in path for c in "<>*…") or "..." in path:
                    continue  # a placeholder the reader fills in
                if any(fnmatch.fnmatch(path, pattern) for pattern in BUILD_OUTPUTS):
                    continue
                paths.append(path.rstrip("/"))
    missing = _missing(paths)
    assert not missing, f"{_rel(page)} names path(s) that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_page_make_targets_exist(page):
    targets = _make_targets()
    named = {m.group(2) for code in _code(_text(page)) for m in MAKE_TARGET.finditer(code)}
    missing = sorted(named - targets)
    assert not missing, f"{_rel(page)} names make target(s) not in the Makefile: {missing}"


def test_readme_make_targets_are_found():
    named = {m.group(2) for code in _code(_text(README)) for m in MAKE_TARGET.finditer(code)}
    assert {"demo", "test"} <= named, f"expected `make demo` and `make test`, found {named}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_page_bench_scripts_exist(page):
    named = set(BENCH_SCRIPT.findall(_text(page)))
    missing = _missing(named)
    assert not missing, f"{_rel(page)} names bench script(s) that do not exist: {missing}"


@pytest.mark.parametrize("page", PAGES, ids=_rel)
def test_page_configfiles_exist(page):
    named = set()
    for code in _code(_text(page)):
        for files in CONFIGFILE.findall(code):
            named.update(f for f in files.split() if f.startswith("config/"))
    missing = _missing(named)
    assert not missing, f"{_rel(page)} passes --configfile file(s) that do not exist: {missing}"


def test_configfile_check_sees_the_readme_commands():
    named = {
        f
        for code in _code(_text(README))
        for files in CONFIGFILE.findall(code)
        for f in files.split()
    }
    assert "config/demo.yaml" in named, f"expected --configfile config/demo.yaml, found {named}"


@pytest.mark.parametrize("name", sorted(CITED_DOC_HEADINGS))
def test_cited_doc_headings_exist(name):
    page = DOCS / name
    assert page.is_file(), f"docs/{name} is missing"
    found = {m.strip() for m in re.findall(r"^#{1,6}\s+(.+)$", _text(page), re.M)}
    missing = [h for h in CITED_DOC_HEADINGS[name] if h not in found]
    assert not missing, f"docs/{name} lacks the heading(s) {missing}"
