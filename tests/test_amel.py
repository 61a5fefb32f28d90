"""Study A (AMEL) library: items, histories, requests, probabilities, statistics, planted-effect recovery."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm
from scipy import stats as sps

from conftest import REPO
from context_effects.amel import stats
from context_effects.amel.design import (
    SYSTEM_PROMPT,
    Cell,
    DomainItems,
    as_transcript,
    build_messages,
    design_cells,
    verdicts,
)
from context_effects.amel.items import AmelItemError, load_item_file, select_items, verification_items
from context_effects.amel.requests import domain_requests, logprobs_available, methods_for, write_model_shard
from context_effects.amel.outputs import ANALYSES, REGISTRY, analysis_table
from context_effects.amel.scores import (
    baseline_uncertainty,
    bias_scores,
    binary_entropy,
    first_token_p_yes,
    parse_verdict,
    probabilities,
)
from context_effects.config import load_config, validate_config
from context_effects.outputs import FigureSpec, TableSpec
from context_effects.amel.synthetic import amel_expected_bias_score, amel_p_yes
from context_effects.llm.backends.synthetic import planted_effects
from context_effects.llm.factory import make_backend
from context_effects.llm.shards import answer_shard
from context_effects.llm.store.responses import ResponseStore

SIM = {"backend": "synthetic", "model_id": "qwen-sim"}


def amel_config(**overrides) -> dict:
    cfg = validate_config(
        {
            "models": {"qwen-sim": SIM},
            "datasets": {},
            "conformity": {"enabled": False},
            "anchoring": {"enabled": False},
            "amel": {"models": ["qwen-sim"], "benchmark_datasets": [], **overrides},
        }
    )
    return cfg


def model_cfg(**fields) -> dict:
    """One model's validated config (every field the schema defaults filled in)."""
    cfg = validate_config({"models": {"m": fields}, "datasets": {}, "conformity": {"enabled": False},
                           "amel": {"enabled": False}, "anchoring": {"enabled": False}})
    return cfg["models"]["m"]


def analysis_data(name: str, bs: pd.DataFrame, probs: pd.DataFrame) -> pd.DataFrame:
    """The item-level frame analysis ``name`` reads."""
    return probs if ANALYSES[name].data == "probabilities" else bs


def sim_items(n: int, domain: str = "sim", groups_of: int = 1) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "item_id": [f"{domain}-{i:04d}" for i in range(n)],
            "domain": domain,
            "group": [f"g{i // groups_of:04d}" for i in range(n)],
            "content": [f"Item number {i}." for i in range(n)],
            "question": "Is it right?",
            "question_swapped": "Is it wrong?",
            "answer": ["Yes", "No"] * (n // 2) + ["Yes"] * (n % 2),
            "source": "test",
        }
    )


# ----------------------------------------------------------------------------- items


def test_code_review_file_is_balanced_pairs():
    items = load_item_file(REPO / "data/amel/code_review.jsonl", "code_review")
    assert len(items) == 56 and items["group"].nunique() == 28
    assert (items.groupby("group")["answer"].apply(sorted) == pd.Series([["No", "Yes"]] * 28).values).all()
    assert (REPO / "data/amel/README.md").read_text().count("written for this project") == 1


def test_item_file_errors_name_line_and_fix(tmp_path):
    good = {"id": "a", "content": "x", "question": "q?", "question_swapped": "not q?", "answer": "Yes"}
    lines = [good, {**good, "id": "b", "answer": "yes"}, {**good, "id": "c", "content": ""}, {**good, "colour": 1}]
    path = tmp_path / "f.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n")
    with pytest.raises(AmelItemError) as err:
        load_item_file(path, "d")
    msg = str(err.value)
    assert "line 2: answer must be 'Yes' or 'No'" in msg
    assert "line 3: missing or empty field(s) ['content']" in msg
    assert "line 4: unknown field(s) ['colour']" in msg and "line 5: not JSON" in msg
    with pytest.raises(AmelItemError, match="does not exist; fix `amel.item_files`"):
        load_item_file(tmp_path / "missing.jsonl", "d")


def test_verification_items_from_benchmark_table():
    bench = pd.DataFrame(
        {
            "item_id": ["q1", "q2", "q3"],
            "dataset": "truthfulqa",
            "question": ["A?", "B?", "C?"],
            "gold_answer": ["a", "b", "c"],
            "wrong_attractor": ["x", "y", "z"],
        }
    )
    two = verification_items(bench, "truthfulqa")
    assert len(two) == 6 and set(two["group"]) == {"q1", "q2", "q3"}
    row = two[two["item_id"] == "q2:wrong"].iloc[0]
    assert row["answer"] == "No" and row["content"] == "Question: B?\nProposed answer: y"
    one = verification_items(bench, "truthfulqa", answers_per_question=1)
    assert len(one) == 3 and one["group"].is_unique and sorted(one["answer"]) == ["No", "Yes", "Yes"]


def test_select_items_balanced_tests_and_pool_order():
    items = select_items(sim_items(40, groups_of=2), 10, seed=1)
    test = items[items["is_test"]]
    assert len(test) == 10 and (test["answer"] == "Yes").sum() == 5
    assert test["group"].is_unique  # groups before second members
    # History pool: items of untested groups (one per group first), then the tested
    # groups' other items, then the test items.
    assert items["pool_rank"].tolist() == list(range(40))
    assert not items["is_test"].iloc[:30].any() and items["is_test"].iloc[30:].all()
    assert items["group"].iloc[:10].is_unique
    assert not set(items["group"].iloc[:20]) & set(test["group"])
    assert set(items["group"].iloc[20:30]) == set(test["group"])
    # Deterministic.
    pd.testing.assert_frame_equal(items, select_items(sim_items(40, groups_of=2).sample(frac=1, random_state=3), 10, 1))


