"""The reproduction report: published numbers beside a run's tables, and the status of each."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from context_effects.paper.lookup import MissingNumber, lookup, parse_cell
from context_effects.paper.reproduction import COLUMNS, compare, read_published, to_markdown, write_report
from context_effects.tables import write_table

REPO = Path(__file__).resolve().parents[1]


def _results(tmp_path: Path) -> Path:
    t = tmp_path / "results/tables/conformity"
    table3 = pd.DataFrame({"Dataset": ["TruthfulQA", "TruthfulQA"], "Model": ["Qwen2.5-7B", "Mistral-7B"],
                           "All-Wrong": ["-0.209 [-0.228, -0.189]", "-0.100 [-0.150, -0.050]"],
                           "Diagnostics": ["OK", "OK"]})
    write_table(table3, t / "table3.csv", t / "table3.tex", "Shifts", "tab:3")
    table5 = pd.DataFrame({"Quantity": ["Ranked higher", "Separation"], "Reference-free": [0.7331, 1.594]})
    write_table(table5, t / "table5.csv", t / "table5.tex", "Anchors", "tab:5")
    return tmp_path / "results"


def _published(rows: list[dict]) -> pd.DataFrame:
    full = [{c: str(r.get(c, "")) for c in COLUMNS} for r in rows]
    df = pd.DataFrame(full, columns=COLUMNS)
    df.insert(0, "study", "conformity")
    return df


def _row(id_, value, **kw):
    return {"id": id_, "section": "Results; Table", "quantity": id_, "value": value, "decimals": 3, **kw}


T3 = {"table": "conformity/table3", "column": "All-Wrong"}
QWEN = "Dataset=TruthfulQA; Model=Qwen2.5-7B"


def test_statuses_on_a_paper_run(tmp_path):
    results = _results(tmp_path)
    published = _published([
        _row("inside", "-0.209", row=QWEN, **T3),
        _row("moved", "-0.300", row=QWEN, **T3),  # a number moved on purpose
        _row("edge", "-0.189", row=QWEN, **T3),  # the interval's end counts as inside
        _row("percent", "73.3", decimals=1, scale=100, table="conformity/table5", row="Quantity=Ranked higher",
             column="Reference-free"),
        _row("rounded-off", "1.60", decimals=2, table="conformity/table5", row="Quantity=Separation",
             column="Reference-free"),
        _row("no-table", "54", decimals=0, note="no table reproduces the Round-1 match rate"),
        _row("other-model", "-0.183", row="Dataset=TruthfulQA; Model=Llama-3.1-8B", **T3),
        _row("no-row", "-0.183", row="Dataset=MMLU-Pro; Model=Qwen2.5-7B", **T3),
        _row("no-file", "0.235", table="conformity/agreement", row="", column="alpha"),
    ])
    report = compare(published, results, "paper").set_index("id")
    assert report.loc["inside", "status"] == "agrees"
    assert report.loc["inside", "reproduced_lower"] == pytest.approx(-0.228)
    assert report.loc["moved", "status"] == "differs"
    assert report.loc["moved", "difference"] == pytest.approx(-0.209 + 0.300)
    assert report.loc["edge", "status"] == "agrees"
    assert report.loc["percent", "status"] == "agrees" and report.loc["percent", "reproduced"] == pytest.approx(73.31)
    # 1.594 prints as 1.59 at two decimals, not 1.60
    assert report.loc["rounded-off", "status"] == "differs"
    assert report.loc["no-table", "status"] == "not produced"
    assert "Round-1 match rate" in report.loc["no-table", "reason"]
    assert report.loc["other-model", "status"] == "not comparable"
    assert "Llama-3.1-8B" in report.loc["other-model", "reason"]
    assert report.loc["no-row", "status"] == "not produced" and "no row" in report.loc["no-row", "reason"]
    assert report.loc["no-file", "status"] == "not produced" and "not written" in report.loc["no-file", "reason"]


def test_demo_and_synthetic_runs_are_never_compared(tmp_path):
    results = _results(tmp_path)
    published = _published([_row("moved", "-0.300", row=QWEN, **T3)])
    for kind in ("demo", "synthetic"):
        r = compare(published, results, kind).iloc[0]
        assert r["status"] == "not comparable" and kind in r["reason"]
        assert r["reproduced"] == pytest.approx(-0.209)  # the value is still shown


def test_report_files_and_malformed_published_files(tmp_path):
    results = _results(tmp_path)
    pub = tmp_path / "published/conformity"
    pub.mkdir(parents=True)
    _published([_row("inside", "-0.209", row=QWEN, **T3)]).drop(columns="study").to_csv(pub / "table3.csv",
                                                                                       index=False)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"config": {"run": {"kind": "paper"}}}))
    out = tmp_path / "out"
    report = write_report([pub / "table3.csv"], manifest, results, out / "r.csv", out / "r.md", out / "r.tex")
    assert report["status"].tolist() == ["agrees"]
    assert "| conformity | 1 | 0 | 0 | 0 |" in (out / "r.md").read_text()
    assert r"\begin{longtable}" in (out / "r.tex").read_text()
    (pub / "bad.csv").write_text("id,value\nx,1\n")
    with pytest.raises(ValueError, match="bad.csv: columns"):
        read_published([pub / "table3.csv", pub / "bad.csv"])


def test_cells_and_selectors():
    assert parse_cell("+0.257 [+0.220, +0.292]").upper == pytest.approx(0.292)
    assert parse_cell("−0.05").value == pytest.approx(-0.05)
    assert parse_cell("1,537").value == 1537
    assert parse_cell("not estimated: no fit") is None
    with pytest.raises(MissingNumber, match="not written"):
        lookup("conformity/none", None, "x", results="nowhere")


def test_every_transcribed_number_names_a_registry_table():
    """The published files as shipped: the documented columns, unique ids, and every
    table they name is registered (a typo would silently read as "not produced")."""
    from context_effects.outputs import registry

    published = read_published(sorted((REPO / "paper/published").glob("*/*.csv")))
    assert len(published) > 0
    for t in sorted(set(published["table"]) - {"", "manifest"}):
        study, _, name = t.partition("/")
        registry(study).table(name)
    assert published["value"].str.strip().ne("").all()
    no_table = published[published["table"] == ""]
    assert no_table["note"].str.strip().ne("").all(), "a number without a table says why in its note"


def test_published_bounds_and_amel_model_rows(tmp_path):
    """A bound the seed prints (p < 1e-46, stored as [0, 1e-46]) is checked against the
    reproduced point; an AMEL per-model row of a model this run lacks is not comparable."""
    t = tmp_path / "results/tables/amel"
    effects = pd.DataFrame({"scope": ["model", "overall"], "group": ["qwen", "all"], "p": [3e-50, 2e-40],
                            "d": [-0.2, -0.17]})
    write_table(effects, t / "effects.csv", t / "effects.tex", "Effects", "tab:e")
    published = _published([
        _row("tiny-p", "1e-46", lower="0", upper="1e-46", table="amel/effects", row="scope=overall; group=all",
             column="p"),
        _row("d", "-0.17", decimals=2, table="amel/effects", row="scope=overall; group=all", column="d"),
        _row("other", "-0.18", decimals=2, table="amel/effects", row="scope=model; group=claude-sonnet",
             column="d"),
    ])
    report = compare(published, tmp_path / "results", "paper").set_index("id")
    assert report.loc["tiny-p", "status"] == "differs"  # 2e-40 is not below 1e-46
    assert "published interval" in report.loc["tiny-p", "reason"]
    assert report.loc["d", "status"] == "agrees"
    assert report.loc["other", "status"] == "not comparable"


def test_design_settings_compare_with_the_manifest(tmp_path):
    run = tmp_path / "results/run"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"config": {"amel": {
        "position_biased_turns": 5, "models": ["a", "b", "c"], "history_lengths": [5, 10, 50]}}}))
    published = _published([
        _row("turns", "5", decimals=0, table="manifest", column="config.amel.position_biased_turns"),
        _row("models", "11", decimals=0, table="manifest", column="config.amel.models#"),
        _row("k_long", "50", decimals=0, table="manifest", column="config.amel.history_lengths.2"),
        _row("typo", "50", decimals=0, table="manifest", column="config.amel.history_length.2"),
    ])
    report = compare(published, tmp_path / "results", "paper").set_index("id")
    assert report.loc["turns", "status"] == "agrees" and report.loc["k_long", "status"] == "agrees"
    assert report.loc["models", "status"] == "differs" and report.loc["models", "reproduced"] == 3
    assert report.loc["typo", "status"] == "not produced" and "history_length" in report.loc["typo", "reason"]


def test_the_deviations_ledger_prints_every_entry():
    """The paper's appendix and the run report print the ledger from its one data file."""
    from context_effects.paper.deviations import load_ledger, report_section, to_latex

    entries = load_ledger(REPO / "docs/deviations.yaml")
    tex, report = to_latex(entries), "\n".join(report_section(entries))
    for e in entries:
        assert e["id"].replace("_", r"\_") in tex and f"(`{e['id']}`)" in report
    assert tex.count(r"\begin{longtable}") == len({e["study"] for e in entries})


