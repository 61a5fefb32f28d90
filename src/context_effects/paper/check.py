"""No number is typed into the paper: every number its prose prints is a macro of
``paper/numbers.yaml`` (written by the rule ``paper_numbers`` from the run's results).

``python -m context_effects.paper.check paper/`` reads every ``.tex`` file under the
folder (except ``preamble.tex`` and files whose first line says they are generated) line
by line and fails, naming ``file:line`` and the text, on any digit left in running text
after these are set aside, in this order:

1. comments (from an unescaped ``%`` to the end of the line);
2. the arguments of commands that name things rather than print numbers: ``\\ref``,
   ``\\label``, ``\\cite`` (and their variants), ``\\input``, ``\\include``,
   ``\\includegraphics``, ``\\usepackage``, ``\\documentclass``, ``\\begin``, ``\\end``,
   ``\\IncludeTable``, ``\\url``, the first argument of ``\\IncludeFigure`` (its caption is
   prose and is checked), both arguments of ``\\setcounter``/``\\setlength``-style
   commands, and ``\\Fixed{...}``: the preamble's mark for a constant of the method or a
   piece of notation that is not a result of the run (``$\\mathcal{N}(0, \\Fixed{0.4})$``),
   printed as it is;
3. the ``[...]`` options that directly follow a command (``\\begin{figure}[t]``,
   ``\\\\[2pt]``, ``\\includegraphics[width=0.9\\linewidth]``);
4. lengths written without a space: ``0.5\\linewidth``, ``2mm``, ``1.5em``;
5. sub- and superscript digits (``$x_1$``, ``$\\theta^{2}$``);
6. years 1900-2099 standing alone;
7. anything matched by a line of the allow-list ``paper/allowed_numbers.txt``: one Python
   regular expression per line (a plain name is one: escape ``.`` ``(`` ``+`` where it
   matters), then `` # `` and the reason it is allowed; it matches whole words only.
   Model and dataset names (``GPT-4o``, ``Qwen2.5-7B``) belong there.

Everything else that holds a digit is a typed number. The fix is a macro from
``paper/numbers.yaml`` (or, for a name, an allow-list line with its reason).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ALLOW_FILE = "allowed_numbers.txt"
SKIP_FILES = frozenset({"preamble.tex"})
FIX = "use a macro from paper/numbers.yaml"
HINT = (f"a result is a macro of paper/numbers.yaml; a name that holds a digit (a model's) is a line of "
        f"paper/{ALLOW_FILE} with its reason; a constant of the method or notation is \\Fixed{{...}}")

#: Commands whose brace arguments name things; the number is how many are set aside.
NAME_ARGS = {
    **dict.fromkeys(
        ("ref", "eqref", "pageref", "autoref", "nameref", "cref", "Cref", "label", "cite", "citep", "citet",
         "citealp", "citealt", "citeauthor", "citeyear", "citeyearpar", "nocite", "input", "include",
         "includeonly", "includegraphics", "usepackage", "RequirePackage", "documentclass", "begin", "end",
         "IncludeTable", "IncludeFigure", "Fixed", "url", "bibliography", "bibliographystyle", "graphicspath"),
        1,
    ),
    **dict.fromkeys(("setcounter", "addtocounter", "setlength", "addtolength"), 2),
}
_CMD_NAMES = "|".join(sorted(NAME_ARGS, key=len, reverse=True))
_NAME_CMD = re.compile(rf"\\({_CMD_NAMES})(?![A-Za-z])\*?")
_CMD_OPTIONS = re.compile(r"(\\(?:[A-Za-z@]+|\\)\*?)((?:\s*\[[^\[\]]*\])+)")
_LENGTH = re.compile(
    r"(?<![\w.])\d*\.?\d+(?:pt|em|ex|cm|mm|in|bp|sp|pc|dd|cc|mu|fil{1,3}|"
    r"\\(?:textwidth|linewidth|columnwidth|textheight|paperwidth|paperheight|baselineskip|parindent|parskip|"
    r"hsize|vsize|tabcolsep|arraystretch|fboxsep|fboxrule|marginparwidth))(?![A-Za-z])"
)
_SCRIPT = re.compile(r"[_^](?:\d|\{\d+\})")
_YEAR = re.compile(r"(?<![\w.,])(?:19|20)\d\d(?![\w]|[.,]\d)")
_COMMAND = re.compile(r"\\[A-Za-z@]+")
_DIGITS = re.compile(r"[\w.,+\-]*\d[\w.,+\-%]*")


@dataclass(frozen=True)
class Finding:
    path: Path
    line: int
    text: str
    context: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: typed number {self.text!r} in {self.context!r}: {FIX}"


class AllowListError(ValueError):
    """A malformed allow-list line; the message names the line."""


def strip_comment(line: str) -> str:
    """The line up to its first unescaped ``%``."""
    i = 0
    while True:
        i = line.find("%", i)
        if i < 0:
            return line
        backslashes = len(line[:i]) - len(line[:i].rstrip("\\"))
        if backslashes % 2 == 0:
            return line[:i]
        i += 1


def _skip_group(text: str, i: int) -> int:
    """Index after the balanced ``{...}`` starting at ``text[i]`` (or the end of the line)."""
    depth = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(text)


def strip_name_args(text: str) -> str:
    """``text`` without the arguments (and options) of the commands of ``NAME_ARGS``."""
    out, pos = [], 0
    for m in _NAME_CMD.finditer(text):
        if m.start() < pos:
            continue
        out.append(text[pos:m.start()])
        i, left = m.end(), NAME_ARGS[m.group(1)]
        while left:
            j = i
            while j < len(text) and text[j] in " \t":
                j += 1
            if j < len(text) and text[j] == "[":
                close = text.find("]", j)
                i = len(text) if close < 0 else close + 1
                continue
            if j < len(text) and text[j] == "{":
                i = _skip_group(text, j)
                left -= 1
                continue
            break
        out.append(f"\\{m.group(1)}")
        pos = i
    out.append(text[pos:])
    return "".join(out)


def load_allow_list(path: str | Path) -> list[re.Pattern[str]]:
    """The allow-list's patterns: ``<regex>  # <reason>`` per line; blank and ``#`` lines skipped."""
    path = Path(path)
    if not path.exists():
        return []
    patterns = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^(?P<pattern>.*?)\s+#\s*(?P<reason>.*)$", line)
        pattern, reason = (m["pattern"].strip(), m["reason"].strip()) if m else (line, "")
        if not reason:
            raise AllowListError(f"{path}:{n}: {raw.strip()!r} gives no reason: "
                                 "write `<pattern>  # <why it is allowed>`")
        try:
            patterns.append(re.compile(rf"(?<![A-Za-z0-9])(?:{pattern})(?![A-Za-z0-9])"))
        except re.error as exc:
            raise AllowListError(f"{path}:{n}: {pattern!r} is not a regular expression ({exc}); "
                                 "escape characters such as ( ) [ ] + ? with a backslash") from None
    return patterns


