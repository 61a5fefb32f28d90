"""A context-effects card for a model: its headline numbers in each study, with their
intervals, beside what the seed papers printed for their own models.

Each study's face (``context_effects.studies``) names the model's headline numbers
(``Headline``: a cell of a results table the run writes) and how to find the seed's
models on the same quantity among the transcribed numbers (``paper/published/``). This
module reads both, decides what the run's interval can and cannot tell apart, and writes,
under ``results/card/``:

``<model>.md``, ``<model>.csv`` and ``<model>.tex`` (``<model>.pdf``: rule card_pdf)
    The card: the model's identity as served (from the run manifest and, where the model
    judged Study H, its result file), each headline number with its 95% interval and the
    seed's models beside it, and, for each, which of them this design tells apart.
``<model>_<study>.png``
    One figure per study: the seed's models and this one, highlighted.
``comparison.csv`` and ``comparison.md``
    Every card model's numbers side by side, and which pairs the run tells apart.

Telling apart. Two estimates x1, x2 with 95% half-widths h1, h2 (h = 0 for a value the
seed prints without an interval) differ at the 5% level, under the normal approximation
both intervals rest on, when |x1 - x2| > sqrt(h1^2 + h2^2): that is the smallest difference
the card can resolve, and it says so for every number. Two models judged in one fit
(Study C's panel) are correlated; the rule then ignores their covariance (docs/card.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects.paper.lookup import Cell, MissingNumber, lookup, parse_row
from context_effects.paper.reproduction import printed_number
from context_effects.studies import Headline, faces

Config = Mapping[str, Any]

CARD_DIR = "results/card"
MANIFEST = "results/run/manifest.json"
STUDY_TITLES = {
    "conformity": "Study C: a visible peer discussion (seed 002)",
    "amel": "Study A: a history of one-sided verdicts (seed 000)",
    "anchoring": "Study H: a previous score on display (seed 001)",
}
#: Why a study's numbers have no seed values beside them.
NO_SEED_VALUES = {
    "anchoring": "Seed 001 is a preregistered protocol: it prints no model's result to set beside this one.",
}
POOLED = "seed roster (pooled)"
CSV_COLUMNS = ("study", "quantity", "label", "role", "model", "value", "lower", "upper", "half_width", "status",
               "seed_models", "seed_min", "seed_max", "differs_from", "not_distinguishable_from", "reading")


# ----------------------------------------------------------------------------- the DAG's view


def card_models(config: Config) -> list[str]:
    """The models that get a card: ``card.models``, else every model the enabled studies run."""
    from context_effects.dag import used_models

    return list(config["card"]["models"]) or used_models(config)


def headlines(config: Config, model: str) -> list[Headline]:
    """The model's headline numbers, study by study (the order of ``studies.FACES``)."""
    return [h for face in faces(config) for h in face.headlines(config, model)]


def studies_of(config: Config, model: str) -> list[str]:
    return list(dict.fromkeys(h.study for h in headlines(config, model)))


def outputs(config: Config) -> dict[str, list[str]]:
    """The card rule's outputs: each model's card and figures, and the comparison."""
    cards, tables, pages, figures = [], [], [], []
    for m in card_models(config):
        cards.append(f"{CARD_DIR}/{m}.md")
        tables.append(f"{CARD_DIR}/{m}.csv")
        pages.append(f"{CARD_DIR}/{m}.tex")
        figures += [f"{CARD_DIR}/{m}_{s}.png" for s in studies_of(config, m)]
    return {"cards": cards, "tables": tables, "pages": pages, "figures": figures,
            "comparison": [f"{CARD_DIR}/comparison.csv", f"{CARD_DIR}/comparison.md"]}


def pdfs(config: Config) -> list[str]:
    """Each card's PDF page when the run builds PDFs (``paper.pdf``: they need LaTeX)."""
    if not config.get("paper", {}).get("pdf", False):
        return []
    return [f"{CARD_DIR}/{m}.pdf" for m in card_models(config)]