def test_intervals_kept_apart_from_the_value_and_bracketed_manifest_keys(tmp_path):
    t = tmp_path / "results/tables/conformity"
    table4 = pd.DataFrame({"Judge": ["Gemma-2-9B"], "gamma_j": [-0.33], "95% CrI": ["[-0.36, -0.30]"],
                           "CI low": [-0.5], "CI high": [-0.1], "Parameters": ["9.2B"]})
    write_table(table4, t / "table4.csv", t / "table4.tex", "Loadings", "tab:4")
    cell = lookup("conformity/table4", "Judge=Gemma-2-9B", "gamma_j @ 95% CrI", results=tmp_path / "results")
    assert (cell.value, cell.lower, cell.upper) == (-0.33, -0.36, -0.30)
    cell = lookup("conformity/table4", "Judge=Gemma-2-9B", "gamma_j @ CI low, CI high", results=tmp_path / "results")
    assert (cell.lower, cell.upper) == (-0.5, -0.1)
    assert lookup("conformity/table4", None, "Parameters", results=tmp_path / "results").value == 9.2
    with pytest.raises(MissingNumber, match="interval column"):
        lookup("conformity/table4", None, "gamma_j @ CrI", results=tmp_path / "results")
    run = tmp_path / "results/run"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"config": {"models": {"qwen2.5-7b": {"engine": {"n": 4096}}}}}))
    published = _published([_row("len", "4096", decimals=0, table="manifest",
                                 column="config.models[qwen2.5-7b].engine.n")])
    assert compare(published, tmp_path / "results", "paper")["status"].tolist() == ["agrees"]


