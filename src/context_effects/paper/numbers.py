"""The numbers the paper's prose prints, as LaTeX macros (``results/paper/numbers.tex``).

No number is typed into the paper: the prose writes ``\\TwoTruthfulQANoPeer`` and the
rule ``paper_numbers`` defines that macro from the run's results, as ``paper/numbers.yaml``
says. The spec maps a macro name (letters only) to where its value comes from::

    TwoTruthfulQANoPeer: {table: conformity/table2, row: "Dataset=truthfulqa", column: NoPeer, format: ".3f"}
    AsymTotalQwen:       {table: conformity/table3, row: "...", column: "...", part: interval}
    ItemsPerDataset:     {manifest: config.datasets.truthfulqa.n_items, format: "d"}

``table``/``row``/``column`` are read with ``context_effects.paper.lookup.lookup``; ``part``
picks the cell's value (default), the lower or upper end of its interval, or the interval
printed ``[lower, upper]``; ``format`` is a Python format spec (default ``.3f``; ``d`` or
``,d`` for counts; ``.1%`` for a share printed as a percentage). ``manifest`` is a dotted
path into ``results/run/manifest.json``; a text value is printed as it is (escaped), a
number by ``format`` when one is given.

The spec is checked strictly (``load_spec``): an unknown key, a bad macro name or format
is an error naming the entry and the fix. A value that cannot be found (a table this run
did not write, no such row, a cell without a number) is *not* an error: the macro prints
*n/a*, a ``%`` comment beside it says why, and the warnings list names it, because a demo
run lacks many of the paper's cells.

Always defined, whatever the spec: ``\\RunLabel``, ``\\RunKind`` (paper, demo, synthetic or rehearsal),
``\\RunCaveat`` (the caveat of ``context_effects.tables.run_notes``; empty for a paper run)
and the conditional ``\\ifPaperRun`` (``paper/preamble.tex``'s ``\\RunCaveatBox`` prints the
caveat only when it is false).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from context_effects.paper.lookup import MissingNumber, lookup

#: Macro names the build defines itself (numbers.tex and paper/preamble.tex).
BUILTINS = ("RunLabel", "RunKind", "RunCaveat")
RESERVED = frozenset(BUILTINS) | {
    "RunCaveatBox", "IncludeTable", "IncludeFigure", "ifPaperRun", "PaperRuntrue", "PaperRunfalse",
}
PARTS = ("value", "lower", "upper", "interval")
TABLE_KEYS = ("table", "row", "column", "format", "part")
MANIFEST_KEYS = ("manifest", "format")
DEFAULT_FORMAT = ".3f"
NA = r"\textit{n/a}"
#: A typeset minus that works in running text and inside $...$ alike.
MINUS = r"\ensuremath{-}"

_MACRO = re.compile(r"^[A-Za-z]+$")
_INTEGER_TYPES = set("bcdoxXn")


class SpecError(ValueError):
    """A numbers.yaml entry that is malformed; the message names the entry and the fix."""


@dataclass(frozen=True)
class Entry:
    name: str
    table: str | None = None
    row: str | None = None
    column: str | None = None
    part: str = "value"
    format: str | None = None
    manifest: str | None = None

    @property
    def source(self) -> str:
        if self.manifest is not None:
            return f"manifest {self.manifest}"
        where = f" [{self.row}]" if self.row else ""
        return f"{self.table}{where} {self.column} ({self.part}, {self.format or DEFAULT_FORMAT})"


@dataclass(frozen=True)
class Value:
    """One macro's LaTeX body, or ``None`` with the reason it is n/a."""

    tex: str | None
    reason: str = ""


# --- the spec -----------------------------------------------------------------------------


def _integer_format(fmt: str) -> bool:
    return bool(fmt) and fmt[-1] in _INTEGER_TYPES


