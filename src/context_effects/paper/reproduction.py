"""The reproduction report: every number the seed papers print beside what this run got.

``paper/published/<study>/*.csv`` holds the transcribed numbers (their columns are
described in ``paper/published/README.md``); each names the registry table, row and
column that reproduce it. A row's status:

* ``agrees`` — the published value lies inside the reproduced 95% interval; where the
  table prints no interval, the reproduced value lies inside the published range (an
  interval, or a bound such as p < 1e-46 transcribed as [0, 1e-46]) or, without one,
  equals the published value at the printed precision;
* ``differs`` — otherwise;
* ``not produced`` — no table of this project reproduces it, the run did not write that
  table or row, or the cell holds no estimate (its text says why);
* ``not comparable`` — the run is a demo or synthetic run (tiny or simulated models), or
  the row names a model this run did not use. The reproduced value is still shown.

A rehearsal run (``run.kind: rehearsal``: the paper's design on synthetic models planted
with the published estimates, ``context_effects.rehearsal``) gives each row a rehearsal
status instead:

* ``recovered`` — a planted, model-based number lies inside the run's 95% interval;
* ``missed`` — it does not; ``distance`` says by how much, in half-widths of the interval;
* ``not planted`` — a number a synthetic world cannot carry (text metrics, classifier
  scores, costs, sampler diagnostics, design settings) or a model-free number, which the
  planted model predicts (the posterior-predictive section sets those beside the paper);
* ``not produced`` — as above.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects.paper.lookup import (
    Cell,
    MissingNumber,
    lookup,
    manifest_node,
    parse_row,
    select_row,
    table_path,
)

COLUMNS = ["id", "section", "quantity", "value", "lower", "upper", "decimals", "table", "row", "column",
           "scale", "note"]
STATUSES = ("agrees", "differs", "not produced", "not comparable")
#: Columns of the results tables that name a model: a selector value absent there means
#: this run used other models, not that the analysis is missing.
MODEL_COLUMNS = ("Model", "Generator", "Judge", "model", "generator", "judge")
KIND_REASONS = {
    "demo": "demo run: tiny local models on a few items",
    "synthetic": "synthetic run: simulated models with planted effects",
    "rehearsal": "rehearsal: the paper's design on simulated models planted with the published estimates",
}


def read_published(files: Iterable[str | Path]) -> pd.DataFrame:
    """All transcribed numbers, one row each, with ``study`` from the folder name.
    A file whose columns are not the documented ones is an error naming the file."""
    frames = []
    for f in sorted(Path(p) for p in files):
        df = pd.read_csv(f, dtype=str, keep_default_na=False)
        if list(df.columns) != COLUMNS:
            raise ValueError(f"{f}: columns {list(df.columns)}; expected {COLUMNS} (paper/published/README.md)")
        df.insert(0, "study", f.parent.name)
        df.insert(1, "file", f.name)
        frames.append(df)
    if not frames:
        return pd.DataFrame(columns=["study", "file", *COLUMNS])
    out = pd.concat(frames, ignore_index=True)
    dup = out[out.duplicated(["study", "id"], keep=False)]
    if not dup.empty:
        raise ValueError(f"duplicate published ids: {sorted(set(dup['study'] + '/' + dup['id']))}")
    return out


#: A published bound over fits, e.g. seed 002 App. C.2 "across all fits R-hat <= 1.007,
#: minimum bulk ESS is 715": its ``column`` reads ``max(R-hat)`` or ``min(ESS bulk)`` and its
#: ``row`` is empty. The run's value is the same bound over the same fits: the rows of that
#: table which the study's other published rows of it select (for Table 9, the seed's own
#: fits), never one fit's value; a fit missing from the run leaves the bound not produced.
_BOUND = re.compile(r"^\s*(max|min)\((.+)\)\s*$")
#: Where ``compare`` keeps the published rows for the bounds (in its table cache).
_PUBLISHED = "published rows"


def _bound(p: Mapping[str, Any], how: str, column: str, results: Path, frames: dict) -> Cell:
    published = frames.get(_PUBLISHED)
    if published is None:
        raise MissingNumber(f"{p['table']}: {p['column']} needs the published rows naming its fits")
    same = published[(published["table"] == p["table"]) & published["row"].str.strip().ne("")
                     & ~published["column"].map(lambda c: bool(_BOUND.match(c)))]
    if "study" in p and "study" in same.columns:
        same = same[same["study"] == p["study"]]
    selectors = list(dict.fromkeys(same["row"]))
    if not selectors:
        raise MissingNumber(f"{p['table']}: no published row of it names a fit for {p['column']}")
    values = []
    for selector in selectors:
        cell = lookup(p["table"], selector, column, results=results, frames=frames)
        if cell is None:
            raise MissingNumber(f"{table_path(p['table'], results)}: the fit [{selector}] holds no {column}")
        values.append(cell.value)
    value = max(values) if how == "max" else min(values)
    return Cell(value, text=f"{how} of {column} over {len(values)} fits")


def _reproduced(p: Mapping[str, Any], results: Path, frames: dict) -> Cell | None:
    """The run's cell for a published row: ``lookup``, or a bound over fits (``_BOUND``)."""
    bound = _BOUND.match(p["column"])
    if bound:
        return _bound(p, bound.group(1), bound.group(2).strip(), results, frames)
    return lookup(p["table"], p["row"] or None, p["column"], results=results, frames=frames)


