"""The reproducibility table (Round-1 match rate and cross-execution rating agreement):
hand-computed values on small frames, and recovery of the synthetic backend's planted
execution noise (``round1_mismatch_rate``) at the trial level."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from context_effects.conformity import reproducibility as R
from context_effects.conformity.outputs import REGISTRY
from context_effects.llm.backends.synthetic import SyntheticBackend, planted_effects
from context_effects.llm.types import LLMRequest, ModelRef, Sampling

SEEDS = [42, 43, 44]


def _answers(texts: dict[tuple[str, str], list[str | None]]) -> pd.DataFrame:
    rows = []
    for (gen, item), per_seed in texts.items():
        for seed, text in zip(SEEDS, per_seed, strict=True):
            rows.append({"corpus": "main", "seed": seed, "generator": gen, "item_id": item, "condition": "round1",
                         "text": text})
            # Round-2 rows and other corpora never enter the Round-1 rate.
            rows.append({"corpus": "main", "seed": seed, "generator": gen, "item_id": item, "condition": "no_peer",
                         "text": "x"})
    rows.append({"corpus": "decomposition", "seed": 7, "generator": "g1", "item_id": "q1", "condition": "round1",
                 "text": "other"})
    return pd.DataFrame(rows)


def test_round1_match_rates_by_hand():
    answers = _answers({
        ("g1", "q1"): ["a", "a", "a"],  # all match: pairs 3/3
        ("g1", "q2"): ["a", "a", "b"],  # pairs 1/3
        ("g1", "q3"): ["a", "b", "c"],  # pairs 0/3
        ("g2", "q1"): ["a", "a", None],  # no answer in seed 44: out of "all", pairs 1/1
        ("g2", "q2"): ["a", "a", "a"],
    })
    t = R.round1_match({"truthfulqa": answers}, SEEDS, {"g1": "G1"}, {"truthfulqa": "TruthfulQA"})
    assert (t.loc[t["Dataset"] == R.ALL, ["Units", "Value"]].to_numpy()
            == t.loc[(t["Dataset"] == "TruthfulQA") & (t["Model"] == R.ALL), ["Units", "Value"]].to_numpy()).all()
    t = t.loc[t["Dataset"] == "TruthfulQA"].set_index(["Quantity", "Model"])
    g1_all = t.loc[(R.MATCH_ALL, "G1")]
    assert (g1_all["Units"], g1_all["Value"]) == (3, pytest.approx(1 / 3))
    # Wilson interval of 1/3 by hand: centre (p + z²/2n)/(1 + z²/n), half z·sqrt(p(1-p)/n + z²/4n²)/(1 + z²/n).
    z, n, p = R.Z95, 3, 1 / 3
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    assert g1_all["CI low"] == pytest.approx(centre - half) and g1_all["CI high"] == pytest.approx(centre + half)
    assert t.loc[(R.MATCH_PAIRWISE, "G1"), "Value"] == pytest.approx((1 + 1 / 3 + 0) / 3)
    pooled_all = t.loc[(R.MATCH_ALL, R.ALL)]
    assert (pooled_all["Units"], pooled_all["Value"]) == (4, pytest.approx(2 / 4))
    pooled_pairs = t.loc[(R.MATCH_PAIRWISE, R.ALL)]
    assert (pooled_pairs["Units"], pooled_pairs["Value"]) == (5, pytest.approx((1 + 1 / 3 + 0 + 1 + 1) / 5))
    shares = np.array([1, 1 / 3, 0, 1, 1])
    half = R.Z95 * shares.std(ddof=1) / math.sqrt(5)
    assert pooled_pairs["CI low"] == pytest.approx(max(0, shares.mean() - half))
    assert pooled_pairs["CI high"] == pytest.approx(min(1, shares.mean() + half))
    assert (t["Executions"] == 3).all()


def _ratings(values: dict[tuple[str, str], list[float | None]], judge="j1") -> pd.DataFrame:
    rows = []
    for (item, cond), per_seed in values.items():
        for seed, r in zip(SEEDS, per_seed, strict=True):
            rows.append({"corpus": "main", "pass": "blind", "status": "ok" if r is not None else "missing",
                         "seed": seed, "rating": r, "judge": judge, "item_id": item, "generator": "g1",
                         "condition": cond, "authority": "present" if cond.startswith("peer") else None})
            rows.append({"corpus": "main", "pass": "informed", "status": "ok", "seed": seed, "rating": 1.0,
                         "judge": judge, "item_id": item, "generator": "g1", "condition": cond,
                         "authority": None})
    return pd.DataFrame(rows)


def test_rating_agreement_by_hand():
    ratings = _ratings({("q1", "round1"): [4, 4, 4], ("q2", "round1"): [4, 4, 2], ("q3", "peer_wrong"): [1, None, 3],
                        ("q4", "no_peer"): [5, None, None]})  # one execution only: not a unit
    t = R.rating_agreement({"truthfulqa": ratings}, SEEDS)
    t = t.loc[t["Dataset"] == "truthfulqa"].set_index("Quantity")
    ident = t.loc[R.RATING_IDENTICAL]
    assert ident["Units"] == 3 and ident["Value"] == pytest.approx((1 + 1 / 3 + 0) / 3)
    # Perfect reproduction of varying ratings: alpha = 1.
    perfect = _ratings({("q1", "round1"): [4, 4, 4], ("q2", "round1"): [2, 2, 2], ("q3", "peer_wrong"): [5, 5, 5]})
    alpha = R.rating_agreement({"truthfulqa": perfect}, SEEDS).set_index(["Quantity", "Dataset"])
    assert alpha.loc[(R.RATING_ALPHA, "truthfulqa"), "Value"] == pytest.approx(1.0)
    assert alpha.loc[(R.RATING_ALPHA, R.ALL), "Value"] == pytest.approx(1.0)


def test_one_execution_gives_a_row_saying_so():
    t = R.reproducibility_table({}, {}, [42])
    assert len(t) == 1 and t.iloc[0]["Quantity"].startswith("not estimated: one execution configured")


def test_main_vs_decomposition_is_the_identical_prompt_rerun():
    """Constructed: the executions 42 and 43 reproduce every Round-1 answer, but the
    decomposition corpus's own run at seed 42 (same prompt, same seed) reproduces one of
    four. The cross-execution rate says 100%, the rerun the seed's 54% speaks of says 25%."""
    rows = []
    for item, decomposition in (("q1", "a"), ("q2", "b"), ("q3", "b"), ("q4", "b")):
        for seed in (42, 43):
            rows.append({"corpus": "main", "seed": seed, "generator": "g1", "item_id": item, "condition": "round1",
                         "text": "a"})
        rows.append({"corpus": "decomposition", "seed": 42, "generator": "g1", "item_id": item,
                     "condition": "round1", "text": decomposition})
        # Other arms and another label never enter the rerun rate.
        rows.append({"corpus": "decomposition", "seed": 42, "generator": "g1", "item_id": item,
                     "condition": "no_peer", "text": "a"})
        rows.append({"corpus": "decomposition", "seed": 7, "generator": "g1", "item_id": item,
                     "condition": "round1", "text": "a"})
    answers = {"truthfulqa": pd.DataFrame(rows)}
    labels = {"truthfulqa": "TruthfulQA"}
    t = R.reproducibility_table(answers, {}, [42, 43], {"g1": "G1"}, labels, decomposition_seed=42)
    t = t.set_index(["Quantity", "Dataset", "Model"])
    assert t.loc[(R.MATCH_PAIRWISE, R.ALL, R.ALL), "Value"] == 1.0
    rerun = t.loc[(R.MATCH_DECOMPOSITION, R.ALL, R.ALL)]
    assert (rerun["Units"], rerun["Value"], rerun["Executions"]) == (4, 0.25, 2)
    assert (rerun["CI low"], rerun["CI high"]) == pytest.approx(R.wilson(1, 4))
    assert t.loc[(R.MATCH_DECOMPOSITION, "TruthfulQA", "G1"), "Value"] == 0.25
    # Without a decomposition corpus there is no such row; with one execution it is still computed.
    plain = R.reproducibility_table(answers, {}, [42, 43], decomposition_seed=None)
    assert R.MATCH_DECOMPOSITION not in set(plain["Quantity"])
    single = R.reproducibility_table(answers, {}, [42], decomposition_seed=42)
    assert single.iloc[0]["Quantity"].startswith("not estimated")
    assert single.loc[single["Quantity"] == R.MATCH_DECOMPOSITION, "Value"].tolist() == [0.25] * 3


