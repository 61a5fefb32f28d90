"""The paper build: number macros from results (paper/numbers.yaml), the check that no
number is typed into the prose, the Unicode map, and one end-to-end build of
paper/paper.pdf on the synthetic backend."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import unicodedata
import zipfile
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO
from context_effects.paper import build, check, numbers
from context_effects.paper.numbers import SpecError, latex_number, parse_spec, render, resolve
from context_effects.tables import run_notes, to_latex

MINUS = numbers.MINUS


# ------------------------------------------------------------------ numbers.yaml


def _results(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    (results / "tables" / "conformity").mkdir(parents=True)
    pd.DataFrame({
        "Dataset": ["truthfulqa", "mmlu_pro"],
        "NoPeer": [2.75, 2.9375],
        "Delta_C-W": [0.46875, -0.125],
        "n_ratings": [1120, 112],
        "note": ["", "undefined: fewer than two judges"],
    }).to_csv(results / "tables" / "conformity" / "table2.csv", index=False)
    pd.DataFrame({
        "Model": ["Qwen-sim", "Llama-sim"],
        "Asym": ["+0.257 [+0.220, +0.292]", "-0.140 [-0.930, -0.004]"],
    }).to_csv(results / "tables" / "conformity" / "table3.csv", index=False)
    return results


MANIFEST = {"label": "synthetic", "kind": "synthetic",
            "config": {"run": {"label": "synthetic", "kind": "synthetic"}, "datasets": {"truthfulqa": {"n_items": 4}}}}


def test_the_shipped_spec_is_valid():
    spec = numbers.load_spec(REPO / "paper" / "numbers.yaml")
    assert len(spec) >= 15
    assert {"TwoTruthfulQANoPeer", "AlphaOrdinalAll", "FlipShareTruthfulQA", "AnchorRankedFree"} <= set(spec)


def test_spec_rejects_bad_names_unknown_keys_and_formats():
    with pytest.raises(SpecError) as err:
        parse_spec({
            "Two2": {"table": "conformity/table2", "column": "NoPeer"},
            "Tw_o": {"table": "conformity/table2", "column": "NoPeer"},
            "RunLabel": {"manifest": "label"},
            "Colum": {"table": "conformity/table2", "colum": "NoPeer"},
            "Both": {"table": "conformity/table2", "column": "NoPeer", "manifest": "label"},
            "BadFormat": {"table": "conformity/table2", "column": "NoPeer", "format": ".3q"},
            "BadPart": {"table": "conformity/table2", "column": "NoPeer", "part": "middle"},
            "BadTable": {"table": "table2", "column": "NoPeer"},
            "BadRow": {"table": "conformity/table2", "row": "truthfulqa", "column": "NoPeer"},
        }, "numbers.yaml")
    text = str(err.value)
    for name in ("Two2", "Tw_o", "RunLabel", "Colum", "Both", "BadFormat", "BadPart", "BadTable", "BadRow"):
        assert f"entry '{name}'" in text, name
    assert "letters only" in text and "unknown key(s) ['colum']" in text and "exactly one source" in text
    assert "needs `column:`" in text and "<study>/<name>" in text and "Column=value" in text


def test_spec_refuses_a_repeated_macro(tmp_path):
    path = tmp_path / "numbers.yaml"
    path.write_text("A: {manifest: label}\nA: {manifest: kind}\n")
    with pytest.raises(SpecError, match="duplicate key `A`"):
        numbers.load_spec(path)


def test_latex_number_minus_percent_counts_and_negative_zero():
    assert latex_number(-0.125, ".3f") == f"{MINUS}0.125"
    assert latex_number(0.46875, "+.2f") == "+0.47"
    assert latex_number(-0.0001, ".3f") == "0.000"
    assert latex_number(0.4375, ".1%") == r"43.8\%"
    assert latex_number(1120.0, ",d") == "1,120"
    with pytest.raises(ValueError, match="whole number"):
        latex_number(2.5, "d")


def test_values_parts_and_missing_cells_become_na(tmp_path):
    results = _results(tmp_path)
    spec = parse_spec({
        "NoPeer": {"table": "conformity/table2", "row": "Dataset=truthfulqa", "column": "NoPeer", "format": ".2f"},
        "Delta": {"table": "conformity/table2", "row": "Dataset=mmlu_pro", "column": "Delta_C-W"},
        "Ratings": {"table": "conformity/table2", "row": "Dataset=truthfulqa", "column": "n_ratings", "format": ",d"},
        "Asym": {"table": "conformity/table3", "row": "Model=Llama-sim", "column": "Asym", "format": ".2f"},
        "AsymLow": {"table": "conformity/table3", "row": "Model=Qwen-sim", "column": "Asym", "part": "lower"},
        "AsymHigh": {"table": "conformity/table3", "row": "Model=Qwen-sim", "column": "Asym", "part": "upper"},
        "AsymCI": {"table": "conformity/table3", "row": "Model=Llama-sim", "column": "Asym", "part": "interval"},
        "NoInterval": {"table": "conformity/table2", "row": "Dataset=truthfulqa", "column": "NoPeer",
                       "part": "interval"},
        "NoTable": {"table": "conformity/table4", "row": "Judge=x", "column": "gamma_j"},
        "NoRow": {"table": "conformity/table2", "row": "Dataset=arc_challenge", "column": "NoPeer"},
        "NoColumn": {"table": "conformity/table2", "row": "Dataset=truthfulqa", "column": "Mixed"},
        "Text": {"table": "conformity/table2", "row": "Dataset=mmlu_pro", "column": "note"},
        "Items": {"manifest": "config.datasets.truthfulqa.n_items", "format": "d"},
        "Label": {"manifest": "config.run.label"},
        "NoKey": {"manifest": "config.run.nothing"},
    })
    got = {name: resolve(entry, results, MANIFEST) for name, entry in spec.items()}
    assert got["NoPeer"].tex == "2.75"
    assert got["Delta"].tex == f"{MINUS}0.125"
    assert got["Ratings"].tex == "1,120"
    assert got["Asym"].tex == f"{MINUS}0.14"
    assert got["AsymLow"].tex == "0.220" and got["AsymHigh"].tex == "0.292"
    assert got["AsymCI"].tex == f"[{MINUS}0.930, {MINUS}0.004]"
    assert got["Items"].tex == "4" and got["Label"].tex == "synthetic"
    assert "has no interval" in got["NoInterval"].reason
    assert "was not written by this run" in got["NoTable"].reason
    assert "no row" in got["NoRow"].reason
    assert "no column 'Mixed'" in got["NoColumn"].reason
    assert "holds no number" in got["Text"].reason
    assert "manifest has no config.run.nothing" in got["NoKey"].reason
    for name in ("NoInterval", "NoTable", "NoRow", "NoColumn", "Text", "NoKey"):
        assert got[name].tex is None, name


def test_render_defines_builtins_and_marks_na_with_a_comment(tmp_path):
    results = _results(tmp_path)
    spec = parse_spec({
        "Delta": {"table": "conformity/table2", "row": "Dataset=mmlu_pro", "column": "Delta_C-W"},
        "Missing": {"table": "conformity/table4", "row": "Judge=x", "column": "gamma_j"},
    })
    tex, warnings = render(spec, results, MANIFEST)
    assert rf"\newcommand{{\Delta}}{{{MINUS}0.125\xspace}}" in tex
    assert r"\newcommand{\Missing}{\textit{n/a}\xspace}" in tex
    assert re.search(r"^% Missing: .*n/a: .*table4\.csv was not written by this run$", tex, re.M)
    assert warnings == [f"Missing: n/a: {results}/tables/conformity/table4.csv was not written by this run"]
    assert r"\newcommand{\RunLabel}{synthetic\xspace}" in tex
    assert r"\newcommand{\RunKind}{synthetic\xspace}" in tex
    assert rf"\newcommand{{\RunCaveat}}{{{run_notes('synthetic')[0]}}}" in tex
    assert r"\PaperRunfalse" in tex and r"\newif\ifPaperRun" in tex
    paper, _ = render({}, results, {"label": "paper", "kind": "paper"})
    assert r"\PaperRuntrue" in paper and r"\newcommand{\RunCaveat}{}" in paper


def test_write_numbers_writes_tex_and_warnings(tmp_path):
    results = _results(tmp_path)
    spec = tmp_path / "numbers.yaml"
    spec.write_text('Gone: {table: conformity/table9, row: "Model=x", column: R-hat}\n'
                    'Run: {manifest: label}\n')
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps(MANIFEST))
    warnings = numbers.write_numbers(spec, tmp_path / "out" / "numbers.tex", tmp_path / "out" / "warnings.txt",
                                     results=results, manifest_path=manifest)
    assert len(warnings) == 1 and warnings[0].startswith("Gone: n/a:")
    assert (tmp_path / "out" / "warnings.txt").read_text() == warnings[0] + "\n"
    assert r"\newcommand{\Run}{synthetic\xspace}" in (tmp_path / "out" / "numbers.tex").read_text()


# ------------------------------------------------------------------ typed numbers


ALLOW = ("GPT-4o  # model name\nQwen2\\.5-7B(-Instruct)?  # model name\n"
         "\\\\mathcal\\{N\\}\\(0,\\s*1\\)  # the standard normal\n")


def _paper(tmp_path: Path, body: str) -> Path:
    folder = tmp_path / "paper"
    folder.mkdir(exist_ok=True)
    (folder / "allowed_numbers.txt").write_text(ALLOW)
    (folder / "preamble.tex").write_text("\\setlength{\\tabcolsep}{4pt} 12 typed in the preamble is fine\n")
    (folder / "intro.tex").write_text(body)
    return folder


@pytest.mark.parametrize("body, bad", [
    ("The gap was 0.21 on TruthfulQA.\n", ["0.21"]),
    ("The gap was \\TwoTruthfulQANoPeer{} on TruthfulQA.\n", []),
    ("As shown in 2024, the gap persists.\n", []),
    ("GPT-4o and Qwen2.5-7B-Instruct agree.\n", []),
    ("GPT-4 and Qwen2.5-7B agree.\n", ["GPT-4"]),
    ("The gap % was 0.21 in a draft\n", []),
    ("Half (50\\%) of the judges.\n", ["50"]),
    ("\\begin{figure}[t]\\includegraphics[width=0.9\\linewidth]{figures/c2/x1.pdf}\\end{figure}\n", []),
    ("See Table~\\ref{tab:t2}, \\cite[p.~12]{smith2020} and \\IncludeTable{conformity/table3}.\n", []),
    ("\\IncludeFigure{conformity/eta1}{Shifts on 3 datasets.}\n", ["3"]),
    ("\\vspace{2mm}\\\\[4pt] \\setcounter{secnumdepth}{3} $\\theta_1 + x^{2}$\n", []),
    ("We used k=5 histories.\n", ["5"]),
    ("Priors $\\Fixed{\\mathcal{N}(0, 0.4)}$ and $\\mathcal{N}(0, 1)$ hold; $\\mathcal{N}(0, 2)$ not.\n", ["0", "2"]),
])
def test_check_flags_typed_numbers_only(tmp_path, body, bad):
    folder = _paper(tmp_path, body)
    findings = check.check(folder)
    assert [f.text for f in findings] == bad
    for f in findings:
        assert f.path.name == "intro.tex" and f.line == 1
        assert "use a macro from paper/numbers.yaml" in str(f) and f"intro.tex:1: typed number {f.text!r}" in str(f)


def test_check_skips_the_preamble_and_generated_files(tmp_path):
    folder = _paper(tmp_path, "clean\n")
    (folder / "gen.tex").write_text("% Generated by a rule: do not edit\n0.21\n")
    assert check.check(folder) == []
    assert {p.name for p in check.source_files(folder)} == {"intro.tex"}


def test_allow_list_lines_need_a_reason(tmp_path):
    path = tmp_path / "allowed_numbers.txt"
    path.write_text("# comment\nGPT-4o\n")
    with pytest.raises(check.AllowListError, match=r"allowed_numbers.txt:2: .* gives no reason"):
        check.load_allow_list(path)
    path.write_text("GPT-4o(  # unbalanced\n")
    with pytest.raises(check.AllowListError, match="not a regular expression"):
        check.load_allow_list(path)


def test_check_cli_exit_codes(tmp_path):
    folder = _paper(tmp_path, "Clean prose with \\TwoTruthfulQANoPeer.\n")
    cmd = [sys.executable, "-m", "context_effects.paper.check", str(folder)]
    ok = subprocess.run(cmd, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    (folder / "results.tex").write_text("\n\nThe gap was 0.21.\n")
    bad = subprocess.run(cmd, capture_output=True, text=True)
    assert bad.returncode == 1
    assert "results.tex:3: typed number '0.21'" in bad.stderr and "use a macro from paper/numbers.yaml" in bad.stderr


def test_the_shipped_allow_list_loads():
    patterns = check.load_allow_list(REPO / "paper" / "allowed_numbers.txt")
    assert check.typed_numbers("GPT-4o, Qwen2.5-7B, Llama-3.1-8B, Gemma-2-9B and Mistral-7B in Round 2", patterns) == []


# ------------------------------------------------------------------ Unicode and tables


def test_every_registry_character_is_mapped_and_an_unmapped_one_is_named(tmp_path):
    mapped = build.mapped_characters(REPO / "paper" / "preamble.tex")
    assert set("γηθκσαβΔ×−≥≤±·…–—’“”é") <= mapped
    sample = tmp_path / "t.tex"
    sample.write_text("fine: γ − ≥\n% ignored in a comment: ☃\nbad: ☃ ✓\n", encoding="utf-8")
    problems = build.unmapped_characters([sample], mapped)
    assert [(p.line, p.char) for p in problems] == [(3, "☃"), (3, "✓")]
    assert "U+2603" in str(problems[0]) and "paper/preamble.tex" in str(problems[0])


def test_registry_captions_use_only_mapped_characters():
    """Every caption a table or figure of a study prints must compile."""
    from context_effects.outputs import STUDY_PACKAGES, registry

    mapped = build.mapped_characters(REPO / "paper" / "preamble.tex")
    for study in STUDY_PACKAGES:
        for entry in registry(study).entries.values():
            odd = {ch for ch in entry.caption if ord(ch) > 127} - mapped
            assert not odd, f"{study}/{entry.name}: {odd} not mapped in paper/preamble.tex"


def test_to_latex_shrinks_wide_tables_and_keeps_the_csv(tmp_path):
    from context_effects.tables import write_table

    df = pd.DataFrame({"Model": ["a"], "γ_j": [-0.5]})
    tex = to_latex(df, "Caption ≥ γ", "tab:x")
    begin, tabular, end = (tex.index(s) for s in (r"\begin{adjustbox}{max width=\linewidth", r"\begin{tabular}",
                                                   r"\end{adjustbox}"))
    assert begin < tabular < tex.index(r"\end{tabular}") < end < tex.index(r"\end{table}")
    write_table(df, tmp_path / "x.csv", tmp_path / "x.tex", "c", "tab:x")
    assert (tmp_path / "x.csv").read_text() == "Model,γ_j\na,-0.5\n"


def test_missing_latexmk_names_packages_env_and_switch(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(build.BuildError) as err:
        build.latexmk()
    text = str(err.value)
    assert "texlive-latex-recommended texlive-latex-extra latexmk" in text
    assert "envs/latex.yaml" in text and "paper: {pdf: false}" in text


def test_latex_errors_are_picked_from_the_log():
    log = "This is pdfTeX\n(./x.tex\n./x.tex:12: Undefined control sequence.\nl.12 \\foo\n\nmore\n! Emergency stop.\n"
    errors = build.latex_errors(log)
    assert errors[0] == "./x.tex:12: Undefined control sequence." and "l.12 \\foo" in errors
    assert "! Emergency stop." in errors


HAS_LATEX = shutil.which("latexmk") is not None and shutil.which("pdftotext") is not None
NO_LATEX = ("LaTeX is not installed (apt-get install texlive-latex-recommended texlive-latex-extra latexmk "
            "poppler-utils, or `make install` as root)")


def _small_paper(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    """A source folder with the shipped preamble and a one-page paper, and a working
    directory with numbers.tex for a run of ``kind`` and one wide Unicode table."""
    src, wd = tmp_path / "src", tmp_path / "wd"
    src.mkdir()
    for name in ("preamble.tex", "allowed_numbers.txt"):
        shutil.copy(REPO / "paper" / name, src / name)
    (src / "paper.tex").write_text(
        "\\documentclass{article}\n\\input{preamble}\n\\input{results/paper/numbers.tex}\n"
        "\\title{T}\\author{A}\n\\begin{document}\n\\maketitle\n\\RunCaveatBox\n"
        "Shift \\ShiftMMLU{} on \\RunLabel run.\n\\IncludeTable{conformity/wide}\n\\IncludeTable{conformity/table3}\n"
        "\\IncludeFigure{conformity/eta_forest}{Shifts.}\n\\end{document}\n")
    results = _results(wd)
    tex, _ = render(parse_spec({"ShiftMMLU": {"table": "conformity/table2", "row": "Dataset=mmlu_pro",
                                          "column": "Delta_C-W"}}), results, {"label": "r", "kind": kind})
    (results / "paper").mkdir()
    (results / "paper" / "numbers.tex").write_text(tex)
    header = "γ ≥ η × θ − κ ± σ · α/β Δ … – — ’“”é"
    wide = pd.DataFrame({f"{header} {i}": [-0.5] for i in range(12)})
    (results / "tables" / "conformity" / "wide.tex").write_text(to_latex(wide, "Wide: γ ≥ η", "tab:wide"))
    return src, wd


@pytest.mark.skipif(not HAS_LATEX, reason=NO_LATEX)
@pytest.mark.parametrize("kind", ["synthetic", "paper"])
def test_preamble_compiles_unicode_wide_tables_and_the_caveat_box(tmp_path, kind):
    src, wd = _small_paper(tmp_path, kind)
    pdf = build.build_pdf(src, "paper/paper.pdf", generated=["results/tables/conformity/wide.tex"], workdir=wd,
                          log=lambda *a: None)
    text = _page_one(pdf)
    assert ("Not findings" in text) == (kind != "paper")
    assert (" ".join(run_notes("synthetic")[0].split()) in text) == (kind == "synthetic")
    assert "Table conformity/table3 was not produced by this run." in text
    assert "Figure conformity/eta_forest was not produced by this run." in text
    assert "Shift −0.125 on r run." in text
    log = (wd / "results" / "paper" / "build" / "paper.log").read_text()
    assert "Overfull \\hbox" not in log  # the wide table shrank to the page


def _design_figures() -> list[str]:
    """The figure floats of part_conformity.tex that are drawn in TikZ."""
    tex = (REPO / "paper" / "part_conformity.tex").read_text()
    floats = re.findall(r"\\begin\{figure\}.*?\\end\{figure\}", tex, flags=re.S)
    return [f for f in floats if "\\begin{tikzpicture}" in f]


def test_design_diagrams_are_tikz_in_the_paper_source():
    """Seed 002's Figures 1 (the two channels) and 2 (branched generation, paired evaluation)
    are drawn in the paper's source, not included as images, and hold no typed number."""
    figures = _design_figures()
    labels = [re.search(r"\\label\{([^}]*)\}", f).group(1) for f in figures]
    assert labels == ["fig:c-channels", "fig:c-design"]
    assert all("\\includegraphics" not in f and "\\IncludeFigure" not in f for f in figures)
    preamble = (REPO / "paper" / "preamble.tex").read_text()
    assert "\\usepackage{tikz}" in preamble
    patterns = check.load_allow_list(REPO / "paper" / "allowed_numbers.txt")
    for f in figures:
        for line in f.splitlines():
            assert check.typed_numbers(line, patterns) == [], line