def check_format(fmt: object) -> str | None:
    """None when ``fmt`` is a usable Python format spec for a number, else what is wrong."""
    if not isinstance(fmt, str):
        return f"format must be a string such as \".3f\" or \",d\", got {fmt!r}"
    try:
        format(1 if _integer_format(fmt) else 1.5, fmt)
    except (ValueError, TypeError) as exc:
        return (f"format {fmt!r} is not a Python format spec for a number ({exc}); "
                'e.g. ".3f", "+.2f", ",d", ".1%"')
    return None


def _check_entry(name: object, body: object) -> tuple[Entry | None, list[str]]:
    where = f"entry {name!r}"
    problems: list[str] = []
    if not isinstance(name, str) or not _MACRO.match(name):
        problems.append(f"{where}: a macro name must be letters only (A-Z, a-z; LaTeX macro names hold no digits, "
                        "'_' or '-'); spell digits out, e.g. TwoTruthfulQANoPeer for Table 2")
    elif name in RESERVED:
        problems.append(f"{where}: \\{name} is defined by the build itself; choose another name")
    if not isinstance(body, dict):
        problems.append(f"{where}: must be a mapping such as {{table: conformity/table2, row: \"Dataset=truthfulqa\", "
                        "column: NoPeer}} or {manifest: config.run.label}")
        return None, problems
    if ("table" in body) == ("manifest" in body):
        problems.append(f"{where}: give exactly one source, `table:` (with `column:`) or `manifest:`")
        return None, problems
    allowed = TABLE_KEYS if "table" in body else MANIFEST_KEYS
    unknown = sorted(str(k) for k in body if k not in allowed)
    if unknown:
        problems.append(f"{where}: unknown key(s) {unknown}; allowed here: {list(allowed)}")
    for key, value in body.items():
        if key in allowed and key != "format" and not isinstance(value, str):
            problems.append(f"{where}: `{key}` must be a string, got {value!r} (quote it)")
    if "format" in body:
        bad = check_format(body["format"])
        if bad:
            problems.append(f"{where}: {bad}")
    if "table" in body:
        if "column" not in body:
            problems.append(f"{where}: a table entry needs `column:` (the CSV column of the cell)")
        table = body.get("table")
        if isinstance(table, str) and not re.match(r"^[A-Za-z0-9_]+/[A-Za-z0-9_.-]+$", table):
            problems.append(f"{where}: table {table!r} must be <study>/<name>, e.g. conformity/table2 "
                            "(results/tables/conformity/table2.csv)")
        part = body.get("part", "value")
        if part not in PARTS:
            problems.append(f"{where}: part {part!r} is not one of {list(PARTS)}")
        row = body.get("row")
        if isinstance(row, str):
            for piece in filter(str.strip, row.split(";")):
                if "=" not in piece:
                    problems.append(f"{where}: row {row!r}: {piece.strip()!r} is not Column=value "
                                    "(several pairs are separated by ';')")
    elif isinstance(body.get("manifest"), str) and not re.match(r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$",
                                                                 body["manifest"]):
        problems.append(f"{where}: manifest path {body['manifest']!r} must be dotted keys, e.g. config.run.label")
    if problems:
        return None, problems
    return Entry(name=name, table=body.get("table"), row=body.get("row"), column=body.get("column"),
                 part=body.get("part", "value"), format=body.get("format"), manifest=body.get("manifest")), []