def test_registry_entry_reads_answers_and_ratings_tables():
    spec = REGISTRY.table("reproducibility")
    cfg = {"conformity": {"datasets": ["truthfulqa"], "seeds": [42, 43], "generators": ["g"], "judges": ["j"],
                          "hosted_judges": [], "enabled": True, "decomposition": {"enabled": True, "seed": 42}},
           "models": {"g": {"display_name": "G"}}, "run": {"kind": "synthetic"}}
    assert spec.inputs(cfg) == {"answers": ["results/conformity/answers/truthfulqa.parquet"],
                                "ratings": ["results/conformity/ratings/truthfulqa.parquet"]}
    s = spec.settings(cfg)
    assert s["seeds"] == [42, 43] and s["display_names"] == {"g": "G", "j": "j"}
    assert s["decomposition_seed"] == 42
    cfg["conformity"]["decomposition"]["enabled"] = False
    assert spec.settings(cfg)["decomposition_seed"] is None


# ----------------------------------------------------------------------------- synthetic recovery


def _round1_answers(params: dict, n_items: int, generators=("g1", "g2")) -> pd.DataFrame:
    rows = []
    backends = {g: SyntheticBackend(model_name=g, params=params) for g in generators}
    for g, b in backends.items():
        for i in range(n_items):
            for seed in SEEDS:
                meta = {"study": "conformity", "role": "generator", "item_id": f"q{i}", "generator": g,
                        "condition": "round1"}
                req = LLMRequest(model=ModelRef(provider="synthetic", model_id=g), messages=(("user", f"Q{i}?"),),
                                 sampling=Sampling(max_tokens=300, seed=seed), meta=meta)
                text = b.answer(req).text
                rows.append({"corpus": "main", "seed": seed, "generator": g, "item_id": f"q{i}",
                             "condition": "round1", "text": text})
    return pd.DataFrame(rows)