def test_histories_are_drawn_per_item_skip_its_group_and_nest_across_lengths():
    dom = DomainItems(select_items(sim_items(60, groups_of=2), 10, seed=2))
    tests = [r["item_id"] for r in dom.rows if r["is_test"]]
    hists = [dom.history(t, 20, seed=2) for t in tests]
    for t, (picks, repeats) in zip(tests, hists):
        assert repeats == 0 and len(set(picks)) == 20
        assert all(dom.rows[p]["group"] != dom.row(t)["group"] for p in picks)
        assert dom.history(t, 5, seed=2)[0] == picks[:5]  # one item's histories nest across k
        assert DomainItems(dom.items).history(t, 20, seed=2)[0] == picks  # seeded: the same in a new process
    # Each test item gets its own history (no domain x k x polarity is one fixed history).
    assert len({tuple(h[0]) for h in hists}) == len(tests)
    assert dom.history(tests[0], 20, seed=3)[0] != hists[0][0]
    small = DomainItems(select_items(sim_items(6, groups_of=2), 4, seed=2))
    picks, repeats = small.history(small.rows[0]["item_id"], 7, seed=2)
    assert repeats == 3 and len(picks) == 7


# ----------------------------------------------------------------------------- design


def test_design_cells_and_verdict_sequences():
    a = amel_config()["amel"]
    cells = design_cells(a)
    # baseline + 2 x 4 lengths + balanced k = 10 + 2 x 3 positions + swapped baseline + 2 swapped
    # (k = 10 is a length already).
    assert len(cells) == 1 + 8 + 1 + 6 + 1 + 2
    sat = Cell("standard", "yes_saturated", 10, None, 10)
    assert verdicts(sat, seed=1, domain="d", item_id="t") == ["Yes"] * 10
    y = verdicts(Cell("standard", "yes_saturated", 10, None, 8), seed=1, domain="d", item_id="t")
    n = verdicts(Cell("standard", "no_saturated", 10, None, 8), seed=1, domain="d", item_id="t")
    assert y.count("Yes") == 8 and [{"Yes": "No", "No": "Yes"}[v] for v in y] == n  # mirror images
    # Another test item's opposing turns sit elsewhere (drawn per item), still mirrored.
    others_y = {tuple(verdicts(Cell("standard", "yes_saturated", 10, None, 8), seed=1, domain="d", item_id=f"t{i}"))
                for i in range(6)}
    assert len(others_y) > 1 and all(v.count("Yes") == 8 for v in others_y)
    others = None
    for pos, block in (("start", range(0, 5)), ("middle", range(22, 27)), ("end", range(45, 50))):
        v = verdicts(Cell("standard", "no_saturated", 50, pos, 5), seed=1, domain="d", item_id="t")
        assert all(v[i] == "No" for i in block)
        rest = [v[i] for i in range(50) if i not in block]
        base = verdicts(Cell("standard", "yes_saturated", 50, pos, 5), seed=1, domain="d", item_id="t")
        assert rest == [base[i] for i in range(50) if i not in block]  # only the block differs
        assert (rest.count("Yes"), rest.count("No")) == (22, 23)  # the other 45 turns balanced
        assert others in (None, rest)  # and the same sequence wherever the block sits
        others = rest


def test_the_paper_share_is_exact_at_every_length_and_an_inexact_one_is_named(caplog):
    from context_effects.config_checks import saturation_shares

    paper = validate_config(load_config(REPO / "config" / "config.yaml"))["amel"]
    assert saturation_shares(paper) == {5: 0.8, 10: 0.8, 20: 0.8, 50: 0.8}
    cells = [c for c in design_cells(paper) if c.condition == "yes_saturated" and c.position is None]
    assert {(c.k, c.n_biased) for c in cells} == {(5, 4), (10, 8), (20, 16), (50, 40)}
    with caplog.at_level("WARNING"):
        amel_config(history_lengths=[5, 10, 20, 50], saturation_share=0.9)
    assert "k = 5: 0.80, k = 10: 0.90, k = 20: 0.90, k = 50: 0.90" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING"):
        amel_config(history_lengths=[5, 10, 20, 50], saturation_share=0.8)
    assert "saturation_share" not in caplog.text


def test_only_manipulated_turns_differ_byte_for_byte():
    a = amel_config(history_lengths=[3, 6], position_history_length=6, position_biased_turns=2,
                    framing_history_lengths=[3], saturation_share=0.7)["amel"]
    dom = DomainItems(select_items(sim_items(20), 4, seed=3))
    item = next(r["item_id"] for r in dom.rows if r["is_test"])
    msgs = {c: build_messages(dom, item, c, seed=3)[0] for c in design_cells(a)}
    base = msgs[Cell("standard", "baseline")]
    assert base == (("system", SYSTEM_PROMPT), base[1]) and "Is it right? Answer Yes or No." in base[1][1]
    for cell, m in msgs.items():
        assert m[0] == ("system", SYSTEM_PROMPT)
        assert m[-1] == msgs[Cell(cell.framing, "baseline")][-1]  # the test item, byte-identical
        assert [r for r, _ in m] == ["system"] + ["user", "assistant"] * cell.k + ["user"]
        for other, m2 in msgs.items():
            if (other.k, other.framing) == (cell.k, cell.framing):
                # Same k and framing: every non-assistant turn identical.
                assert [t for t in m if t[0] != "assistant"] == [t for t in m2 if t[0] != "assistant"]
    swapped = msgs[Cell("swapped", "yes_saturated", 3, None, 2)]
    assert all("Is it wrong?" in c for r, c in swapped if r == "user")
    std = msgs[Cell("standard", "yes_saturated", 3, None, 2)]
    assert [c.replace("right", "wrong") for _, c in std] == [c for _, c in swapped]  # only the question differs
    text = as_transcript(std)
    assert text.startswith(SYSTEM_PROMPT) and text.endswith("Answer Yes or No.\n\nAssistant:")


# ----------------------------------------------------------------------------- requests


def test_methods_samples_for_every_model_first_token_where_logprobs():
    a = amel_config()["amel"]
    assert methods_for(a, logprobs=True) == ("samples", "first_token")
    assert methods_for(a, logprobs=False) == ("samples",)
    assert methods_for({**a, "first_token": False}, logprobs=True) == ("samples",)
    cfg = {"models": {"v": model_cfg(backend="vllm", model_id="v"), "c": model_cfg(backend="anthropic", model_id="c"),
                      "g": {**model_cfg(backend="openai", model_id="g"), "capabilities": {"logprobs": True}}}}
    assert logprobs_available(cfg, "v") and not logprobs_available(cfg, "c") and logprobs_available(cfg, "g")


