"""A synthetic run cannot silently diverge from its config: the `synthetic:` object is closed,
no profile is chosen from a model's name, the planted anchor scale must be the fit's, the
planted values are written from the config (results/synthetic/planted.json), and the recovery
table sets each one beside the run's estimate (context_effects.recovery)."""

from __future__ import annotations

import copy
import json
import math

import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake
from context_effects import recovery, recovery_rows, targets
from context_effects.amel import recovery as amel_recovery
from context_effects.anchoring import recovery as anchoring_recovery
from context_effects.conformity import recovery as conformity_recovery
from context_effects.amel.synthetic import amel_expected_bias_score
from context_effects.anchoring.synthetic import expected_pull
from context_effects.config import ConfigError, load_config, load_schema, validate_config
from context_effects.conformity.synthetic import DEFAULTS as C_DEFAULTS
from context_effects.llm.backends.synthetic import PROFILE_CHOICES, SyntheticBackend, nested_keys, parameter_names
from context_effects.report import recovery_section

GEN = {"quality_mean": 0.5, "sigma_b": 0.4, "eta": {"peer_wrong": -0.8}, "empty_rate": 0.0}
# Named like a family with built-in values (gemma: γ −0.33, β 0.2): none of them may leak in.
JUDGE = {"gamma": 0.0, "alpha": 2.0, "anchoring_lambda": 0.6}

BASE = {
    "run": {"label": "synthetic-recovery", "kind": "synthetic"},
    "datasets": {"truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl", "n_items": 4}},
    "models": {
        "gen-a": {"backend": "synthetic", "model_id": "gen-a", "family": "sim", "synthetic": GEN},
        "gemma-judge": {"backend": "synthetic", "model_id": "gemma-judge", "family": "sim", "synthetic": JUDGE},
    },
    "conformity": {
        "datasets": ["truthfulqa"], "generators": ["gen-a"], "judges": ["gemma-judge"], "seeds": [42],
        "primary_seed": 42, "decomposition": {"enabled": False},
        "fit": {"theta_anchor_sensitivity": [1.5]},
    },
    "amel": {"models": ["gen-a"], "benchmark_datasets": ["truthfulqa"], "items_per_domain": 4,
             "history_lengths": [3], "positions": [], "framing_swap": False},
    "anchoring": {"judges": ["gemma-judge"], "benchmark_datasets": ["truthfulqa"], "tasks_per_dataset": 3,
                  "repetitions": 2, "bootstrap_resamples": 200},
}


def config(**models) -> dict:
    """BASE with some models' `synthetic:` mappings replaced; not validated."""
    cfg = copy.deepcopy(BASE)
    for name, syn in models.items():
        cfg["models"][name]["synthetic"] = syn
    return cfg


def planted_of(cfg: dict) -> dict:
    return json.loads(json.dumps(recovery.planted_values(recovery.planted_inputs(validate_config(cfg)))))


# ----------------------------------------------------------------------------- schema


def test_synthetic_object_is_closed_and_lists_every_planted_parameter():
    model = load_schema()["$defs"]["model"]["properties"]["synthetic"]
    props = model["properties"]
    assert model["additionalProperties"] is False and model["default"] == {}
    assert set(props) == set(parameter_names())
    for key, allowed in nested_keys().items():
        assert props[key]["additionalProperties"] is False and set(props[key]["properties"]) == set(allowed)
    assert props["profile"]["enum"] == list(PROFILE_CHOICES) and "auto" not in PROFILE_CHOICES
    # No defaults are filled in: a filled default would overwrite a named profile's values.
    assert not [k for k, v in props.items() if "default" in v]
    assert all(v.get("description") for k, v in props.items())
    assert validate_config(config())["models"]["gen-a"]["synthetic"] == GEN  # nothing added


