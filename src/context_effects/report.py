"""The run report: one Markdown file a reader opens first after a run.

It puts what can invalidate a number before the numbers: the run's caveat (demo,
synthetic), judge parse-failure rates, Study C answers flagged as addressing the
judge (possible prompt injection, per condition), and every fit whose sampler
diagnostics failed; then every table the run produced (caption from its LaTeX twin, values
from its CSV) and the list of figures. It only reads files the DAG produced.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from context_effects.tables import run_notes

MAX_ROWS = 40
_CAPTION = re.compile(r"\\caption\{(.*)\}")
_NOTE = re.compile(r"\\par\\smallskip\{\\footnotesize (.*)\}")
_LATEX_UNESCAPE = [(r"\textbackslash{}", "\\"), (r"\textbar{}", "|"), (r"\textless{}", "<"),
                   (r"\textgreater{}", ">"), (r"\textasciitilde{}", "~"), (r"\textasciicircum{}", "^")]


def _plain(text: str) -> str:
    for a, b in _LATEX_UNESCAPE:
        text = text.replace(a, b)
    return re.sub(r"\\([&%$#_{}])", r"\1", text)


def _tex(csv_path: Path) -> str:
    tex = csv_path.with_suffix(".tex")
    return tex.read_text() if tex.exists() else ""


def _caption(csv_path: Path) -> str:
    m = _CAPTION.search(_tex(csv_path))
    return _plain(m.group(1)) if m else ""


def _notes(csv_path: Path) -> list[str]:
    """The table's notes (caveats, failed-diagnostics reasons) from its LaTeX twin."""
    return [_plain(n) for n in _NOTE.findall(_tex(csv_path))]


def _markdown(df: pd.DataFrame) -> str:
    shown = df.head(MAX_ROWS).astype(object)
    shown = shown.where(shown.notna(), "")
    body = shown.to_markdown(index=False, floatfmt=".3f")
    if len(df) > MAX_ROWS:
        body += f"\n\n({len(df) - MAX_ROWS} more rows in the CSV)"
    return body


def failed_diagnostics(tables: dict[Path, pd.DataFrame]) -> pd.DataFrame:
    """Fits that failed their sampler diagnostics, from the diagnostics table(s).

    A diagnostics table has an ``R-hat`` column and a ``Diagnostics`` status
    (``FAILED``) or a boolean ``diagnostics_ok``; the result tables that merely
    repeat the status are not listed twice.
    """
    rows = []
    for path, df in tables.items():
        if "diagnostics_ok" in df.columns:
            bad = df[~df["diagnostics_ok"].astype(bool)].drop(columns="diagnostics_ok")
        elif "R-hat" in df.columns and "Diagnostics" in df.columns:
            bad = df[df["Diagnostics"].astype(str).str.startswith("FAILED")]
        else:
            continue
        rows += [{"table": path.name, **rec} for rec in bad.to_dict("records")]
    return pd.DataFrame(rows)


def injection_section(injection_paths: Sequence[str | Path]) -> list[str]:
    """Study C answers flagged as addressing the judge, counted per corpus x condition.

    The flags come from ``results/conformity/injection/<dataset>.parquet``
    (``context_effects.conformity.injection``); a flagged answer is rated like any
    other, and ``table2_injection_excluded`` shows Table 2 without them.
    """
    lines = ["## Answers addressed to the judge (possible prompt injection)", ""]
    if not injection_paths:
        return lines + ["No Study C answers were checked (Study C did not run).", ""]
    from context_effects.conformity.injection import condition_counts

    flags = pd.concat([pd.read_parquet(p) for p in injection_paths], ignore_index=True)
    n, k = len(flags), int(flags["flagged"].sum())
    lines += [f"{k} of {n} answers ({100 * k / max(1, n):.2f}%) contain an instruction addressed to the judge "
              "(rule set: docs/deviations.yaml#answer-injection-flags). They are rated as written; "
              "`table2_injection_excluded` recomputes Table 2 without them.", ""]
    per_dataset = flags.groupby("dataset", sort=False)["flagged"].agg(["sum", "size"])
    lines += ["By dataset: " + "; ".join(f"{d} {int(r['sum'])} of {int(r['size'])}" for d, r in per_dataset.iterrows())
              + ".", ""]
    counts = condition_counts(flags.assign(dataset="all"))
    lines += [_markdown(counts.drop(columns="dataset")), ""]
    if k:
        rules = flags.loc[flags["flagged"], "pattern"].str.split(", ").explode().value_counts()
        lines += ["Matched rules: " + ", ".join(f"{r} ({int(c)})" for r, c in rules.items()) + ".", ""]
    return lines


