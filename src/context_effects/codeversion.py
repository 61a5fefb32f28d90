"""The version of the code a job runs, as a content hash Snakemake compares like any param.

No rule declares the library as input: every job imports ``context_effects`` from
``src/``, so editing a prompt, a table builder or a plotting function would otherwise
rerun nothing and leave stale results. Each rule passes ``code=...`` (from here) as a
param; with the ``params`` rerun trigger a job reruns exactly when the code it runs has
changed, and everything downstream of it follows (docs/configuration.md, "Reruns").

What a job runs is found statically, function by function: the job's script, then for every ``context_effects`` name it uses, the
module-level code of the module that defines it (its constants, classes and imports)
and, where the name is a function, that function's body, following the names each of
those uses in turn (imports inside functions included: builders keep their heavy
imports there). A module imported whole (``import x``, ``from pkg import x``) counts
through the attributes the code reads from it (``x.f``), or whole where it is used
otherwise. For a registered table or figure the start is the entry's own builder, not
the registry's script, which serves every entry. So editing one plotting function
reruns the figures that call it, not the tables beside it in the same module.

The hash is over syntax trees, not bytes: a comment, a blank line or a reformat changes
no result and reruns nothing. Names enter relative to ``src/``, so another checkout of
the same code (a second clone, a cluster's copy) has the same version.

The analysis errs towards rerunning: a name it cannot resolve statically (a module used
as a value, ``getattr`` on a module) counts the whole module.

Every Snakemake process (a dry run, ``snakemake estimate``, each cluster job) versions
every rule while it parses the Snakefile, which took about 2.5 s of syntax-tree walking.
The versions are therefore kept on disk, in ``<repo>/.cache/codeversion/``, under a
digest of every file they can depend on (the package's and the scripts' sources, and the
Python version, whose ``ast.dump`` they hash): an edit anywhere makes a new file, and a
damaged or unwritable cache only costs the walk again.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import re
import inspect
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

PACKAGE = "context_effects"
#: The folder that holds the package (``src/``).
SRC = Path(__file__).resolve().parents[1]
#: The workflow's job scripts: the repository's ``workflow/scripts/`` beside ``src/``.
SCRIPTS = SRC.parent / "workflow" / "scripts"

#: A unit of code: (module, None) the whole module; (module, "") its module-level code
#: other than functions and simple assignments; (module, "=NAME") the top-level
#: assignment(s) of NAME (a prompt template, a table of constants); (module, name) one
#: top-level function; (module, "~name") what that function
#: runs when module-level code calls it (a factory building registry entries at import):
#: its body without the functions it defines, which run only when a job calls them.
Unit = tuple[str, str | None]
#: Top-level definitions that are units of their own.
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def module_file(name: str) -> Path | None:
    """The source file of a ``context_effects`` module or package, or None."""
    if name != PACKAGE and not name.startswith(PACKAGE + "."):
        return None
    rel = Path(*name.split("."))
    for candidate in (SRC / rel.with_suffix(".py"), SRC / rel / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=None)
def _module_tree(name: str) -> ast.Module:
    path = module_file(name)
    assert path is not None, name
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@functools.lru_cache(maxsize=None)
def _functions(name: str) -> dict[str, ast.AST]:
    """Top-level functions and classes: a class, like a function, matters to a job only
    where the job's code uses it."""
    return {n.name: n for n in _module_tree(name).body if isinstance(n, _DEFS)}


def _assigned_names(node: ast.AST) -> list[str]:
    """The names a simple top-level assignment binds ([] for anything else)."""
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
        return [node.target.id]
    if isinstance(node, ast.Assign):
        names = []
        for target in node.targets:
            elts = target.elts if isinstance(target, ast.Tuple) else [target]
            if not all(isinstance(e, ast.Name) for e in elts):
                return []
            names += [e.id for e in elts]
        return names
    return []


@functools.lru_cache(maxsize=None)
def _assignments(name: str) -> dict[str, list[ast.AST]]:
    found: dict[str, list[ast.AST]] = {}
    for node in _module_tree(name).body:
        for target in _assigned_names(node):
            found.setdefault(target, []).append(node)
    return found


@functools.lru_cache(maxsize=None)
def _module_code(name: str) -> ast.Module:
    """A module without its top-level functions, classes and simple assignments (units of
    their own) and without the
    ``if __name__ == "__main__":`` block, which an import does not run."""

    def main_guard(node: ast.AST) -> bool:
        return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")

    body = [n for n in _module_tree(name).body
            if not isinstance(n, _DEFS) and not main_guard(n) and not _assigned_names(n)]
    return ast.Module(body=body, type_ignores=[])