@pytest.mark.skipif(not HAS_LATEX, reason=NO_LATEX)
def test_design_diagrams_compile_with_the_shipped_preamble(tmp_path):
    src, wd = tmp_path / "src", tmp_path / "wd"
    src.mkdir()
    wd.mkdir()
    for name in ("preamble.tex", "allowed_numbers.txt"):
        shutil.copy(REPO / "paper" / name, src / name)
    (src / "paper.tex").write_text("\\documentclass[11pt]{article}\n\\input{preamble}\n\\begin{document}\n"
                                   + "\n".join(_design_figures()) + "\n\\end{document}\n")
    pdf = build.build_pdf(src, "paper/paper.pdf", workdir=wd, log=lambda *a: None)
    text = _page_one(pdf)
    for words in ("Blind judge", "Informed judge", "Content-only", "Peer-presented", "Evaluator side"):
        assert words in text, words
    log = (wd / "results" / "paper" / "build" / "paper.log").read_text()
    assert "Overfull \\hbox" not in log


@pytest.mark.skipif(not HAS_LATEX, reason=NO_LATEX)
def test_latex_errors_reach_the_message(tmp_path):
    src, wd = _small_paper(tmp_path, "synthetic")
    (src / "paper.tex").write_text((src / "paper.tex").read_text().replace("\\maketitle", "\\maketitle\\nosuchmacro"))
    with pytest.raises(build.BuildError, match=r"(?s)LaTeX failed.*paper\.tex:\d+: Undefined control sequence"):
        build.build_pdf(src, "paper/paper.pdf", workdir=wd, log=lambda *a: None)