def reproduction_section(path: str | Path | None) -> list[str]:
    """How this run's numbers compare with the seed papers', by status (the rows are in
    ``results/report/reproduction.md``)."""
    from context_effects.paper.reproduction import summary

    lines = ["## Against the published numbers", ""]
    if path is None:
        return lines + ["No reproduction report was requested.", ""]
    report = pd.read_csv(path)
    if report.empty:
        return lines + ["No published numbers are transcribed.", ""]
    lines += [f"`results/report/reproduction.md` sets each of the {len(report)} numbers the seed papers print "
              "beside this run's value:", "", _markdown(summary(report)), ""]
    return lines


def recovery_section(path: str | Path | None) -> list[str]:
    """Synthetic runs: how many planted values the run's estimates cover, per study (the rows are
    in ``results/synthetic/recovery.md``, written by ``context_effects.recovery``). Nothing for
    a run without synthetic models."""
    if path is None:
        return []
    from context_effects.recovery import RECOVERY_MD, coverage_lines

    table = pd.read_csv(path, keep_default_na=False, na_values=[""])
    lines = ["## Planted values recovered", "",
             f"Every value the synthetic models plant (`results/synthetic/planted.json`) beside this run's "
             f"estimate and its 95% interval, row by row in `{RECOVERY_MD}`:", ""]
    return lines + (coverage_lines(table) or ["No planted value has an estimate in this run."]) + [""]


def cost_section(ledger_paths: Sequence[str | Path]) -> list[str]:
    """Calls, tokens and cost of the run per study, stage and model, from the shard ledgers."""
    from context_effects.llm.ledger import Ledger

    lines = ["## Calls, tokens and cost per model and stage", ""]
    rows: dict[tuple[str, str, str], list[Ledger]] = {}
    for path in ledger_paths:
        p = Path(path)
        model, stage, study = p.parent.name, p.parent.parent.name, p.parent.parent.parent.name
        rows.setdefault((study, stage, model), []).append(Ledger.load(p))
    if not rows:
        return lines + ["No answering job wrote a ledger in this run.", ""]
    table = []
    for (study, stage, model), ledgers in sorted(rows.items()):
        total = Ledger.merge(ledgers)
        table.append(_cost_row(study, stage, model, len(ledgers), total))
    everything = Ledger.merge([led for group in rows.values() for led in group])
    table.append(_cost_row("**total**", "", "", len(ledger_paths), everything))
    lines += [_markdown(pd.DataFrame(table)), ""]
    lines += [
        "Calls are requests sent to a model (re-asks and the calls of every attempt at a shard "
        "included, interrupted or rerun); cache hits were served from the response store and "
        "cost nothing. A cost marked ≥ is a lower bound: some calls had no price (local models cost 0).",
        "",
    ]
    return lines


def _cost_row(study: str, stage: str, model: str, shards: int, led: Any) -> dict[str, Any]:
    cost = f"${led.cost_usd:.4f}"
    if led.cost_unknown_calls:
        cost = f"≥ {cost}"
    return {
        "study": study, "stage": stage, "model": model, "shards": shards, "calls": led.calls,
        "cache hits": led.cache_hits, "failures": led.failures, "tokens in": led.tokens_in,
        "tokens out": led.tokens_out, "cost": cost,
    }