def test_table3_cells_carry_the_generator_mean_refit_flag(tmp_path):
    results = _results(tmp_path)
    t = results / "tables/conformity"
    variant = pd.DataFrame({"Dataset": ["TruthfulQA", "TruthfulQA"], "Fit": ["main corpus", "decomposition corpus"],
                            "Model": ["Qwen2.5-7B", "Qwen2.5-7B"], "Quantity": ["All-Wrong", "All-Wrong"],
                            "Sign or interval changes": ["yes", "no"]})
    write_table(variant, t / "table3_generator_mean.csv", t / "table3_generator_mean.tex", "Variant", "tab:3g")
    published = _published([_row("inside", "-0.209", row=QWEN, **T3),
                            _row("t5", "73.3", decimals=1, scale=100, table="conformity/table5",
                                 row="Quantity=Ranked higher", column="Reference-free")])
    report = compare(published, results, "paper")
    assert report["generator_mean_changes"].tolist() == ["yes", ""]
    assert "generator-mean refit changes its sign" in to_markdown(report, "paper")


def test_round1_match_rate_and_table4_rows_compare_number_by_number(tmp_path):
    """The shipped published rows for the 54% Round-1 match rate and Table 4 find their cells in
    the tables the builders write (the reproducibility table's pooled main-vs-decomposition row,
    the identical-prompt rerun; one Table 4 row per judge)."""
    from context_effects.conformity.reproducibility import reproducibility_table

    published = read_published(sorted((REPO / "paper/published/conformity").glob("*.csv")))
    wanted = published[(published["id"] == "s2_2.decomp.round1_match_rate")
                       | published["id"].str.match(r"table4\.(gemma|gpt4o)\.")]
    assert len(wanted) == 5
    # 100 trials whose three executions wrote one text; the decomposition corpus's own run at
    # seed 42 reproduced 54 of them. The executions' pairwise rate (100%) is not the 54%.
    rows = [{"corpus": "main", "seed": seed, "generator": "g", "item_id": f"q{i}", "condition": "round1",
             "text": "same"} for i in range(100) for seed in (42, 43, 44)]
    rows += [{"corpus": "decomposition", "seed": 42, "generator": "g", "item_id": f"q{i}", "condition": "round1",
              "text": "same" if i < 54 else "other"} for i in range(100)]
    repro = reproducibility_table({"truthfulqa": pd.DataFrame(rows)}, {}, [42, 43, 44], decomposition_seed=42)
    t = tmp_path / "results/tables/conformity"
    write_table(repro, t / "reproducibility.csv", t / "reproducibility.tex", "Reproducibility", "tab:r")
    table4 = pd.DataFrame({"Panel": ["open-weight panel", "frontier API judge"], "Judge": ["Gemma-2-9B", "GPT-4o"],
                           "gamma_j": [-0.327, -0.2], "95% CrI": ["[-0.360, -0.290]", "[-0.250, -0.150]"],
                           "Pr(gamma_j > 0)": [0.0, 0.0], "Fit": ["main", "hosted-gpt-4o"], "Diagnostics": ["ok", "ok"]})
    write_table(table4, t / "table4.csv", t / "table4.tex", "Loadings", "tab:4")
    report = compare(wanted, tmp_path / "results", "paper").set_index("id")
    r = report.loc["s2_2.decomp.round1_match_rate"]
    assert r["reproduced"] == pytest.approx(54.0) and r["status"] == "agrees"
    assert r["reproduced_lower"] < 54 < r["reproduced_upper"]
    assert report.loc["table4.gemma.gamma", "status"] == "agrees"
    assert report.loc["table4.gpt4o.gamma", "status"] == "differs"  # -0.096 lies outside [-0.25, -0.15]
    assert report.loc["table4.gemma.pr_positive", "status"] == "agrees"


