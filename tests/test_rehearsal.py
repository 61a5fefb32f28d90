"""The rehearsal: planted values from the published numbers, the synthetic backend's values
by dataset and corpus, and the reproduction report's rehearsal statuses."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from context_effects import rehearsal
from context_effects.conformity.synthetic import parse_quality_tag
from context_effects.llm.backends.synthetic import SyntheticBackend, effective_params
from context_effects.llm.types import LLMRequest, ModelRef, Sampling
from context_effects.paper.reproduction import COLUMNS, compare, to_markdown
from context_effects.tables import write_table

REPO = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- planted from the papers


def test_the_config_plants_what_the_published_numbers_say():
    """config/rehearsal.yaml's models are exactly what the module derives from
    paper/published/ and its own amel: design (a transcription, calibration or design
    change must be carried into it)."""
    paper = yaml.safe_load((REPO / "config/config.yaml").read_text())
    cfg = yaml.safe_load((REPO / "config/rehearsal.yaml").read_text())
    c = paper["conformity"]
    others = [*paper["amel"]["models"], *paper["amel"]["extra_models"], *paper["anchoring"]["judges"]]
    want = rehearsal.models_block(paper["models"], c["generators"], [*c["judges"], *c["hosted_judges"]], others,
                                  REPO / "paper/published", cfg["amel"])
    assert cfg["models"] == want
    # the design is the paper's
    for key in ("datasets", "generators", "judges", "hosted_judges", "hosted_judge_datasets", "seeds", "peers"):
        assert cfg["conformity"][key] == c[key], key
    assert cfg["amel"]["models"] == paper["amel"]["models"]
    assert cfg["anchoring"]["judges"] == paper["anchoring"]["judges"]
    for name, m in cfg["models"].items():  # the published rows select models by display name
        assert m["display_name"] == paper["models"][name]["display_name"]
        effective_params(name, m["synthetic"])  # valid planted values


def test_planted_shifts_follow_the_decomposition_arithmetic():
    """Table 10 prints Δ_total beside its increments: Δ_sp + Δ_content + Δ_pp must give it
    (to the rounding of three two-decimal numbers), and the main corpus's peer arms are
    Table 3's cells."""
    shifts = rehearsal.planted_shifts(REPO / "paper/published")
    t10 = rehearsal.read_table("table10", REPO / "paper/published")
    qwen = shifts["Qwen2.5-7B"]["truthfulqa"]
    assert qwen["eta"]["peer_wrong"] == pytest.approx(-0.209)  # Table 3, TruthfulQA, Qwen, all-wrong
    assert qwen["eta"]["no_peer"] == pytest.approx(-0.02)  # Table 10's Δ_sp
    short = {"Qwen2.5-7B": "qwen", "Mistral-7B": "mistral", "Gemma-2-9B": "gemma", "Llama-3.1-8B": "llama"}
    for display, key in short.items():
        dec = shifts[display]["truthfulqa"]["decomposition_eta"]
        for pol, pid in rehearsal.POLARITY_IDS.items():
            total = float(t10.loc[f"table10.{key}.{pid}.delta_total", "value"])
            assert dec[f"peer_{pol}"] == pytest.approx(total, abs=0.015 + 1e-9), (display, pol)
    assert set(shifts) == set(short)
    assert all(set(by) == {"truthfulqa", "mmlu_pro", "arc_challenge"} for by in shifts.values())


def test_calibrated_judging_reproduces_tables_2_and_5():
    v = rehearsal.calibrate_judging(REPO / "paper/published")
    pred = rehearsal.predicted_targets(v, rehearsal.planted_shifts(REPO / "paper/published"))
    targets = rehearsal.calibration_targets(REPO / "paper/published")
    assert len(targets) == 16
    misfit = {key: pred[key] - want for key, want in targets.items()}
    for key, d in misfit.items():
        if key.startswith("table2"):
            assert abs(d) < 0.2, key
    assert abs(misfit["table5.mean_correct.reference_augmented"]) < 0.1
    assert abs(misfit["table5.mean_correct.reference_free"]) < 0.01
    assert abs(misfit["table5.mean_incorrect.reference_free"]) < 0.01
    # the one target a judge of plausible slope cannot meet (module constants say why)
    assert 0.3 < misfit["table5.mean_incorrect.reference_augmented"] < 0.8
    # every rating stays possible, and the judge is not a step function
    assert np.all(np.diff(v["kappa"]) >= rehearsal.MIN_CUTPOINT_GAP - 1e-3)
    assert v["alpha"] == rehearsal.JUDGE_ALPHA and abs(np.log(v["alpha"])) / 0.4 < 2.5


# ----------------------------------------------------------------------------- values by dataset and corpus


def _req(meta, text):
    return LLMRequest(model=ModelRef(provider="synthetic", model_id="m"), messages=(("user", text),),
                      sampling=Sampling(max_tokens=300), meta=meta)