def pdf_inputs(model: str, config: Config) -> list[str]:
    """What a card's PDF page reads: its LaTeX source and its figures."""
    return [f"{CARD_DIR}/{model}.tex", *(f"{CARD_DIR}/{model}_{s}.png" for s in studies_of(config, model))]


def inputs(config: Config, basedir: str) -> dict[str, list[str]]:
    """What the cards read: the results tables holding their numbers, the manifest, Study H's
    result files (the model as served) and the seed's transcribed numbers (in the repository
    at ``basedir``)."""
    from context_effects.anchoring.dag import result_path
    from context_effects.paper.lookup import table_path
    from context_effects.targets import published_files

    models = card_models(config)
    hs = [h for m in models for h in headlines(config, m)]
    return {
        "tables": sorted({str(table_path(h.table)) for h in hs}),
        "manifest": [MANIFEST],
        "anchoring": [result_path(m) for m in models if "anchoring" in studies_of(config, m)],
        "published": published_files(basedir),
    }


# ----------------------------------------------------------------------------- seed values


@dataclass(frozen=True)
class SeedValue:
    """A seed model's value of a headline quantity, in the results table's unit."""

    model: str
    value: float
    lower: float | None
    upper: float | None
    source: str

    @property
    def half_width(self) -> float:
        return 0.0 if self.lower is None or self.upper is None else (self.upper - self.lower) / 2


def seed_values(h: Headline, published: pd.DataFrame) -> list[SeedValue]:
    """The seed's models on ``h``'s quantity: published rows of the same table and value column
    whose row has ``h.fixed`` and any model (one value per model, the first file's), then
    the seed's pooled value where ``h.pooled`` selects one. A printed value is divided by
    the row's ``scale`` (its unit against the table's, e.g. ``-1`` for a printed |d|)."""
    def value_column(column: str) -> str:  # a row may print the value without its interval
        return column.partition("@")[0].strip()

    table, column = h.seed_table or h.table, h.seed_column or h.column
    rows = published[(published["table"] == table) & (published["column"].map(value_column) == value_column(column))]
    fixed = dict(h.seed_fixed if h.seed_table else h.fixed)
    pooled_row = {**fixed, **dict(h.pooled)} if h.pooled else None
    out: dict[str, SeedValue] = {}
    for _, r in rows.iterrows():
        sel = parse_row(r["row"])
        model = sel.pop(h.model_column, None)
        if model is not None and sel == fixed:
            name = model
        elif pooled_row is not None and {**sel, h.model_column: model} == pooled_row:
            name = POOLED
        else:
            continue
        value = printed_number(r["value"])
        if value is None or name in out:
            continue
        scale = printed_number(r["scale"]) or 1.0
        lo, hi = printed_number(r["lower"]), printed_number(r["upper"])
        lo, hi = (None if lo is None else lo / scale), (None if hi is None else hi / scale)
        if lo is not None and hi is not None and lo > hi:
            lo, hi = hi, lo
        out[name] = SeedValue(name, value / scale, lo, hi, f"{r['study']}/{r['id']}")
    return sorted(out.values(), key=lambda s: (s.model == POOLED, s.model))


# ----------------------------------------------------------------------------- the numbers


def resolvable(h1: float, h2: float) -> float:
    """The smallest difference two estimates with 95% half-widths h1, h2 resolve (module docstring)."""
    return math.hypot(h1, h2)


def tells_apart(a: float, ha: float, b: float, hb: float) -> bool:
    return abs(a - b) > resolvable(ha, hb)


@dataclass(frozen=True)
class Number:
    """A headline number as the run produced it (``cell`` None: ``status`` says why)."""

    headline: Headline
    model: str
    cell: Cell | None
    status: str
    seeds: tuple[SeedValue, ...]

    @property
    def half_width(self) -> float | None:
        c = self.cell
        return None if c is None or not c.has_interval else (c.upper - c.lower) / 2

    def verdicts(self) -> tuple[list[str], list[str]]:
        """The seed models this number differs from, and those it cannot be told apart from."""
        if self.cell is None or self.half_width is None:
            return [], []
        differs, same = [], []
        for s in self.seeds:
            (differs if tells_apart(self.cell.value, self.half_width, s.value, s.half_width) else same).append(s.model)
        return differs, same