def _shipped(pattern: str) -> pd.DataFrame:
    published = read_published(sorted((REPO / "paper/published/conformity").glob("*.csv")))
    return published[published["id"].str.match(pattern)]


def test_table20_theta_1_5_row_is_the_decomposition_fit(tmp_path):
    """Seed 002 Table 20 at theta_a = 1.5 is the decomposition corpus's Asym_total (from Table 10:
    Gemma 0.06 + 0.02, Llama 0.32 + 0.02), not Table 3's main fit (+0.061, +0.327): the shipped
    rows, set beside the table the builder writes, agree with the decomposition fit's numbers
    and would differ from the main fit's (docs/deviations.yaml#anchor-scale-refits)."""
    from context_effects.config import validate_config
    from context_effects.measurement.pipeline import fit_plan
    from context_effects.measurement.report import Builder, FitResult, table_settings

    display = {"gemma": "Gemma-2-9B", "llama": "Llama-3.1-8B"}
    cfg = validate_config({
        "run": {"kind": "paper"},
        "datasets": {"truthfulqa": {"source": "local", "local_path": "items.jsonl"}},
        "models": {m: {"backend": "synthetic", "model_id": m, "family": m, "display_name": d}
                   for m, d in display.items()},
        "conformity": {"datasets": ["truthfulqa"], "generators": list(display), "judges": list(display),
                       "fit": {"theta_anchor_sensitivity": [1.0, 1.5, 2.0], "theta_anchor_datasets": ["truthfulqa"],
                               "generator_mean_sensitivity": False, "reference_free_sensitivity": False}},
        "amel": {"enabled": False}, "anchoring": {"enabled": False},
    })
    # Posterior means (and +-0.06 intervals) per fit: the main fit carries Table 3's values.
    asym = {"main": {"gemma": 0.061, "llama": 0.327}, "decomposition": {"gemma": 0.072, "llama": 0.346},
            "theta-1.0": {"gemma": 0.05, "llama": 0.23}, "theta-2.0": {"gemma": 0.10, "llama": 0.46}}
    results = {}
    for spec in fit_plan(cfg):
        if spec.variant not in asym:
            continue
        summary = pd.DataFrame([{"block": "asym_total", "generator": g, "condition": None, "judge": None,
                                 "mean": m, "q2.5": m - 0.06, "q97.5": m + 0.06} for g, m in asym[spec.variant].items()])
        results[(spec.dataset, spec.variant)] = FitResult(spec, summary, {}, [])
    plan = {s.variant: s for s in fit_plan(cfg)}
    assert plan["theta-1.0"].corpus == "decomposition" and plan["theta-1.0"].shift_prior == "increment"
    built = Builder(table_settings(cfg, "20"), results).table20()
    assert set(built.df["Fit"]) == {"decomposition", "theta-1.0", "theta-2.0"}
    t = tmp_path / "results/tables/conformity"
    write_table(built.df, t / "table20.csv", t / "table20.tex", "Anchor scale", "tab:20")
    report = compare(_shipped(r"table20\.(gemma|llama)\.theta"), tmp_path / "results", "paper").set_index("id")
    assert len(report) == 6 and (report["status"] == "agrees").all(), report[["status", "reason"]]
    # The row selects the decomposition fit (+0.07, +0.35 as printed); the main fit's row would read
    # +0.06 and +0.33, which the seed's Table 20 does not print.
    assert report.loc["table20.gemma.theta_1_5", "reproduced"] == pytest.approx(0.07)
    assert report.loc["table20.llama.theta_1_5", "reproduced"] == pytest.approx(0.35)
    assert report.loc["table20.gemma.theta_1_5", "source"].endswith("Fit=decomposition] Asym_total")