class _StripNested(ast.NodeTransformer):
    def __init__(self) -> None:
        self.depth = 0

    def visit_FunctionDef(self, node):  # noqa: N802 (ast visitor protocol)
        self.depth += 1
        if self.depth > 1:
            node = ast.FunctionDef(name=node.name, args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                   kw_defaults=[], defaults=[]), body=[ast.Pass()], decorator_list=[], type_params=[])
        else:
            self.generic_visit(node)
        self.depth -= 1
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815

    def visit_Lambda(self, node):  # noqa: N802
        return ast.Constant(value="<lambda>")


@functools.lru_cache(maxsize=None)
def _import_time_tree(module: str, name: str) -> ast.AST:
    """A function as module-level code runs it: nested functions reduced to their names."""
    import copy

    return _StripNested().visit(copy.deepcopy(_functions(module)[name]))


def _package(module: str) -> str:
    path = module_file(module)
    return module if path is not None and path.name == "__init__.py" else module.rpartition(".")[0]


def _absolute(node: ast.ImportFrom, module: str | None) -> str:
    if not node.level:
        return node.module or ""
    if module is None:
        return ""
    parts = _package(module).split(".")
    parts = parts[: len(parts) - node.level + 1]
    return ".".join([*parts, node.module] if node.module else parts)


#: What an import binds a name to: ("module", name) a module object; ("unit", unit) a
#: function, or a module's constant or class (its module-level code).
Binding = tuple[str, Any]


def _binding_of(module: str, name: str) -> Binding:
    """What ``from module import name`` binds."""
    if module_file(f"{module}.{name}") is not None:
        return ("module", f"{module}.{name}")
    if name in _functions(module):
        return ("unit", (module, name))
    if name in _assignments(module):
        return ("unit", (module, "=" + name))
    return ("unit", (module, ""))


def _imports(tree: ast.AST, module: str | None) -> tuple[dict[str, Binding], set[str], set[str]]:
    """The import statements in ``tree``: the names they bind, the modules whose code they
    run, and the modules imported in a form whose uses are not followed (counted whole)."""
    bindings: dict[str, Binding] = {}
    runs: set[str] = set()
    whole: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if module_file(alias.name) is None:
                    continue
                runs.add(alias.name)
                if alias.asname:
                    bindings[alias.asname] = ("module", alias.name)
                else:
                    # `import a.b.c` binds `a`; reads through it are not followed.
                    whole.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, module)
            if module_file(base) is None:
                continue
            runs.add(base)
            for alias in node.names:
                if alias.name == "*":
                    whole.add(base)
                    continue
                binding = _binding_of(base, alias.name)
                if binding[0] == "module":
                    runs.add(binding[1])
                bindings[alias.asname or alias.name] = binding
    return bindings, runs, whole


@functools.lru_cache(maxsize=None)
def _top_bindings(module: str) -> dict[str, Binding]:
    """Names the module's top-level imports bind (what its functions see as globals)."""
    bindings, _, _ = _imports(_module_code(module), module)
    return bindings


_DOTTED = re.compile(rf"{PACKAGE}(\.\w+)+(:\w+)?")


def _named_in_string(text: str) -> set[Unit]:
    """A string naming a package module (``"context_effects.x.y"``) or one of its
    attributes (``"context_effects.x.y:name"``) is a dynamic import (a registry of
    simulators, reply policies or study registries resolves it with importlib): the
    module counts whole, the attribute as itself."""
    if not _DOTTED.fullmatch(text):
        return set()
    module, _, attr = text.partition(":")
    if module_file(module) is None:
        return set()
    return {_binding_of(module, attr)[1]} if attr and _binding_of(module, attr)[0] == "unit" else {(module, None)}