def read_numbers(config: Config, model: str, published: pd.DataFrame, results: str | Path = "results",
                 frames: dict | None = None) -> list[Number]:
    frames = {} if frames is None else frames
    out = []
    for h in headlines(config, model):
        try:
            cell = lookup(h.table, h.row, h.column, results=results, frames=frames)
            status = "ok" if cell is not None else "not estimated: the table's cell holds no number"
            if cell is not None and not cell.has_interval:
                status = "no interval"
            diagnostics = _diagnostics(h, results, frames)
            if cell is not None and diagnostics not in ("", "ok"):
                status = f"fit diagnostics {diagnostics}: the number is shown but is not reliable"
        except MissingNumber as exc:
            cell, status = None, f"not produced: {exc}"
        out.append(Number(h, model, cell, status, tuple(seed_values(h, published))))
    return out


def _diagnostics(h: Headline, results: str | Path, frames: dict) -> str:
    """The row's ``Diagnostics`` cell (the fit tables' convergence verdict), "" where the table has none."""
    from context_effects.paper.lookup import select_row, table_path

    df = frames[table_path(h.table, results)]  # read by lookup
    if "Diagnostics" not in df.columns:
        return ""
    return str(select_row(df, h.row, h.table)["Diagnostics"]).strip()


def number_rows(numbers: Sequence[Number]) -> pd.DataFrame:
    rows = []
    for n in numbers:
        h, c = n.headline, n.cell
        differs, same = n.verdicts()
        seeds = [s.value for s in n.seeds]
        rows.append({
            "study": h.study, "quantity": h.quantity, "label": h.label, "role": h.role, "model": n.model,
            "value": math.nan if c is None else c.value,
            "lower": math.nan if c is None or c.lower is None else c.lower,
            "upper": math.nan if c is None or c.upper is None else c.upper,
            "half_width": math.nan if n.half_width is None else n.half_width,
            "status": n.status, "seed_models": len(n.seeds),
            "seed_min": min(seeds) if seeds else math.nan, "seed_max": max(seeds) if seeds else math.nan,
            "differs_from": "; ".join(differs), "not_distinguishable_from": "; ".join(same), "reading": h.reading,
        })
    return pd.DataFrame(rows, columns=list(CSV_COLUMNS))


def comparison(numbers: Mapping[str, Sequence[Number]]) -> pd.DataFrame:
    """Every card model's numbers in one long table; ``separated_from`` names the other card
    models whose value on the same quantity this run tells apart from this one."""
    rows = number_rows([n for ns in numbers.values() for n in ns])
    rows = rows.drop(columns=["seed_models", "seed_min", "seed_max", "differs_from", "not_distinguishable_from"])
    separated, not_separated = [], []
    for _, r in rows.iterrows():
        same_q = rows[(rows["study"] == r["study"]) & (rows["quantity"] == r["quantity"])
                      & (rows["model"] != r["model"])]
        yes, no = [], []
        for _, o in same_q.iterrows():
            if any(math.isnan(v) for v in (r["value"], r["half_width"], o["value"], o["half_width"])):
                continue
            (yes if tells_apart(r["value"], r["half_width"], o["value"], o["half_width"]) else no).append(o["model"])
        separated.append("; ".join(yes))
        not_separated.append("; ".join(no))
    rows.insert(len(rows.columns) - 1, "separated_from", separated)
    rows.insert(len(rows.columns) - 1, "not_separated_from", not_separated)
    return rows


# ----------------------------------------------------------------------------- identity