@pytest.mark.parametrize("syn, message", [
    ({"gama": 0.1}, "unknown key `models.gemma-judge.synthetic.gama`; allowed keys here: alpha,"),
    ({"eta": {"peer_wrongg": -1.0}}, "unknown key `models.gemma-judge.synthetic.eta.peer_wrongg`"),
    ({"amel_position_weights": {"last": 1.0}}, "unknown key `models.gemma-judge.synthetic.amel_position_weights.last`"),
    ({"gamma": "high"}, "`models.gemma-judge.synthetic.gamma`: 'high' is not of type 'number'"),
    ({"kappa": [1, 2, 3]}, "`models.gemma-judge.synthetic.kappa`"),
    ({"sigma_b": -0.1}, "`models.gemma-judge.synthetic.sigma_b`: -0.1 is less than the minimum of 0"),
    # What the schema cannot say is checked against the simulator while the config is parsed, too.
    ({"kappa": [1, 0, 2, 3]}, "`models.gemma-judge.synthetic`: synthetic param 'kappa' must be strictly increasing"),
])
def test_a_bad_planted_value_fails_at_parse_time_naming_the_key(syn, message):
    with pytest.raises(ConfigError) as err:
        validate_config(config(**{"gemma-judge": syn}))
    assert message in str(err.value)


# ----------------------------------------------------------------------------- no hidden profile


def test_no_profile_is_chosen_from_the_model_name():
    judge = planted_of(config())["conformity"]["judges"]["gemma-judge"]
    assert judge["gamma"] == 0.0 and judge["alpha"] == 2.0
    assert judge["beta"] == C_DEFAULTS["beta"] and judge["kappa"] == list(C_DEFAULTS["kappa"])
    # The removed `auto` fails while the config is parsed, listing the profiles to name instead.
    with pytest.raises(ConfigError, match=r"`models.gemma-judge.synthetic.profile` = 'auto' is not allowed; "
                                          r"allowed values: 'none', 'qwen'"):
        validate_config(config(**{"gemma-judge": {**JUDGE, "profile": "auto"}}))
    # A named profile is layered under the config's values, never over them.
    named = planted_of(config(**{"gemma-judge": {**JUDGE, "profile": "gemma"}}))
    assert named["models"]["gemma-judge"]["profile"] == "gemma"
    judge = named["conformity"]["judges"]["gemma-judge"]
    assert judge["gamma"] == 0.0 and judge["alpha"] == 2.0 and judge["beta"] == 0.2  # gemma's β, the config's γ, α


def test_shipped_synthetic_config_plants_what_it_says():
    cfg = validate_config(load_config(REPO / "config" / "synthetic.yaml"))
    planted = recovery.planted_values(recovery.planted_inputs(cfg))
    means = {g: v["quality_mean"] for g, v in planted["conformity"]["generators"].items()}
    assert means == {"qwen-sim": 0.5, "llama-sim": -0.3}  # unequal generator means, as the config says
    assert {j: v["gamma"] for j, v in planted["conformity"]["judges"].items()} == {"qwen-sim": 0.3, "llama-sim": -0.3}
    assert all(m["profile"] is None for m in planted["models"].values())


# ----------------------------------------------------------------------------- anchor scale


def test_planted_anchor_scale_must_be_the_fits():
    with pytest.raises(ConfigError) as err:
        validate_config(config(**{"gen-a": {**GEN, "theta_anchor": 2.0}}))
    msg = str(err.value)
    assert "`models.gen-a.synthetic.theta_anchor` = 2 but `conformity.fit.theta_anchor` = 1.5" in msg
    assert "set both to the same value (`conformity.fit.theta_anchor: 2` or " \
           "`models.gen-a.synthetic.theta_anchor: 1.5`)" in msg
    cfg = config()
    cfg["conformity"]["fit"]["theta_anchor"] = 2.0
    cfg["conformity"]["fit"]["theta_anchor_sensitivity"] = [2.0]
    with pytest.raises(ConfigError, match=r"`models.gen-a.synthetic.theta_anchor` = 1.5 \(the default\) but "
                                          r"`conformity.fit.theta_anchor` = 2"):
        validate_config(cfg)
    cfg["models"]["gen-a"]["synthetic"] = {**GEN, "theta_anchor": 2.0}
    assert validate_config(cfg)["conformity"]["fit"]["theta_anchor"] == 2.0
    # A judge's θ_a plants no anchor, and Study C off means no fit: neither is checked.
    validate_config(config(**{"gemma-judge": {**JUDGE, "theta_anchor": 3.0}}))
    off = config(**{"gen-a": {**GEN, "theta_anchor": 2.0}})
    off["conformity"]["enabled"] = False
    validate_config(off)