def _item_meta(path: Path) -> dict[str, Any]:
    # Schema metadata only: the tables themselves are not needed for one line per dataset.
    raw = pq.read_schema(path).metadata or {}
    return {k.decode().removeprefix("context_effects."): json.loads(v)
            for k, v in raw.items() if k.decode().startswith("context_effects.")}


def peer_source_section(config: Mapping[str, Any], base: str | Path = ".",
                        item_paths: Sequence[str | Path] | None = None) -> list[str]:
    """Which datasets take items and peer blocks from the predecessor release, and which fall
    back to the seeded generator (read from the item tables' metadata, ``datasets.build_item_table``)."""
    conf = config.get("conformity", {})
    if not conf.get("enabled", True) or not conf.get("datasets"):
        return []
    if item_paths is None:
        # Every Study C stage depends on the item tables, so they exist when the report runs.
        item_paths = [Path(base) / "results/items" / f"{d}.parquet" for d in conf["datasets"]]
    lines = ["## Items and peer blocks", "",
             f"`conformity.peers.source`: {conf.get('peers', {}).get('source', 'generated')}.", "",
             "| dataset | items | peer blocks | why |", "|---|---|---|---|"]
    found = False
    for path in map(Path, item_paths):
        if not path.is_file():
            continue
        meta = _item_meta(path)
        sample = meta.get("sample") or {"source": "seeded"}
        peers = meta.get("peer_source") or {"used": "generated", "why": "not recorded (older item table)"}
        items = (f"release ({sample.get('n_items', '?')} items of `{sample.get('path')}`)"
                 if sample.get("source") == "release" else f"seeded sample ({meta.get('n_items')} items)")
        lines.append(f"| {meta.get('dataset') or path.stem} | {items} | {peers.get('used')} | {peers.get('why')} |")
        found = True
    if not found:
        return []
    return lines + [""]


def build_report(manifest_path: str | Path, table_paths: Sequence[str | Path], figure_paths: Sequence[str | Path],
                 base: str | Path = ".", injection_paths: Sequence[str | Path] = (),
                 reproduction_path: str | Path | None = None, ledger_path: str | Path | None = None,
                 recovery_path: str | Path | None = None,
                 ledger_paths: Sequence[str | Path] = ()) -> str:
    """The run report. ``ledger_paths``: the shard ledgers of the run's answering jobs
    (``targets.ledger_files``)."""
    manifest = json.loads(Path(manifest_path).read_text())
    run = manifest.get("config", {}).get("run", {})
    base = Path(base)
    lines = [f"# Run report: {run.get('label', '?')} ({run.get('kind', '?')})", ""]
    for note in run_notes(run.get("kind")) + list(manifest.get("notes", [])):
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

    lines += peer_source_section(manifest.get("config", {}), base)
    lines += injection_section(injection_paths)
    lines += reproduction_section(reproduction_path)
    lines += recovery_section(recovery_path)
    lines += cost_section(ledger_paths)
    if ledger_path is not None:
        from context_effects.paper.deviations import load_ledger, report_section

        lines += report_section(load_ledger(ledger_path))

    bad = failed_diagnostics(tables)
    lines += ["## Fits failing sampler diagnostics", ""]
    lines += [_markdown(bad) if len(bad) else "None: every fit met the configured thresholds (or no fit ran).", ""]
    for table in dict.fromkeys(bad["table"]) if len(bad) else ():
        path = next(p for p in tables if p.name == table)
        lines += [f"> {note}" for note in _notes(path) if "FAILED" in note or "threshold" in note] + [""]

    lines += ["## Tables", ""]
    for p, df in tables.items():
        if p in parse:
            continue
        rel = p.relative_to(base) if p.is_relative_to(base) else p
        lines += [f"### `{rel}`", "", _caption(p), "", _markdown(df), ""]
        lines += [f"*{note}*" for note in _notes(p) if note not in run_notes(run.get("kind"))] + [""]
    lines += ["## Figures", ""]
    lines += [f"- `{Path(f).relative_to(base) if Path(f).is_relative_to(base) else f}`" for f in figure_paths]
    return "\n".join(lines) + "\n"