def test_requests_are_sorted_for_prefix_reuse_and_sampled_where_needed():
    cfg = amel_config(history_lengths=[2, 4], position_history_length=8, position_biased_turns=2,
                      framing_history_lengths=[2], n_samples=3)
    items = select_items(sim_items(30), 5, seed=4)
    reqs = domain_requests(items, "qwen-sim", cfg["models"]["qwen-sim"], cfg["amel"], logprobs=True)
    n_cells = len(design_cells(cfg["amel"]))
    assert len(reqs) == 5 * n_cells * (3 + 1)
    assert [r.messages for r in reqs] == sorted(r.messages for r in reqs)
    first = [r for r in reqs if r.meta["method"] == "first_token"]
    assert len(first) == 5 * n_cells
    # Each test item's 4-turn yes-saturated history is its own (drawn per item); the
    # item's requests after it (3 samples, 1 first-token) are one contiguous run.
    run = [i for i, r in enumerate(reqs) if r.meta["cell"] == "standard:yes_saturated:k4"]
    assert len(run) == 5 * 4
    by_item: dict[str, list[int]] = {}
    for i in run:
        by_item.setdefault(reqs[i].meta["item_id"], []).append(i)
    for idx in by_item.values():
        assert idx == list(range(idx[0], idx[0] + 4)) and len({reqs[i].messages for i in idx}) == 1
    assert len({reqs[idx[0]].messages[1:9] for idx in by_item.values()}) == 5
    # No two cells of one item share a prompt (a short position run could, before redrawing).
    for item in by_item:
        prompts = {}
        for r in (r for r in first if r.meta["item_id"] == item):
            prompts.setdefault(r.messages, set()).add(r.meta["cell"])
        assert all(len(cells) == 1 for cells in prompts.values()), prompts.values()
    r0 = first[0]
    assert r0.sampling.max_tokens == 1 and r0.sampling.temperature == 0 and "Yes" in r0.sampling.probe_tokens
    claude = model_cfg(backend="anthropic", model_id="claude-x")
    sampled = domain_requests(items, "claude", claude, cfg["amel"], logprobs=False)
    # No first-token probabilities: its two baselines (both framings) are sampled
    # baseline_samples (5) times for the entropy strata, every other cell n_samples (3) times.
    assert len(sampled) == 5 * ((n_cells - 2) * 3 + 2 * 5) and {r.meta["method"] for r in sampled} == {"samples"}
    assert {r.sample_index for r in sampled if r.meta["condition"] == "baseline"} == {0, 1, 2, 3, 4}
    # The Anthropic API takes no temperature (llm/capabilities.py): not sent, its default of 1 applies.
    assert {r.sample_index for r in sampled if r.meta["condition"] != "baseline"} == {0, 1, 2}
    assert all(r.sampling.temperature is None for r in sampled)
    assert len({r.key for r in sampled}) == len(sampled)
    base = domain_requests(items, "gbase", model_cfg(backend="vllm", model_id="g", mode="completion"), cfg["amel"],
                           logprobs=True)
    assert all(len(r.messages) == 1 and r.mode == "completion" for r in base)


def test_every_sampled_request_has_its_own_seed_from_its_identity():
    """vLLM seeds a generator per request (docs/llm-layer.md, "Sampling seeds"): requests
    that share a seed share their noise. A cell's baseline and treated requests, two items
    and two samples each have their own seed, a hash of amel.seed and the request's
    identity: the same in every rebuild, within the range every engine takes."""
    cfg = amel_config(history_lengths=[2, 4], n_samples=3)
    items = select_items(sim_items(30), 5, seed=4)
    qwen = cfg["models"]["qwen-sim"]
    reqs = domain_requests(items, "qwen-sim", qwen, cfg["amel"], logprobs=True)
    sampled = [r for r in reqs if r.meta["method"] == "samples"]
    seeds = {(r.meta["item_id"], r.meta["cell"], r.sample_index): r.sampling.seed for r in sampled}
    assert len(seeds) == len(sampled) == 5 * len(design_cells(cfg["amel"])) * 3
    assert len(set(seeds.values())) == len(seeds)  # no two requests of the run share a draw
    one, two = sorted({r.meta["item_id"] for r in sampled})[:2]
    assert seeds[(one, "standard:baseline", 0)] != seeds[(one, "standard:no_saturated:k4", 0)]
    assert seeds[(one, "standard:baseline", 0)] != seeds[(two, "standard:baseline", 0)]
    assert seeds[(one, "standard:baseline", 0)] != seeds[(one, "standard:baseline", 1)]
    from context_effects.amel.requests import sample_seed
    from context_effects.llm.seeds import SEED_BITS, request_seed

    assert all(0 <= v < 2**SEED_BITS for v in seeds.values()) and SEED_BITS == 31
    # Derived from the identity alone: a rebuild gives the same seeds, another run seed or model others.
    r = sampled[0]
    cell = next(c for c in design_cells(cfg["amel"]) if c.label == r.meta["cell"])
    assert r.sampling.seed == sample_seed(42, "qwen-sim", "sim", r.meta["item_id"], cell, r.sample_index)
    assert [x.sampling.seed for x in domain_requests(items, "qwen-sim", qwen, cfg["amel"], logprobs=True)] == [
        x.sampling.seed for x in reqs]
    other_run = domain_requests(items, "qwen-sim", qwen, {**cfg["amel"], "seed": 43}, logprobs=True)
    other_model = domain_requests(items, "other", qwen, cfg["amel"], logprobs=True)
    for other in (other_run, other_model):
        assert not {x.sampling.seed for x in other if x.meta["method"] == "samples"} & set(seeds.values())
    # The derivation is pinned: changing it changes every key, so no stored answer is reused.
    assert request_seed(42, "amel", "samples", "m", "d", "i", "standard:baseline", 0) == 1095626000
    with pytest.raises(TypeError, match="strings and integers"):
        request_seed(42, 1.5)
    # The greedy first-token request draws nothing: it keeps the run seed. A model that takes
    # no seed (llm/capabilities.py) is sent none.
    assert {r.sampling.seed for r in reqs if r.meta["method"] == "first_token"} == {42}
    claude = domain_requests(items, "claude", model_cfg(backend="anthropic", model_id="claude-x"), cfg["amel"],
                             logprobs=False)
    assert {r.sampling.seed for r in claude} == {None}