def _theta(backend, item, cond, dataset, corpus):
    meta = {"study": "conformity", "role": "generator", "item_id": item, "generator": "m", "condition": cond,
            "dataset": dataset, "corpus": corpus}
    (res,) = list(backend.run([_req(meta, f"{item} {cond} {dataset} {corpus}")]))
    return parse_quality_tag(res.text)


def test_generators_answer_with_the_shifts_of_their_dataset_and_corpus():
    params = {"empty_rate": 0.0, "sigma_theta": 0.2, "eta": {"peer_wrong": -0.1},
              "by_dataset": {"arc": {"eta": {"peer_wrong": -0.9}, "decomposition_eta": {"peer_wrong": 0.6},
                                     "quality_mean": 0.5}}}
    b = SyntheticBackend(model_name="m", seed=5, params=params)
    n = 600
    diffs = {}
    for dataset, corpus in (("tqa", "main"), ("arc", "main"), ("arc", "decomposition"), ("tqa", "decomposition")):
        d = [_theta(b, f"q{i}", "peer_wrong", dataset, corpus) - _theta(b, f"q{i}", "round1", dataset, corpus)
             for i in range(n)]
        diffs[dataset, corpus] = np.mean(d)
    se = math.sqrt(2) * 0.2 / math.sqrt(n)
    assert diffs["tqa", "main"] == pytest.approx(-0.1, abs=4 * se)
    assert diffs["arc", "main"] == pytest.approx(-0.9, abs=4 * se)
    assert diffs["arc", "decomposition"] == pytest.approx(0.6, abs=4 * se)
    assert diffs["tqa", "decomposition"] == pytest.approx(-0.1, abs=4 * se)  # no decomposition shift: η's
    # the dataset's quality mean moves its trial baselines
    r1 = {d: np.mean([_theta(b, f"q{i}", "round1", d, "main") for i in range(n)]) for d in ("tqa", "arc")}
    assert r1["arc"] - r1["tqa"] == pytest.approx(0.5, abs=0.1)
    planted = b.planted_effects()["conformity"]
    assert planted["by_dataset"]["arc"]["eta"]["peer_wrong"] == -0.9
    assert planted["by_dataset"]["arc"]["decomposition"]["delta_total"]["wrong"] == 0.6
    assert planted["decomposition"]["delta_total"]["wrong"] == -0.1


def test_judges_rate_with_the_values_of_their_dataset():
    b = SyntheticBackend(model_name="j", seed=2, params={"parse_failure_rate": 0.0,
                                                        "by_dataset": {"hard": {"beta": 2.0}}})
    ratings = {}
    for dataset in ("easy", "hard"):
        out = []
        for i in range(300):
            meta = {"study": "conformity", "role": "judge", "judge": "j", "pass": "blind", "dataset": dataset}
            (res,) = list(b.run([_req(meta, f"{i} [synthetic q=+0.5000] An answer.")]))
            out.append(int(res.text.split(":")[1].strip(" }")))
        ratings[dataset] = np.mean(out)
    assert ratings["hard"] < ratings["easy"] - 1.0  # a severer judge on that dataset


