"""One number from a registry table: ``results/tables/<study>/<name>.csv``, a row chosen by
``Column=value`` pairs, a column.

The fit tables print a posterior mean with its 95% interval in one cell
(``+0.257 [+0.220, +0.292]``); other tables hold plain numbers. ``parse_cell`` reads both,
so the paper's macros and the reproduction report take the same value from the same cell
a reader sees in the table.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any
from pathlib import Path

import pandas as pd

_NUMBER = r"[+\-−]?(?:\d[\d,]*\.?\d*|\.\d+)(?:[eE][+\-]?\d+)?"
# a unit suffix is kept as printed: 73.3% → 73.3, 7.6B (parameters) → 7.6
_CELL = re.compile(rf"^\s*({_NUMBER})\s*([%BMK]?)\s*(?:\[\s*({_NUMBER})\s*,\s*({_NUMBER})\s*\])?\s*$")
_INTERVAL = re.compile(rf"^\s*\[\s*({_NUMBER})\s*,\s*({_NUMBER})\s*\]\s*$")


class MissingNumber(LookupError):
    """A table, row or column that is not there; the message says which and what is."""


@dataclass(frozen=True)
class Cell:
    value: float
    lower: float | None = None
    upper: float | None = None
    text: str = ""

    @property
    def has_interval(self) -> bool:
        return self.lower is not None and self.upper is not None


def _num(text: str) -> float:
    return float(text.replace("−", "-").replace(",", ""))


def parse_cell(raw: object) -> Cell | None:
    """A table cell as a number with its interval; None for an empty or non-numeric cell
    ("--", "not estimated: …"). A trailing %, B, M or K is dropped (73.3% → 73.3)."""
    if raw is None or (isinstance(raw, float) and math.isnan(raw)):
        return None
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return Cell(float(raw), text=str(raw))
    text = str(raw)
    m = _CELL.match(text)
    if not m:
        return None
    value = _num(m.group(1))
    if m.group(3) is None:
        return Cell(value, text=text)
    return Cell(value, _num(m.group(3)), _num(m.group(4)), text=text)


def parse_row(selector: str | None) -> dict[str, str]:
    """``"Dataset=TruthfulQA; Model=Qwen2.5-7B"`` → {"Dataset": "TruthfulQA", "Model": "Qwen2.5-7B"}."""
    out: dict[str, str] = {}
    for part in (selector or "").split(";"):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"row selector part {part.strip()!r} is not Column=value (in {selector!r})")
        out[key.strip()] = value.strip()
    return out


def _same(cell: object, wanted: str) -> bool:
    text = "" if cell is None or (isinstance(cell, float) and math.isnan(cell)) else str(cell).strip()
    if text == wanted:
        return True
    try:  # 1.0 written as 1 or 1.0
        return float(text) == float(wanted)
    except ValueError:
        return False


def table_path(table: str, results: str | Path = "results") -> Path:
    """``conformity/table3`` → ``results/tables/conformity/table3.csv``."""
    study, sep, name = table.partition("/")
    if not sep or not name:
        raise ValueError(f"table {table!r} must be <study>/<name>, e.g. conformity/table3")
    return Path(results) / "tables" / study / f"{name}.csv"


def select_row(df: pd.DataFrame, selector: str | None, where: str = "") -> pd.Series:
    """The one row of ``df`` matching every ``Column=value`` pair of ``selector``."""
    wanted = parse_row(selector)
    missing = [c for c in wanted if c not in df.columns]
    if missing:
        raise MissingNumber(f"{where}: no column {missing} (columns: {list(df.columns)})")
    mask = pd.Series(True, index=df.index)
    for col, value in wanted.items():
        mask &= df[col].map(lambda v, value=value: _same(v, value))
    hits = df[mask]
    if len(hits) != 1:
        what = "no row" if hits.empty else f"{len(hits)} rows"
        raise MissingNumber(f"{where}: {what} with {selector or '(no selector)'}")
    return hits.iloc[0]


def _interval(row: pd.Series, columns: str, where: str) -> tuple[float, float] | None:
    """The interval a table holds apart from its value: one column printing ``[lo, hi]``
    or two columns ``lo_col, hi_col``."""
    names = [c.strip() for c in columns.split(",")]
    missing = [c for c in names if c not in row.index]
    if missing or len(names) > 2:
        raise MissingNumber(f"{where}: no interval column(s) {missing or names} (columns: {list(row.index)})")
    if len(names) == 1:
        m = _INTERVAL.match(str(row[names[0]]))
        return (_num(m.group(1)), _num(m.group(2))) if m else None
    lo, hi = (parse_cell(row[c]) for c in names)
    return (lo.value, hi.value) if lo is not None and hi is not None else None


def lookup(table: str, row: str | None, column: str, results: str | Path = "results",
           frames: dict[Path, pd.DataFrame] | None = None) -> Cell | None:
    """The cell of ``table`` at ``row``/``column`` parsed by ``parse_cell`` (None when the
    cell holds no number). ``column`` may name where the table keeps the value's interval
    apart from it: ``gamma_j @ 95% CrI`` (one ``[lo, hi]`` column) or ``Delta @ CI low, CI
    high``. Raises ``MissingNumber`` naming what is missing. ``frames`` caches tables read
    once."""
    path = table_path(table, results)
    frames = {} if frames is None else frames
    if path not in frames:
        if not path.exists():
            raise MissingNumber(f"{path} was not written by this run")
        frames[path] = pd.read_csv(path, dtype=str, keep_default_na=False)
    df = frames[path]
    column, _, interval_columns = (part.strip() for part in column.partition("@"))
    if column not in df.columns:
        raise MissingNumber(f"{path}: no column {column!r} (columns: {list(df.columns)})")
    found = select_row(df, row, str(path))
    cell = parse_cell(found[column])
    if cell is None or not interval_columns:
        return cell
    bounds = _interval(found, interval_columns, str(path))
    return Cell(cell.value, *bounds, text=cell.text) if bounds else cell


def manifest_node(manifest: Any, path: str) -> Any:
    """The value at ``path`` of the run manifest (``results/run/manifest.json``): dotted keys,
    an integer part indexing a list, and a key holding a dot written in brackets
    (``config.models[qwen2.5-7b].engine``). KeyError names the missing key and what is there."""
    node, done = manifest, []
    for a, b in re.findall(r"\[([^\]]+)\]|([^.\[\]]+)", path):
        key = a or b
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            have = sorted(node) if isinstance(node, dict) else type(node).__name__
            raise KeyError(f"manifest has no {'.'.join([*done, key])} (at {'.'.join(done) or 'top level'}: {have})")
        done.append(key)
    return node
