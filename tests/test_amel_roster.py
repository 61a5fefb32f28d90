"""Study A against the seed's design: roster and extras, one measurement per comparison,
balanced histories, "predominantly" saturated histories, enough code-review items, and
multiple-choice verification items that show their options."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as sps

from conftest import REPO
from context_effects.amel import dag as amel_dag
from context_effects.amel.analysis import effects_table, scaling_table, size_order
from context_effects.amel.design import Cell, DomainItems, build_messages, design_cells, n_prevailing, verdicts
from context_effects.amel.items import load_item_file, select_items, verification_items
from context_effects.amel.scores import bias_scores
from test_amel import amel_config, model_cfg, sim_items

ROSTER = ["qwen2.5-7b", "mistral-7b", "gemma-2-9b", "llama-3.1-8b", "gpt-5-nano", "gpt-5.2", "claude-haiku",
          "claude-sonnet", "claude-opus", "gemini-flash", "gemini-pro"]


@pytest.fixture(scope="module")
def paper_amel():
    return yaml.safe_load((REPO / "config/config.yaml").read_text())["amel"]


def test_paper_config_runs_the_seed_roster_with_extras_marked(paper_amel):
    assert paper_amel["models"] == ROSTER
    assert paper_amel["extra_models"] == ["gpt-4o", "gpt-5.4-mini"]
    assert not set(paper_amel["models"]) & set(paper_amel["extra_models"])


def test_extra_models_are_asked_but_marked(tmp_path):
    cfg = amel_config(extra_models=["x-sim"])
    cfg["models"]["x-sim"] = cfg["models"]["qwen-sim"]
    assert amel_dag.models(cfg) == ["qwen-sim", "x-sim"] and amel_dag.roster(cfg) == ["qwen-sim"]
    info = amel_dag.score_models(cfg)
    assert not info["qwen-sim"]["extra_model"] and info["x-sim"]["extra_model"]
    with pytest.raises(ValueError, match="not defined under `models`"):
        amel_dag.extra_models({**cfg, "amel": {**cfg["amel"], "extra_models": ["nope"]}})
    with pytest.raises(ValueError, match="list each once"):
        amel_dag.extra_models({**cfg, "amel": {**cfg["amel"], "extra_models": ["qwen-sim"]}})


def _toy_bs(models: dict[str, tuple[str, float, bool]], n_items: int = 6, seed: int = 0) -> pd.DataFrame:
    """Main-design bias scores: per model (provider, mean BS, extra) n items x 2 polarities x 2 k."""
    rng = np.random.default_rng(seed)
    rows = []
    for rank, (model, (provider, mu, extra)) in enumerate(models.items()):
        for i in range(n_items):
            for pol in ("yes", "no"):
                for k in (5, 50):
                    rows.append(dict(model=model, method="samples", domain="d", item_id=f"i{i}", framing="standard",
                                     position=None, k=k, condition=f"{pol}_saturated", polarity=pol,
                                     bs=mu + rng.normal(0, 0.05), provider=provider, params_b=np.nan,
                                     display_name=model, extra_model=extra, list_rank=rank,
                                     stratum="uncertain", congruent=False, baseline_congruent=False))
    return pd.DataFrame(rows)


def test_within_provider_scaling_covers_the_roster_in_size_order():
    models = {"gpt-5-nano": ("openai", -0.30, False), "gpt-5.2": ("openai", -0.15, False),
              "claude-haiku": ("claude", -0.22, False), "claude-sonnet": ("claude", -0.18, False),
              "claude-opus": ("claude", -0.17, False), "gemini-flash": ("gemini", -0.18, False),
              "gemini-pro": ("gemini", -0.27, False), "gpt-4o": ("openai", -0.5, True)}
    bs = _toy_bs(models)
    order = size_order(bs)
    assert "gpt-4o" not in set(order["model"])  # extras stay out of the roster's scaling
    ranks = dict(zip(order["model"], order["size_rank"]))
    assert (ranks["claude-haiku"], ranks["claude-sonnet"], ranks["claude-opus"]) == (1, 2, 3)
    assert (ranks["gpt-5-nano"], ranks["gpt-5.2"], ranks["gemini-flash"], ranks["gemini-pro"]) == (1, 2, 1, 2)
    table = scaling_table(bs)
    assert set(table["method"]) == {"samples"} and not table["extra_model"].any()
    prov = table[table["scope"] == "provider"].set_index("group")
    assert prov.loc["claude", "contrast"] == "claude-opus - claude-haiku"
    # Largest minus smallest, paired per item on the item means (mean over polarity and k).
    means = bs.groupby(["model", "item_id"])["bs"].mean()
    ref = sps.ttest_rel(means["claude-opus"], means["claude-haiku"])
    assert (prov.loc["claude", "t"], prov.loc["claude", "n"]) == (pytest.approx(ref.statistic), 6)
    # Pooled rows are of the roster; the extra shows up by model only, marked.
    eff = effects_table(bs).set_index(["scope", "group"])
    assert eff.loc[("overall", "all"), "n"] == 7 * 6
    assert bool(eff.loc[("model", "gpt-4o"), "extra_model"]) and not eff.loc[("model", "gpt-5.2"), "extra_model"]
    assert eff.loc[("provider", "openai"), "n"] == 2 * 6


def test_each_comparison_uses_one_method_and_its_own_baseline():
    rows = []
    for method, base, treat in (("samples", 0.6, 0.8), ("first_token", 0.5, 0.9)):
        for i, item in enumerate(("a", "b", "c")):
            for cell, cond, k, p in (("standard:baseline", "baseline", 0, base + 0.01 * i),
                                     ("standard:yes_saturated:k5", "yes_saturated", 5, treat + 0.02 * i),
                                     ("standard:balanced:k5", "balanced", 5, base + 0.01 * i + 0.05)):
                rows.append(dict(model="m", domain="d", item_id=item, answer="Yes", cell=cell, framing="standard",
                                 condition=cond, k=k, n_biased=k, position=None, method=method, p_yes=p,
                                 saturation_share=0.8 if cond == "yes_saturated" else np.nan))
    bs = bias_scores(pd.DataFrame(rows), {"m": model_cfg(backend="vllm", model_id="m")}, entropy_threshold_bits=0.5)
    sat = bs[(bs["condition"] == "yes_saturated") & (bs["item_id"] == "a")].groupby("method")["bs"].first()
    assert sat["samples"] == pytest.approx(-(0.8 - 0.6)) and sat["first_token"] == pytest.approx(-(0.9 - 0.5))
    bal = bs[bs["condition"] == "balanced"]
    assert bal["bs"].isna().all() and np.allclose(bal["shift"], 0.05) and set(bal["polarity"]) == {"balanced"}
    eff = effects_table(bs)
    assert eff["method"].tolist()[:1] == ["samples"] and set(eff["method"]) == {"samples", "first_token"}
    overall = eff[eff["scope"] == "overall"].set_index("method")
    assert overall.loc["samples", "mean_bs"] == pytest.approx(-0.21)
    assert overall.loc["first_token", "mean_bs"] == pytest.approx(-0.41)
    assert (overall["saturation_share"] == 0.8).all()


def test_balanced_history_shares_items_and_is_half_yes_half_no():
    a = amel_config(history_lengths=[6], balanced_history_lengths=[6, 7], positions=[], framing_swap=False)["amel"]
    cells = design_cells(a)
    assert Cell("standard", "balanced", 6) in cells and Cell("standard", "balanced", 7) in cells
    assert sorted(verdicts(Cell("standard", "balanced", 6), seed=1, domain="d", item_id="t")) == ["No"] * 3 + ["Yes"] * 3
    assert verdicts(Cell("standard", "balanced", 7), seed=1, domain="d", item_id="t").count("No") == 4
    dom = DomainItems(select_items(sim_items(20), 4, seed=3))
    item = next(r["item_id"] for r in dom.rows if r["is_test"])
    bal = build_messages(dom, item, Cell("standard", "balanced", 6), seed=3)[0]
    sat = build_messages(dom, item, Cell("standard", "yes_saturated", 6, None, 6), seed=3)[0]
    assert [t for t in bal if t[0] != "assistant"] == [t for t in sat if t[0] != "assistant"]


def test_paper_config_saturation_is_predominant_and_histories_do_not_repeat(paper_amel):
    share = paper_amel["saturation_share"]
    assert 0.5 < share < 1.0
    assert all(n_prevailing(k, share) < k for k in paper_amel["history_lengths"])
    assert paper_amel["balanced_history_lengths"]
    # The code-review domain holds enough items that the longest history never repeats a turn.
    items = select_items(load_item_file(REPO / "data/amel/code_review.jsonl", "code_review"),
                         paper_amel["items_per_domain"], paper_amel.get("seed", 42))
    dom = DomainItems(items)
    longest = max([*paper_amel["history_lengths"], paper_amel["position_history_length"]])
    for item in items.loc[items["is_test"], "item_id"]:
        picks, repeats = dom.history(item, longest, seed=paper_amel.get("seed", 42))
        assert repeats == 0 and len(set(picks)) == longest


def test_multiple_choice_verification_items_show_the_options():
    bench = pd.DataFrame({
        "item_id": ["q1", "t1"], "dataset": ["arc_challenge", "truthfulqa"], "question": ["Which is a gas?", "Q?"],
        "gold_answer": ["Oxygen", "yes"], "wrong_attractor": ["Iron", "no"],
        "option_labels": [["A", "B", "C"], []], "options": [["Iron", "Oxygen", "Salt"], []],
        "gold_label": ["B", None], "attractor_label": ["A", None],
    })
    items = verification_items(bench, "mixed").set_index("item_id")
    assert items.loc["q1:correct", "content"] == (
        "Question: Which is a gas?\nOptions:\nA. Iron\nB. Oxygen\nC. Salt\nProposed answer: B. Oxygen")
    assert items.loc["q1:wrong", "content"].endswith("Proposed answer: A. Iron")
    assert items.loc["t1:correct", "content"] == "Question: Q?\nProposed answer: yes"


def test_published_model_rows_ask_only_for_methods_the_model_can_have():
    """Seed 000's Nano numbers (Figure 8's ratio 1.41 -> 1.12) come from sampled outcomes:
    GPT-5 nano returns no logprobs, so a first_token row of it can never exist. Every
    published per-model row names a method the paper config's model can produce."""
    import csv

    from context_effects.amel.requests import logprobs_available
    from context_effects.config import load_config, validate_config

    cfg = validate_config(load_config(REPO / "config" / "config.yaml"))
    seen = 0
    for path in sorted((REPO / "paper" / "published" / "amel").glob("*.csv")):
        for r in csv.DictReader(path.open(newline="")):
            sel = dict(part.split("=", 1) for part in r["row"].split("; ") if "=" in part)
            if sel.get("scope") != "model":
                continue
            seen += 1
            assert sel["group"] in cfg["models"], r["id"]
            assert sel.get("method") in ("single_call", "samples", "first_token"), r["id"]
            if sel["method"] == "first_token":
                assert logprobs_available(cfg, sel["group"]), f"{r['id']}: {sel['group']} has no logprobs"
            if r["id"].startswith("figure8.nano"):
                assert sel["method"] == "single_call" and not logprobs_available(cfg, sel["group"])
    assert seen >= 10