# ----------------------------------------------------------------------------- planted.json


def test_planted_json_holds_exactly_the_configured_values(tmp_path):
    cfg = validate_config(config())
    inputs = recovery.planted_inputs(cfg)
    json.dumps(inputs)  # the rule's params: plain data
    values = recovery.write_planted(inputs, tmp_path / "planted.json")
    planted = json.loads((tmp_path / "planted.json").read_text())
    assert planted == json.loads(json.dumps(values)) and planted["note"].startswith("SYNTHETIC")
    assert planted["models"]["gen-a"]["config"] == GEN and planted["models"]["gemma-judge"]["config"] == JUDGE
    gen = planted["conformity"]["generators"]["gen-a"]
    assert (gen["quality_mean"], gen["sigma_b"], gen["empty_rate"]) == (0.5, 0.4, 0.0)
    assert gen["sigma_theta"] == C_DEFAULTS["sigma_theta"] and gen["theta_anchor"] == 1.5
    assert gen["eta"] == {"round1": 0.0, **C_DEFAULTS["eta"], "peer_wrong": -0.8}
    assert gen["decomposition"]["delta_total"]["wrong"] == -0.8
    assert gen["decomposition"]["delta_pp"]["wrong"] == pytest.approx(-0.8 - C_DEFAULTS["eta"]["content_wrong"])
    assert gen["asym_total"] == pytest.approx(0.8 - C_DEFAULTS["eta"]["peer_correct"])
    assert planted["conformity"]["fit_theta_anchor"] == 1.5 and planted["conformity"]["anchor_generator"] == "gen-a"
    assert list(planted["conformity"]["judges"]) == ["gemma-judge"]  # by role: the generator judges nothing
    cells = planted["amel"]["models"]["gen-a"]["cells"]
    assert [(c["condition"], c["k"]) for c in cells] == [("yes_saturated", 3), ("no_saturated", 3)]
    for c in cells:
        assert c["expected_bias_score"] == pytest.approx(
            amel_expected_bias_score("gen-a", GEN, c["condition"], c["n_simulated"]))
    assert planted["amel"]["models"]["gen-a"]["conformity"] == 0.8  # the default: the config sets none
    assert planted["anchoring"]["judges"]["gemma-judge"]["lambda"] == 0.6
    assert set(planted["anchoring"]["judges"]) == {"gemma-judge"}


def test_targets_only_for_runs_with_synthetic_models():
    cfg = validate_config(config())
    assert recovery.targets(cfg) == [recovery.PLANTED, recovery.RECOVERY_CSV, recovery.RECOVERY_MD]
    assert set(recovery.targets(cfg)) <= set(targets.study_outputs(cfg))
    assert not [f for f in targets.report_tables(cfg) + targets.report_figures(cfg) if f.startswith("results/synthetic/")]
    inputs = targets.recovery_inputs(cfg)
    assert inputs["fits"] == ["results/conformity/fits/truthfulqa/main/summary.csv",
                              "results/conformity/fits/truthfulqa/generator-mean/summary.csv"]
    assert inputs["amel"] == ["results/amel/bias_scores.parquet"]
    assert inputs["anchoring"] == ["results/anchoring/runs/gemma-judge.json"]
    assert targets.recovery_report_input(cfg) == [recovery.RECOVERY_CSV]
    demo = validate_config(load_config(REPO / "config" / "demo.yaml"))
    assert targets.synthetic_targets(demo) == [] and targets.recovery_report_input(demo) == []


# ----------------------------------------------------------------------------- the table