def typed_numbers(line: str, allowed: list[re.Pattern[str]] = ()) -> list[str]:
    """The typed numbers of one line of LaTeX (empty when it holds none)."""
    text = strip_comment(line)
    if not re.search(r"\d", text):
        return []
    text = strip_name_args(text)
    text = _CMD_OPTIONS.sub(lambda m: m.group(1), text)
    for pattern in allowed:
        text = pattern.sub(" ", text)
    text = _LENGTH.sub(" ", text)
    text = _SCRIPT.sub(" ", text)
    text = _YEAR.sub(" ", text)
    text = _COMMAND.sub(" ", text)
    return [m.group(0).strip(".,") for m in _DIGITS.finditer(text)]


def is_generated(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as fh:
        first = fh.readline()
    return bool(re.match(r"^\s*%.*\b(generated|written by rule|do not edit)\b", first, re.I))


def source_files(folder: str | Path) -> list[Path]:
    """The .tex files the check reads: every one under ``folder`` except the preamble,
    generated files and a LaTeX build folder."""
    folder = Path(folder)
    files = [folder] if folder.is_file() else sorted(folder.rglob("*.tex"))
    return [p for p in files
            if p.name not in SKIP_FILES and "build" not in p.relative_to(folder).parts[:-1] and not is_generated(p)]


def check_files(files: list[Path], allowed: list[re.Pattern[str]]) -> list[Finding]:
    findings = []
    for path in files:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for number in typed_numbers(line, allowed):
                context = " ".join(line.strip().split())
                findings.append(Finding(path, n, number, context[:160]))
    return findings


def check(folder: str | Path, allow_list: str | Path | None = None) -> list[Finding]:
    """Every typed number in the paper sources under ``folder``."""
    folder = Path(folder)
    base = folder if folder.is_dir() else folder.parent
    allowed = load_allow_list(allow_list if allow_list is not None else base / ALLOW_FILE)
    return check_files(source_files(folder), allowed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m context_effects.paper.check", description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", nargs="?", default="paper", help="the paper's source folder (default: paper)")
    parser.add_argument("--allow", help=f"allow-list file (default: <folder>/{ALLOW_FILE})")
    args = parser.parse_args(argv)
    folder = Path(args.folder)
    if not folder.exists():
        print(f"error: {folder} does not exist", file=sys.stderr)
        return 2
    try:
        findings = check(folder, args.allow)
    except AllowListError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for finding in findings:
        print(finding, file=sys.stderr)
    n = len(source_files(folder))
    if findings:
        print(f"{len(findings)} typed number(s) in {n} file(s) under {folder}: {HINT}", file=sys.stderr)
        return 1
    print(f"no typed numbers in {n} file(s) under {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
