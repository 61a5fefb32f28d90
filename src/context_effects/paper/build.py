"""Compile the paper: ``paper/paper.tex`` of the repository with the run's generated
files → ``paper/paper.pdf`` of the working directory (the rule ``paper_pdf``).

The paper's sources live in the repository (``<basedir>/paper``); the files it reads
from the run (``results/paper/numbers.tex``, ``results/tables/...``, ``figures/...``,
``results/report/reproduction.tex``) lie in the working directory, which is not the
repository when Snakemake runs with ``--directory``. So latexmk runs with the working
directory as cwd and the source folder on ``TEXINPUTS``, writes its files to
``results/paper/build`` and the PDF is copied to ``paper/paper.pdf``.

Before LaTeX runs, two checks fail fast with a message naming file and line:

* a number typed into the prose (``context_effects.paper.check``);
* a non-ASCII character that ``paper/preamble.tex`` does not map with
  ``\\newunicodechar`` (pdflatex would stop on it with a terser message).

This module imports only the standard library: the rule's conda environment
(``envs/latex.yaml``) holds LaTeX and Python, not the analysis stack.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from context_effects.paper import check as number_check

DEBIAN_PACKAGES = "texlive-latex-recommended texlive-latex-extra latexmk"
MISSING_LATEX = (
    "latexmk is not on PATH, so the paper PDF cannot be built. Install LaTeX: on Debian/Ubuntu "
    f"`apt-get install {DEBIAN_PACKAGES}` (`make install` does it where apt-get runs as root); on a cluster "
    "run Snakemake with `--sdm conda` (the rule's environment envs/latex.yaml brings texlive-core and latexmk); "
    "or leave the PDF out of the run with `paper: {pdf: false}` in the config file (numbers, tables and "
    "figures are still written)."
)
_UNICODE_DECL = re.compile(r"^\s*\\newunicodechar\{(.)\}", re.M)
_UNICODE_HEX = re.compile(r"^\s*\\DeclareUnicodeCharacter\{([0-9A-Fa-f]{4,6})\}", re.M)


class BuildError(RuntimeError):
    """The paper could not be built; the message says where and what to do."""


@dataclass(frozen=True)
class CharProblem:
    path: Path
    line: int
    char: str

    def __str__(self) -> str:
        return (f"{self.path}:{self.line}: character {self.char!r} (U+{ord(self.char):04X}) is not mapped for "
                "pdflatex: add a line \\newunicodechar{" + self.char + "}{<LaTeX for it>} to paper/preamble.tex")


def mapped_characters(preamble: str | Path) -> set[str]:
    """The non-ASCII characters ``preamble.tex`` maps with ``\\newunicodechar`` (or
    ``\\DeclareUnicodeCharacter{<hex>}``)."""
    text = Path(preamble).read_text(encoding="utf-8")
    return set(_UNICODE_DECL.findall(text)) | {chr(int(h, 16)) for h in _UNICODE_HEX.findall(text)}


def unmapped_characters(files: list[str | Path], mapped: set[str]) -> list[CharProblem]:
    """Every non-ASCII character of ``files`` that is not in ``mapped`` (outside comments),
    once per file and character, at its first line."""
    problems = []
    for path in files:
        seen: set[str] = set()
        text = Path(path).read_text(encoding="utf-8")
        for n, line in enumerate(text.splitlines(), 1):
            for ch in number_check.strip_comment(line):
                if ord(ch) > 127 and ch not in mapped and ch not in seen:
                    seen.add(ch)
                    problems.append(CharProblem(Path(path), n, ch))
    return problems


def latexmk() -> str:
    exe = shutil.which("latexmk")
    if exe is None or shutil.which("pdflatex") is None:
        raise BuildError(MISSING_LATEX)
    return exe


def latex_errors(log_text: str, context: int = 3) -> list[str]:
    """The error lines of a LaTeX log (``file:line: message`` or ``! message``) with a few
    lines after each (LaTeX prints the offending input there)."""
    lines = log_text.splitlines()
    out: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith("!") or re.match(r"^\S+\.\w+:\d+: ", line):
            block = lines[i:i + 1 + context]
            if not out or out[-1] != block[-1]:
                out.extend(block)
    return out


def run_latexmk(main_tex: Path, source_dir: Path, workdir: Path, outdir: Path, log) -> Path:
    """Compile ``main_tex`` in ``workdir``; the PDF's path; BuildError with LaTeX's errors."""
    exe = latexmk()
    texinputs = os.pathsep.join([str(source_dir) + "//", ""])  # the trailing "" keeps TeX's defaults
    # TeX files, BibTeX databases and styles of the paper are all found in the source folder.
    env = {**os.environ, "max_print_line": "10000"}  # one log line per message: errors are found whole
    for var in ("TEXINPUTS", "BIBINPUTS", "BSTINPUTS"):
        env[var] = texinputs + os.environ.get(var, "")
    outdir.mkdir(parents=True, exist_ok=True)
    cmd = [exe, "-pdf", "-g", "-interaction=nonstopmode", "-halt-on-error", "-file-line-error",
           f"-outdir={outdir}", f"-jobname={main_tex.stem}", str(main_tex)]
    log(f"$ TEXINPUTS={texinputs} {' '.join(cmd)}  (cwd {workdir})")
    res = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, errors="replace")
    log(res.stdout)
    log(res.stderr)
    pdf = outdir / f"{main_tex.stem}.pdf"
    if res.returncode != 0 or not pdf.exists():
        latex_log = outdir / f"{main_tex.stem}.log"
        text = latex_log.read_text(errors="replace") if latex_log.exists() else res.stdout
        errors = latex_errors(text) or res.stdout.splitlines()[-20:]
        raise BuildError(f"LaTeX failed (exit {res.returncode}); the errors of {latex_log}:\n" + "\n".join(errors))
    return pdf


def build_pdf(source_dir: str | Path, out_pdf: str | Path, generated: list[str | Path] = (),
              workdir: str | Path = ".", outdir: str | Path = "results/paper/build", log=print) -> Path:
    """Check, then compile ``<source_dir>/paper.tex`` in ``workdir`` and copy the PDF to
    ``out_pdf`` (relative to ``workdir``). ``generated``: the run's .tex files the paper
    reads, scanned for unmapped characters with the sources."""
    source_dir, workdir = Path(source_dir).resolve(), Path(workdir).resolve()
    main_tex = source_dir / "paper.tex"
    if not main_tex.exists():
        raise BuildError(f"{main_tex} does not exist: the paper's main file is paper/paper.tex")
    findings = number_check.check(source_dir)
    if findings:
        raise BuildError("typed numbers in the paper's prose:\n" + "\n".join(map(str, findings))
                         + f"\n{len(findings)} typed number(s): {number_check.HINT}")
    log(f"number check: no typed numbers in {len(number_check.source_files(source_dir))} file(s) of {source_dir}")
    preamble = source_dir / "preamble.tex"
    mapped = mapped_characters(preamble) if preamble.exists() else set()
    scanned = sorted(source_dir.rglob("*.tex")) + [workdir / p for p in generated if str(p).endswith(".tex")]
    problems = unmapped_characters(scanned, mapped)
    if problems:
        raise BuildError("characters pdflatex cannot typeset:\n" + "\n".join(map(str, problems)))
    log(f"unicode check: {len(scanned)} file(s), every non-ASCII character mapped ({len(mapped)} mapped)")
    pdf = run_latexmk(main_tex, source_dir, workdir, workdir / outdir, log)
    target = workdir / out_pdf
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pdf, target)
    log(f"wrote {target}")
    return target