def _summary_row(block, parameter, mean, lo, hi, generator=None, condition=None, judge=None):
    return {"block": block, "parameter": parameter, "generator": generator, "condition": condition, "judge": judge,
            "mean": mean, "sd": 0.1, "q2.5": lo, "q97.5": hi}


def test_covered_is_yes_inside_no_outside_and_na_without_an_interval():
    assert recovery_rows.covered(0.5, 0.0, 1.0) == "yes" and recovery_rows.covered(1.0, 0.0, 1.0) == "yes"
    assert recovery_rows.covered(-0.1, 0.0, 1.0) == "no" and recovery_rows.covered(1.2, 0.0, 1.0) == "no"
    assert recovery_rows.covered(0.5, math.nan, 1.0) == "n/a"
    assert recovery_rows.row("x", "s", "m", "p", 0.5, 0.4, 0.0, 1.0, comparable=False)["covered"] == "n/a"


def test_conformity_rows_compare_on_the_latent_scale():
    planted = planted_of(config())
    summary = pd.DataFrame([
        _summary_row("eta", "eta[gen-a,peer_wrong]", -0.7, -1.1, -0.3, "gen-a", "peer_wrong"),  # covers -0.8
        _summary_row("eta", "eta[gen-a,no_peer]", 0.3, 0.1, 0.5, "gen-a", "no_peer"),  # misses -0.05
        _summary_row("total_shift", "total_shift[gen-a,peer_wrong]", -0.7, -1.1, -0.3, "gen-a", "peer_wrong"),
        _summary_row("gamma", "gamma[gemma-judge]", 0.1, -0.2, 0.4, judge="gemma-judge"),  # covers 0
        _summary_row("alpha", "alpha[gemma-judge]", 1.0, 0.8, 1.2, judge="gemma-judge"),  # misses 2.0
        _summary_row("kappa", "kappa[1]", -2.2, -2.5, -2.0),
        _summary_row("sigma_b", "sigma_b", 0.6, 0.3, 0.9),
    ])
    paper = pd.DataFrame(conformity_recovery.fit_rows(planted, "truthfulqa", "main", summary))
    got = {(r.model, r.parameter): (r.planted, r.covered, r.comparable) for r in paper.itertuples()}
    assert got[("gen-a", "eta[peer_wrong]")] == (-0.8, "yes", "yes")
    assert got[("gen-a", "eta[no_peer]")] == (C_DEFAULTS["eta"]["no_peer"], "no", "yes")
    assert got[("gemma-judge", "gamma")] == (0.0, "yes", "yes")
    assert got[("gemma-judge", "alpha")] == (2.0, "no", "yes")
    assert got[("", "kappa[1]")] == (-2.25, "yes", "yes")
    # The paper's model has no generator mean: its σ_b absorbs them and μ_g is listed, not compared.
    assert got[("", "sigma_b")][1:] == ("n/a", "no")
    assert got[("gen-a", "mu_g (generator mean)")] == (0.5, "n/a", "no")
    assert "total_shift" not in " ".join(paper["parameter"])  # a duplicate of η, not counted twice
    assert "generator means planted (gen-a +0.50)" in paper.set_index("parameter").loc["eta[peer_wrong]", "note"]
    assert set(paper["fit_model"]) == {"paper"} and set(paper["source"]) == {"conformity/fits/truthfulqa/main"}

    # The generator-mean fit: μ_g is a parameter and σ_b is comparable.
    variant = pd.concat([summary, pd.DataFrame([_summary_row("mu_gen", "mu_gen[gen-a]", 0.4, 0.1, 0.7, "gen-a")])])
    gm = pd.DataFrame(conformity_recovery.fit_rows(planted, "truthfulqa", "generator-mean", variant))
    got = {(r.model, r.parameter): (r.planted, r.covered, r.comparable) for r in gm.itertuples()}
    assert got[("gen-a", "mu_g (generator mean)")] == (0.5, "yes", "yes")
    assert got[("", "sigma_b")] == (0.4, "yes", "yes")
    assert set(gm["fit_model"]) == {"generator-mean"} and not gm["note"].str.contains("generator means planted").any()

    table = recovery.recovery_table(planted, {("truthfulqa", "main"): summary,
                                              ("truthfulqa", "generator-mean"): variant})
    cov = recovery.coverage(table).set_index("fit_model")
    assert (cov.loc["paper", "compared"], cov.loc["paper", "covered"]) == (5, 3)
    assert cov.loc["paper", "not_compared"] == 2
    assert (cov.loc["generator-mean", "compared"], cov.loc["generator-mean", "covered"]) == (7, 5)
    with pytest.raises(ValueError, match="not compared"):
        conformity_recovery.fit_rows(planted, "truthfulqa", "theta-2.0", summary)


