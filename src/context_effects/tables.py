"""Every table of every study is written by ``write_table``: one CSV (the numbers,
full precision, for reuse) and one LaTeX fragment (booktabs, rounded, for the paper),
from the same DataFrame, so the two can never disagree.

The LaTeX is written here rather than by ``DataFrame.to_latex`` because the paper
needs per-column number formats, escaped cell text, table notes (the demo/synthetic
caveat, a failed-diagnostics flag) and byte-stable output across pandas versions. The
tabular sits in an ``adjustbox`` (``paper/preamble.tex`` loads the package) so a wide
table shrinks to the page. Non-ASCII text (γ, −, ≥, …) is written as it is: the paper's
preamble maps every such character for pdflatex, and the build refuses one it does not.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "|": r"\textbar{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
}


def latex_escape(text: object) -> str:
    return "".join(_LATEX_SPECIAL.get(ch, ch) for ch in str(text))


def format_cell(value: object, fmt: str | None = None, missing: str = "--") -> str:
    """One cell as LaTeX text: numbers by ``fmt`` (default 3 significant decimals), NaN → ``missing``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, numbers.Integral):
        return f"{int(value):{fmt or 'd'}}"
    if isinstance(value, numbers.Real):
        return f"{float(value):{fmt or '.3f'}}".replace("-", "$-$")
    return latex_escape(value)


def to_latex(
    df: pd.DataFrame,
    caption: str,
    label: str,
    formats: Mapping[str, str] | None = None,
    notes: Sequence[str] = (),
    align: str | None = None,
) -> str:
    formats = dict(formats or {})
    cols = list(df.columns)
    align = align or "".join("r" if pd.api.types.is_numeric_dtype(df[c]) else "l" for c in cols)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{latex_escape(caption)}}}",
        rf"\label{{{label}}}",
        # A wide (or long) table shrinks to the page; a narrow one keeps its size.
        r"\begin{adjustbox}{max width=\linewidth,max totalheight=0.7\textheight}",
        rf"\begin{{tabular}}{{{align}}}",
        r"\toprule",
        " & ".join(latex_escape(c) for c in cols) + r" \\",
        r"\midrule",
    ]
    for row in df.itertuples(index=False):
        lines.append(" & ".join(format_cell(v, formats.get(c)) for c, v in zip(cols, row)) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{adjustbox}"]
    for note in notes:
        lines.append(rf"\par\smallskip{{\footnotesize {latex_escape(note)}}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def write_table(
    df: pd.DataFrame,
    csv_path: str | Path,
    tex_path: str | Path,
    caption: str,
    label: str,
    formats: Mapping[str, str] | None = None,
    notes: Sequence[str] = (),
    align: str | None = None,
) -> None:
    """Write ``df`` as CSV (full precision) and as a LaTeX table with ``notes`` under it."""
    for path in (csv_path, tex_path):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(csv_path, index=False)
    Path(tex_path).write_text(to_latex(df, caption, label, formats, notes, align))


def run_notes(kind: str | None) -> list[str]:
    """The caveat every table and figure of a non-paper run carries (``run.kind``:
    demo models, synthetic data); a paper run carries none."""
    if kind == "demo":
        return ["Embedded default (demo): tiny local models on a few items; these numbers "
                "show the pipeline works and are not findings."]
    if kind == "synthetic":
        return ["Synthetic backend: simulated models with planted effects; these numbers "
                "validate the analysis and are not findings about any real model."]
    if kind == "rehearsal":
        return ["Rehearsal: simulated models planted with the seed papers' own estimates; these "
                "numbers test that the analysis prints them back and are not findings."]
    return []