def test_a_models_one_shard_holds_every_domain_in_order_each_sorted_for_prefix_reuse(tmp_path):
    """One shard per model (one model load for the study): the domains follow one another
    in the given order, each exactly its own prefix-sorted requests; nothing is lost."""
    from context_effects.llm.shards import read_request_shard

    cfg = amel_config(history_lengths=[2, 4], n_samples=2)
    paths, per_domain = [], []
    for domain, n in (("beta", 6), ("alpha", 4)):  # not alphabetical: the given order wins
        items = select_items(sim_items(24, domain=domain), n, seed=3)
        path = tmp_path / f"{domain}.parquet"
        items.to_parquet(path, index=False)
        paths.append(path)
        per_domain.append(domain_requests(items, "qwen-sim", cfg["models"]["qwen-sim"], cfg["amel"], logprobs=True))
    n = write_model_shard(paths, tmp_path / "req.parquet", model_name="qwen-sim", model_cfg=cfg["models"]["qwen-sim"],
                          amel_cfg=cfg["amel"], logprobs=True)
    shard, _ = read_request_shard(tmp_path / "req.parquet")
    assert n == len(shard) == len(per_domain[0]) + len(per_domain[1])
    assert [r.key for r in shard] == [r.key for r in per_domain[0] + per_domain[1]]
    assert [r.meta["domain"] for r in shard] == ["beta"] * len(per_domain[0]) + ["alpha"] * len(per_domain[1])


# ----------------------------------------------------------------------------- probabilities


def test_first_token_probability_and_sample_parsing():
    p, mass, missing = first_token_p_yes({"Yes": 0.3, "No": 0.1, "yes": 0.1}, None)
    assert p == pytest.approx(0.8) and mass == pytest.approx(0.5) and not missing
    p, _, missing = first_token_p_yes(None, {" Yes": math.log(0.6), "No": math.log(0.2), "The": math.log(0.1)})
    assert p == pytest.approx(0.75) and not missing
    p, _, missing = first_token_p_yes(None, {"Yes": math.log(0.6), "The": math.log(0.1)})
    assert p == 1.0 and missing
    assert math.isnan(first_token_p_yes({}, {"The": -0.1})[0])
    assert [parse_verdict(t) for t in ("Yes.", " no, because", "**Yes**", "Maybe", "", None)] == [
        "Yes", "No", "Yes", None, None, None,
    ]


def test_bias_score_entropy_and_congruence_by_hand():
    rows = [
        # item a (answer Yes): baseline 0.7; yes-sat 0.9 (r* = No: 0.1 - 0.3 = -0.2); no-sat 0.4 (r* = Yes: 0.4 - 0.7 = -0.3)
        ("a", "Yes", "standard:baseline", "standard", "baseline", 0, 0.7),
        ("a", "Yes", "standard:yes_saturated:k5", "standard", "yes_saturated", 5, 0.9),
        ("a", "Yes", "standard:no_saturated:k5", "standard", "no_saturated", 5, 0.4),
        ("b", "No", "standard:baseline", "standard", "baseline", 0, 1.0),
        ("b", "No", "standard:no_saturated:k5", "standard", "no_saturated", 5, 1.0),
    ]
    probs = pd.DataFrame(
        [dict(model="m", domain="d", item_id=i, answer=a, cell=c, framing=f, condition=cond, k=k, n_biased=k,
              position=None, method="first_token", p_yes=p) for i, a, c, f, cond, k, p in rows]
    )
    bs = bias_scores(probs, {"m": model_cfg(backend="vllm", model_id="m", family="fam", params_b=7)},
                     entropy_threshold_bits=0.5)
    got = bs.set_index(["item_id", "condition"])
    assert got.loc[("a", "yes_saturated"), "bs"] == pytest.approx(-0.2)
    assert got.loc[("a", "no_saturated"), "bs"] == pytest.approx(-0.3)
    assert got.loc[("a", "yes_saturated"), "baseline_entropy"] == pytest.approx(sps.entropy([0.7, 0.3], base=2))
    assert got.loc[("a", "yes_saturated"), "stratum"] == "uncertain"
    assert got.loc[("b", "no_saturated"), "baseline_entropy"] == 0 and got.loc[("b", "no_saturated"), "stratum"] == "deterministic"
    assert bool(got.loc[("a", "yes_saturated"), "congruent"]) and not bool(got.loc[("a", "no_saturated"), "congruent"])
    assert bool(got.loc[("b", "no_saturated"), "congruent"])
    assert set(bs["provider"]) == {"fam"} and set(bs["params_b"]) == {7.0}
    assert binary_entropy([0.0, 0.5, 1.0]).tolist() == [0.0, 1.0, 0.0]


def test_a_sampled_baseline_is_deterministic_only_when_every_sample_agrees():
    """2 dissenters in 20 samples (P = 0.1, H = 0.47 bits) pass the 0.5-bit threshold that was
    set for first-token probabilities; for sampled answers that item is uncertain."""
    rows = []
    for method in ("samples", "first_token"):
        for item, p_base in (("two-dissent", 0.1), ("all-agree", 1.0), ("one-dissent", 0.95)):
            rows += [dict(model="m", domain="d", item_id=item, answer="Yes", cell=c, framing="standard",
                          condition=cond, k=k, n_biased=k, position=None, method=method, p_yes=p)
                     for c, cond, k, p in (("standard:baseline", "baseline", 0, p_base),
                                           ("standard:no_saturated:k5", "no_saturated", 5, 0.5))]
    bs = bias_scores(pd.DataFrame(rows), {"m": model_cfg(backend="vllm", model_id="m", family="fam", params_b=7)},
                     entropy_threshold_bits=0.5)
    got = bs.set_index(["method", "item_id"])["stratum"]
    assert got[("samples", "two-dissent")] == "uncertain" and got[("first_token", "two-dissent")] == "deterministic"
    assert got[("samples", "one-dissent")] == "uncertain" and got[("first_token", "one-dissent")] == "deterministic"
    assert got[("samples", "all-agree")] == "deterministic" == got[("first_token", "all-agree")]


# ----------------------------------------------------------------------------- statistics


X = np.array([-0.21, -0.05, 0.02, -0.33, -0.12, 0.08, -0.19, -0.07, -0.26, 0.01, -0.15, -0.04])
Y = np.array([-0.11, 0.03, 0.05, -0.20, -0.02, 0.04, -0.25, 0.00, -0.10, 0.06, -0.09, -0.01])
K = np.array([5, 5, 5, 10, 10, 10, 20, 20, 20, 50, 50, 50])