def identity(config: Config, model: str, manifest: Mapping[str, Any],
             anchoring_result: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The model as configured and, where its Study H result file records it, as served
    (that file, in seed 001's format, is named too)."""
    from context_effects.anchoring.dag import result_path

    m = manifest["config"]["models"][model]
    rows = [("name in the config", model), ("display name", m.get("display_name") or model),
            ("backend", m["backend"]), ("model id", m["model_id"]), ("revision", m.get("revision") or "not pinned")]
    if m.get("base_url"):
        rows.append(("base URL", m["base_url"]))
    if m.get("stands_in_for"):
        rows.append(("stands in for", str(m["stands_in_for"])))
    if anchoring_result is not None:
        rm = anchoring_result["model"]
        st = anchoring_result["settings"]
        served = rm.get("served_versions") or []
        rows += [("provider", str(rm.get("provider") or "")),
                 ("served as (Study H replies)", ", ".join(map(str, served)) or "not reported"),
                 ("engine", ", ".join(map(str, rm.get("engine_versions") or [])) or "not reported"),
                 ("decoding (Study H)", f"temperature {st['temperature']}, top_p {st['top_p']}, "
                                        f"max_tokens {st['max_tokens']}"),
                 ("replies dated", _dates(anchoring_result.get("date"))),
                 ("Study H result file (seed 001's format)", result_path(model))]
    rows += [("run", f"{manifest.get('label')} ({manifest.get('kind')}), made {manifest.get('created_utc')}"),
             ("code", str(manifest.get("git_commit") or "not a git checkout"))]
    return rows


def _dates(date: Any) -> str:
    """Study H's ``date`` block (``anchoring.results.response_dates``) in words."""
    if not isinstance(date, Mapping) or not date.get("first_response"):
        return "not recorded"
    first, last = date["first_response"], date.get("last_response") or date["first_response"]
    return first if first == last else f"{first} to {last}"


# ----------------------------------------------------------------------------- writing


def _fmt(v: float | None, digits: int = 3) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:+.{digits}f}"


def _interval(c: Cell | None) -> str:
    if c is None or not c.has_interval:
        return "n/a"
    return f"[{_fmt(c.lower)}, {_fmt(c.upper)}]"


def _md_row(cells: Sequence[Any]) -> str:
    """One Markdown table row; a ``|`` inside a cell (``|BS(no)|``) is escaped."""
    return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"


def _seed_text(s: SeedValue) -> str:
    tail = f" [{_fmt(s.lower)}, {_fmt(s.upper)}]" if s.lower is not None and s.upper is not None else ""
    return f"{s.model} {_fmt(s.value)}{tail}"


def design_lines(numbers: Sequence[Number]) -> list[str]:
    """What this design can and cannot distinguish, per study: the half-widths of its
    intervals and the resolvable difference from a seed model."""
    lines = []
    for study in dict.fromkeys(n.headline.study for n in numbers):
        ns = [n for n in numbers if n.headline.study == study and n.half_width is not None]
        if not ns:
            lines.append(f"- {STUDY_TITLES[study]}: no interval was produced, so this run tells nothing apart.")
            continue
        hw = sorted(n.half_width for n in ns)
        told = sum(bool(n.verdicts()[0]) for n in ns)
        seeds = sum(bool(n.seeds) for n in ns)
        line = (f"- {STUDY_TITLES[study]}: 95% half-widths {hw[0]:.3f} to {hw[-1]:.3f}. A model measured the same "
                f"way differs from this one only by more than about {resolvable(hw[0], hw[0]):.3f} to "
                f"{resolvable(hw[-1], hw[-1]):.3f}")
        if seeds:
            line += (f"; {told} of the {seeds} numbers with seed values beside them tell at least one seed model "
                     "apart from this one.")
        else:
            line += "."
        lines.append(line)
    return lines


def markdown(config: Config, model: str, numbers: Sequence[Number], ident: Sequence[tuple[str, str]],
             notes: Sequence[str]) -> str:
    from context_effects.measurement.pipeline import display_name

    name = display_name(config, model)
    out = [f"# Context-effects card: {name}", ""]
    out += [f"> {n}" for n in notes] + ([""] if notes else [])
    out += ["How far this model's writing and judgments move with the context the three studies vary, each "
            "number with its 95% interval, beside the seed papers' own models on the same quantity. A seed "
            "model is *told apart* when the two differ by more than the two intervals' combined half-width "
            "(sqrt(h1^2 + h2^2)); *not distinguishable* says only that this design is too small or the two "
            "are close, never that they are equal.", ""]
    out += ["## Identity", "", "| | |", "|---|---|"] + [_md_row([k, v]) for k, v in ident] + [""]
    out += ["## What this design can tell apart", ""] + design_lines(numbers) + [""]
    for study in dict.fromkeys(n.headline.study for n in numbers):
        ns = [n for n in numbers if n.headline.study == study]
        out += [f"## {STUDY_TITLES[study]}", "", f"![{STUDY_TITLES[study]}]({model}_{study}.png)", ""]
        if study in NO_SEED_VALUES:
            out += [NO_SEED_VALUES[study], ""]
        out += ["| quantity | role | this model | 95% interval | seed models | told apart from | "
                "not distinguishable from |", "|---|---|---:|---|---|---|---|"]
        for n in ns:
            differs, same = n.verdicts()
            value = _fmt(n.cell.value) if n.cell is not None else n.status
            if n.cell is not None and n.status.startswith("fit diagnostics"):
                value += " (fit diagnostics FAILED: not reliable)"
            seeds = "; ".join(_seed_text(s) for s in n.seeds) or "none printed"
            out.append(_md_row([n.headline.label, n.headline.role, value, _interval(n.cell), seeds,
                                ", ".join(differs) or "-", ", ".join(same) or "-"]))
        readings = dict.fromkeys(n.headline.reading for n in ns if n.headline.reading)
        out += [""] + [f"- {r}." for r in readings] + [""]
        missing = [n for n in ns if n.cell is None]
        out += [f"- {n.headline.label}: {n.status}" for n in missing] + ([""] if missing else [])
    return "\n".join(out).rstrip() + "\n"


def comparison_markdown(table: pd.DataFrame, notes: Sequence[str]) -> str:
    out = ["# Context-effects cards side by side", ""] + [f"> {n}" for n in notes] + ([""] if notes else [])
    out += ["Each cell: the value and its 95% interval; *separated from* names the card models this run tells "
            "apart from it (a difference beyond sqrt(h1^2 + h2^2)).", ""]
    models = list(dict.fromkeys(table["model"]))
    out += ["| study | quantity | " + " | ".join(models) + " |", "|---|---|" + "---|" * len(models)]
    for (study, quantity), part in table.groupby(["study", "quantity"], sort=False):
        cells = []
        for m in models:
            r = part[part["model"] == m]
            if r.empty:
                cells.append("-")
                continue
            r = r.iloc[0]
            sep = f" (separated from {r['separated_from']})" if r["separated_from"] else ""
            cells.append(f"{_fmt(r['value'])} [{_fmt(r['lower'])}, {_fmt(r['upper'])}]{sep}")
        out.append(_md_row([study, part["label"].iloc[0], *cells]))
    return "\n".join(out) + "\n"


_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "|": r"\textbar{}",
                "<": r"\textless{}", ">": r"\textgreater{}"}