def printed_number(text: str) -> float | None:
    """A transcribed number of paper/published (a sign kept, thousands separators dropped); None when empty."""
    text = (text or "").strip().replace("−", "-").replace(",", "")
    return float(text) if text else None


def _table(table: str, results: Path, frames: dict) -> pd.DataFrame:
    """A results table read once per report (``frames`` caches it, as ``lookup`` does)."""
    path = table_path(table, results)
    if path not in frames:
        frames[path] = pd.read_csv(path, dtype=str, keep_default_na=False)
    return frames[path]


def _model_absent(published: Mapping[str, Any], results: Path, frames: dict) -> str | None:
    """The model a row's selector names that the run's table does not have, if any."""
    try:
        df = _table(published["table"], results, frames)
    except (FileNotFoundError, ValueError):
        return None
    selector = parse_row(published["row"])
    for col, value in selector.items():
        # AMEL's tables name the model in `group` on their per-model rows (scope=model)
        names_model = col in MODEL_COLUMNS or (col == "group" and selector.get("scope") == "model")
        if names_model and col in df.columns and value not in set(df[col].str.strip()):
            return value
    return None


def agrees(published: float, decimals: int, value: float, lower: float | None, upper: float | None,
           published_lower: float | None = None, published_upper: float | None = None) -> tuple[bool, str]:
    """Whether the numbers agree, and by which rule (see the module docstring)."""
    if lower is not None and upper is not None:
        return min(lower, upper) <= published <= max(lower, upper), "the reproduced 95% interval"
    if published_lower is not None and published_upper is not None:
        lo, hi = sorted((published_lower, published_upper))
        return lo <= value <= hi, "the published interval"
    half_unit = 0.5 * 10 ** (-decimals)
    return abs(value - published) <= half_unit * (1 + 1e-9), f"equality at {decimals} decimals"