def test_statistics_match_scipy_and_statsmodels():
    s = stats.one_sample(X)
    ref = sps.ttest_1samp(X, 0)
    assert s["t"] == pytest.approx(ref.statistic) and s["p"] == pytest.approx(ref.pvalue)
    assert s["d"] == pytest.approx(X.mean() / X.std(ddof=1))
    half = sps.t.ppf(0.975, len(X) - 1) * X.std(ddof=1) / math.sqrt(len(X))
    assert (s["ci_low"], s["ci_high"]) == pytest.approx((X.mean() - half, X.mean() + half))

    w = stats.welch(X, Y)
    ref = sps.ttest_ind(X, Y, equal_var=False)
    assert (w["t"], w["p"]) == pytest.approx((ref.statistic, ref.pvalue))
    sp = math.sqrt((X.var(ddof=1) + Y.var(ddof=1)) / 2)  # equal n: pooled = mean of variances
    assert w["d"] == pytest.approx((X.mean() - Y.mean()) / sp)

    p = stats.paired(np.abs(X), np.abs(Y))
    ref = sps.ttest_rel(np.abs(X), np.abs(Y))
    assert (p["t"], p["p"]) == pytest.approx((ref.statistic, ref.pvalue))
    diff = np.abs(X) - np.abs(Y)
    assert p["d_z"] == pytest.approx(diff.mean() / diff.std(ddof=1))

    rho, rho_p = stats.spearman(K, X)
    ref = sps.spearmanr(K, X)
    assert (rho, rho_p) == pytest.approx((ref.statistic, ref.pvalue))

    fit = stats.ols_slope(K, X)
    lin = sps.linregress(K, X)
    assert (fit["slope"], fit["se"], fit["p"], fit["intercept"]) == pytest.approx(
        (lin.slope, lin.stderr, lin.pvalue, lin.intercept)
    )
    ci = sm.OLS(X, sm.add_constant(K)).fit().conf_int()[1]
    tq = sps.t.ppf(0.975, len(K) - 2)
    assert (fit["ci_low"], fit["ci_high"]) == pytest.approx(tuple(ci))
    assert fit["ci_high"] == pytest.approx(lin.slope + tq * lin.stderr)

    # Repeated measures: 4 items (rows) at 3 positions (columns), against statsmodels' AnovaRM.
    from statsmodels.stats.anova import AnovaRM

    wide = np.column_stack([X[:4], X[4:8], X[8:]])
    rm = stats.rm_anova(wide)
    long = pd.DataFrame([(i, j, wide[i, j]) for i in range(4) for j in range(3)], columns=["item", "pos", "bs"])
    ref = AnovaRM(long, "bs", "item", within=["pos"]).fit().anova_table.iloc[0]
    assert (rm["F"], rm["p"], rm["df_num"], rm["df_den"]) == pytest.approx(
        (ref["F Value"], ref["Pr > F"], ref["Num DF"], ref["Den DF"]))
    # Between-item spread leaves the error term: adding an item constant changes nothing,
    # where a one-way ANOVA of the same numbers would lose power.
    shifted = wide + np.array([[5.0], [-3.0], [0.0], [9.0]])
    assert stats.rm_anova(shifted)["F"] == pytest.approx(rm["F"])
    assert sps.f_oneway(*shifted.T).pvalue > rm["p"]
    assert stats.rm_anova(np.vstack([wide, [np.nan, 1.0, 2.0]]))["n"] == 4  # an item without every position is left out

    assert math.isnan(stats.one_sample([0.1])["t"]) and math.isnan(stats.spearman([1, 1, 1], [1, 2, 3])[0])
    assert stats.ratio(-0.3, -0.2) == pytest.approx(1.5) and stats.ratio(0.1, 0) == math.inf