def test_tables_2_19_and_14_shipped_rows_find_the_cells_the_builders_write(tmp_path):
    """The pooled rows of Tables 2 and 19 and the No-Peer sim_peer cells of Table 14 are the
    cells the shipped published rows select; Table 19's last column reproduces the seed's
    TruthfulQA hard tercile from two questions with its printed means."""
    from context_effects.conformity.outputs import REGISTRY
    from context_effects.metrics import summaries

    rows = []
    # TruthfulQA, one generator and judge, two executions; hard tercile (lowest Round-1 ratings)
    # q0, q1 with Delta_AC = +0.116 and Delta_AW = +0.184, -0.350 (mean -0.083); four more questions.
    shifts = {"q0": (0.116, 0.065, 0.184), "q1": (0.116, 0.065, -0.350)}
    shifts |= {f"q{i}": (-0.1, -0.1, -0.3) for i in range(2, 6)}
    for seed in (42, 43):
        for i, (q, (ac, mx, aw)) in enumerate(shifts.items()):
            r1 = 1.0 + 0.5 * i
            for cond, rating in (("round1", r1), ("no_peer", r1), ("peer_correct", r1 + ac), ("peer_mixed", r1 + mx),
                                 ("peer_wrong", r1 + aw)):
                rows.append({"answer_id": f"{seed}|{q}|{cond}", "dataset": "truthfulqa", "corpus": "main",
                             "seed": seed, "generator": "g", "item_id": q, "condition": cond, "judge": "j",
                             "pass": "blind", "rating": rating, "status": "ok", "hosted": False})
    ratings = pd.DataFrame(rows)
    t = tmp_path / "results/tables/conformity"
    # Table 2 as its registry builder writes it (datasets by their labels).
    ratings.to_parquet(tmp_path / "ratings.parquet")
    built = REGISTRY.table("table2").build({"ratings": [str(tmp_path / "ratings.parquet")]},
                                           {"datasets": ["truthfulqa"], "primary_seed": 42, "seeds": [42, 43],
                                            "run_kind": "paper"})
    write_table(built.df, t / "table2.csv", t / "table2.tex", "T2", "tab:2")
    t19 = summaries.difficulty_table(ratings, n_resamples=200, seed=0, primary_seed=42)
    write_table(t19, t / "table19.csv", t / "table19.tex", "T19", "tab:19")
    semantic = pd.DataFrame({"Dataset": ["TruthfulQA"], "Condition": ["No-Peer"], "n": [6], "sim_gold": [0.6],
                             "sim_peer": [-0.005], "BERTScore F1": [0.3]})
    write_table(semantic, t / "table14.csv", t / "table14.tex", "T14", "tab:14")
    wanted = _shipped(r"table2\.truthfulqa\.|table19\.truthfulqa\.hard\.|table14\.truthfulqa\.no_peer\.sim_peer")
    report = compare(wanted, tmp_path / "results", "paper").set_index("id")
    assert (report["status"] != "not produced").all(), report[["status", "reason"]]
    hard = report.loc["table19.truthfulqa.hard.abs_aw_minus_ac"]
    assert hard["reproduced"] == pytest.approx(0.151) and hard["status"] == "agrees"
    assert report.loc["table19.truthfulqa.hard.delta_all_wrong", "reproduced"] == pytest.approx(-0.083)
    assert report.loc["table14.truthfulqa.no_peer.sim_peer", "status"] == "agrees"