def tex(text: Any) -> str:
    """Plain text for LaTeX: specials escaped; a character pdflatex cannot set with the
    page's fonts (outside Latin-1) becomes ``?``, so a model's name never stops the build."""
    out = []
    for ch in str(text):
        if ch in _TEX_SPECIAL:
            out.append(_TEX_SPECIAL[ch])
        elif ord(ch) > 255:
            out.append("?")
        else:
            out.append(ch)
    return "".join(out)


def latex(config: Config, model: str, numbers: Sequence[Number], ident: Sequence[tuple[str, str]],
          notes: Sequence[str]) -> str:
    """The card as one LaTeX page: identity, what the design resolves, each study's numbers
    beside the seed's range and its figure (compiled by rule card_pdf, as the paper is)."""
    from context_effects.measurement.pipeline import display_name

    lines = [r"\documentclass[10pt]{article}", r"\usepackage[margin=0.5in]{geometry}",
             r"\usepackage[utf8]{inputenc}", r"\usepackage{graphicx,booktabs,xcolor,tabularx}", r"\pagestyle{empty}",
             r"\setlength{\parindent}{0pt}", r"\begin{document}",
             rf"{{\Large\bfseries Context-effects card: {tex(display_name(config, model))}}}\par\smallskip"]
    for n in notes:
        lines.append(rf"\fcolorbox{{red!60!black}}{{red!4}}{{\parbox{{\dimexpr\linewidth-2\fboxsep\relax}}"
                     rf"{{\small\bfseries {tex(n)}}}}}\par\smallskip")
    lines += [r"{\scriptsize\begin{tabularx}{\linewidth}{@{}lX@{}}\toprule"]
    lines += [rf"{tex(k)} & {tex(v)}\\" for k, v in ident]
    lines += [r"\bottomrule\end{tabularx}}\par\smallskip", r"{\scriptsize\textbf{What this design can tell apart.}"]
    lines += [tex(line.removeprefix("- ")) + r"\par" for line in design_lines(numbers)]
    lines.append(r"}\smallskip")
    for study in dict.fromkeys(n.headline.study for n in numbers):
        ns = [n for n in numbers if n.headline.study == study]
        lines += [rf"\textbf{{{tex(STUDY_TITLES[study])}}}\par",
                  r"{\scriptsize\begin{tabularx}{\linewidth}{@{}Xlrlll@{}}\toprule",
                  r"quantity & role & this model & 95\% interval & seed models (range) & told apart from\\\midrule"]
        for n in ns:
            differs, _ = n.verdicts()
            value = _fmt(n.cell.value) if n.cell is not None else "n/a"
            if n.cell is not None and n.status.startswith("fit diagnostics"):
                value += " (unreliable)"
            seeds = (f"{len(n.seeds)}: {_fmt(min(s.value for s in n.seeds))} to {_fmt(max(s.value for s in n.seeds))}"
                     if n.seeds else "none printed")
            told = f"{len(differs)} of {len(n.seeds)}" if n.seeds and n.half_width is not None else "-"
            lines.append(" & ".join(tex(c) for c in (n.headline.label, n.headline.role, value, _interval(n.cell),
                                                     seeds, told)) + r"\\")
        lines += [r"\bottomrule\end{tabularx}}\par\smallskip"]
    # The figures in one row under the tables, as tall as the page has room for (at most 0.3
    # of it): one page whatever the number of datasets (the paper's three give Study C 13
    # rows). \pagegoal - \pagetotal is what is left of the page once the tables are on it.
    studies = list(dict.fromkeys(n.headline.study for n in numbers))
    width = 0.99 / max(1, len(studies))
    lines += [r"\newlength\cardfigheight",
              r"\setlength\cardfigheight{\dimexpr\pagegoal-\pagetotal-2\baselineskip\relax}",
              r"\ifdim\cardfigheight>0.3\textheight\setlength\cardfigheight{0.3\textheight}\fi",
              r"\ifdim\cardfigheight<0.1\textheight\setlength\cardfigheight{0.1\textheight}\fi",
              r"\vfill\noindent"] + [
        rf"\includegraphics[width={width:.3f}\linewidth,height=\cardfigheight,keepaspectratio]{{{model}_{s}.png}}"
        for s in studies]
    lines.append(r"\end{document}")
    return "\n".join(lines) + "\n"