# ------------------------------------------------------------------ the DAG


def test_paper_inputs_and_the_pdf_switch():
    from context_effects import targets
    from context_effects.config import load_config, validate_config

    cfg = validate_config(load_config(REPO / "config" / "synthetic.yaml"))
    assert cfg["paper"]["pdf"] is True  # the default
    inputs = targets.paper_inputs(cfg, str(REPO))
    assert inputs["preamble"] == str(REPO / "paper" / "preamble.tex")
    assert str(REPO / "paper" / "numbers.yaml") in inputs["sources"]
    assert inputs["tables"] == [t[: -len("csv")] + "tex" for t in targets.report_tables(cfg)]
    assert "results/tables/conformity/table2.tex" in inputs["tables"]
    assert inputs["figures"] == targets.report_figures(cfg) and inputs["figures"]
    assert inputs["numbers"] == "results/paper/numbers.tex"
    assert inputs["reproduction"] == "results/report/reproduction.tex"
    assert inputs["deviations"] == "results/paper/deviations.tex"
    assert "paper/paper.pdf" in targets.paper_targets(cfg)
    assert "paper/paper.pdf" not in targets.study_outputs(cfg)
    off = validate_config({**load_config(REPO / "config" / "synthetic.yaml"), "paper": {"pdf": False}})
    assert "paper/paper.pdf" not in targets.paper_targets(off)


