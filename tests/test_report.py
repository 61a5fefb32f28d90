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