def test_every_study_c_table_names_datasets_by_one_label_map(tmp_path):
    """Tables 2 and 5, agreement, flip share and the injection-excluded Table 2 name their
    datasets as every other Study C table does (TruthfulQA, MMLU-Pro; pooled rows All), so one
    selector finds a dataset in any of them; the shipped published rows and the paper's macros
    select them that way. A table keyed by config name (truthfulqa) would leave them unmatched."""
    import yaml

    from context_effects.conformity.conditions import DATASET_LABELS
    from context_effects.conformity.outputs import REGISTRY

    datasets = ["truthfulqa", "mmlu_pro"]
    inputs = {"ratings": [], "revisions": []}
    for ds in datasets:
        rows = []
        for judge, (c, w) in (("j1", (5.0, 2.0)), ("j2", (4.0, 4.0))):
            for cond, rating in (("no_peer", 4.0), ("peer_correct", c), ("peer_mixed", 4.0), ("peer_wrong", w)):
                rows.append({"answer_id": f"{ds}|{cond}", "item_id": "q1", "condition": cond, "corpus": "main",
                             "seed": 42, "pass": "blind", "reference": None, "judge": judge, "rating": rating})
            for ref in ("free", "augmented"):
                for cond, rating in (("anchor_correct", c), ("anchor_incorrect", w)):
                    rows.append({"answer_id": f"{ds}|{cond}", "item_id": "q1", "condition": cond, "corpus": "anchor",
                                 "seed": None, "pass": "blind", "reference": ref, "judge": judge, "rating": rating})
        ratings = pd.DataFrame(rows).assign(dataset=ds, status="ok", hosted=False, injection_flag=False,
                                           generator="g", authority=None)
        revisions = pd.DataFrame({"answer_id": ["r1"], "unchanged": [True], "rating_round1": [5.0],
                                  "rating_revision": [3.0], "rating_drop": [2.0]})
        for kind, df in (("ratings", ratings), ("revisions", revisions)):
            path = tmp_path / f"{kind}-{ds}.parquet"
            df.to_parquet(path)
            inputs[kind].append(str(path))
    settings = {"datasets": datasets, "primary_seed": 42, "seeds": [42], "run_kind": "paper"}
    labels = {"TruthfulQA", "MMLU-Pro", "All"}
    for name in ("table2", "table2_injection_excluded", "table5", "agreement", "flip_share"):
        got = set(REGISTRY.table(name).build(inputs, settings).df["Dataset"])
        assert got <= labels and got & {"TruthfulQA", "MMLU-Pro"} == {"TruthfulQA", "MMLU-Pro"}, (name, got)

    # The fit tables keep a copy of the map (context_effects.measurement.report): the same names.
    from context_effects.measurement import report as fit_report

    assert fit_report.DATASET_LABELS == DATASET_LABELS

    # The shipped selectors of Study C name datasets by those labels.
    known = set(DATASET_LABELS.values()) | {"All"}
    published = read_published(sorted((REPO / "paper/published/conformity").glob("*.csv")))
    selectors = list(published["row"])
    spec = yaml.safe_load((REPO / "paper/numbers.yaml").read_text())
    selectors += [v.get("row", "") for v in spec.values() if str(v.get("table", "")).startswith("conformity/")]
    named = {part.split("=", 1)[1].strip() for sel in selectors for part in sel.split(";")
             if part.strip().startswith("Dataset=")}
    assert named and named <= known, named - known


