"""Study C measurement-model rules: the fit plan, the tables' flags, and the whole chain
(generation → judging → fits → tables) on the synthetic backend, whose planted judge
loadings γ_j and condition shifts η the fitted tables must show."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake
from context_effects.config import load_config, validate_config
from context_effects.llm.backends.synthetic import planted_effects
from context_effects.measurement.data import RatingsError
from context_effects.measurement.pipeline import (
    FitSpec,
    assess,
    fit_plan,
    omitted_fits,
    select_ratings,
)
from context_effects.measurement.report import Builder, FitResult, changes_call, table_settings

THRESHOLDS = {"max_rhat": 1.01, "min_ess_bulk": 400, "min_ess_tail": 400, "max_divergences": 0}


# ----------------------------------------------------------------------------- plan


def test_paper_plan_has_every_fit_of_seed_002():
    cfg = validate_config(load_config(REPO / "config" / "config.yaml"))
    plan = {(s.dataset, s.variant): s for s in fit_plan(cfg)}
    for ds in ("truthfulqa", "mmlu_pro", "arc_challenge"):
        for v in ("main", "decomposition", "self-excluded"):
            assert (ds, v) in plan
    # Table 20: θ_a = 1.0 and 2.0 refits on TruthfulQA only, of the decomposition fit (which is
    # the 1.5 row; docs/deviations.yaml#anchor-scale-refits).
    assert sorted(v for ds, v in plan if v.startswith("theta")) == ["theta-1.0", "theta-2.0"]
    assert plan[("truthfulqa", "theta-2.0")] == replace(plan[("truthfulqa", "decomposition")], variant="theta-2.0",
                                                        kind="theta", theta_anchor=2.0)
    # Table 4 API rows: one five-judge refit per hosted judge, TruthfulQA only.
    h = plan[("truthfulqa", "hosted-gpt-4o")]
    assert h.judges == (*cfg["conformity"]["judges"], "gpt-4o") and len(h.judges) == 5
    assert not any(v.startswith("hosted") for ds, v in plan if ds != "truthfulqa")
    assert plan[("truthfulqa", "decomposition")].shift_prior == "increment"
    assert plan[("truthfulqa", "main")].seed == 42 and plan[("truthfulqa", "main")].judges == tuple(
        cfg["conformity"]["judges"]
    )
    # The generator-mean sensitivity refits (this project's addition): one per main and per
    # decomposition fit, the same data and model otherwise.
    for ds in ("truthfulqa", "mmlu_pro", "arc_challenge"):
        for base, variant in (("main", "generator-mean"), ("decomposition", "decomposition-generator-mean")):
            refit = plan[(ds, variant)]
            assert refit.generator_mean and not plan[(ds, base)].generator_mean
            assert replace(refit, variant=base, kind=base, generator_mean=False) == plan[(ds, base)]
    # A paper-model fit's rule params are what they were before the option existed.
    assert "generator_mean" not in plan[("truthfulqa", "main")].as_dict()
    assert plan[("truthfulqa", "generator-mean")].as_dict()["generator_mean"] is True


def test_generator_mean_refits_follow_their_switch_and_base_fits():
    cfg = validate_config(load_config(REPO / "config" / "demo.yaml"))
    assert {"generator-mean", "decomposition-generator-mean"} <= {s.kind for s in fit_plan(cfg)}
    cfg["conformity"]["decomposition"]["enabled"] = False
    kinds = {s.kind for s in fit_plan(cfg)}
    assert "generator-mean" in kinds and "decomposition-generator-mean" not in kinds
    assert "decomposition corpus is disabled" in omitted_fits(cfg)["decomposition-generator-mean"]
    cfg["conformity"]["fit"]["generator_mean_sensitivity"] = False
    assert not {"generator-mean", "decomposition-generator-mean"} & {s.kind for s in fit_plan(cfg)}
    assert "switched off" in omitted_fits(cfg)["generator-mean"]
    t = Builder(table_settings(cfg, "3_generator_mean"), {}).table3_generator_mean()
    assert t.df.iloc[0, 0].startswith("not estimated: the generator-mean sensitivity fits are switched off")
    # The switch decides which fits exist, not how one runs: no fit job sees it.
    from context_effects.conformity import dag as conformity_dag

    assert "generator_mean_sensitivity" not in conformity_dag.fit_settings(cfg)
    assert "reference_free_sensitivity" not in conformity_dag.fit_settings(cfg)


def test_demo_plan_leaves_out_impossible_variants_with_reasons():
    cfg = validate_config(load_config(REPO / "config" / "demo.yaml"))
    kinds = {s.kind for s in fit_plan(cfg)}
    # One judge of the one generator's family: self-exclusion would empty the table; no hosted judge.
    assert "self-excluded" not in kinds and "hosted" not in kinds
    why = omitted_fits(cfg)
    assert "remove every experimental rating" in why["self-excluded"]
    assert "hosted" in why["hosted"]


def _ratings_rows():
    base = {"trial_id": "t", "generator": "g", "item_id": "q1", "authority": None, "hosted": False, "d": 0,
            "rating": 4.0, "status": "ok"}
    rows = []
    for judge in ("j1", "j2", "api"):
        rows.append({**base, "answer_id": "a1", "corpus": "main", "seed": 42, "condition": "no_peer",
                     "judge": judge, "pass": "blind", "reference": None})
        rows.append({**base, "answer_id": "a2", "corpus": "main", "seed": 43, "condition": "no_peer",
                     "judge": judge, "pass": "blind", "reference": None})
        rows.append({**base, "answer_id": "a3", "corpus": "decomposition", "seed": 42, "condition": "no_peer",
                     "judge": judge, "pass": "blind", "reference": None})
        for ref in ("augmented", "free"):
            rows.append({**base, "answer_id": "anc", "trial_id": None, "generator": None, "corpus": "anchor",
                         "seed": None, "condition": "anchor_correct", "judge": judge, "pass": "blind",
                         "reference": ref})
    return pd.DataFrame(rows)


def test_select_ratings_keeps_corpus_seed_panel_and_augmented_anchors_only():
    table = _ratings_rows()
    spec = FitSpec("truthfulqa", "main", "main", "main", 42, ("j1", "j2"), 1.5)
    rows = select_ratings(table, spec)
    assert set(rows["answer_id"]) == {"a1", "anc"}
    assert set(rows["judge"]) == {"j1", "j2"}  # the hosted judge never enters a four-judge fit
    assert set(rows.loc[rows["corpus"] == "anchor", "reference"]) == {"augmented"}
    dec = select_ratings(table, FitSpec("truthfulqa", "decomposition", "decomposition", "decomposition", 42,
                                        ("j1", "j2", "api"), 1.5))
    assert set(dec["answer_id"]) == {"a3", "anc"} and len(dec) == 6
    with pytest.raises(RatingsError, match="no main-corpus ratings of seed 44"):
        select_ratings(table, FitSpec("truthfulqa", "main", "main", "main", 44, ("j1",), 1.5))


# ----------------------------------------------------------------------------- flags


def _diag(**over):
    d = {"method": "nuts", "max_rhat": 1.004, "max_rhat_at": "gamma[j1]", "min_ess_bulk": 900.0,
         "min_ess_bulk_at": "eta", "min_ess_tail": 800.0, "min_ess_tail_at": "eta", "divergences": 0,
         "chains": 4, "draws_per_chain": 1500, "data": {}}
    d.update(over)
    return d


def test_assess_names_each_failed_threshold():
    assert assess(_diag(), THRESHOLDS) == []
    bad = assess(_diag(max_rhat=1.05, min_ess_tail=120.0, divergences=3), THRESHOLDS)
    assert len(bad) == 3 and "R-hat 1.050 > 1.01 (gamma[j1])" in bad[0] and "3 divergent" in bad[2]
    assert "SVI" in assess({"method": "svi"}, THRESHOLDS)[0]


def test_failed_fit_is_flagged_in_its_table_and_note():
    cfg = validate_config({
        "run": {"kind": "synthetic"},
        "datasets": {"truthfulqa": {"source": "local", "local_path": "items.jsonl"}},
        "models": {"g": {"backend": "synthetic", "model_id": "g", "family": "x"},
                   "j": {"backend": "synthetic", "model_id": "j", "family": "x"}},
        "conformity": {"datasets": ["truthfulqa"], "generators": ["g"], "judges": ["j"],
                       "decomposition": {"enabled": False}, "fit": {"theta_anchor_sensitivity": [1.5]}},
        "amel": {"enabled": False}, "anchoring": {"enabled": False},
    })
    summary = pd.DataFrame([
        {"block": "total_shift", "generator": "g", "condition": c, "judge": None, "mean": m, "q2.5": m - 0.1,
         "q97.5": m + 0.1, "pr_gt0": 0.0}
        for c, m in (("peer_correct", -0.1), ("peer_wrong", -0.5), ("peer_mixed", -0.2))
    ] + [{"block": "asym_total", "generator": "g", "condition": None, "judge": None, "mean": 0.6, "q2.5": 0.4,
          "q97.5": 0.8, "pr_gt0": 1.0}])
    spec = fit_plan(cfg)[0]
    diag = _diag(max_rhat=1.2)
    res = FitResult(spec, summary, diag, assess(diag, THRESHOLDS))
    results = {("truthfulqa", "main"): res}
    t3 = Builder(table_settings(cfg, "3"), results).table3()
    assert t3.df.loc[0, "All-Wrong"] == "-0.500 [-0.600, -0.400]"
    assert t3.df.loc[0, "Diagnostics"] == "FAILED"
    assert any("Diagnostics FAILED for fit truthfulqa/main" in n and "R-hat 1.200" in n for n in t3.notes)
    t10 = Builder(table_settings(cfg, "10"), results).decomposition_table("truthfulqa")
    assert t10.df.iloc[0, 0].startswith("not estimated: the decomposition corpus is disabled")
    t17 = Builder(table_settings(cfg, "17"), results).table17()
    assert t17.df.loc[0, "Self-excluded fit"] == "not fitted"
    assert any("remove every experimental rating" in n for n in t17.notes)


def _shift_summary(means: dict[str, tuple[float, float, float]], mu: float | None = None) -> pd.DataFrame:
    """A summary.csv of one generator "g": block → (mean, q2.5, q97.5)."""
    rows = [{"block": "total_shift" if c != "asym" else "asym_total", "generator": "g",
             "condition": c if c != "asym" else None, "judge": None, "mean": m, "q2.5": lo, "q97.5": hi}
            for c, (m, lo, hi) in means.items()]
    if mu is not None:
        rows.append({"block": "mu_gen", "generator": "g", "condition": None, "judge": None, "mean": mu,
                     "q2.5": mu - 0.2, "q97.5": mu + 0.2})
    return pd.DataFrame(rows)


def test_generator_mean_table_pairs_the_fits_and_flags_changes():
    cfg = validate_config({
        "run": {"kind": "synthetic"},
        "datasets": {"truthfulqa": {"source": "local", "local_path": "items.jsonl"}},
        "models": {"g": {"backend": "synthetic", "model_id": "g", "family": "x"},
                   "j": {"backend": "synthetic", "model_id": "j", "family": "x"}},
        "conformity": {"datasets": ["truthfulqa"], "generators": ["g"], "judges": ["j"],
                       "decomposition": {"enabled": False},
                       "fit": {"theta_anchor_sensitivity": [1.5], "reference_free_sensitivity": False}},
        "amel": {"enabled": False}, "anchoring": {"enabled": False},
    })
    s = table_settings(cfg, "3_generator_mean")
    assert [(f["dataset"], f["variant"]) for f in s["fits"]] == [("truthfulqa", "main"),
                                                                  ("truthfulqa", "generator-mean")]
    paper = _shift_summary({"peer_correct": (0.10, 0.02, 0.18), "peer_wrong": (-0.40, -0.5, -0.3),
                            "peer_mixed": (0.05, -0.05, 0.15), "asym": (0.30, 0.1, 0.5)})
    variant = _shift_summary({"peer_correct": (-0.05, -0.13, 0.03), "peer_wrong": (-0.55, -0.65, -0.45),
                              "peer_mixed": (-0.02, -0.12, 0.08), "asym": (0.60, 0.4, 0.8)}, mu=0.45)
    plan = {sp.variant: sp for sp in fit_plan(cfg)}
    good, bad = _diag(), _diag(min_ess_bulk=50.0)
    results = {("truthfulqa", "main"): FitResult(plan["main"], paper, good, assess(good, THRESHOLDS)),
               ("truthfulqa", "generator-mean"): FitResult(plan["generator-mean"], variant, bad,
                                                            assess(bad, THRESHOLDS))}
    t = Builder(s, results).build("3_generator_mean")
    df = t.df.set_index("Quantity")
    assert list(df.index) == ["All-Correct", "All-Wrong", "Mixed", "Asym_total"]
    assert df.loc["All-Correct", "Paper model"] == "+0.100 [+0.020, +0.180]"
    assert df.loc["All-Correct", "Generator-mean variant"] == "-0.050 [-0.130, +0.030]"
    assert df["Difference"].round(3).tolist() == [-0.15, -0.15, -0.07, 0.3]
    # All-Correct: sign and exclusion of 0 change; All-Wrong: both exclude 0, same sign; Mixed:
    # sign changes, neither excludes 0; Asym_total: both exclude 0, same sign.
    assert df["Sign or interval changes"].tolist() == ["yes", "no", "yes", "no"]
    assert (df["mu_g (variant)"] == "+0.450 [+0.250, +0.650]").all()
    assert (df["Fit"] == "main corpus").all() and (df["Diagnostics"] == "FAILED").all()
    assert any("Diagnostics FAILED for fit truthfulqa/generator-mean" in n for n in t.notes)
    assert any("2 of 4 cells" in n for n in t.notes) and any("not part of the paper's method" in n for n in t.notes)
    assert changes_call(None, paper.iloc[0]) == "--"
    # Table 9 lists the refit with its own label (and Table 15's blind-only fit after it).
    results[("truthfulqa", "blind-quality")] = FitResult(plan["blind-quality"], paper, good, [])
    t9 = Builder(table_settings(cfg, "9"), results).table9()
    assert t9.df["Fit"].tolist()[-2:] == ["Generator baseline means, main corpus (table3_generator_mean)",
                                          "Blind ratings, every execution (Table 15)"]


# ----------------------------------------------------------------------------- end to end

N_ITEMS = 48
#: Planted so that every claim the test checks is several posterior SDs clear at this size:
#: γ of opposite signs, a different ordering of the three peer shifts per generator, and
#: generators of different mean quality (b_t ~ N(quality_mean, σ_b)) — the case the paper's
#: model misreads, so its Table 3 is checked for order only and the planted shifts are checked
#: for coverage in the generator-mean variant's column of table3_generator_mean.
PLANTED = {
    "mistral-sim": {"gamma": 0.8, "quality_mean": 0.4,
                    "eta": {"peer_correct": 0.0, "peer_mixed": -0.5, "peer_wrong": -1.0}},
    "gemma-sim": {"gamma": -0.8, "quality_mean": -0.4,
                  "eta": {"peer_correct": -0.5, "peer_mixed": 0.0, "peer_wrong": -1.0}},
}


def _items(n: int) -> str:
    lines = []
    for i in range(n):
        lines.append(json.dumps({
            "type": "Non-Adversarial", "category": "Synthetic", "question": f"Synthetic question number {i}?",
            "best_answer": f"Answer {i}", "correct_answers": [f"Answer {i}", f"It is {i}"],
            "incorrect_answers": [f"Answer {i + 1}", f"It is {i + 2}"], "source": "test",
        }))
    return "\n".join(lines) + "\n"


def test_study_c_fit_rules_recover_planted_values(workdir):
    (workdir / "items").mkdir()
    (workdir / "items" / "truthfulqa.jsonl").write_text(_items(N_ITEMS))
    config = {
        "run": {"label": "synthetic-fit", "kind": "synthetic", "threads_per_job": 1},
        "datasets": {"truthfulqa": {"source": "local", "local_path": "items/truthfulqa.jsonl", "n_items": N_ITEMS}},
        "models": {
            # One declared family for both: a self-rating exclusion would empty the table, so the plan
            # holds the main fit, its generator-mean refit and Table 15's blind-quality fit only (CI
            # time) and Table 17 must say why it has no refit.
            name: {"backend": "synthetic", "model_id": name, "family": "sim", "synthetic": params}
            for name, params in PLANTED.items()
        },
        "conformity": {
            "datasets": ["truthfulqa"],
            "generators": list(PLANTED),
            "judges": list(PLANTED),
            "seeds": [42],
            "primary_seed": 42,
            "decomposition": {"enabled": False},
            "generation": {"shard_size": 4000},
            "judging": {"shard_size": 20000},
            # Short NUTS in float32: the chain is what is tested, not the paper's settings.
            "fit": {"chains": 2, "warmup": 150, "samples": 150, "precision": "float32",
                    "theta_anchor_sensitivity": [1.5], "reference_free_sensitivity": False},
        },
        "amel": {"enabled": False},
        "anchoring": {"enabled": False},
    }
    cfg_path = workdir / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(config))
    targets = [f"results/tables/conformity/table{n}.csv" for n in (3, 4, 9, 10, 17, 20, "3_generator_mean")]
    res = run_snakemake(
        "--cores", "2", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile=" + str(cfg_path), *targets, "results/conformity/quality/truthfulqa.parquet",
        env={"OMP_NUM_THREADS": "1"}, timeout=600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    tables = workdir / "results" / "tables" / "conformity"

    def mean(cell: str) -> float:
        return float(cell.split(" ")[0])

    def bounds(cell: str) -> tuple[float, float]:
        lo, hi = cell.split("[")[1].rstrip("]").split(", ")
        return float(lo), float(hi)

    def near(true: float, cell: str) -> bool:
        # Within twice the 95% half-width of the posterior mean (~4 SD): a recovery check that a
        # wrong likelihood or indexing fails, without betting on one 95% interval's coverage.
        lo, hi = bounds(cell)
        return abs((lo + hi) / 2 - true) <= hi - lo

    def covers(true: float, cell: str) -> bool:
        lo, hi = bounds(cell)
        return lo <= true <= hi

    planted = {name: planted_effects(name, PLANTED[name])["conformity"] for name in PLANTED}
    # (unit, what, planted value, fitted "mean [lo, hi]") of every planted value a table reports
    # without the paper model's blind spot: 95%-interval coverage is checked on these below.
    checks: list[tuple[str, str, float, str]] = []

    # Table 4: each judge's γ has its planted sign, credibly, and is near its planted value.
    t4 = pd.read_csv(tables / "table4.csv").set_index("Judge")
    for judge in PLANTED:
        true = planted[judge]["judge"]["gamma"]
        assert near(true, t4.loc[judge, "95% CrI"]), (judge, true, t4.loc[judge, "95% CrI"])
        assert (t4.loc[judge, "Pr(gamma_j > 0)"] > 0.99) == (true > 0)
        assert (t4.loc[judge, "Pr(gamma_j > 0)"] < 0.01) == (true < 0)
        lo, hi = t4.loc[judge, "95% CrI"].strip("[]").split(", ")
        checks.append((f"gamma {judge}", "gamma", true, f"{t4.loc[judge, 'gamma_j']} [{lo}, {hi}]"))

    # Table 3 (the paper's model): per generator the fitted order of the three peer shifts is the
    # planted one. Its levels are not checked: with unequal generator means the paper's model moves
    # each generator's shifts by a common offset (tests/test_measurement.py keeps that miss).
    t3 = pd.read_csv(tables / "table3.csv").set_index("Model")
    cols = {"peer_correct": "All-Correct", "peer_wrong": "All-Wrong", "peer_mixed": "Mixed"}
    for gen in PLANTED:
        eta = planted[gen]["eta"]
        fitted = {c: mean(t3.loc[gen, col]) for c, col in cols.items()}
        assert sorted(cols, key=eta.get) == sorted(cols, key=fitted.get), (gen, eta, fitted)

    # table3_generator_mean: the variant's intervals cover the planted shifts, Asym_total and the
    # generator means; the paper model's cells are the same numbers as Table 3.
    tg = pd.read_csv(tables / "table3_generator_mean.csv")
    assert len(tg) == 2 * 4 and (tg["Fit"] == "main corpus").all()
    tg = tg.set_index(["Model", "Quantity"])
    for gen in PLANTED:
        for c, col in cols.items():
            assert tg.loc[(gen, col), "Paper model"] == t3.loc[gen, col]
            checks.append((f"level {gen}", col, planted[gen]["eta"][c], tg.loc[(gen, col), "Generator-mean variant"]))
        checks.append((f"level {gen}", "Asym_total", planted[gen]["asym_total"],
                       tg.loc[(gen, "Asym_total"), "Generator-mean variant"]))
        checks.append((f"level {gen}", "mu_g", planted[gen]["quality_mean"],
                       tg.loc[(gen, "All-Wrong"), "mu_g (variant)"]))
        for col in (*cols.values(), "Asym_total"):
            row = tg.loc[(gen, col)]
            assert row["Difference"] == pytest.approx(mean(row["Generator-mean variant"]) - mean(row["Paper model"]),
                                                      abs=2e-3)
    # The paper's model pushes the better generator's shifts up and the weaker one's down, so
    # the variant moves them the other way (variant minus paper: lower for the better one).
    shifts = tg.loc[tg.index.get_level_values("Quantity").isin(list(cols.values())), "Difference"]
    diff = shifts.groupby(level="Model").mean()
    assert diff["mistral-sim"] < 0 < diff["gemma-sim"], diff
    # Coverage of the 12 planted values by their 95% intervals, counted by independent unit:
    # each γ_j is one unit, and each generator's shifts, Asym_total and μ_g are one more, since
    # they share that generator's level error (μ_g up by δ moves all its shifts down by about
    # δ and Asym_total up by 2δ). This seeded run has one such miss: mistral-sim's level, μ_g
    # +0.82 [+0.40, +1.43] against +0.4 (the answers' own Round-1 mean is +0.43), with its
    # All-Correct and Asym_total intervals missing with it. A γ unit misses with probability 0.05 and
    # a generator unit with ~0.1-0.15 (any of five correlated intervals), so two or more of the
    # four units miss by chance with probability ~0.05: at most one may miss. `near` still bounds
    # every single error to about 4 posterior SDs.
    assert len(checks) == 12
    missed_units = sorted({unit for unit, what, true, cell in checks if not covers(true, cell)})
    assert len(missed_units) <= 1, [c for c in checks if c[0] in missed_units]
    assert all(near(true, cell) for _, _, true, cell in checks), checks

    # Table 9: one row per fit, with the figures of its diagnostics file.
    t9 = pd.read_csv(tables / "table9.csv")
    assert len(t9) == 3 and (t9["Method"] == "NUTS").all() and (t9["Chains"] == 2).all()
    assert t9.loc[1, "Fit"] == "Generator baseline means, main corpus (table3_generator_mean)"
    assert t9.loc[2, "Fit"] == "Blind ratings, every execution (Table 15)"
    diag = json.loads((workdir / "results/conformity/fits/truthfulqa/main/diagnostics.json").read_text())
    assert t9.loc[0, "R-hat"] == pytest.approx(diag["max_rhat"])
    assert t9.loc[0, "ESS bulk"] == pytest.approx(diag["min_ess_bulk"])
    # 150 draws per chain cannot reach ESS 400: the failure must be flagged, not printed as fine.
    assert assess(diag, THRESHOLDS) and t9.loc[0, "Diagnostics"] == "FAILED"
    assert "Diagnostics FAILED for fit truthfulqa/main" in (tables / "table3.tex").read_text()
    assert (t9["Diagnostics"] == "FAILED").all()
    assert (pd.read_csv(tables / "table3_generator_mean.csv")["Diagnostics"] == "FAILED").all()

    # Table 17: the main-fit contrast, and no refit number where none could be fitted.
    t17 = pd.read_csv(tables / "table17.csv")
    assert len(t17) == 2 and (t17["Self-excluded fit"] == "not fitted").all()
    assert "remove every experimental rating" in (tables / "table17.tex").read_text()

    # Decomposition disabled, so neither it nor its θ_a refits: tables say so instead of printing numbers.
    assert pd.read_csv(tables / "table10.csv").iloc[0, 0].startswith("not estimated")
    assert pd.read_csv(tables / "table20.csv").iloc[0, 0].startswith("not estimated: no decomposition-corpus fit")

    # Per-answer blind latent quality (the blind-quality fit) for the convergent-validity table.
    q = pd.read_parquet(workdir / "results/conformity/quality/truthfulqa.parquet")
    assert len(q) == N_ITEMS * 2 * 8 and q["answer_id"].is_unique and (q["theta_sd"] > 0).all()
    assert set(q["corpus"]) == {"main"}
    # The synthetic answers carry their true θ in the text: the posterior means track it.
    answers = pd.read_parquet(workdir / "results/conformity/answers/truthfulqa.parquet")
    true_theta = answers.set_index("answer_id")["text"].str.extract(r"q=([+-]?[\d.]+)")[0].astype(float)
    r = q.set_index("answer_id")["theta_mean"].corr(true_theta.reindex(q["answer_id"]).set_axis(q["answer_id"]))
    assert r > 0.6, r
    assert os.path.exists(workdir / "results/conformity/fits/truthfulqa/main/posterior.nc")
