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
    # The schema's default balanced length (10) is a cell of the design too.
    assert [(c["condition"], c["k"]) for c in cells] == [("yes_saturated", 3), ("no_saturated", 3), ("balanced", 10)]
    for c in cells[:2]:
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
    assert inputs["amel"] == ["results/amel/bias_scores.parquet"] + [
        f"results/tables/amel/{name}.csv" for name in ("effects", "asymmetry", "balanced", "length", "framing")]
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
    # A result file's JSON null (a statistic without an interval) is no interval.
    assert recovery_rows.row("x", "s", "m", "p", 0.5, 0.4, None, None)["covered"] == "n/a"


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


# ----------------------------------------------------------------------------- Study A (AMEL)

#: Two AMEL models planted unlike the defaults and unlike each other: a strong conformer,
#: steep in k, with no-saturated histories moving it 2.2 times as far (logit scale) as
#: yes-saturated ones; and a weak one, flat in k, moved less by no-saturated histories.
AMEL_A = {"amel_conformity": 1.6, "amel_negativity_asymmetry": 2.2, "amel_yes_bias": -0.4, "amel_k_scale": 4.0,
          "amel_deterministic_share": 0.3, "amel_uncertain_logit_sd": 1.5, "amel_asymmetry_token_share": 0.3}
AMEL_B = {"amel_conformity": 0.6, "amel_negativity_asymmetry": 0.7, "amel_yes_bias": 0.5, "amel_k_scale": 0.0,
          "amel_position_weights": {"start": 0.3, "middle": 0.9, "end": 1.2}}
#: Every kind of cell: saturated at two lengths (share 0.8 exact at both), balanced, position
#: runs, the framing swap; three samples per cell.
AMEL_DESIGN = {"history_lengths": [5, 10], "saturation_share": 0.8, "balanced_history_lengths": [5],
               "positions": ["start", "end"], "position_history_length": 6, "position_biased_turns": 2,
               "framing_swap": True, "framing_history_lengths": [5], "n_samples": 3}
METHODS = ("single_call", "samples", "first_token")
HEADLINE = ("mean BS", "Cohen's d", "ratio of mean BS no/yes", "ratio of mean |BS| no/yes", "d_z of |BS| no - yes",
            "mean shift of P(Yes), balanced", "mean |shift| balanced - mean |BS| saturated", "OLS slope of BS on k",
            "ratio of mean BS no/yes, standard framing", "ratio of mean BS no/yes, swapped framing")


def amel_config() -> dict:
    """Study A alone on the two models above (not validated)."""
    cfg = copy.deepcopy(BASE)
    cfg["models"] = {"sim-a": {"backend": "synthetic", "model_id": "sim-a", "family": "sim", "synthetic": AMEL_A},
                     "sim-b": {"backend": "synthetic", "model_id": "sim-b", "family": "other", "synthetic": AMEL_B}}
    cfg["conformity"], cfg["anchoring"] = {"enabled": False}, {"enabled": False}
    cfg["amel"] = {"models": ["sim-a", "sim-b"], "benchmark_datasets": ["truthfulqa"], "items_per_domain": 4,
                   **AMEL_DESIGN}
    return cfg


