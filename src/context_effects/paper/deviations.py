"""The deviations ledger (``docs/deviations.yaml``) as the paper's methods appendix and as a
section of the run report: every place a seed paper is silent and this project chose,
printed from the one data file, so no choice lives only in code."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

STUDIES = {"C": "Study C (open-ended conformity)", "A": "Study A (AMEL)", "H": "Study H (history anchoring)",
           "all": "All studies"}


def load_ledger(path: str | Path) -> list[dict[str, Any]]:
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, Mapping) or not isinstance(data.get("entries"), list):
        raise ValueError(f"{path}: expected a mapping with a list under `entries`")
    return list(data["entries"])


def _by_study(entries: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    return [(STUDIES[s], [e for e in entries if e["study"] == s]) for s in STUDIES
            if any(e["study"] == s for e in entries)]


def to_latex(entries: list[dict[str, Any]]) -> str:
    """One longtable per study: topic, what the seed says, what this project does."""
    from context_effects.tables import latex_escape

    def esc(text: object) -> str:
        return latex_escape(" ".join(str(text).split()))

    out = []
    for title, block in _by_study(entries):
        out += [rf"\subsection*{{{esc(title)}}}", r"{\scriptsize",
                r"\begin{longtable}{p{0.2\textwidth}p{0.33\textwidth}p{0.38\textwidth}}", r"\toprule",
                r"Topic & The seed paper & This project \\", r"\midrule", r"\endhead", r"\bottomrule", r"\endfoot"]
        for e in block:
            out.append(rf"{esc(e['topic'])} {{\tiny(\texttt{{{esc(e['id'])}}})}} & {esc(e['seed_says'])} & "
                       rf"{esc(e['choice'])} \\")
        out += [r"\end{longtable}", "}"]
    return "\n".join(out) + "\n"


def report_section(entries: list[dict[str, Any]]) -> list[str]:
    """The run report's list: every choice by study, one line each (details in the ledger)."""
    lines = ["## Where the seed papers are silent: this project's choices", "",
             f"{len(entries)} entries of `docs/deviations.yaml` (what each seed says, the choice, why, where):", ""]
    for title, block in _by_study(entries):
        lines += [f"**{title}**", ""] + [f"- {e['topic']} (`{e['id']}`)" for e in block] + [""]
    return lines