@pytest.mark.parametrize("rate", [0.0, 0.46])
def test_table_recovers_planted_round1_match_rate(rate):
    n_items = 300
    params = {"round1_mismatch_rate": rate, "empty_rate": 0.0}
    planted = planted_effects("g1", params)["conformity"]["round1_match_rate"]
    assert planted == pytest.approx(1 - rate)
    answers = _round1_answers(params, n_items)
    t = R.round1_match({"truthfulqa": answers}, SEEDS)
    t = t.loc[t["Dataset"] == R.ALL].set_index(["Quantity", "Model"])
    for quantity in (R.MATCH_ALL, R.MATCH_PAIRWISE):
        row = t.loc[(quantity, R.ALL)]
        assert row["Units"] == 2 * n_items
        if rate == 0.0:
            assert row["Value"] == 1.0  # greedy reruns reproduce every answer
            continue
        # Trials are the unit (each is stable with probability 1 - rate, independently): the
        # estimate lies within 3.3 binomial SDs of the planted rate and its 95% interval covers it.
        sd = math.sqrt(planted * (1 - planted) / row["Units"])
        assert abs(row["Value"] - planted) <= 3.3 * sd, (quantity, row["Value"], planted)
        assert row["CI low"] <= planted <= row["CI high"], (quantity, row.to_dict())
    # An unstable trial's three texts all differ, so both definitions give the same share here.
    assert t.loc[(R.MATCH_ALL, R.ALL), "Value"] == pytest.approx(t.loc[(R.MATCH_PAIRWISE, R.ALL), "Value"])


def test_round1_noise_leaves_round2_and_other_draws_to_the_request():
    # A stable trial's Round-1 text is the same under every sampling seed; Round-2 answers still differ.
    b = SyntheticBackend(model_name="g1", params={"round1_mismatch_rate": 0.0, "empty_rate": 0.0})

    def text(cond, seed):
        meta = {"study": "conformity", "role": "generator", "item_id": "q0", "generator": "g1", "condition": cond}
        req = LLMRequest(model=ModelRef(provider="synthetic", model_id="g1"), messages=(("user", "Q?"),),
                         sampling=Sampling(max_tokens=300, seed=seed), meta=meta)
        return b.answer(req).text

    assert text("round1", 42) == text("round1", 43)
    assert text("peer_wrong", 42) != text("peer_wrong", 43)


def test_registry_builder_reads_the_parquet_tables(tmp_path):
    spec = REGISTRY.table("reproducibility")
    answers = _answers({("g1", "q1"): ["a", "a", "a"], ("g1", "q2"): ["a", "b", "c"]})
    answers = answers.assign(answer_id=range(len(answers)), question="Q?")  # columns the builder must skip
    ratings = _ratings({("q1", "round1"): [4, 4, 4], ("q2", "round1"): [4, 2, 2]}).assign(reference=None)
    a, r = tmp_path / "answers.parquet", tmp_path / "ratings.parquet"
    answers.to_parquet(a)
    ratings.to_parquet(r)
    s = {"datasets": ["truthfulqa"], "seeds": SEEDS, "display_names": {"g1": "G1", "j1": "J1"}, "run_kind": "paper",
         "decomposition_seed": None}
    built = spec.build({"answers": [str(a)], "ratings": [str(r)]}, s)
    df = built.df.set_index(["Quantity", "Dataset", "Model"])
    assert df.loc[(R.MATCH_ALL, "TruthfulQA", "G1"), "Value"] == pytest.approx(0.5)
    assert df.loc[(R.RATING_IDENTICAL, R.ALL, "J1"), "Value"] == pytest.approx((1 + 1 / 3) / 2)
    assert any("no decomposition corpus configured" in n for n in built.notes)
    with_rerun = spec.build({"answers": [str(a)], "ratings": [str(r)]}, {**s, "decomposition_seed": 7})
    assert any("54%" in n and "seed 7" in n for n in with_rerun.notes)
    # _answers holds one decomposition Round-1 answer, at label 7, which no execution has: no trial to compare.
    assert R.MATCH_DECOMPOSITION not in set(with_rerun.df["Quantity"])
    one = spec.build({"answers": [], "ratings": []}, {**s, "seeds": [42]})
    assert one.df.iloc[0]["Quantity"].startswith("not estimated")
