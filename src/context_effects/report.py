"""The run report: one Markdown file a reader opens first after a run.

It puts what can invalidate a number before the numbers: the run's caveat (demo,
synthetic), judge parse-failure rates, and every fit whose sampler diagnostics
failed; then every table the run produced (caption from its LaTeX twin, values
from its CSV) and the list of figures. It only reads files the DAG produced.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from context_effects.tables import run_notes

MAX_ROWS = 40
_CAPTION = re.compile(r"\\caption\{(.*)\}")
_LATEX_UNESCAPE = [(r"\textbackslash{}", "\\"), (r"\textbar{}", "|"), (r"\textless{}", "<"),
                   (r"\textgreater{}", ">"), (r"\textasciitilde{}", "~"), (r"\textasciicircum{}", "^")]


def _caption(csv_path: Path) -> str:
    tex = csv_path.with_suffix(".tex")
    if not tex.exists():
        return ""
    m = _CAPTION.search(tex.read_text())
    if not m:
        return ""
    text = m.group(1)
    for a, b in _LATEX_UNESCAPE:
        text = text.replace(a, b)
    return re.sub(r"\\([&%$#_{}])", r"\1", text)


def _markdown(df: pd.DataFrame) -> str:
    shown = df.head(MAX_ROWS)
    body = shown.to_markdown(index=False, floatfmt=".3f")
    if len(df) > MAX_ROWS:
        body += f"\n\n({len(df) - MAX_ROWS} more rows in the CSV)"
    return body


def failed_diagnostics(tables: dict[Path, pd.DataFrame]) -> pd.DataFrame:
    """Rows of any table whose ``diagnostics_ok`` column is false."""
    rows = []
    for path, df in tables.items():
        if "diagnostics_ok" in df.columns:
            bad = df[~df["diagnostics_ok"].astype(bool)]
            for rec in bad.to_dict("records"):
                rows.append({"table": path.name, **{k: v for k, v in rec.items() if k != "diagnostics_ok"}})
    return pd.DataFrame(rows)


def build_report(manifest_path: str | Path, table_paths: Sequence[str | Path], figure_paths: Sequence[str | Path],
                 base: str | Path = ".") -> str:
    manifest = json.loads(Path(manifest_path).read_text())
    run = manifest.get("config", {}).get("run", {})
    base = Path(base)
    lines = [f"# Run report: {run.get('label', '?')} ({run.get('kind', '?')})", ""]
    for note in run_notes(run) + list(manifest.get("notes", [])):
        lines += [f"> {note}", ""]
    tables = {Path(p): pd.read_csv(p) for p in table_paths}

    parse = [p for p in tables if "parse_failures" in p.name]
    lines += ["## Judge replies without a valid score", ""]
    if not parse:
        lines += ["No study with judges ran.", ""]
    for p in parse:
        df = tables[p]
        lines += [f"`{p.relative_to(base) if p.is_relative_to(base) else p}` — {_caption(p)}", ""]
        if {"missing", "requests"} <= set(df.columns):
            total = df["missing"].sum() / max(1, df["requests"].sum())
            lines += [f"Overall: {int(df['missing'].sum())} of {int(df['requests'].sum())} requests "
                      f"({100 * total:.2f}%) stayed without a valid rating after every re-ask.", ""]
        lines += [_markdown(df), ""]

    bad = failed_diagnostics(tables)
    lines += ["## Fits failing sampler diagnostics", ""]
    lines += [_markdown(bad) if len(bad) else "None: every fit met the configured thresholds (or no fit ran).", ""]

    lines += ["## Tables", ""]
    for p, df in tables.items():
        if p in parse:
            continue
        rel = p.relative_to(base) if p.is_relative_to(base) else p
        lines += [f"### `{rel}`", "", _caption(p), "", _markdown(df), ""]
    lines += ["## Figures", ""]
    lines += [f"- `{Path(f).relative_to(base) if Path(f).is_relative_to(base) else f}`" for f in figure_paths]
    return "\n".join(lines) + "\n"