def parse_spec(data: object, source: str = "paper/numbers.yaml") -> dict[str, Entry]:
    """The entries of a parsed spec, all problems reported at once (``SpecError``)."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SpecError(f"{source}: must be a mapping of macro name -> source, got {type(data).__name__}")
    entries: dict[str, Entry] = {}
    problems: list[str] = []
    lowered: dict[str, str] = {}
    for name, body in data.items():
        entry, found = _check_entry(name, body)
        problems += found
        if entry is not None:
            other = lowered.setdefault(entry.name.lower(), entry.name)
            if other != entry.name:
                problems.append(f"entry {entry.name!r}: differs from {other!r} only in case; pick distinct names")
            entries[entry.name] = entry
    if problems:
        raise SpecError(f"{source}: {len(problems)} problem(s):\n" + "\n".join(f"  - {p}" for p in problems))
    return entries


def load_spec(path: str | Path) -> dict[str, Entry]:
    """Read ``paper/numbers.yaml`` strictly: a repeated key is an error, as in the configs."""
    from context_effects.config import ConfigError, load_yaml_strict

    try:
        data = load_yaml_strict(Path(path).read_text(encoding="utf-8"), str(path))
    except ConfigError as exc:
        raise SpecError(str(exc)) from None
    return parse_spec(data, str(path))


# --- values -------------------------------------------------------------------------------


def latex_number(value: float, fmt: str = DEFAULT_FORMAT) -> str:
    """``value`` by ``fmt``, a negative number with a typeset minus (``\\ensuremath{-}0.125``), no
    negative zero, ``%`` escaped."""
    if _integer_format(fmt):
        if not float(value).is_integer():
            raise ValueError(f"{value!r} is not a whole number (format {fmt!r} needs one)")
        text = format(int(value), fmt)
    else:
        text = format(float(value), fmt)
    if text.startswith("-") and not re.search(r"[1-9]", text):
        text = text[1:]  # -0.000 → 0.000
    return text.replace("-", MINUS).replace("%", r"\%")


def _table_value(entry: Entry, results: str | Path, frames: dict) -> Value:
    try:
        cell = lookup(entry.table, entry.row, entry.column, results=results, frames=frames)
    except MissingNumber as exc:
        return Value(None, str(exc))
    except ValueError as exc:  # a malformed selector the spec check let through
        return Value(None, str(exc))
    if cell is None:
        return Value(None, f"{entry.table} [{entry.row}] {entry.column}: the cell holds no number")
    fmt = entry.format or DEFAULT_FORMAT
    if entry.part != "value" and not cell.has_interval:
        return Value(None, f"{entry.table} [{entry.row}] {entry.column}: cell {cell.text!r} has no interval")
    if entry.part == "value":
        numbers = [cell.value]
    elif entry.part == "lower":
        numbers = [cell.lower]
    elif entry.part == "upper":
        numbers = [cell.upper]
    else:
        numbers = [cell.lower, cell.upper]
    if any(not math.isfinite(n) for n in numbers):
        return Value(None, f"{entry.table} [{entry.row}] {entry.column}: not a finite number ({cell.text!r})")
    try:
        texts = [latex_number(n, fmt) for n in numbers]
    except ValueError as exc:
        return Value(None, f"{entry.table} [{entry.row}] {entry.column}: {exc}")
    return Value(f"[{texts[0]}, {texts[1]}]" if entry.part == "interval" else texts[0])


def manifest_value(manifest: dict[str, Any] | None, path: str) -> Any:
    """The value at dotted ``path`` of the manifest; KeyError naming the missing key."""
    from context_effects.paper.lookup import manifest_node

    if manifest is None:
        raise KeyError("results/run/manifest.json was not read")
    return manifest_node(manifest, path)


def _manifest_value(entry: Entry, manifest: dict[str, Any] | None) -> Value:
    from context_effects.tables import latex_escape

    try:
        value = manifest_value(manifest, entry.manifest)
    except KeyError as exc:
        return Value(None, str(exc.args[0]))
    if value is None or isinstance(value, dict | list):
        return Value(None, f"manifest {entry.manifest} is {type(value).__name__}, not a printable value")
    if isinstance(value, bool):
        return Value("yes" if value else "no")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            return Value(None, f"manifest {entry.manifest} is not a finite number")
        if entry.format:
            try:
                return Value(latex_number(value, entry.format))
            except ValueError as exc:
                return Value(None, f"manifest {entry.manifest}: {exc}")
        return Value(latex_number(value, "d") if isinstance(value, int) else latex_number(value))
    if entry.format:
        return Value(None, f"manifest {entry.manifest} is text ({value!r}); `format` applies to numbers only")
    return Value(latex_escape(value))


def resolve(entry: Entry, results: str | Path = "results", manifest: dict[str, Any] | None = None,
            frames: dict | None = None) -> Value:
    """One entry's LaTeX body, or n/a with the reason."""
    if entry.manifest is not None:
        return _manifest_value(entry, manifest)
    return _table_value(entry, results, {} if frames is None else frames)