def build_pdf(tex_path: str | Path, pdf_path: str | Path, log=print) -> Path:
    """Compile a card's page with latexmk in its own folder (its figures lie beside it)."""
    import shutil

    from context_effects.paper.build import run_latexmk

    tex_path = Path(tex_path).resolve()
    folder = tex_path.parent
    pdf = run_latexmk(tex_path, folder, folder, folder / "build" / tex_path.stem, log)
    shutil.copyfile(pdf, pdf_path)
    return Path(pdf_path)


def draw(config: Config, model: str, study: str, numbers: Sequence[Number], notes: Sequence[str], path: str | Path):
    """The study's figure: one panel per headline number, the seed's models in grey and this
    model highlighted, each with its 95% interval where there is one."""
    from context_effects import style
    from context_effects.figures import add_note, save_figure
    from context_effects.measurement.pipeline import display_name

    ns = [n for n in numbers if n.headline.study == study]
    ncols = 2 if len(ns) > 1 else 1
    nrows = math.ceil(len(ns) / ncols)
    height = max(1.0, 0.28 * max(len(n.seeds) + 1 for n in ns) + 0.6)
    fig, axes = style.figure(width=style.FULL_WIDTH, height=height * nrows, nrows=nrows, ncols=ncols,
                             squeeze=False)
    color = style.palette(2)[1]
    name = display_name(config, model)
    for ax, n in zip(axes.flat, ns):
        labels, y = [], 0
        for s in n.seeds:
            err = None if s.lower is None else [[s.value - s.lower], [s.upper - s.value]]
            ax.errorbar([s.value], [y], xerr=err, fmt="o", color=style.NEUTRAL, ms=3, lw=0.8)
            labels.append(s.model)
            y += 1
        if n.cell is not None:
            c = n.cell
            err = [[c.value - c.lower], [c.upper - c.value]] if c.has_interval else None
            ax.errorbar([c.value], [y], xerr=err, fmt="D", color=color, ms=4, lw=1.4)
        labels.append(f"{name} (this card)")
        ax.set_yticks(range(len(labels)), labels)
        ax.get_yticklabels()[-1].set_fontweight("bold")
        ax.set_ylim(-0.6, len(labels) - 0.4)
        ax.axvline(1.0 if n.headline.quantity == "asymmetry" else 0.0, **style.REFERENCE_LINE)
        ax.set_title(n.headline.label, fontsize=style.TITLE_PT)
    for ax in list(axes.flat)[len(ns):]:
        ax.set_visible(False)
    style.despine(fig)
    fig.tight_layout()
    extra = [NO_SEED_VALUES[study]] if study in NO_SEED_VALUES else []
    add_note(fig, [*extra, *notes])
    save_figure(fig, path)