def test_convergence_bounds_compare_with_the_runs_bound_over_the_same_fits(tmp_path):
    """Seed 002 App. C.2 prints bounds over every fit of its Table 9 ("R-hat <= 1.007, minimum
    bulk ESS is 715, minimum tail ESS is 1,239", zero divergences). The run's value is the same
    bound over the same fits (the rows the shipped Table 9 numbers select), not one fit's value:
    here the run's largest R-hat sits in another fit than the seed's, and a fit of this project's
    own (reference-free anchors) that the seed's Table 9 lacks does not enter the bound."""
    from context_effects.paper.lookup import parse_row

    shipped = _shipped(r"table9\.|c2\.")
    shipped = shipped[shipped["table"] == "conformity/table9"]
    fits = {}
    for r in shipped[shipped["row"].str.strip().ne("")].to_dict("records"):
        sel = parse_row(r["row"])
        fits.setdefault((sel["Fit"], sel["Dataset"]), {"Divergences": 0})[r["column"]] = float(r["value"])
    assert len(fits) == 12  # the seed's Table 9: 3 + 3 + 3 self-excluded + 2 anchor-scale + 1 five-judge
    fits[("Total condition shifts (Tables 3, 4)", "TruthfulQA")]["R-hat"] = 1.002  # the seed's max is elsewhere too
    fits[("Decomposition (Tables 10-12)", "ARC-Challenge")]["R-hat"] = 1.0071
    fits[("Reference-free anchor scoring (table3_reference_free)", "TruthfulQA")] = {
        "R-hat": 1.2, "ESS bulk": 12.0, "ESS tail": 30.0, "Divergences": 3}
    table9 = pd.DataFrame([{"Fit": f, "Dataset": d, **v} for (f, d), v in fits.items()])
    t = tmp_path / "results/tables/conformity"
    write_table(table9, t / "table9.csv", t / "table9.tex", "T9", "tab:9")
    report = compare(shipped, tmp_path / "results", "paper").set_index("id")
    bounds = ["c2.max_rhat", "c2.min_ess_bulk", "c2.min_ess_tail", "c2.divergences", "table9.caption.divergences"]
    assert (report.loc[bounds, "status"] == "agrees").all(), report.loc[bounds, ["status", "reason"]]
    assert report.loc["c2.max_rhat", "reproduced"] == pytest.approx(1.0071)
    assert report.loc["c2.min_ess_bulk", "reproduced"] == 715 and report.loc["c2.min_ess_tail", "reproduced"] == 1239
    assert report.loc["c2.divergences", "reproduced"] == 0
    # A fit of the seed's Table 9 that the run lacks leaves the bound not produced, naming it.
    write_table(table9.iloc[1:], t / "table9.csv", t / "table9.tex", "T9", "tab:9")
    missing = compare(shipped, tmp_path / "results", "paper").set_index("id").loc["c2.max_rhat"]
    assert missing["status"] == "not produced" and "no row" in missing["reason"]