def compare_row(p: Mapping[str, Any], results: Path, run_kind: str, frames: dict) -> dict[str, Any]:
    published = printed_number(p["value"])
    decimals = int(p["decimals"]) if str(p["decimals"]).strip() else 3
    scale = printed_number(p["scale"]) or 1.0
    out: dict[str, Any] = {
        "study": p["study"], "id": p["id"], "section": p["section"], "quantity": p["quantity"],
        "published": published, "published_lower": printed_number(p["lower"]), "published_upper": printed_number(p["upper"]),
        "decimals": decimals, "reproduced": math.nan, "reproduced_lower": math.nan, "reproduced_upper": math.nan,
        "difference": math.nan, "status": "", "reason": "",
        "source": f"{p['table']} [{p['row']}] {p['column']}".strip() if p["table"] else "",
    }
    comparable = run_kind == "paper"
    if run_kind == "rehearsal":
        return _rehearse_row(p, out, results, frames)
    if p["table"] == "manifest":  # a design setting: compare with the run's resolved config
        return _compare_setting(p, out, results, run_kind, frames)
    if not p["table"]:
        return {**out, "status": "not produced", "reason": p["note"] or "no table of this project reproduces it"}
    try:
        cell = _reproduced(p, results, frames)
    except MissingNumber as err:
        absent = _model_absent(p, results, frames)
        if not comparable:
            return {**out, "status": "not comparable", "reason": f"{KIND_REASONS.get(run_kind, run_kind)}; {err}"}
        if absent is not None:
            return {**out, "status": "not comparable", "reason": f"this run has no model {absent!r}"}
        return {**out, "status": "not produced", "reason": str(err)}
    if cell is None:
        return {**out, "status": "not produced" if comparable else "not comparable",
                "reason": "the cell holds no estimate" + ("" if comparable else f"; {KIND_REASONS.get(run_kind)}")}
    value, lower, upper = _fill_reproduced(out, cell, scale)
    if published is None:
        return {**out, "status": "not produced", "reason": "no published value transcribed"}
    if not comparable:
        return {**out, "status": "not comparable", "reason": KIND_REASONS.get(run_kind, f"{run_kind} run")}
    ok, rule = agrees(published, decimals, value, lower, upper, out["published_lower"], out["published_upper"])
    return {**out, "status": "agrees" if ok else "differs", "reason": f"{'meets' if ok else 'fails'} {rule}"}


def _fill_reproduced(out: dict[str, Any], cell: Any, scale: float) -> tuple[float, float | None, float | None]:
    """Put a looked-up cell, at the published number's scale, into ``out`` (value, interval,
    difference from the published value); return the value and the interval's ends."""
    value = cell.value * scale
    lower = cell.lower * scale if cell.lower is not None else None
    upper = cell.upper * scale if cell.upper is not None else None
    published = out["published"]
    out.update(reproduced=value, reproduced_lower=lower if lower is not None else math.nan,
               reproduced_upper=upper if upper is not None else math.nan,
               difference=value - published if published is not None else math.nan)
    return value, lower, upper


def _rehearse_row(p: Mapping[str, Any], out: dict[str, Any], results: Path, frames: dict) -> dict[str, Any]:
    """A row's rehearsal status (module docstring)."""
    from context_effects.rehearsal import row_role

    role, why = row_role(p)
    out["role"] = role
    if role == "not produced":
        return {**out, "status": "not produced", "reason": p["note"] or why}
    if role == "setting":
        return {**out, "status": "not planted", "reason": why}
    try:
        cell = _reproduced(p, results, frames)
    except MissingNumber as err:
        return {**out, "status": "not produced", "reason": str(err)}
    if cell is None:
        return {**out, "status": "not produced", "reason": "the cell holds no estimate"}
    published = out["published"]
    _, lower, upper = _fill_reproduced(out, cell, printed_number(p["scale"]) or 1.0)
    if published is None:
        return {**out, "status": "not produced", "reason": "no published value transcribed"}
    if role != "planted":
        return {**out, "status": "not planted", "reason": why}
    if lower is None or upper is None:
        return {**out, "status": "not produced", "reason": "the run's cell has no 95% interval to check against"}
    lo, hi = sorted((lower, upper))
    if lo <= published <= hi:
        return {**out, "status": "recovered", "reason": "inside the run's 95% interval"}
    half = (hi - lo) / 2 or math.inf
    out["distance"] = (lo - published if published < lo else published - hi) / half
    return {**out, "status": "missed",
            "reason": f"outside the run's 95% interval by {_fmt(min(abs(published - lo), abs(published - hi)), 3)} "
                      f"({out['distance']:.2f} half-widths)"}