# ------------------------------------------------------------------ the paper, end to end


def _page_one(pdf: Path) -> str:
    text = subprocess.run(["pdftotext", "-f", "1", "-l", "1", str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout
    return " ".join(unicodedata.normalize("NFKC", text).split())


@pytest.mark.skipif(not HAS_LATEX, reason=NO_LATEX)
def test_paper_pdf_builds_on_the_synthetic_backend(synthetic_run, tmp_path):
    """The whole DAG on simulated models (every study), then paper/paper.pdf (the
    session's shared synthetic run: several minutes on two cores)."""
    assert (REPO / "paper" / "paper.tex").exists(), "paper/paper.tex (the prose) is missing"
    workdir = synthetic_run.repo
    pdf = workdir / "paper" / "paper.pdf"
    assert pdf.stat().st_size > 10_000
    assert _page_one(pdf).count(" ".join(run_notes("synthetic")[0].split())) == 1
    mapped = build.mapped_characters(REPO / "paper" / "preamble.tex")
    assert build.unmapped_characters(sorted((workdir / "results" / "tables").glob("*/*.tex")), mapped) == []
    numbers_tex = (workdir / "results" / "paper" / "numbers.tex").read_text()
    assert r"\newcommand{\TwoTruthfulQANoPeer}{" in numbers_tex and r"\PaperRunfalse" in numbers_tex

    # A number typed into a copy of the paper's sources fails the check, naming file and line.
    sources = tmp_path / "paper-copy"
    shutil.copytree(REPO / "paper", sources, ignore=shutil.ignore_patterns("*.pdf", "published"))
    assert check.check(sources) == []
    main = sources / "paper.tex"
    lines = main.read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip() == r"\begin{document}") + 1
    lines.insert(at, "The gap was 0.21 points.")
    main.write_text("\n".join(lines) + "\n")
    res = subprocess.run([sys.executable, "-m", "context_effects.paper.check", str(sources)],
                         capture_output=True, text=True)
    assert res.returncode == 1
    assert f"paper.tex:{at + 1}: typed number '0.21'" in res.stderr
    with pytest.raises(build.BuildError, match="typed numbers"):
        build.build_pdf(sources, "paper/again.pdf", workdir=workdir)

    # The reproduction report lists every transcribed number; on this synthetic run none is
    # compared, and a published value set from the run itself agrees until it is moved.
    from context_effects.paper.reproduction import COLUMNS, compare, read_published

    published = read_published(sorted((REPO / "paper" / "published").glob("*/*.csv")))
    report = pd.read_csv(workdir / "results" / "report" / "reproduction.csv")
    assert len(report) == len(published) and "agrees" not in set(report["status"])
    table2 = pd.read_csv(workdir / "results" / "tables" / "conformity" / "table2.csv", dtype=str)
    row = table2.iloc[0]
    own = {c: "" for c in COLUMNS} | {"id": "own", "section": "s", "quantity": "q", "decimals": "3",
                                      "table": "conformity/table2",
                                      "row": f"Dataset={row['Dataset']}; Executions={row['Executions']}",
                                      "column": "NoPeer", "value": f"{float(row['NoPeer']):.3f}"}
    moved = own | {"id": "moved", "value": f"{float(row['NoPeer']) + 0.25:.3f}"}
    mine = pd.DataFrame([own, moved]).assign(study="conformity")
    assert compare(mine, workdir / "results", "paper")["status"].tolist() == ["agrees", "differs"]
    text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True, check=True).stdout
    assert "generator-mean-baseline" in text  # the deviations ledger, printed in the appendix

    # snakemake --report: one self-contained report with every table and figure of the run
    res = synthetic_run.snakemake("--cores", "1", "--report", str(tmp_path / "report.zip"), "paper/paper.pdf")
    assert res.returncode == 0, res.stderr[-5000:]
    names = {Path(n).name for n in zipfile.ZipFile(tmp_path / "report.zip").namelist()}
    from context_effects import targets
    from context_effects.config import load_config, validate_config

    cfg = validate_config(load_config(REPO / "config" / "synthetic.yaml"))
    expected = {Path(p).name for p in targets.report_tables(cfg)}
    expected |= {Path(p).name for p in targets.report_figures(cfg) if p.endswith(".png")}
    assert expected <= names, sorted(expected - names)