@pytest.mark.parametrize("params, message", [
    ({"by_dataset": {"tqa": {"empty_rate": 0.5}}}, "unknown keys in synthetic param 'by_dataset.tqa'"),
    ({"by_dataset": {"tqa": {"eta": {"peer_wrong": float("nan")}}}}, "by_dataset.tqa"),
    ({"by_dataset": {"tqa": {"alpha": -1.0}}}, "'alpha' must be > 0"),
    ({"decomposition_eta": {"round1": 0.1}}, "decomposition_eta"),
    ({"by_dataset": {"tqa": {"by_dataset": {}}}}, "unknown keys"),
])
def test_bad_values_by_dataset_are_refused(params, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        effective_params("m", params)


# ----------------------------------------------------------------------------- the report's statuses


def _published(rows):
    df = pd.DataFrame([{c: str(r.get(c, "")) for c in COLUMNS} for r in rows], columns=COLUMNS)
    df.insert(0, "study", "conformity")
    return df


def _row(id_, value, **kw):
    return {"id": id_, "section": "s", "quantity": id_, "value": value, "decimals": 3, **kw}


def test_rehearsal_statuses(tmp_path):
    t = tmp_path / "results/tables/conformity"
    table3 = pd.DataFrame({"Dataset": ["TruthfulQA"], "Model": ["Qwen2.5-7B"],
                           "All-Wrong": ["-0.250 [-0.300, -0.200]"], "All-Correct": ["-0.010 [-0.050, +0.030]"]})
    write_table(table3, t / "table3.csv", t / "table3.tex", "Shifts", "tab:3")
    table2 = pd.DataFrame({"Dataset": ["TruthfulQA"], "Executions": ["pooled"], "NoPeer": [4.40]})
    write_table(table2, t / "table2.csv", t / "table2.tex", "Means", "tab:2")
    table13 = pd.DataFrame({"Dataset": ["TruthfulQA"], "ROUGE": [0.3]})
    write_table(table13, t / "table13.csv", t / "table13.tex", "Metrics", "tab:13")
    q = "Dataset=TruthfulQA; Model=Qwen2.5-7B"
    published = _published([
        _row("inside", "-0.209", table="conformity/table3", row=q, column="All-Wrong"),
        _row("outside", "-0.100", table="conformity/table3", row=q, column="All-Correct"),
        _row("model-free", "4.535", table="conformity/table2", row="Dataset=TruthfulQA; Executions=pooled",
             column="NoPeer"),
        _row("text-metric", "0.31", table="conformity/table13", row="Dataset=TruthfulQA", column="ROUGE"),
        _row("no-table", "54"),
        _row("not-written", "-0.3", table="conformity/table10", row="Model=Qwen2.5-7B", column="Delta_sp"),
        _row("setting", "500", table="manifest", column="config.datasets.truthfulqa.n_items"),
    ])
    report = compare(published, tmp_path / "results", "rehearsal").set_index("id")
    assert report.loc["inside", "status"] == "recovered"
    assert report.loc["outside", "status"] == "missed"
    # -0.100 lies 0.050 below the interval's bottom, whose half-width is 0.040
    assert report.loc["outside", "distance"] == pytest.approx(0.05 / 0.04)
    assert "0.050" in report.loc["outside", "reason"]
    assert report.loc["model-free", "status"] == "not planted"
    assert report.loc["model-free", "role"] == "predicted"
    assert report.loc["model-free", "difference"] == pytest.approx(4.40 - 4.535)
    assert report.loc["text-metric", "status"] == "not planted" and "text metric" in report.loc["text-metric", "reason"]
    assert report.loc["no-table", "status"] == "not produced"
    assert report.loc["not-written", "status"] == "not produced"
    assert report.loc["setting", "status"] == "not planted"
    md = to_markdown(report.reset_index(), "rehearsal")
    assert "| conformity | 1 | 1 | 3 | 2 |" in md
    assert "| conformity | 1 / 2 | 0.500 |" in md
    ppc = md.split("## Posterior-predictive check")[1].split("## Every number")[0]
    assert "model-free" in ppc and "-0.135" in ppc and "outside" not in ppc
    assert "outside" in md.split("## Missed")[1].split("## Posterior")[0]


def test_recovered_share_interval_is_clopper_pearson():
    report = pd.DataFrame({"study": ["c"] * 20, "status": ["recovered"] * 19 + ["missed"]})
    k, n, share, lo, hi = rehearsal.recovered_share(report)
    assert (k, n, share) == (19, 20, 0.95)
    # Clopper-Pearson for 19/20: beta quantiles
    from scipy.stats import beta
    assert lo == pytest.approx(beta.ppf(0.025, 19, 2)) and hi == pytest.approx(beta.ppf(0.975, 20, 1))


def test_by_table_tells_a_wrong_definition_from_noise():
    """Two tables of planted values with calibrated intervals (sd 0.1 around the truth);
    one of them built wrong (its values scaled by 1.5): that table's misses exceed the
    nominal count and its slope leaves 1, the other's stay near 5% and 1."""
    rng = np.random.default_rng(7)
    planted = rng.uniform(-0.6, 0.6, 400)
    rows = []
    for i, truth in enumerate(planted):
        table = "conformity/table3" if i % 2 else "conformity/table10"
        estimate = truth * (1.5 if table == "conformity/table10" else 1.0) + rng.normal(0, 0.1)
        out = {"published": truth, "reproduced": estimate}
        status = "recovered" if abs(estimate - truth) <= 0.196 else "missed"
        distance = max(abs(estimate - truth) - 0.196, 0) / 0.196
        rows.append({**out, "id": f"x{i}", "status": status, "distance": distance if status == "missed" else np.nan,
                     "source": f"{table} [Dataset=TruthfulQA] Value"})
    t = rehearsal.by_table(pd.DataFrame(rows)).set_index("table")
    good, bad = t.loc["conformity/table3"], t.loc["conformity/table10"]
    assert good["checked"] == bad["checked"] == 200 and good["expected_missed"] == 10
    assert good["missed"] <= 20 and 0.9 < good["slope"] < 1.1 and abs(good["mean_difference"]) < 0.03
    assert bad["missed"] > 40 and bad["slope"] > 1.4


def test_values_by_dataset_left_empty_keep_a_models_revision():
    """A model that plants nothing by dataset or corpus keeps the fingerprint (and so the
    stored answers and the draws) it had before those parameters existed."""
    from context_effects.llm.backends.synthetic import model_revision

    plain = model_revision("m", {"gamma": 0.3})
    assert model_revision("m", {"gamma": 0.3, "by_dataset": {}, "decomposition_eta": {}}) == plain
    assert model_revision("m", {"gamma": 0.3, "by_dataset": {"tqa": {"beta": 1.0}}}) != plain
    assert model_revision("m", {"gamma": 0.3, "decomposition_eta": {"no_peer": 0.1}}) != plain