def manifest_value(manifest: Mapping[str, Any], path: str) -> float:
    """A number from the run manifest: a dotted path (``config.amel.position_biased_turns``;
    an integer part indexes a list) or, with a trailing ``#``, the length of the list or
    mapping there (``config.amel.models#`` = how many models)."""
    count = path.endswith("#")
    try:
        node = manifest_node(manifest, path.rstrip("#"))
    except KeyError as err:
        raise MissingNumber(f"the run {err.args[0]}") from None
    value = len(node) if count else node
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MissingNumber(f"the run manifest's {path!r} is {value!r}, not a number")
    return float(value)


def _compare_setting(p: Mapping[str, Any], out: dict[str, Any], results: Path, run_kind: str,
                     frames: dict) -> dict[str, Any]:
    if "manifest" not in frames:  # read once per report, not once per setting
        frames["manifest"] = json.loads((results / "run" / "manifest.json").read_text())
    manifest = frames["manifest"]
    try:
        value = manifest_value(manifest, p["column"])
    except MissingNumber as err:
        return {**out, "status": "not produced", "reason": str(err)}
    published = out["published"]
    out.update(reproduced=value, difference=value - published, source=f"manifest {p['column']}")
    if run_kind != "paper":
        return {**out, "status": "not comparable", "reason": KIND_REASONS.get(run_kind, f"{run_kind} run")}
    ok = value == published
    return {**out, "status": "agrees" if ok else "differs", "reason": "a design setting of the run's config"}


#: Table 3's cells beside their refit with per-generator baseline means: a cell whose sign
#: or exclusion of zero changes there is flagged (the paper's model has a blind spot when
#: generators differ in mean quality; docs/deviations.yaml#generator-mean-baseline).
SENSITIVITY = {"conformity/table3": ("conformity/table3_generator_mean", "Fit=main corpus",
                                     "Sign or interval changes")}


def sensitivity_flag(p: Mapping[str, Any], results: Path, frames: dict) -> str:
    """``"yes"``/``"no"`` when the published number's cell has a sensitivity refit, else ``""``."""
    if p["table"] not in SENSITIVITY:
        return ""
    table, fit, column = SENSITIVITY[p["table"]]
    row = "; ".join(part for part in (p["row"], fit, f"Quantity={p['column']}") if part)
    try:
        found = select_row(_table(table, results, frames), row, str(table_path(table, results)))
        return str(found[column]).strip()
    except (FileNotFoundError, MissingNumber, KeyError):
        return ""


def compare(published: pd.DataFrame, results: str | Path, run_kind: str) -> pd.DataFrame:
    """One row per published number with its reproduced value, difference and status
    (and, for Table 3's cells, whether the generator-mean refit changes sign or interval)."""
    frames: dict = {_PUBLISHED: published}
    rows = [compare_row(p, Path(results), run_kind, frames) | {"generator_mean_changes": sensitivity_flag(
        p, Path(results), frames)} for p in published.to_dict("records")]
    return pd.DataFrame(rows, columns=None if rows else ["study", "id", "status"])


def _fmt(x: float | None, decimals: int) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    if x != 0 and (abs(x) < 1e-4 or abs(x) >= 1e7):  # p-values like 3.7e-17 in three characters, not forty
        return f"{x:.2e}"
    return f"{x:+.{min(decimals, 6)}f}" if x < 0 else f"{x:.{min(decimals, 6)}f}"


def _with_interval(r: Mapping[str, Any], key: str) -> str:
    d = int(r["decimals"])
    text = _fmt(r[key], d)
    lo, hi = r[f"{key}_lower"], r[f"{key}_upper"]
    if text and lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi)):
        text += f" [{_fmt(lo, d)}, {_fmt(hi, d)}]"
    return text


def summary(report: pd.DataFrame, statuses: tuple[str, ...] = STATUSES) -> pd.DataFrame:
    """Counts of each status per study."""
    counts = report.groupby(["study", "status"]).size().unstack(fill_value=0)
    return counts.reindex(columns=list(statuses), fill_value=0).reset_index()