def simulate_bias_scores(cfg: dict, n_items: int, seed: int) -> pd.DataFrame:
    """The item-level bias scores of a simulated Study A run: each cell's ``n_samples`` replies drawn
    as the synthetic backend draws them (Yes with the simulator's exact P(Yes) of the item and
    cell, ``amel.synthetic.amel_p_yes``, from the meta the requests carry), the first reply the
    single call, the share of all of them the ``samples`` P(Yes), P(Yes) itself the first-token
    one; then the pipeline's own ``amel.scores.bias_scores``."""
    import numpy as np

    from context_effects.amel.design import design_cells
    from context_effects.amel.requests import cell_meta
    from context_effects.amel.scores import PROB_COLUMNS, bias_scores
    from context_effects.amel.synthetic import amel_p_yes

    a = cfg["amel"]
    rng = np.random.default_rng(seed)
    rows = []
    for model in a["models"]:
        backend = SyntheticBackend(model_name=model, params=cfg["models"][model]["synthetic"], seed=0)
        for i in range(n_items):
            item = {"item_id": f"s{seed}-i{i}", "domain": ("d1", "d2")[i % 2], "answer": ("Yes", "No")[i // 2 % 2]}
            for cell in design_cells(a):
                meta = cell_meta(cell, item, model, "samples", 0, a["saturation_share"])
                n = meta.get("n_biased") if cell.condition != "baseline" else None
                p = amel_p_yes(backend, item["item_id"], cell.condition, n, cell.position, cell.framing)
                replies = rng.random(int(a["n_samples"])) < p
                for method, value in (("single_call", float(replies[0])), ("samples", float(replies.mean())),
                                      ("first_token", p)):
                    rows.append({**dict.fromkeys(PROB_COLUMNS), "model": model, "domain": item["domain"],
                                 "item_id": item["item_id"], "answer": meta["answer"], "cell": cell.label,
                                 "framing": cell.framing, "condition": cell.condition, "k": int(meta.get("k") or 0),
                                 "n_biased": int(meta.get("n_biased") or 0), "position": cell.position,
                                 "method": method, "p_yes": value, "yes_no_mass": 1.0, "probe_missing": False,
                                 "saturation_share": meta.get("saturation_share"),
                                 "prevailing_share": meta.get("prevailing_share")})
    return bias_scores(pd.DataFrame(rows, columns=list(PROB_COLUMNS)), cfg["models"], entropy_threshold_bits=0.5)


def test_planted_json_has_the_balanced_history_cells():
    cfg = amel_config()
    cfg["amel"]["balanced_history_lengths"] = [3, 5]
    planted = planted_of(cfg)["amel"]
    assert planted["design"]["balanced_history_lengths"] == [3, 5] and planted["design"]["n_samples"] == 3
    for model in ("sim-a", "sim-b"):
        cells = {c["cell"]: c for c in planted["models"][model]["cells"]}
        for k in (3, 5):
            c = cells[f"standard:balanced:k{k}"]
            # A balanced history plants no shift: its logit shift and its shift of P(Yes) are 0.
            assert (c["condition"], c["k"], c["n_simulated"]) == ("balanced", k, k)
            assert c["logit_shift"] == 0.0 and c["expected_shift"] == pytest.approx(0.0, abs=1e-12)
            assert c["expected_abs"]["first_token"] == 0.0 and c["expected_abs"]["single_call"] > 0.1
        head = planted["models"][model]["headline"]["single_call"]
        assert head["balanced_mean_shift"] == pytest.approx(0.0, abs=1e-12) and math.isfinite(head["balanced_diff"])


def test_amel_planted_values_are_those_of_simulated_replies():
    """Known answer by brute force: 20,000 items per model, each cell's replies drawn with the
    simulator's P(Yes). Every cell's mean BS (shift) and mean |BS| by method, the second moment
    of each method's unit and Cohen's d lie within 4 standard errors of the quadrature."""
    import numpy as np

    from context_effects.amel.synthetic import amel_item_logit, amel_logit_shift, amel_p_yes
    from context_effects.llm.backends.synthetic import sigmoid

    planted = planted_of(amel_config())["amel"]
    n_items, n_samples = 20_000, AMEL_DESIGN["n_samples"]
    rng = np.random.default_rng(11)

    def close(values, target, what):
        values = np.asarray(values, float)
        se = values.std(ddof=1) / math.sqrt(len(values))
        assert abs(values.mean() - target) <= 4 * se + 1e-12, (what, values.mean(), target, se)

    for model, params in (("sim-a", AMEL_A), ("sim-b", AMEL_B)):
        backend = SyntheticBackend(model_name=model, params=params, seed=0)
        pm = planted["models"][model]
        z = np.array([amel_item_logit(backend, f"i{i}") for i in range(n_items)])

        def p_yes(framing, condition="baseline", n=None, position=None):
            s = 1.0 if framing == "standard" else -1.0
            return sigmoid(s * z + backend.params["amel_yes_bias"]
                           + amel_logit_shift(model, params, condition, n, position, framing))

        for c in pm["cells"]:  # the simulator's own P(Yes)
            args = (c["condition"], c["n_simulated"], c["position"], c["framing"])
            assert p_yes(c["framing"], *args[:3])[:5] == pytest.approx([amel_p_yes(backend, f"i{i}", *args)
                                                                       for i in range(5)])

        def measured(p):
            replies = rng.random((n_items, n_samples)) < p[:, None]
            return {"single_call": replies[:, 0].astype(float), "samples": replies.mean(axis=1), "first_token": p}

        base = {fr: measured(p_yes(fr)) for fr in ("standard", "swapped")}
        main = {m: [] for m in METHODS}
        for c in pm["cells"]:
            got = measured(p_yes(c["framing"], c["condition"], c["n_simulated"], c["position"]))
            balanced = c["condition"] == "balanced"
            sign = 1.0 if balanced or c["condition"] == "no_saturated" else -1.0
            for m in METHODS:
                value = sign * (got[m] - base[c["framing"]][m])
                close(value, c["expected_shift"] if balanced else c["expected_bias_score"], (model, c["cell"], m))
                close(np.abs(value), c["expected_abs"][m], (model, c["cell"], m, "abs"))
                if c["framing"] == "standard" and c["position"] is None and not balanced:
                    main[m].append((c["condition"], str(c["k"]), value))
        for m in METHODS:
            # The asymmetry table's pairs: an item's mean |BS| no-saturated minus yes-saturated.
            moments = pm["asymmetry_moments"]
            for key, keep in [("all", lambda k: True)] + [(k, lambda k, kk=k: k == kk) for k in moments["by_k"]]:
                side = {cond: np.mean([np.abs(v) for c, k, v in main[m] if c == cond and keep(k)], axis=0)
                        for cond in ("no_saturated", "yes_saturated")}
                diff = side["no_saturated"] - side["yes_saturated"]
                target = moments["all"] if key == "all" else moments["by_k"][key]
                close(diff, target[m]["mean"], (model, m, key, "E[D]"))
                close(diff ** 2, target[m]["second"], (model, m, key, "E[D^2]"))
            rows = np.stack([v for _, _, v in main[m]])  # main cells x items
            # The unit of the effects table's test: a row for one call per cell, else an item's mean.
            unit = rows if m == "single_call" else rows.mean(axis=0, keepdims=True)
            close((unit ** 2).mean(axis=0), pm["unit_second_moment"][m], (model, m, "E[U^2]"))
            s = amel_recovery.clustered_mean_d(unit.ravel(), np.tile(np.arange(n_items), len(unit)))
            assert abs(s["d"] - pm["headline"][m]["d"]) <= 4 * s["se_d"], (model, m, s, pm["headline"][m]["d"])


def test_headline_values_aggregate_the_cells_as_the_tables_do():
    """Known answers by hand on two constructed models' cell values."""

    def cell(condition, k, mean, absv, framing="standard", position=None):
        return {"cell": f"{framing}:{condition}:k{k}", "condition": condition, "k": k, "framing": framing,
                "position": position, "expected_bias_score": mean, "expected_shift": 0.0,
                "expected_abs": dict.fromkeys(METHODS, absv)}

    x = {"unit_second_moment": dict.fromkeys(METHODS, 0.5), "cells": [
        cell("yes_saturated", 2, -0.1, 0.3), cell("no_saturated", 2, -0.2, 0.4),
        cell("yes_saturated", 4, -0.2, 0.35), cell("no_saturated", 4, -0.3, 0.45), cell("balanced", 4, 0.0, 0.25),
        cell("yes_saturated", 2, -0.05, 0.2, "swapped"), cell("no_saturated", 2, -0.1, 0.3, "swapped"),
        cell("yes_saturated", 6, -0.9, 0.9, position="end")]}  # a position run: in no headline value
    y = {"unit_second_moment": dict.fromkeys(METHODS, 0.3), "cells": [
        cell("yes_saturated", 2, -0.3, 0.3), cell("no_saturated", 2, -0.1, 0.2),
        cell("yes_saturated", 4, -0.3, 0.3), cell("no_saturated", 4, -0.1, 0.2), cell("balanced", 4, 0.0, 0.1)]}
    design = {"framing_history_lengths": [2]}
    hx = amel_recovery.headline([x], design)["single_call"]
    assert hx["mean_bs"] == pytest.approx(-0.2) and hx["d"] == pytest.approx(-0.2 / math.sqrt(0.5 - 0.04))
    assert hx["ratio"] == pytest.approx(0.25 / 0.15) and hx["ratio_abs"] == pytest.approx(0.425 / 0.325)
    assert hx["by_k"]["2"]["ratio"] == pytest.approx(2.0) and hx["by_k"]["4"]["ratio"] == pytest.approx(1.5)
    # Slope of (k, mean) over the four main cells: Σ(k − 3)(m + 0.2) / Σ(k − 3)² = −0.2 / 4.
    assert hx["slope"] == pytest.approx(-0.05)
    assert hx["balanced_mean_shift"] == 0.0 and hx["balanced_diff"] == pytest.approx(0.25 - 0.4)
    assert hx["framing"]["standard"]["ratio"] == pytest.approx(2.0)
    assert hx["framing"]["swapped"]["ratio"] == pytest.approx(2.0)
    # The roster's pool: every cell of both models alike; d from the pooled moments.
    pooled = amel_recovery.headline([x, y], design)["samples"]
    assert pooled["mean_bs"] == pytest.approx(-0.2) and pooled["d"] == pytest.approx(-0.2 / math.sqrt(0.4 - 0.04))
    assert pooled["ratio"] == pytest.approx(0.175 / 0.225) and pooled["slope"] == pytest.approx(-0.025)
    assert pooled["balanced_diff"] == pytest.approx(0.175 - (0.45 + 0.35 + 0.3 + 0.2) / 4)
    assert "swapped" not in amel_recovery.headline([y], design)["samples"]["framing"]
    # d_z of the per-item |BS| difference from its moments: E[D] / sqrt(E[D²] − E[D]²), pooled alike.
    assert math.isnan(hx["d_z"])  # no moments, no value
    x["asymmetry_moments"] = {"all": dict.fromkeys(METHODS, {"mean": 0.1, "second": 0.05}), "by_k": {}}
    y["asymmetry_moments"] = {"all": dict.fromkeys(METHODS, {"mean": 0.3, "second": 0.15}), "by_k": {}}
    assert amel_recovery.headline([x], design)["first_token"]["d_z"] == pytest.approx(0.1 / math.sqrt(0.04))
    assert amel_recovery.headline([x, y], design)["first_token"]["d_z"] == pytest.approx(0.2 / math.sqrt(0.06))


def test_item_clustered_interval_known_answers():
    import numpy as np
    from scipy import stats as sstats

    from context_effects.amel import stats

    rng = np.random.default_rng(3)
    x = rng.normal(0.3, 1.0, 40)
    # One value per item: the mean's interval is the t interval.
    s = amel_recovery.clustered_mean_d(x, np.arange(40))
    m, lo, hi = stats.mean_ci(x)
    assert (s["mean"] - s["q"] * s["se_mean"], s["mean"] + s["q"] * s["se_mean"]) == pytest.approx((lo, hi))
    assert s["d"] == pytest.approx(x.mean() / x.std(ddof=1)) and s["q"] == pytest.approx(sstats.t.ppf(0.975, 39))
    # An item's rows all alike: the interval is that of one value per item, however many rows.
    rep = amel_recovery.clustered_mean_d(np.repeat(x, 3), np.repeat(np.arange(40), 3))
    assert rep["n"] == 120 and rep["n_clusters"] == 40
    assert (rep["se_mean"], rep["se_d"], rep["q"]) == pytest.approx((s["se_mean"], s["se_d"], s["q"]))
    # Large normal samples: d's standard error is the exact noncentral-t interval's, about sqrt((1 + d²/2) / n).
    big = rng.normal(-0.5, 2.0, 4000)
    b = amel_recovery.clustered_mean_d(big, np.arange(4000))
    d_lo, d_hi = stats.d_interval(b["d"], 4000)
    assert 2 * b["q"] * b["se_d"] == pytest.approx(d_hi - d_lo, rel=0.03)
    assert b["se_d"] == pytest.approx(math.sqrt((1 + b["d"] ** 2 / 2) / 4000), rel=0.05)
    assert math.isnan(amel_recovery.clustered_mean_d([1.0, 2.0], [0, 0])["se_mean"])  # one item: no interval


def test_the_rows_use_the_analysis_definitions():
    from context_effects.amel import analysis, outputs

    assert amel_recovery.METHODS == analysis.METHOD_ORDER and amel_recovery.UNIT == analysis.UNIT
    assert amel_recovery.ROW_UNIT_METHODS == analysis.ROW_UNIT_METHODS
    for name in amel_recovery.TABLES:
        assert amel_recovery.table_path(name) == outputs.table_path(name) and name in outputs.ANALYSES
        assert amel_recovery.table_of_path(amel_recovery.table_path(name)) == name
    assert amel_recovery.table_of_path("results/amel/bias_scores.parquet") is None


def test_amel_rows_cover_every_planted_value_across_simulated_runs(tmp_path):
    """The recovery test: on 10 simulated runs (120 items per model), every compared row's
    interval covers its planted value in most runs (a planted value off by more than a
    half-width would be missed in most), and 90% of all comparisons are covered."""
    import numpy as np

    cfg = amel_config()
    planted = planted_of(cfg)
    vcfg = validate_config(cfg)
    hits: dict[tuple[str, str], list[bool]] = {}
    runs = range(10)
    for rep in runs:
        bs = simulate_bias_scores(vcfg, 120, seed=rep)
        rows = pd.DataFrame(amel_recovery.bias_score_rows(planted, bs))
        if rep == 0:
            check_amel_rows(planted, bs, rows, tmp_path)
        judged = rows[rows["covered"].isin(["yes", "no"])]
        for model, parameter, covered in zip(judged["model"], judged["parameter"], judged["covered"]):
            hits.setdefault((model, parameter), []).append(covered == "yes")
    headline = {(m, f"{q} ({meth})") for m in ("overall", "sim-a", "sim-b") for q in HEADLINE for meth in METHODS}
    # Compared in most runs, but for ratios whose Fieller set is unbounded (listed with no interval)
    # where the denominator's mean is not clearly non-zero (sim-b's single calls at 120 items), and
    # sim-b's first-token slope: planted flat in k, its probabilities give every item the same
    # BS at each k, so the cluster-robust interval has zero width (no interval).
    rarely = {k for k in headline if len(hits.get(k, [])) < len(runs) / 2}
    assert {p for _, p in rarely} <= {"OLS slope of BS on k (first_token)", "ratio of mean BS no/yes (single_call)",
                                      "ratio of mean BS no/yes, standard framing (single_call)",
                                      "ratio of mean BS no/yes, swapped framing (single_call)"}, rarely
    assert {m for m, _ in rarely} <= {"sim-b"}
    missed = {k: f"{sum(v)}/{len(v)}" for k, v in hits.items() if sum(v) < len(v) / 2}
    assert not missed
    share = np.mean([c for v in hits.values() for c in v])
    assert share >= 0.9, share


def check_amel_rows(planted: dict, bs: pd.DataFrame, rows: pd.DataFrame, tmp_path) -> None:
    """What one simulated run's rows hold: the primary method first, every headline value of every
    method for the roster and each model, the tables' estimates, and the same rows from the
    tables written as CSV files and read back (``recovery.write_recovery``)."""
    from context_effects.amel import analysis

    assert rows["parameter"].iloc[0] == "mean BS (single_call)" and rows["model"].iloc[0] == "overall"
    order = [next(m for m in METHODS if p.endswith(f"({m})")) for p in rows["parameter"] if p.endswith(")")
             and not p.startswith("amel_")]
    assert order == sorted(order, key=METHODS.index)  # single_call, then samples, then first_token
    got = rows.set_index(["model", "parameter"])
    effects = analysis.effects_table(bs)
    for meth in METHODS:
        for model in ("overall", "sim-a", "sim-b"):
            for q in HEADLINE:
                assert (model, f"{q} ({meth})") in got.index, (model, q, meth)
        printed = effects[(effects["method"] == meth) & (effects["scope"] == "model") & (effects["group"] == "sim-a")]
        assert got.loc[("sim-a", f"Cohen's d ({meth})"), "estimate"] == pytest.approx(printed["d"].iloc[0])
        head = planted["amel"]["models"]["sim-a"]["headline"][meth]
        assert got.loc[("sim-a", f"Cohen's d ({meth})"), "planted"] == pytest.approx(head["d"])
        assert got.loc[("overall", f"ratio of mean BS no/yes, k=10 ({meth})"), "planted"] == pytest.approx(
            planted["amel"]["pooled"]["headline"][meth]["by_k"]["10"]["ratio"])
    # The single-call d takes the item as the unit around the printed estimate (the table's takes the row).
    d = got.loc[("sim-a", "Cohen's d (single_call)")]
    assert d["ci_low"] < d["estimate"] < d["ci_high"] and "item-clustered" in d["note"]
    assert got.loc[("sim-b", "shift[standard:balanced:k5] (single_call)"), "planted"] == pytest.approx(0, abs=1e-12)

    # The tables as the pipeline writes them give the same rows.
    from context_effects.amel.outputs import analysis_table

    for name in amel_recovery.TABLES:
        path = tmp_path / amel_recovery.table_path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        analysis_table(name, bs, planted["amel"]["design"]).to_csv(path, index=False)
    (tmp_path / "planted.json").write_text(json.dumps(planted))
    bs_path = tmp_path / "bias_scores.parquet"
    bs.to_parquet(bs_path)
    table = recovery.write_recovery(tmp_path / "planted.json", [], [bs_path] + [
        tmp_path / amel_recovery.table_path(n) for n in amel_recovery.TABLES], [], tmp_path / "r.csv",
        tmp_path / "r.md", {})
    pd.testing.assert_frame_equal(table.reset_index(drop=True), rows.reset_index(drop=True), check_exact=False)

    # A roster model without planted values: its pooled rows are listed, not compared.
    other = bs[bs["model"] == "sim-b"].assign(model="real-c")
    mixed = pd.DataFrame(amel_recovery.bias_score_rows(planted, pd.concat([bs, other], ignore_index=True)))
    overall = mixed[mixed["model"] == "overall"]
    assert len(overall) and (overall["comparable"] == "no").all() and overall["note"].str.contains("real-c").all()
    mine = mixed[(mixed["model"] == "sim-a") & ~mixed["parameter"].str.startswith("amel_")]
    assert (mine["comparable"] == "yes").all()


# ----------------------------------------------------------------------------- Study H (anchoring)

#: A judge planted unlike the defaults (λ 0.3, δ_framing 0.1, noise 0.5, task SD 0.3, bias 0).
H_JUDGE = {**JUDGE, "anchoring_lambda": 0.6, "anchoring_framing_shift": 0.4, "anchoring_noise_sd": 0.7,
           "anchoring_task_bias_sd": 0.5, "anchoring_bias": 0.2}
#: (task, gold, prior, valid repetitions blind/framing/anchor, the scorer's pull status): priors
#: above, below and at gold; a task with a lost repetition; ties as the scorer labels them
#: (scored 0, kept); a task without a blind score (left out of the pull).
H_TASKS = [("t0", 5, 2, (3, 3, 3), "ok"), ("t1", 2, 4, (3, 3, 3), "ok"), ("t2", 3, 5, (3, 2, 3), "ok"),
           ("t3", 4, 1, (3, 3, 3), "ok"), ("t4", 1, 3, (2, 3, 3), "ok"), ("t5", 3, 3, (3, 3, 3), "tie"),
           ("t6", 4, 4, (3, 3, 2), "tie"), ("t7", 2, 1, (3, 3, 3), "ok"), ("t8", 5, 4, (3, 3, 3), "ok"),
           ("t9", 3, 2, (0, 3, 3), "missing")]


def anchoring_run(judge: str, per_task: list[dict], estimate: float = 0.5) -> dict:
    """A Study H result file with the scorer's per-task rows and a summary of constant estimates."""
    stat = {"estimate": estimate, "ci_low": estimate - 0.2, "ci_high": estimate + 0.2}
    return {"model": {"name": judge}, "scorer": {"per_task": per_task, "summary": {
        "pull": {"mean": stat, "median": stat}, "pull_ties_excluded": {"mean": stat, "median": stat},
        "anchor_vs_framing": {"signed_mean": stat, "signed_mean_ties_excluded": stat, "framing_minus_blind": 0.4}}}}


def h_per_task() -> list[dict]:
    return [{"task_id": t, "gold_score": g, "prior_score": p, "n_blind": nb, "n_framing": nf, "n_anchor": na,
             "pull_status": st, "pull_vs_framing_status": "missing" if nf == 0 else ("tie" if st == "tie" else "ok"),
             "mean_blind": math.nan if nb == 0 else 3.0, "mean_framing": 3.0, "framing_minus_blind": 0.1 * g}
            for t, g, p, (nb, nf, na), st in H_TASKS]


def test_anchoring_targets_are_the_scorers_statistics_in_expectation():
    """Brute force: 200,000 simulated runs of the judge (scores drawn by the simulator's reply rule)
    over the tasks above; each statistic of the pull table as the scorer computes it, averaged
    over the runs, lies within 0.005 of the planted value the recovery table derives."""
    import numpy as np

    from context_effects.anchoring.scoring import task_metrics
    from context_effects.anchoring.synthetic import answer, condition_mean

    judge = "gemma-judge"
    planted = planted_of(config(**{judge: H_JUDGE}))
    backend = SyntheticBackend(model_name=judge, params=H_JUDGE, seed=int(planted["backend_seed"]))
    sd = backend.params["anchoring_noise_sd"]
    rng = np.random.default_rng(2024)

    class Eps:  # hands the simulator's reply rule a chosen standard-normal draw
        def __init__(self, eps):
            self.eps = eps

        def standard_normal(self):
            return self.eps

    def scores(mu, eps):
        return np.clip(np.floor(mu + sd * eps + 0.5), 1, 5)

    # The vectorised reply rule is the simulator's: the same draw gives the same score.
    for t, g, p, _, _ in H_TASKS[:4]:
        for cond in ("blind", "framing", "anchor"):
            eps = rng.standard_normal(8)
            meta = {"study": "anchoring", "task_id": t, "condition": cond, "gold_score": g, "prior_score": p}
            sim = [json.loads(answer(backend, None, meta, Eps(e))[0])["score"] for e in eps]
            assert sim == scores(condition_mean(backend, t, g, cond, p), eps).tolist()

    runs = 200_000
    stats = {"blind": [], "framing": []}
    fmb = []
    draws = {}
    for t, g, p, ns, _ in H_TASKS:
        draws[t] = {cond: scores(condition_mean(backend, t, g, cond, p), rng.standard_normal((runs, max(n, 1))))
                    for cond, n in zip(("blind", "framing", "anchor"), ns)}
        means = {cond: (draws[t][cond].mean(axis=1) if n else np.full(runs, np.nan))
                 for cond, n in zip(("blind", "framing", "anchor"), ns)}
        for ref in ("blind", "framing"):
            if ns[("blind", "framing").index(ref)] == 0:
                continue  # no reference score: the scorer leaves the task out
            tie = np.abs(p - means[ref]) <= 1e-9
            stats[ref].append((np.where(tie, 0.0, np.sign(p - means[ref]) * (means["anchor"] - means[ref])), tie))
        if ns[0] and ns[1]:
            fmb.append(means["framing"] - means["blind"])

    # The statistic above is the scorer's: its per-task rows on the first simulated runs.
    tasks = pd.DataFrame([{"task_id": t, "gold_score": g, "prior_score": p, "source": "s", "answer_kind": "a",
                           "prior_direction": "above", "prior_verdict": "pass"} for t, g, p, _, _ in H_TASKS])
    for r in range(3):
        judgments = pd.DataFrame([{"task_id": t, "condition": cond, "repetition": i, "score": float(s)}
                                  for t, *_ in H_TASKS for cond, sc in draws[t].items() for i, s in enumerate(sc[r])
                                  if not (t == "t9" and cond == "blind")])
        judgments["score"] = judgments["score"].astype("Int64")
        ours = task_metrics(judgments, tasks, 3).set_index("task_id")
        used = [t for t, *_ in H_TASKS if t != "t9"]
        assert ours.loc[used, "pull"].tolist() == pytest.approx([v[r] for v, _ in stats["blind"]])
        assert ours.loc[[t for t, *_ in H_TASKS], "pull_vs_framing"].tolist() == pytest.approx(
            [v[r] for v, _ in stats["framing"]])

    brute, pooled = {}, {}
    for ref, name in (("blind", "pull (mean"), ("framing", "anchor vs framing (signed mean")):
        values = np.stack([v for v, _ in stats[ref]])  # tasks x runs
        ties = np.stack([tie for _, tie in stats[ref]])
        # Ties scored 0: the mean over tasks; ties left out: the pulls' sum over the untied count.
        brute[f"{name}, implied by λ)"] = values.mean()
        brute[f"{name}, ties excluded, implied by λ)"] = values[~ties].mean()
        pooled[ref] = {"median": values.ravel(), "median, ties excluded": values[~ties]}
    brute["framing - blind (mean, implied by δ_framing)"] = np.mean(fmb)

    rows = pd.DataFrame(anchoring_recovery.pull_rows(planted, {judge: anchoring_run(judge, h_per_task())}))
    got = rows.set_index("parameter")["planted"]
    # The rows the table has always had first, then the ones it checks now too.
    for name in sorted(brute, key=lambda n: "ties excluded" in n):
        assert got[name] == pytest.approx(brute[name], abs=0.005), (name, got[name], brute[name])
    for key, pool in pooled["blind"].items():
        median = got[f"pull ({key}, implied by λ)"]
        # The pooled runs' CDF reaches one half at the planted median (a discrete distribution).
        assert np.mean(pool < median - 1e-9) <= 0.5 + 0.005 and np.mean(pool <= median + 1e-9) >= 0.5 - 0.005
    assert got["anchoring_lambda"] == 0.6


def test_anchoring_exact_distributions_known_answers():
    import numpy as np

    from context_effects.anchoring.synthetic import expected_pull

    judge = "gemma-judge"
    b = SyntheticBackend(model_name=judge, params=H_JUDGE, seed=0)
    for t, g, p, (nb, nf, na), _ in H_TASKS[:-1]:
        for ref, n in (("blind", nb), ("framing", nf)):
            values, probs, tie = anchoring_recovery.task_distribution(b, t, g, p, ref, n, na)
            assert probs.sum() == pytest.approx(1.0)
            # Its mean is the scorer's estimand in expectation as the simulator states it.
            assert float(values @ probs) == pytest.approx(expected_pull(b, t, g, p, n, reference=ref))
            assert (values[tie] == 0).all()
    v = np.array([0.0, 1.0, 2.0, 3.0])
    assert anchoring_recovery.pooled_median(v, np.array([0.1, 0.3, 0.2, 0.4])) == 2.0
    assert anchoring_recovery.pooled_median(v, np.array([0.2, 0.3, 0.1, 0.4])) == 1.5  # CDF stops at 1/2
    assert anchoring_recovery.pooled_median(v, np.array([2.0, 6.0, 2.0, 0.0])) == 1.0  # weights, not probabilities


def test_anchoring_rows_keep_ties_and_leave_out_missing_tasks():
    import numpy as np

    judge = "gemma-judge"
    planted = planted_of(config())
    b = SyntheticBackend(model_name=judge, params=JUDGE, seed=0)
    # A tie stays in the primary estimand (scored 0); a missing pull does not count.
    tasks = [("t1", 5, 2, "ok"), ("t2", 2, 4, "tie"), ("t3", 3, 5, "missing")]
    pull = sum(expected_pull(b, t, g, p, 3) for t, g, p, st in tasks if st != "missing") / 2
    per_task = [{"task_id": t, "gold_score": g, "prior_score": p, "pull_status": st, "n_blind": 3, "n_framing": 3,
                 "n_anchor": 3, "pull_vs_framing_status": "ok", "mean_blind": 3.0, "mean_framing": 3.0,
                 "framing_minus_blind": 0.1} for t, g, p, st in tasks]
    h = pd.DataFrame(anchoring_recovery.pull_rows(planted, {judge: anchoring_run(judge, per_task, pull)}))
    h = h.set_index("parameter")
    assert h.loc["pull (mean, implied by λ)", "planted"] == pytest.approx(pull)
    assert h.loc["pull (mean, implied by λ)", "covered"] == "yes"
    assert "primary" in h.loc["pull (mean, implied by λ)", "note"]
    framing = [expected_pull(b, t, g, p, 3, reference="framing") for t, g, p, _ in tasks]
    assert h.loc["anchor vs framing (signed mean, implied by λ)", "planted"] == pytest.approx(np.mean(framing))
    # framing - blind has no interval in the scorer's summary: a t interval over tasks, here degenerate (all 0.1).
    fmb = h.loc["framing - blind (mean, implied by δ_framing)"]
    assert (fmb["ci_low"], fmb["ci_high"]) == pytest.approx((0.1, 0.1)) and fmb["comparable"] == "yes"
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


# ----------------------------------------------------------------------------- the shared synthetic run


def test_the_synthetic_runs_table_checks_every_headline_value(synthetic_run):
    """``config/synthetic.yaml``'s recovery table: for every method (the primary one first) the
    headline values of Study A, overall and per model, and every statistic of Study H's pull
    table, each compared with its planted value and recovered (Study A: but for the few rows a
    95% interval misses by chance). The paper does not read the table: the run is asked for it
    (two jobs, planted.json and the table, on the run's finished results)."""
    res = synthetic_run.snakemake("--cores", "1", recovery.RECOVERY_CSV)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    table = pd.read_csv(synthetic_run.repo / recovery.RECOVERY_CSV, keep_default_na=False, na_values=[""])
    models = ("qwen-sim", "llama-sim")
    amel = table[table["study"] == "amel"]
    assert amel["parameter"].iloc[0] == "mean BS (single_call)"
    got = amel.set_index(["model", "parameter"])
    rows = [(m, f"{q} ({meth})") for meth in METHODS for m in ("overall", *models) for q in HEADLINE]
    assert not [r for r in rows if r not in got.index]
    head = got.loc[rows]
    assert (head["comparable"] == "yes").all()
    # Only a ratio goes without a comparison: its Fieller set is unbounded when the denominator's
    # mean is not clearly non-zero at the run's 16 items per model.
    assert head[head["covered"] == "n/a"].index.get_level_values(1).str.startswith("ratio").all()
    # Recovered, but for what a 95% interval misses by chance: a few rows, near their interval
    # (runs so far missed one row of about 185, within 0.3 half-widths; a wrong planted value
    # would be missed in most rows of its kind, and far).
    amel_judged = amel[amel["covered"] != "n/a"]
    missed = amel_judged[amel_judged["covered"] == "no"]
    half = (missed["ci_high"] - missed["ci_low"]) / 2
    outside = ((missed["ci_low"] - missed["planted"]).clip(lower=0)
               + (missed["planted"] - missed["ci_high"]).clip(lower=0))
    assert len(missed) <= 0.05 * len(amel_judged) and (outside <= half).all(), missed
    primary = head[head.index.get_level_values(1).str.endswith("(single_call)")]
    assert primary.loc[primary["covered"] != "n/a", "covered"].eq("yes").all()  # the primary analysis' headline
    cells = amel[amel["parameter"].str.startswith("shift[standard:balanced:k6]")]
    assert len(cells) == 2 * len(METHODS) and (cells["planted"].abs() < 1e-12).all()
    h = table[table["study"] == "anchoring"].set_index(["model", "parameter"])
    for judge in models:
        for name in ("pull (mean, implied by λ)", "pull (median, implied by λ)",
                     "pull (mean, ties excluded, implied by λ)", "pull (median, ties excluded, implied by λ)",
                     "anchor vs framing (signed mean, implied by λ)",
                     "anchor vs framing (signed mean, ties excluded, implied by λ)",
                     "framing - blind (mean, implied by δ_framing)"):
            assert h.loc[(judge, name), "covered"] == "yes", (judge, name, h.loc[(judge, name)].to_dict())


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
    bs = table[table["parameter"].str.startswith("bias_score[") & table["parameter"].str.endswith("(single_call)")]
    assert len(bs) == 2 and bs["estimate"].notna().all() and (bs["model"] == "gen-a").all()
    # The primary analysis leads, and its headline values are read from the tables as written.
    amel = table[table["study"] == "amel"]
    assert amel["parameter"].iloc[0] == "mean BS (single_call)" and amel["source"].iloc[0] == "tables/amel/effects"
    d = amel[amel["parameter"] == "Cohen's d (single_call)"].set_index("model")
    effects = pd.read_csv(workdir / "results/tables/amel/effects.csv")
    printed = effects[(effects["method"] == "single_call") & (effects["scope"] == "overall")]["d"].iloc[0]
    assert d.loc["overall", "estimate"] == pytest.approx(printed) and d.loc["overall", "comparable"] == "yes"
    assert "shift[standard:balanced:k10] (single_call)" in set(amel["parameter"])
    h = table[table["study"] == "anchoring"].set_index("parameter")
    assert h.loc["anchor vs framing (signed mean, implied by λ)", "covered"] in ("yes", "no")
    assert h.loc["framing - blind (mean, implied by δ_framing)", "ci_low"] <= \
        h.loc["framing - blind (mean, implied by δ_framing)", "ci_high"]
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