def test_tables_on_fixed_data_use_the_item_as_the_unit():
    """Each of 4 items has 3 rows per polarity (k = 5, 10, 20 or 50): tests run on per-item means."""
    rows = []
    for i, (x, y, k) in enumerate(zip(X, Y, K)):
        for pol, bs in (("yes", x), ("no", y)):
            rows.append(dict(model="m", method="samples", domain="d", item_id=f"i{i % 4}", framing="standard",
                             position=None, k=k, condition=f"{pol}_saturated", polarity=pol, bs=bs, provider="p",
                             params_b=1.0, stratum="uncertain" if i % 2 else "deterministic",
                             congruent=bool(i % 3), baseline_congruent=bool(i % 2)))
    bs = pd.DataFrame(rows)
    items = [f"i{j}" for j in range(4)]
    # By hand: item j's rows are i = j, j + 4, j + 8.
    mean_item = np.array([np.concatenate([X[j::4], Y[j::4]]).mean() for j in range(4)])
    abs_yes = np.array([np.abs(X[j::4]).mean() for j in range(4)])
    abs_no = np.array([np.abs(Y[j::4]).mean() for j in range(4)])
    eff = analysis_table("effects", bs, {}).set_index(["scope", "group"])
    ref = sps.ttest_1samp(mean_item, 0)
    row = eff.loc[("overall", "all")]
    assert row["method"] == "samples" and row["n"] == 4 and row["n_rows"] == 24
    assert (row["t"], row["p"]) == pytest.approx((ref.statistic, ref.pvalue))
    assert row["d"] == pytest.approx(mean_item.mean() / mean_item.std(ddof=1))
    asym = analysis_table("asymmetry", bs, {}).set_index(["scope", "group"])
    ref = sps.ttest_rel(abs_no, abs_yes)
    assert asym.loc[("overall", "all"), "n_pairs"] == 4
    assert (asym.loc[("overall", "all"), "t"], asym.loc[("overall", "all"), "p"]) == pytest.approx(
        (ref.statistic, ref.pvalue))
    assert asym.loc[("overall", "all"), "ratio"] == pytest.approx(abs(Y.mean()) / abs(X.mean()))
    # The nonparametric paired test on the same per-item values agrees in direction.
    assert sps.wilcoxon(abs_no, abs_yes).statistic >= 0
    # Entropy strata: odd rows are "uncertain", so items i1 and i3 (rows 1, 5, 9 / 3, 7, 11).
    ent = analysis_table("entropy", bs, {}).set_index(["scope", "group", "stratum"])
    unc, det = mean_item[[1, 3]], mean_item[[0, 2]]
    ref = sps.ttest_ind(unc, det, equal_var=False)
    diff = ent.loc[("overall", "all", "uncertain - deterministic")]
    assert diff["n"] == 4 and (diff["t"], diff["p"]) == pytest.approx((ref.statistic, ref.pvalue))
    assert ent.loc[("overall", "all", "uncertain"), "mean_bs"] == pytest.approx(unc.mean())
    # Length: the OLS slope of the rows with a cluster-robust SE by item.
    length = analysis_table("length", bs, {}).set_index(["scope", "group"])
    fit = sm.OLS(X, sm.add_constant(K)).fit(cov_type="cluster", cov_kwds={"groups": np.arange(12) % 4})
    got = length.loc[("polarity", "yes")]
    assert got["slope"] == pytest.approx(sps.linregress(K, X).slope)
    assert (got["slope_se"], got["slope_p"]) == pytest.approx((fit.bse[1], fit.pvalues[1]))
    assert got["rho"] == pytest.approx(sps.spearmanr(K, X).statistic) and got["n_items"] == 4
    assert set(items) == set(bs["item_id"])
    # Congruence: with both polarities an item has congruent and incongruent cells (rows with
    # i % 3 != 0 are congruent here): the paired t of its two means, not Welch across items.
    cong = analysis_table("congruence", bs, {})
    cong = cong[cong["basis"] == "truth"].set_index(["scope", "group", "items"])
    a = np.array([np.concatenate([[X[i], Y[i]] for i in range(j, 12, 4) if i % 3]).mean() for j in range(4)])
    b = np.array([np.concatenate([[X[i], Y[i]] for i in range(j, 12, 4) if not i % 3]).mean() for j in range(4)])
    ref = sps.ttest_rel(a, b)
    diff = cong.loc[("overall", "all", "congruent - incongruent")]
    assert diff["test"] == "paired t (per item)" and diff["n"] == 4
    assert (diff["mean_bs"], diff["t"], diff["p"]) == pytest.approx(((a - b).mean(), ref.statistic, ref.pvalue))
    assert sps.ttest_ind(a, b, equal_var=False).pvalue != pytest.approx(ref.pvalue)  # the readings differ
    assert cong.loc[("polarity", "yes", "congruent - incongruent"), "test"] == "Welch t"
    # The primary method (one call per cell, the seed's design) takes the row as the unit
    # of its d; its test is clustered by item (an item's rows share it), and its paired
    # tests still pair within item.
    single = bs.assign(method="single_call")
    both = analysis_table("effects", pd.concat([single, bs], ignore_index=True), {})
    assert both["method"].tolist()[0] == "single_call"
    row = both[(both["method"] == "single_call") & (both["scope"] == "overall")].iloc[0]
    s_rows = single[single["condition"].isin(["yes_saturated", "no_saturated"])]
    rows = s_rows["bs"].to_numpy()
    codes = np.unique(s_rows["item_id"].astype(str), return_inverse=True)[1]
    ref = sm.OLS(rows, np.ones_like(rows)).fit(cov_type="cluster", cov_kwds={"groups": codes}, use_t=True)
    assert row["n"] == 24 and row["n_rows"] == 24 and len(set(codes)) == 4
    assert (row["t"], row["p"], row["d"]) == pytest.approx(
        (ref.tvalues[0], ref.pvalues[0], rows.mean() / rows.std(ddof=1)))
    assert row["p"] != pytest.approx(sps.ttest_1samp(rows, 0).pvalue)  # not the rows as independent
    asym_single = analysis_table("asymmetry", single, {}).set_index(["scope", "group"])
    assert asym_single.loc[("overall", "all"), "n_pairs"] == 4  # paired per item, as the seed's n = 2,481


# ----------------------------------------------------------------------------- planted recovery