def test_amel_and_anchoring_rows():
    planted = planted_of(config())
    cells = {c["condition"]: c for c in planted["amel"]["models"]["gen-a"]["cells"]}
    yes, no = cells["yes_saturated"], cells["no_saturated"]
    # Around the planted mean for yes-saturated; far away (and tight) for no-saturated.
    bs = pd.DataFrame(
        [{"model": "gen-a", "cell": yes["cell"], "bs": yes["expected_bias_score"] + d, "method": "samples"}
         for d in (-0.01, 0.0, 0.01)]
        + [{"model": "gen-a", "cell": no["cell"], "bs": 0.2 + d, "method": "samples"} for d in (-0.001, 0.001)]
        # The secondary measurement never enters the primary rows.
        + [{"model": "gen-a", "cell": yes["cell"], "bs": 9.0, "method": "first_token"}]
    )
    amel = pd.DataFrame(amel_recovery.bias_score_rows(planted, bs)).set_index("parameter")
    assert amel.loc[f"bias_score[{yes['cell']}]", "covered"] == "yes"
    assert amel.loc[f"bias_score[{no['cell']}]", "covered"] == "no"
    assert amel.loc[f"bias_score[{yes['cell']}]", "estimate"] == pytest.approx(yes["expected_bias_score"])
    ratio = amel.loc["bias_score_ratio[standard:k3]"]
    assert ratio["covered"] == "n/a" and ratio["planted"] == pytest.approx(
        abs(no["expected_bias_score"]) / abs(yes["expected_bias_score"]))
    assert amel.loc["amel_conformity", "comparable"] == "no" and amel.loc["amel_conformity", "planted"] == 0.8

    judge = "gemma-judge"
    ph = planted["anchoring"]["judges"][judge]
    b = SyntheticBackend(model_name=judge, params=JUDGE, seed=0)
    # A tie stays in the primary estimand (scored 0); a missing pull does not count.
    tasks = [("t1", 5, 2, "ok"), ("t2", 2, 4, "tie"), ("t3", 3, 5, "missing")]
    pull = sum(expected_pull(b, t, g, p, 3) for t, g, p, st in tasks if st != "missing") / 2
    per_task = [{"task_id": t, "gold_score": g, "prior_score": p, "pull_status": st, "n_blind": 3,
                 "pull_vs_framing_status": "ok", "mean_blind": 3.0, "mean_framing": 3.0} for t, g, p, st in tasks]
    run = {"model": {"name": judge}, "scorer": {"per_task": per_task, "summary": {
        "pull": {"mean": {"estimate": pull, "ci_low": pull - 0.1, "ci_high": pull + 0.1}},
        "anchor_vs_framing": {"signed_mean": {"estimate": 5.0, "ci_low": 4.0, "ci_high": 6.0},
                              "framing_minus_blind": 0.1}}}}
    h = pd.DataFrame(anchoring_recovery.pull_rows(planted, {judge: run})).set_index("parameter")
    assert h.loc["pull (mean, implied by λ)", "planted"] == pytest.approx(pull)
    assert h.loc["pull (mean, implied by λ)", "covered"] == "yes"
    assert h.loc["anchor vs framing (signed mean, implied by λ)", "covered"] == "no"
    assert h.loc["anchoring_lambda", "planted"] == 0.6 and h.loc["anchoring_lambda", "comparable"] == "no"


