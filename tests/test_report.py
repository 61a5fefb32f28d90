"""The run report puts caveats, parse failures and failed fits before the tables."""

from __future__ import annotations

import json

import pandas as pd

from context_effects.report import build_report, failed_diagnostics
from context_effects.tables import write_table


def test_report_sections(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"config": {"run": {"label": "x", "kind": "demo"}}}))
    t = tmp_path / "results/tables"
    pf = pd.DataFrame({"judge": ["j1", "j1"], "pass": ["blind", "informed"], "condition": ["round1", "peer_wrong"],
                       "requests": [10, 10], "missing": [1, 0], "missing_rate": [0.1, 0.0]})
    write_table(pf, t / "parse_failures.csv", t / "parse_failures.tex", "Parse failures & more", "tab:pf")
    fits = pd.DataFrame({"Fit": ["main", "decomp"], "R-hat": [1.002, 1.2], "Diagnostics": ["OK", "FAILED"]})
    write_table(fits, t / "table9.csv", t / "table9.tex", "Diagnostics", "tab:9",
                notes=["Diagnostics FAILED for fit decomp: R-hat 1.2 > 1.01."])
    # a result table that repeats the status is not a second listing
    t3 = pd.DataFrame({"Model": ["m"], "Asym": ["+0.1 [0, 0.2]"], "Diagnostics": ["FAILED"]})
    write_table(t3, t / "table3.csv", t / "table3.tex", "Shifts", "tab:3")
    text = build_report(tmp_path / "manifest.json", [t / "parse_failures.csv", t / "table3.csv", t / "table9.csv"],
                        [tmp_path / "results/figures/f.pdf"], base=tmp_path)
    assert "> Embedded default (demo)" in text
    assert "1 of 20 requests (5.00%)" in text and "Parse failures & more" in text
    bad = failed_diagnostics({t / "table9.csv": fits, t / "table3.csv": t3})
    assert bad["Fit"].tolist() == ["decomp"] and bad["table"].tolist() == ["table9.csv"]
    assert "> Diagnostics FAILED for fit decomp: R-hat 1.2 > 1.01." in text
    # the failed fit is listed before the tables section
    assert text.index("decomp") < text.index("## Tables")
    assert "`results/tables/table9.csv`" in text and "`results/figures/f.pdf`" in text


def test_report_has_calls_tokens_and_cost_per_model_and_stage_from_the_ledgers(tmp_path):
    from context_effects.llm.ledger import Ledger

    models = {"gpt": {"backend": "openai"}, "smol": {"backend": "vllm"}}
    (tmp_path / "manifest.json").write_text(json.dumps({"config": {"run": {"label": "x", "kind": "paper"}, "models": models}}))
    ledgers = tmp_path / "results/ledgers"
    Ledger(calls=10, cache_hits=2, tokens_in=1000, tokens_out=200, cost_usd=0.5).save(ledgers / "conformity/judge/gpt/0000.json")
    Ledger(calls=5, tokens_in=500, tokens_out=100, cost_usd=0.25, cost_unknown_calls=1).save(
        ledgers / "conformity/judge/gpt/0001.json")
    Ledger(calls=7, tokens_in=70, tokens_out=700).save(ledgers / "conformity/generate/smol/0000.json")
    # A ledger of an earlier run lying beside them is not one of this run's: left out.
    Ledger(calls=99).save(ledgers / "conformity/judge/old-model/0000.json")
    run = [ledgers / p for p in ("conformity/generate/smol/0000.json", "conformity/judge/gpt/0000.json",
                                 "conformity/judge/gpt/0001.json")]
    text = build_report(tmp_path / "manifest.json", [], [], base=tmp_path, ledger_paths=run)
    section = text[text.index("## Calls, tokens and cost per model and stage"):text.index("## Fits failing")]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    cells = {tuple(c.strip() for c in r.strip("|").split("|"))[2]: dict(zip(header, (c.strip() for c in r.strip("|").split("|"))))
             for r in rows[2:]}
    assert cells["gpt"]["stage"] == "judge" and cells["gpt"]["shards"] == "2" and cells["gpt"]["calls"] == "15"
    assert cells["gpt"]["tokens in"] == "1500" and cells["gpt"]["tokens out"] == "300"
    assert cells["gpt"]["cost"] == "≥ $0.7500"  # one call had no price
    assert cells["smol"]["stage"] == "generate" and cells["smol"]["cost"] == "$0.0000"
    total = next(r for r in rows if "**total**" in r)
    assert "22" in total and "old-model" not in section
    text = build_report(tmp_path / "manifest.json", [], [], base=tmp_path, ledger_paths=[])
    assert "No answering job wrote a ledger in this run." in text