def run_synthetic(tmp_path, cfg, items, model="qwen-sim"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "items.parquet"
    items.to_parquet(path)
    write_model_shard([path], tmp_path / "req.parquet", model_name=model, model_cfg=cfg["models"][model],
                       amel_cfg=cfg["amel"], logprobs=logprobs_available(cfg, model))
    store = ResponseStore(tmp_path / "store")
    backend = make_backend(model, cfg["models"][model], store=store)
    answer_shard(tmp_path / "req.parquet", tmp_path / "resp.parquet", tmp_path / "ledger.json", backend, store,
                 progress=False)
    probs = probabilities([tmp_path / "resp.parquet"])
    return probs, bias_scores(probs, cfg["models"], entropy_threshold_bits=cfg["amel"]["entropy_threshold_bits"])


def test_analysis_recovers_planted_amel_effects(tmp_path):
    """Synthetic model, 200 items: BS per cell, asymmetry, k trend, position and framing within their CIs."""
    cfg = amel_config(history_lengths=[5, 20, 50], framing_history_lengths=[20], balanced_history_lengths=[20],
                      n_samples=2)
    probs, bs = run_synthetic(tmp_path, cfg, select_items(sim_items(260), 200, seed=5))
    assert set(probs["method"]) == {"single_call", "samples", "first_token", "baseline_samples"}
    assert probs["p_yes"].notna().all()
    # The first-token (exact) measurement carries the recovery checks; the tables below keep its rows.
    probs, bs = probs[probs["method"] == "first_token"], bs[bs["method"] == "first_token"]
    planted = planted_effects("qwen-sim")["amel"]
    main = bs[(bs["framing"] == "standard") & bs["position"].isna() & (bs["condition"] != "balanced")]
    for (cond, k), part in main.groupby(["condition", "k"]):
        s = stats.one_sample(part["bs"])
        assert s["ci_high"] < 0  # conforming, significantly
        assert s["ci_low"] <= planted["expected_bias_score"]["standard"][cond][k] <= s["ci_high"], (cond, k, s)
    for (cond, pos), part in bs[bs["position"].notna()].groupby(["condition", "position"]):
        s = stats.one_sample(part["bs"])
        assert s["ci_low"] <= amel_expected_bias_score("qwen-sim", None, cond, 5, pos) <= s["ci_high"], (cond, pos)
    a = {}
    for name in ANALYSES:
        a[name] = analysis_table(name, analysis_data(name, bs, probs), cfg["amel"])
        assert set(a[name]["method"]) == {"first_token"}, name
    overall = lambda t: t[t["scope"] == "overall"]  # noqa: E731
    eff = overall(a["effects"]).iloc[0]
    assert eff["d"] < 0 and eff["p"] < 1e-10
    ent = overall(a["entropy"]).set_index("stratum")
    assert ent.loc["uncertain", "mean_bs"] < ent.loc["deterministic", "mean_bs"] < 0  # bias concentrates on uncertain items
    asym = a["asymmetry"].set_index(["scope", "group"])
    for k in (5, 20, 50):
        row = asym.loc[("k", str(k))]
        assert row["ratio"] == pytest.approx(planted["bias_score_ratio"]["standard"][k], rel=0.1)
    assert asym.loc[("overall", "all"), "ratio"] > 1.3 and asym.loc[("overall", "all"), "p"] < 1e-10
    length = overall(a["length"]).iloc[0]
    assert length["rho"] < 0 and length["slope_ci_high"] < 0  # planted f(k) grows with k
    assert length["prevailing_share_by_k"] == "5:1.00 20:1.00 50:1.00"  # the schema default share, at every k
    assert asym.loc[("k", "20"), "prevailing_share"] == 1.0 and np.isnan(asym.loc[("overall", "all"), "prevailing_share"])
    pos = overall(a["position"]).set_index("position")
    assert pos.loc["end", "mean_bs"] < pos.loc["middle", "mean_bs"] < pos.loc["start", "mean_bs"]  # recency weights
    assert pos.loc["ANOVA", "p"] < 0.01
    fr = overall(a["framing"]).set_index("framing")
    assert fr.loc["swapped", "ratio"] == pytest.approx(planted["bias_score_ratio"]["swapped"][20], rel=0.1)
    assert fr.loc["standard - swapped", "asym"] > 0 and fr.loc["standard - swapped", "p"] < 0.01
    cong = overall(a["congruence"])
    diff = cong[(cong["basis"] == "truth") & (cong["items"] == "congruent - incongruent")].iloc[0]
    assert diff["p"] > 0.001  # nothing planted on truth
    # A balanced history plants no shift: exactly 0 (first-token P), far below the saturated |BS|.
    bal = overall(a["balanced"]).iloc[0]
    assert bal["mean_abs_shift"] == pytest.approx(0, abs=1e-12) and bal["n"] == 200
    assert bal["diff"] < 0 and bal["p_diff"] < 1e-10


def test_flat_k_and_sampled_probabilities(tmp_path):
    """k_scale = 0 plants a flat effect in k (seed finding); sampling P(Yes) tracks the planted P."""
    cfg = amel_config(history_lengths=[5, 50], positions=[], framing_swap=False, first_token=False,
                      balanced_history_lengths=[], n_samples=30)
    cfg["models"]["qwen-sim"] = {**cfg["models"]["qwen-sim"], "synthetic": {"amel_k_scale": 0.0}}
    probs, bs = run_synthetic(tmp_path, cfg, select_items(sim_items(30), 16, seed=6))
    assert set(probs["method"]) == {"samples", "single_call", "baseline_samples"}
    single, probs = probs[probs["method"] == "single_call"], probs[probs["method"] == "samples"]
    assert (probs["n_valid"] == 30).all() and (single["n_requests"] == 1).all() and single["p_yes"].isin([0, 1]).all()
    # The single call of a cell is its first sampled reply (sample_index 0), nothing else.
    from context_effects.llm.shards import read_response_shard

    reqs, table = read_response_shard(tmp_path / "resp.parquet", ["text"], requests_path=tmp_path / "req.parquet")
    firsts = {(r.meta["item_id"], r.meta["cell"]): float(parse_verdict(t) == "Yes")
              for r, t in zip(reqs, table["text"]) if r.sample_index == 0}
    assert {(r.item_id, r.cell): r.p_yes for r in single.itertuples()} == firsts
    from context_effects.llm.backends.synthetic import SyntheticBackend

    truth = SyntheticBackend(model_name="qwen-sim", params={"amel_k_scale": 0.0})
    base = probs[probs["condition"] == "baseline"]
    exact = np.array([amel_p_yes(truth, i) for i in base["item_id"]])
    se = np.sqrt(exact * (1 - exact) / 30)
    assert np.mean(np.abs(base["p_yes"].to_numpy() - exact) <= 2.6 * se + 1e-9) > 0.9
    length = analysis_table("length", bs, cfg["amel"])
    for _, row in length[length["scope"] == "overall"].iterrows():
        assert row["slope_ci_low"] <= 0 <= row["slope_ci_high"], row["method"]


def test_the_paper_design_pays_one_call_per_cell_and_samples_only_baselines_it_cannot_read(tmp_path):
    """The seed's bill (75,898 calls, about one per cell): by default every cell is sent once;
    a model with first-token probabilities adds one greedy request per cell (its strata come
    from them), a model without adds baseline_samples - 1 samples of each baseline, no more.
    The primary rows are the single calls; no all-samples rows without n_samples > 1."""
    cfg = amel_config(history_lengths=[5, 20], positions=[], framing_swap=True, framing_history_lengths=[5],
                      balanced_history_lengths=[], baseline_samples=4)
    assert cfg["amel"]["n_samples"] == 1
    items = select_items(sim_items(40), 12, seed=3)
    n_cells = len(design_cells(cfg["amel"]))  # 2 baselines (both framings) + 6 saturated
    assert n_cells == 8
    with_probs = domain_requests(items, "qwen-sim", cfg["models"]["qwen-sim"], cfg["amel"], logprobs=True)
    assert len(with_probs) == 12 * n_cells * 2
    assert {r.sample_index for r in with_probs} == {0}
    without = domain_requests(items, "qwen-sim", cfg["models"]["qwen-sim"], cfg["amel"], logprobs=False)
    assert len(without) == 12 * ((n_cells - 2) + 2 * 4)
    assert all(r.meta["n_samples"] == 1 for r in without)
    # Run both ways on the simulated engine: the strata's source is the model's cheapest one.
    probs, bs = run_synthetic(tmp_path / "probs", cfg, items)
    assert set(probs["method"]) == {"single_call", "first_token", "baseline_samples"}
    single = bs[bs["method"] == "single_call"]
    first = probs[(probs["method"] == "first_token") & (probs["condition"] == "baseline")]
    h = dict(zip(zip(first["item_id"], first["framing"]), binary_entropy(first["p_yes"])))
    assert single["baseline_entropy"].tolist() == pytest.approx([h[(i, f)] for i, f in
                                                                 zip(single["item_id"], single["framing"])])
    assert (single["stratum"] == np.where(single["baseline_entropy"] < 0.5, "deterministic", "uncertain")).all()
    cfg["amel"]["first_token"] = False
    probs, bs = run_synthetic(tmp_path / "samples", cfg, items)
    assert set(probs["method"]) == {"single_call", "baseline_samples"}
    base = probs[probs["method"] == "baseline_samples"]
    assert (base["condition"] == "baseline").all() and (base["n_requests"] == 4).all() and len(base) == 24
    share = dict(zip(zip(base["item_id"], base["framing"]), base["p_yes"]))
    single = bs[bs["method"] == "single_call"]
    want = ["deterministic" if share[(i, f)] in (0.0, 1.0) else "uncertain"
            for i, f in zip(single["item_id"], single["framing"])]
    assert single["stratum"].tolist() == want and set(want) == {"deterministic", "uncertain"}


def test_a_single_calls_stratum_takes_one_source_per_model():
    """First-token P(Yes) where the model has it (threshold in bits), else every sampled
    reply of the baseline (all agreeing = deterministic); fewer than two verdicts, no stratum."""
    def row(model, item, method, p, n_valid=1):
        return dict(model=model, domain="d", item_id=item, answer="Yes", cell="standard:baseline",
                    framing="standard", condition="baseline", k=0, n_biased=0, position=None, method=method,
                    p_yes=p, n_valid=n_valid)
    probs = pd.DataFrame([
        row("lp", "a", "first_token", 0.95), row("lp", "a", "baseline_samples", 0.6, 5),
        row("lp", "b", "first_token", 0.6), row("lp", "b", "baseline_samples", 1.0, 5),
        row("ns", "a", "baseline_samples", 0.8, 5), row("ns", "b", "baseline_samples", 1.0, 5),
        row("ns", "c", "baseline_samples", 1.0, 1),
    ])
    got = baseline_uncertainty(probs, 0.5).set_index(["model", "item_id"])
    assert got.loc[("lp", "a"), "stratum"] == "deterministic"  # H(0.95) = 0.29 bits < 0.5
    assert got.loc[("lp", "b"), "stratum"] == "uncertain"
    assert got.loc[("lp", "a"), "baseline_entropy"] == pytest.approx(sps.entropy([0.95, 0.05], base=2))
    assert got.loc[("ns", "a"), "stratum"] == "uncertain" and got.loc[("ns", "b"), "stratum"] == "deterministic"
    assert ("ns", "c") not in got.index and len(got) == 4


def test_a_synthetic_models_single_calls_are_independent_draws_not_one_threshold(tmp_path):
    """The synthetic backend draws a seeded request's noise from its seed alone, as vLLM does
    (docs/llm-layer.md, "Sampling seeds"). Were the single call of every cell sent with one
    seed, its answer would be Yes exactly where P(Yes) exceeds one shared uniform: the
    cells answered Yes and those answered No would be split by one threshold on P(Yes).
    With a seed of its own per request they are independent draws, and no threshold splits them."""
    cfg = amel_config(history_lengths=[5, 20], positions=[], framing_swap=False, balanced_history_lengths=[],
                      n_samples=2)
    probs, _ = run_synthetic(tmp_path, cfg, select_items(sim_items(60), 30, seed=8))
    exact = probs[probs["method"] == "first_token"].set_index(["item_id", "cell"])["p_yes"]
    single = probs[probs["method"] == "single_call"].set_index(["item_id", "cell"])["p_yes"]
    assert len(single) == len(exact) == 30 * 5 and set(single) == {0.0, 1.0}
    p = exact.loc[single.index]
    yes, no = p[single == 1.0], p[single == 0.0]
    assert len(yes) and len(no)
    assert no.max() > yes.min()  # not separable by one threshold
    # Ranked by P(Yes), the Yes and No cells interleave (one threshold would give an AUC of
    # exactly 1; this draw gives 0.95, half the items being near-deterministic).
    auc = float(np.mean(yes.to_numpy()[:, None] > no.to_numpy()[None, :]))
    assert auc < 0.99, auc
    assert single.mean() == pytest.approx(p.mean(), abs=4 * math.sqrt(0.25 / len(p)))


def test_every_registered_table_and_figure_is_written(tmp_path, monkeypatch):
    """Every analysis through the registry, as the amel_table and amel_figure jobs run it."""
    from context_effects.outputs import draw_registered_figure, write_registered_table

    cfg = amel_config(history_lengths=[2, 6], position_history_length=8, position_biased_turns=2,
                      framing_history_lengths=[2], balanced_history_lengths=[6], n_samples=2)
    cfg["run"] = {**cfg["run"], "kind": "synthetic"}
    probs, bs = run_synthetic(tmp_path, cfg, select_items(sim_items(24), 12, seed=7))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "amel").mkdir(parents=True)
    probs.to_parquet("results/amel/probabilities.parquet", index=False)
    bs.to_parquet("results/amel/bias_scores.parquet", index=False)
    assert REGISTRY.names(TableSpec) == REGISTRY.names(FigureSpec) == list(ANALYSES)
    for spec in REGISTRY.tables("analysis"):
        df = write_registered_table("amel", spec.name, spec.inputs(cfg), spec.settings(cfg),
                                    f"results/tables/amel/{spec.name}.csv", f"results/tables/amel/{spec.name}.tex")
        assert len(df), spec.name
        tex = (tmp_path / f"results/tables/amel/{spec.name}.tex").read_text()
        assert rf"\label{{tab:amel-{spec.name}}}" in tex and "Synthetic backend" in tex
    for spec in REGISTRY.figures("analysis"):
        out = {ext: f"figures/amel/{spec.name}.{ext}" for ext in spec.formats}
        draw_registered_figure("amel", spec.name, spec.inputs(cfg), spec.settings(cfg), out)
        for path in out.values():
            assert (tmp_path / path).stat().st_size > 1000, path
