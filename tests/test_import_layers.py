"""The modules of ``context_effects`` import one another one way only: no import cycle,
however hidden (docs/architecture.md, "DAG helpers": the layers and their arrows).

A cycle hides easily in an import inside a function (builders and DAG helpers import
there to keep the Snakefile's parse fast), so every import counts: module level and
function level, absolute and relative. Fast and light: the sources are parsed with
``ast``, nothing of the package is imported.

A module named in a string and imported by ``importlib`` when first used (the study
registries of ``context_effects.outputs``, the simulators of the synthetic backend, the
reply policies) is no import here: such a table lets a shared module find the study
modules built on it without importing them.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "context_effects"


def package_modules(src: Path = SRC, package: str = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (source file, whether it is a package's ``__init__``)."""
    modules = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return modules


def _known(name: str, modules: Mapping[str, object]) -> str | None:
    """The module ``name`` is, or the nearest package module above it (``pkg.mod.attr`` -> ``pkg.mod``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, is_package: bool, modules: Mapping[str, object]) -> dict[str, int]:
    """The package modules ``module`` imports anywhere in its source -> the first line that does."""
    base = module.split(".") if is_package else module.split(".")[:-1]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parent = base[: len(base) - node.level + 1]
                origin = ".".join(parent + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # `from pkg import mod` imports the module `pkg.mod`; `from mod import name`, the module `mod`.
            targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else origin
                       for alias in node.names]
        for target in targets:
            known = _known(target, modules) if target.split(".")[0] == PACKAGE else None
            if known and known != module:
                found.setdefault(known, node.lineno)
    return found


def import_graph(src: Path = SRC) -> dict[str, dict[str, int]]:
    modules = package_modules(src)
    return {name: imports_of(name, path, is_package, modules) for name, (path, is_package) in modules.items()}


def cycles(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan), as a closed path
    through it (``a -> b -> ... -> a``) so the message names every import to cut."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(start: str) -> None:
        # Iterative: a deep package must not hit the recursion limit.
        work = [(start, iter(sorted(graph.get(start, {}))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return [_closed_path(graph, group) for group in groups]


def _closed_path(graph: Mapping[str, Mapping[str, int]], group: set[str]) -> list[str]:
    """A shortest path from the group's first module back to itself, inside the group."""
    first = min(group)
    paths = {first: [first]}
    frontier = [first]
    while frontier:
        nxt_frontier = []
        for node in frontier:
            for nxt in sorted(graph[node]):
                if nxt == first:
                    return paths[node] + [first]
                if nxt in group and nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    nxt_frontier.append(nxt)
        frontier = nxt_frontier
    raise AssertionError(f"{sorted(group)} is not strongly connected")


def describe(graph: Mapping[str, Mapping[str, int]], path: list[str]) -> str:
    return " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(path, path[1:])) + f" -> {path[-1]}"


# ----------------------------------------------------------------------------- the tests


def test_no_import_cycle_in_the_package():
    graph = import_graph()
    assert len(graph) > 50 and "context_effects.targets" in graph  # the whole package was read
    found = [describe(graph, path) for path in cycles(graph)]
    assert not found, "import cycle(s) inside context_effects; cut one import of each:\n" + "\n".join(found)


def test_detector_finds_a_planted_cycle(tmp_path):
    """A tiny package with a cycle through a function-level relative import, a one-way
    import beside it: the cycle is found and named, the one-way import is not."""
    pkg = tmp_path / PACKAGE
    (pkg / "study").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "base.py").write_text("X = 1\n")
    (pkg / "top.py").write_text("from context_effects.study import dag\n")
    (pkg / "study" / "__init__.py").write_text("")
    (pkg / "study" / "dag.py").write_text("from context_effects import base\n\n\ndef f():\n    from .outputs import Y\n")
    (pkg / "study" / "outputs.py").write_text("from context_effects.study.dag import f\n\nY = 2\n")
    graph = import_graph(tmp_path)
    assert graph["context_effects.study.dag"] == {"context_effects.base": 1, "context_effects.study.outputs": 5}
    assert graph["context_effects.top"] == {"context_effects.study.dag": 1}
    found = cycles(graph)
    assert found == [["context_effects.study.dag", "context_effects.study.outputs", "context_effects.study.dag"]]
    assert describe(graph, found[0]) == ("context_effects.study.dag (line 5) -> context_effects.study.outputs "
                                         "(line 1) -> context_effects.study.dag")
    # Cut the function-level import: no cycle is left.
    (pkg / "study" / "dag.py").write_text("from context_effects import base\n")
    assert cycles(import_graph(tmp_path)) == []