def test_expected_score_is_the_reply_rule_in_expectation():
    import numpy as np

    rng = np.random.default_rng(0)
    for mu, sd in ((2.3, 0.5), (4.8, 0.7), (0.4, 0.3)):
        x = rng.normal(mu, sd, 200_000)
        mc = np.clip(np.floor(x + 0.5), 1, 5).mean()
        assert float(anchoring_recovery.expected_score(mu, sd)) == pytest.approx(mc, abs=0.01)
    assert float(anchoring_recovery.expected_score(3.49, 0.0)) == 3.0
    assert float(anchoring_recovery.expected_score(3.5, 0.0)) == 4.0


def test_markdown_and_run_report_section(tmp_path):
    table = pd.DataFrame([
        recovery_rows.row("conformity", "s", "g", "eta[x]", 0.1, 0.0, -0.5, 0.5, fit_model="paper"),
        recovery_rows.row("conformity", "s", "g", "eta[y]", 0.1, 0.9, 0.8, 1.0, fit_model="paper"),
        recovery_rows.row("conformity", "s", "g", "mu", 0.1, fit_model="paper", comparable=False, note="not a parameter"),
        recovery_rows.row("amel", "a", "m", "bs", -0.1, -0.1, -0.2, 0.0),
    ], columns=list(recovery_rows.COLUMNS))
    md = recovery.markdown(table)
    assert "- Study C (conformity), paper model: 1 of 2 planted values inside their 95% interval (50%); " \
           "1 listed without a comparison" in md
    assert "- Study A (AMEL): 1 of 1 planted values inside their 95% interval (100%)" in md
    assert "| s | paper | g | eta[y] | +0.100 | +0.900 | +0.800 | +1.000 | no | yes |  |" in md
    path = tmp_path / "recovery.csv"
    table.to_csv(path, index=False)
    lines = recovery_section(path)
    assert lines[0] == "## Planted values recovered" and "results/synthetic/recovery.md" in lines[2]
    assert any("paper model: 1 of 2" in line for line in lines)  # "n/a" survives the CSV round trip
    assert recovery_section(None) == []


# ----------------------------------------------------------------------------- the rules


def test_rules_write_planted_values_and_the_recovery_table(workdir):
    """AMEL and Study H end to end up to the recovery table (Study C's fits cost minutes; the
    dry run shows the recovery rule waiting on them, and its rows are tested above)."""
    cfg = config()
    cfg["conformity"]["enabled"] = False
    cfg["anchoring"]["tasks_per_dataset"] = 4
    cfg_path = workdir / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    args = ("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir), "--configfile=" + str(cfg_path))
    res = run_snakemake("--cores", "2", *args, recovery.RECOVERY_CSV, env={"OMP_NUM_THREADS": "1"}, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    planted = json.loads((workdir / recovery.PLANTED).read_text())
    assert planted == planted_of(cfg)
    table = pd.read_csv(workdir / recovery.RECOVERY_CSV, keep_default_na=False, na_values=[""])
    assert set(table["study"]) == {"amel", "anchoring"}
    assert set(table["covered"]) <= {"yes", "no", "n/a"}
    bs = table[table["parameter"].str.startswith("bias_score[")]
    assert len(bs) == 2 and bs["estimate"].notna().all() and (bs["model"] == "gen-a").all()
    assert table.loc[table["parameter"] == "anchoring_lambda", "planted"].tolist() == [0.6]
    md = (workdir / recovery.RECOVERY_MD).read_text()
    assert "## Coverage" in md and "- Study A (AMEL):" in md and "- Study H (anchoring):" in md

    # With Study C on, the table waits on the paper's fit and the generator-mean refit.
    with_c = config()
    cfg_path.write_text(yaml.safe_dump(with_c))
    dry = run_snakemake("-n", *args, recovery.RECOVERY_CSV)
    out = dry.stdout + dry.stderr
    assert dry.returncode == 0, out[-3000:]
    for variant in ("main", "generator-mean"):
        assert f"results/conformity/fits/truthfulqa/{variant}/summary.csv" in out
    assert "synthetic_planted" in out  # planted.json follows the changed config