def _dependencies(tree: ast.AST, module: str | None, import_time: bool = False) -> set[Unit]:
    """The package units the code in ``tree`` uses (``module`` is where it lives).

    A name counts through what it is bound to: an import in ``tree`` or, failing that,
    a top-level import or function of ``module``. At import time (module-level code,
    and the functions it calls) a function counts only where it is called: one merely
    named there (a registry entry's builder) runs only in the job that calls it."""
    local, runs, whole = _imports(tree, module)
    units: set[Unit] = {(m, "") for m in runs} | {(m, None) for m in whole}
    own = _functions(module) if module is not None else {}
    constants = _assignments(module) if module is not None else {}
    top = _top_bindings(module) if module is not None else {}
    parents = {id(child): parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}

    def called(node: ast.AST) -> bool:
        parent = parents.get(id(node))
        return isinstance(parent, ast.Call) and parent.func is node

    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            units |= _named_in_string(node.value)
            continue
        if not (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)):
            continue
        binding = local.get(node.id) or top.get(node.id)
        if binding is None and node.id in own:
            binding = ("unit", (module, node.id))
        if binding is None and node.id in constants:
            binding = ("unit", (module, "=" + node.id))
        if binding is None:
            continue
        kind, target = binding
        if kind == "unit":
            target_module, part = target
            if part and not part.startswith("="):  # a function or class
                if import_time and not called(node):
                    continue
                units.add(_called_at_import(target) if import_time else target)
            else:
                units.add(target)
            continue
        # A module object: follow the attribute read from it, or take the module whole.
        parent = parents.get(id(node))
        if isinstance(parent, ast.Attribute) and parent.value is node:
            kind2, target2 = _binding_of(target, parent.attr)
            if kind2 == "module":
                units.add((target2, None))
            elif target2[1] and not target2[1].startswith("=") and import_time:
                if called(parent):
                    units.add(_called_at_import(target2))
            else:
                units.add(target2)
        else:
            units.add((target, None))
    return units


def _called_at_import(unit: Unit) -> Unit:
    """A function called by module-level code runs without its nested functions; a class
    instantiated there runs its methods, so it counts whole."""
    module, name = unit
    return unit if isinstance(_functions(module)[name], ast.ClassDef) else (module, "~" + name)


def _unit_tree(unit: Unit) -> ast.AST:
    module, part = unit
    if part is None:
        return _module_tree(module)
    if part == "":
        return _module_code(module)
    if part.startswith("~"):
        return _import_time_tree(module, part[1:])
    if part.startswith("="):
        return ast.Module(body=_assignments(module)[part[1:]], type_ignores=[])
    return _functions(module)[part]


@functools.lru_cache(maxsize=None)
def _unit_dependencies(unit: Unit) -> frozenset[Unit]:
    module, part = unit
    deps = _dependencies(_unit_tree(unit), module, import_time=part is not None and part[:1] in ("", "~", "="))
    if part != "":
        deps.add((module, ""))  # a definition runs after its module's imports
    # Importing a module runs every package __init__ above it.
    parents = module.split(".")
    deps.update((".".join(parents[:i]), "") for i in range(1, len(parents)))
    deps.discard(unit)
    return frozenset(deps)


def closure(start: Iterable[Unit]) -> set[Unit]:
    """Every unit reachable from ``start``; a whole module subsumes its parts."""
    seen: set[Unit] = set()
    todo = list(start)
    while todo:
        unit = todo.pop()
        if unit in seen:
            continue
        seen.add(unit)
        todo.extend(_unit_dependencies(unit) - seen)
    whole = {m for m, part in seen if part is None}
    return {(m, part) for m, part in seen if part is None or m not in whole}


def _tree_digest(tree: ast.AST) -> str:
    # ast.dump leaves out positions and comments: only what the code does counts.
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def _digest(parts: Iterable[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for name, digest in sorted(parts):
        h.update(f"{name}\0{digest}\n".encode())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=None)
def _unit_digest(unit: Unit) -> str:
    # Many entries share most of their units (a Snakefile parse versions ~150 rules): each
    # unit's tree is dumped and hashed once per process, not once per entry that reaches it.
    return _tree_digest(_unit_tree(unit))


def _unit_parts(units: Iterable[Unit]) -> Iterator[tuple[str, str]]:
    for module, part in units:
        label = module if part is None else f"{module}:{part or '<module>'}"
        yield label, _unit_digest((module, part))


@functools.lru_cache(maxsize=None)
def units_of_script(script: str) -> frozenset[Unit]:
    """The package code a workflow script (``workflow/scripts/<script>``) runs."""
    return frozenset(closure(_dependencies(_script_tree(script), None)))


@functools.lru_cache(maxsize=None)
def _script_tree(script: str) -> ast.Module:
    path = SCRIPTS / script
    if not path.is_file():
        raise FileNotFoundError(f"no job script {path}: name it relative to workflow/scripts/")
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


@functools.lru_cache(maxsize=None)
def _sources_digest() -> str:
    """Digest of every file a code version can depend on, and of the Python version."""
    h = hashlib.sha256(f"{sys.version_info[:2]}\n".encode())
    files = sorted((SRC / PACKAGE).rglob("*.py")) + sorted(SCRIPTS.glob("*.py"))
    for path in files:
        h.update(f"{path.relative_to(SRC.parent).as_posix()}\0".encode())
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:32]


def _cache_file() -> Path:
    return SRC.parent / ".cache" / "codeversion" / f"{_sources_digest()}.json"