def to_markdown(report: pd.DataFrame, run_kind: str) -> str:
    if run_kind == "rehearsal":
        from context_effects.rehearsal import report_markdown

        return report_markdown(report)
    lines = ["# Reproduction report", ""]
    if run_kind != "paper":
        lines += [f"> {KIND_REASONS.get(run_kind, run_kind).capitalize()}: every row is `not comparable`; the "
                  "reproduced values show that each published number has a place in this run's tables.", ""]
    lines += ["Every number the seed papers print (`paper/published/`) beside this run's value. `agrees`: "
              "the published value is inside the reproduced 95% interval; where the table prints none, the "
              "reproduced value is inside the published interval or, without one, equal at the printed precision.", "", "| study | " + " | ".join(STATUSES) + " |",
              "|---|" + "---|" * len(STATUSES)]
    for r in summary(report).to_dict("records"):
        lines.append(f"| {r['study']} | " + " | ".join(str(r[s]) for s in STATUSES) + " |")
    for study, block in report.groupby("study", sort=False):
        lines += ["", f"## {study}", "", "| section | quantity | published | reproduced | difference | status | why |",
                  "|---|---|---|---|---|---|---|"]
        for r in block.to_dict("records"):
            why = r["reason"] + ("; the generator-mean refit changes its sign or interval"
                                 if r.get("generator_mean_changes") == "yes" else "")
            cells = [r["section"], r["quantity"], _with_interval(r, "published"), _with_interval(r, "reproduced"),
                     _fmt(r["difference"], int(r["decimals"])), r["status"], why]
            lines.append("| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def to_latex(report: pd.DataFrame, run_kind: str) -> str:
    """A longtable for the paper's appendix (compact: section, quantity, both values, status)."""
    from context_effects.tables import latex_escape

    head = (r"Section & Quantity & Published & Reproduced & Status \\")
    lines = [r"{\scriptsize", r"\begin{longtable}{p{0.17\textwidth}p{0.33\textwidth}p{0.14\textwidth}"
             r"p{0.17\textwidth}p{0.09\textwidth}}",
             r"\caption{Every number the seed papers print beside this run's value. "
             + latex_escape(KIND_REASONS.get(run_kind, "").capitalize() + ("." if run_kind != "paper" else ""))
             + r"}\label{tab:reproduction}\\", r"\toprule", head, r"\midrule", r"\endfirsthead", r"\toprule", head,
             r"\midrule", r"\endhead", r"\bottomrule", r"\endfoot"]
    for r in report.to_dict("records"):
        cells = [r["section"], r["quantity"], _with_interval(r, "published"), _with_interval(r, "reproduced"),
                 r["status"]]
        lines.append(" & ".join(latex_escape(c).replace("-", "-{}") for c in cells) + r" \\")
    lines += [r"\end{longtable}", "}"]
    return "\n".join(lines) + "\n"


_GROUP = re.compile(r"\bgroup=([^;\]]+)")


def name_stand_ins(report: pd.DataFrame, models: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """Say, on each row of a per-model number, which model ran and which seed model it stands
    in for (``models.<name>.stands_in_for``): a retired model's number is compared with its
    stand-in's, and the report must not read as if the seed's own model had run."""
    report = report.copy()
    notes = []
    for source, reason in zip(report.get("source", pd.Series([""] * len(report))), report["reason"]):
        m = _GROUP.search(str(source or ""))
        model = models.get(m.group(1).strip()) if m else None
        seed = (model or {}).get("stands_in_for")
        stand_in = f"ran {model['model_id']}, standing in for {seed}" if seed else ""
        notes.append("; ".join(x for x in (stand_in, str(reason or "")) if x))
    report["reason"] = notes
    return report


def write_report(published_files: Iterable[str | Path], manifest: str | Path, results: str | Path,
                 csv_path: str | Path, md_path: str | Path, tex_path: str | Path) -> pd.DataFrame:
    config = json.loads(Path(manifest).read_text())["config"]
    run_kind = config["run"]["kind"]
    report = name_stand_ins(compare(read_published(published_files), results, run_kind), config.get("models", {}))
    for p in (csv_path, md_path, tex_path):
        Path(p).parent.mkdir(parents=True, exist_ok=True)
    report.to_csv(csv_path, index=False)
    Path(md_path).write_text(to_markdown(report, run_kind))
    Path(tex_path).write_text(to_latex(report, run_kind))
    return report