def test_a_stand_in_is_named_beside_the_seed_model_in_figure_14_and_the_report():
    """A retired seed model runs a stand-in (docs/deviations.yaml, hosted-stand-ins): the
    scaling figure and the reproduction report name both, never only one."""
    import matplotlib

    matplotlib.use("Agg")
    from context_effects.amel.plots import scaling_figure
    from context_effects.paper.reproduction import name_stand_ins

    models = {"claude-haiku": ("claude", -0.22, False), "claude-opus": ("claude", -0.17, False)}
    bs = _toy_bs(models)
    bs["stands_in_for"] = bs["model"].map({"claude-opus": "Claude Opus (seed 000; retired)", "claude-haiku": None})
    fig = scaling_figure(scaling_table(bs), bs)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert "claude: claude-opus\nfor Claude Opus" in labels and "claude: claude-haiku" in labels
    report = pd.DataFrame({
        "source": ["amel/effects [method=single_call; scope=model; group=claude-opus] d",
                   "amel/effects [method=single_call; scope=model; group=claude-haiku] d",
                   "amel/effects [method=single_call; scope=overall; group=all] d"],
        "reason": ["meets rule", "meets rule", ""],
    })
    cfg = {"claude-opus": {"model_id": "claude-opus-4-7", "stands_in_for": "Claude Opus (seed 000; retired)"},
           "claude-haiku": {"model_id": "claude-haiku-4-5", "stands_in_for": None}}
    got = name_stand_ins(report, cfg)["reason"].tolist()
    assert got == ["ran claude-opus-4-7, standing in for Claude Opus (seed 000; retired); meets rule",
                   "meets rule", ""]