def _read_versions(path: Path) -> dict[str, str]:
    """The versions a cache file holds; {} for a missing, damaged or foreign file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str) and re.fullmatch(r"[0-9a-f]{16}", v)}


@functools.lru_cache(maxsize=1)
def _stored() -> dict[str, str]:
    """Versions computed by an earlier process for these exact sources."""
    return _read_versions(_cache_file())


def _store(key: str, version: str) -> None:
    """Add one version to the file, merged with what other processes wrote meanwhile;
    each writer replaces the file whole, so a lost entry is computed again, never wrong."""
    stored = _stored()
    stored[key] = version
    path = _cache_file()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        new_state = not path.exists()
        with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False, encoding="utf-8") as tmp:
            json.dump({**_read_versions(path), **stored}, tmp, sort_keys=True)
        os.chmod(tmp.name, 0o644)
        os.replace(tmp.name, path)
        if new_state:
            _prune(path.parent)
    except OSError:
        pass  # a read-only checkout: each process computes the versions again


#: Cache files kept (one per state of the sources); older ones are removed when a new state
#: writes its first version, so editing all day does not grow the folder without bound.
KEEP_STATES = 32


def _prune(folder: Path) -> None:
    def age(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return float("inf")  # already gone

    files = sorted(folder.glob("*.json"), key=age, reverse=True)
    # a writer killed between its temporary file and the rename leaves the temporary file
    stale = [p for p in folder.glob("*.tmp") if age(p) < time.time() - 3600]
    for p in files[KEEP_STATES:] + stale:
        p.unlink(missing_ok=True)


def _persisted(key: str, compute: Callable[[], str]) -> str:
    version = _stored().get(key)
    if version is None:
        version = compute()
        _store(key, version)
    return version


@functools.lru_cache(maxsize=None)
def of_script(script: str) -> str:
    """Code version of a job that runs ``workflow/scripts/<script>``."""
    return _persisted(f"script:{script}", lambda: _compute_of_script(script))


def _compute_of_script(script: str) -> str:
    parts = [(f"workflow/scripts/{script}", _tree_digest(_script_tree(script))), *_unit_parts(units_of_script(script))]
    return _digest(parts)


def _function_unit(func: Callable[..., Any]) -> tuple[list[Unit], list[tuple[str, str]]]:
    """The units a function starts from. A top-level function is a unit itself; a nested
    one (a closure made by a factory) contributes its own tree and what it uses."""
    while isinstance(func, functools.partial):
        func = func.func
    module = func.__module__
    if func.__qualname__ in _functions(module):
        return [(module, func.__qualname__)], []
    tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    return [(module, ""), *_dependencies(tree, module)], [(f"{module}:{func.__qualname__}", _tree_digest(tree))]


#: The script that serves every registered table, and every registered figure.
ENTRY_SCRIPTS = {"table": "write_table.py", "figure": "draw_figure.py"}


def _entry_start(study: str, kind: str, name: str) -> tuple[list[Unit], list[tuple[str, str]], str]:
    from context_effects.outputs import registry

    reg = registry(study)
    entry = reg.table(name) if kind == "table" else reg.figure(name)
    start, own = _function_unit(entry.build if kind == "table" else entry.draw)
    # Formats, labels and alignment are declared in the registry, not in the builder:
    # the declarations of the study's registry count for each of its entries.
    start.append((f"{PACKAGE}.{study}.outputs", "=REGISTRY"))
    return start, own, ENTRY_SCRIPTS[kind]


@functools.lru_cache(maxsize=None)
def of_entry(study: str, kind: str, name: str) -> str:
    """Code version of one registered table or figure of ``study`` (``kind``: table |
    figure): its builder or drawer and the script that serves the registry."""
    return _persisted(f"{kind}:{study}:{name}", lambda: _compute_of_entry(study, kind, name))


def _compute_of_entry(study: str, kind: str, name: str) -> str:
    start, own, script = _entry_start(study, kind, name)
    units = closure(start) | units_of_script(script)
    return _digest([(f"workflow/scripts/{script}", _tree_digest(_script_tree(script))), *own, *_unit_parts(units)])


def describe(units: Iterable[Unit]) -> list[str]:
    """Readable names of units (for tests and debugging)."""
    return sorted(m if p is None else f"{m}:{p or '<module>'}" for m, p in units)


def entry_units(study: str, kind: str, name: str) -> set[Unit]:
    """The units ``of_entry`` hashes besides a nested builder's own tree (tests, debugging)."""
    start, _, script = _entry_start(study, kind, name)
    return closure(start) | units_of_script(script)