# --- numbers.tex --------------------------------------------------------------------------


def _comment(text: str) -> str:
    return " ".join(str(text).split())


def builtins(manifest: dict[str, Any] | None) -> tuple[dict[str, str], bool, list[str]]:
    """(\\RunLabel/\\RunKind/\\RunCaveat bodies, is a paper run, warnings)."""
    from context_effects.tables import latex_escape, run_notes

    warnings: list[str] = []
    manifest = manifest or {}
    run = (manifest.get("config") or {}).get("run") or {}
    label = manifest.get("label") or run.get("label")
    kind = manifest.get("kind") or run.get("kind")
    if kind not in ("paper", "demo", "synthetic", "rehearsal"):
        warnings.append(f"RunKind: run kind {kind!r} unknown (no run manifest?): the caveat box is printed")
        caveat = "The kind of this run is unknown (no run manifest): these numbers are not findings."
        return {"RunLabel": latex_escape(label) if label else NA, "RunKind": NA,
                "RunCaveat": latex_escape(caveat)}, False, warnings
    caveat = " ".join(run_notes(kind))
    return {"RunLabel": latex_escape(label) if label else NA, "RunKind": kind,
            "RunCaveat": latex_escape(caveat)}, kind == "paper", warnings


def render(spec: dict[str, Entry], results: str | Path = "results",
           manifest: dict[str, Any] | None = None) -> tuple[str, list[str]]:
    """numbers.tex's text and the warnings (one line per n/a macro)."""
    values, paper_run, warnings = builtins(manifest)
    lines = [
        "% Written by rule paper_numbers from paper/numbers.yaml and this run's results: do not edit.",
        "% Every macro below prints one number of the paper; n/a marks a value this run did not produce.",
        r"\newif\ifPaperRun",
        r"\PaperRuntrue" if paper_run else r"\PaperRunfalse",
    ]
    for name in BUILTINS:
        space = "" if name == "RunCaveat" else r"\xspace"
        lines.append(rf"\newcommand{{\{name}}}{{{values[name]}{space}}}")
    frames: dict = {}
    for name in sorted(spec):
        entry = spec[name]
        value = resolve(entry, results, manifest, frames)
        if value.tex is None:
            reason = _comment(value.reason)
            warnings.append(f"{name}: n/a: {reason}")
            lines.append(f"% {name}: {_comment(entry.source)}: n/a: {reason}")
            lines.append(rf"\newcommand{{\{name}}}{{{NA}\xspace}}")
        else:
            lines.append(f"% {name}: {_comment(entry.source)}")
            lines.append(rf"\newcommand{{\{name}}}{{{value.tex}\xspace}}")
    return "\n".join(lines) + "\n", warnings


def read_manifest(path: str | Path | None) -> dict[str, Any] | None:
    if path is None or not Path(path).exists():
        return None
    return json.loads(Path(path).read_text(encoding="utf-8"))


def write_numbers(spec_path: str | Path, out_tex: str | Path, warnings_path: str | Path | None = None,
                  results: str | Path = "results", manifest_path: str | Path | None = None) -> list[str]:
    """Write numbers.tex (and the warnings file: one n/a macro per line); return the warnings."""
    spec = load_spec(spec_path)
    text, warnings = render(spec, results, read_manifest(manifest_path))
    Path(out_tex).parent.mkdir(parents=True, exist_ok=True)
    Path(out_tex).write_text(text, encoding="utf-8")
    if warnings_path is not None:
        Path(warnings_path).parent.mkdir(parents=True, exist_ok=True)
        Path(warnings_path).write_text("".join(f"{w}\n" for w in warnings), encoding="utf-8")
    return warnings