def write_cards(config: Config, published_files: Sequence[str | Path], out_dir: str | Path = CARD_DIR,
                results: str | Path = "results") -> None:
    """Every card model's card, table and figures, and the comparison (``outputs``' files)."""
    from context_effects.anchoring.dag import result_path
    from context_effects.paper.reproduction import read_published
    from context_effects.tables import run_notes

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    manifest = json.loads(Path(results, "run", "manifest.json").read_text())
    notes = run_notes(config["run"]["kind"])
    published = read_published(published_files)
    frames: dict = {}
    numbers = {m: read_numbers(config, m, published, results, frames) for m in card_models(config)}
    for m, ns in numbers.items():
        anchoring = None
        if any(n.headline.study == "anchoring" for n in ns):
            anchoring = json.loads(Path(result_path(m)).read_text())
        ident = identity(config, m, manifest, anchoring)
        (out / f"{m}.md").write_text(markdown(config, m, ns, ident, notes))
        (out / f"{m}.tex").write_text(latex(config, m, ns, ident, notes))
        number_rows(ns).to_csv(out / f"{m}.csv", index=False)
        for study in dict.fromkeys(n.headline.study for n in ns):
            draw(config, m, study, ns, notes, out / f"{m}_{study}.png")
    table = comparison(numbers)
    table.to_csv(out / "comparison.csv", index=False)
    (out / "comparison.md").write_text(comparison_markdown(table, notes))
