"""Study C judging and the model-free results: known answers, then the rules end to end
on the synthetic backend against its planted effects."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake
from context_effects.conformity import descriptive as D
from context_effects.conformity import requests as creq
from context_effects.conformity.judging import judged_answers, requests_per_item
from context_effects.config import validate_config
from context_effects.llm.backends.synthetic import SyntheticBackend, planted_effects

# ------------------------------------------------------------------ known answers


def test_token_f1_known_values():
    assert D.token_f1("The cat sat", "a cat sat down") == pytest.approx(2 * (2 / 2) * (2 / 3) / (2 / 2 + 2 / 3))
    assert D.token_f1("Paris!", "paris") == 1.0
    assert D.token_f1("", "x") == 0.0 and D.token_f1("dog", "cat") == 0.0


def test_answer_position_takes_the_closer_candidate_set():
    item = {"gold_answer": "An octopus has three hearts", "wrong_attractor": "An octopus has one heart",
            "correct_answers": ["Three"], "incorrect_answers": ["Eight hearts"]}
    assert D.answer_position("It has three hearts.", item) == "correct"
    assert D.answer_position("Only one heart.", item) == "incorrect"


#: Replies in the form seed 002's judge prompts print, ``"rating": <integer 1--5>`` without
#: braces (App. B), and what each reads as.
BARE_REPLIES = [
    ('"rating": 4', (4, None)),
    ('"rating": 4.', (4, None)),  # the prompt's own closing period echoed
    ('"rating":2', (2, None)),
    ('Respond ONLY with JSON: "rating": 5', (5, None)),
    ('```\n"rating": 3\n```', (3, None)),
    ('"rating": 4.0', (4, None)),
    ('"rating": 3, "rating": 3', (3, None)),  # one value repeated is not ambiguous
    # genuinely ambiguous or invalid: a miss with the reason an object would get
    ('"rating": 4, "rating": 5', (None, "conflicting_ratings")),
    ('"rating": 7', (None, "rating_out_of_range")),
    ('"rating": 0', (None, "rating_out_of_range")),
    ('"rating": "4"', (None, "rating_is_string")),
    ('"rating": 4.5', (None, "rating_not_integer")),
    ('"rating": null', (None, "rating_not_a_number")),
    ('"rating": NaN', (None, "rating_not_a_number")),
    ('"rating": <integer 1--5>.', (None, "rating_not_a_number")),  # the template echoed
    ('rating: 4', (None, "no_json_object")),  # not the prompt's form
    ('"score": 4', (None, "no_json_object")),
    ('"rating": 4}', (None, "no_json_object")),  # a brace: read only as JSON objects
]


@pytest.mark.parametrize("text,expected", BARE_REPLIES)
def test_judge_reply_in_the_prompts_own_form_is_a_rating(text, expected):
    """Seed 002 App. B asks for `"rating": <integer 1--5>` with no braces; a judge that answers
    in exactly that form gives a rating (it used to be re-asked, then recorded missing)."""
    from context_effects.conformity.replies import parse_rating

    assert parse_rating(text) == expected


def test_brace_less_reply_is_scored_by_the_policy_without_a_reask():
    from context_effects.conformity.replies import rating_policy

    policy = rating_policy()
    assert policy.validate('"rating": 2') == (2, None)
    # Objects are read as before: the brace-less reading never overrides a JSON object.
    assert policy.validate('{"rating": 2} "rating": 5') == (2, None)


def _ratings(rows):
    base = {"corpus": "main", "seed": 42, "hosted": False, "pass": "blind", "reference": None, "d": 0,
            "status": "ok", "error": None, "attempts": 1, "dataset": "truthfulqa", "generator": "g", "authority": None}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_table2_means_and_gap_by_hand():
    r = _ratings([
        {"answer_id": "a1", "item_id": "i1", "condition": "peer_correct", "judge": "j1", "rating": 5.0},
        {"answer_id": "a1", "item_id": "i1", "condition": "peer_correct", "judge": "j2", "rating": 4.0},
        {"answer_id": "a2", "item_id": "i1", "condition": "peer_wrong", "judge": "j1", "rating": 2.0},
        {"answer_id": "a3", "item_id": "i1", "condition": "no_peer", "judge": "j1", "rating": 3.0},
        {"answer_id": "a4", "item_id": "i1", "condition": "peer_mixed", "judge": "j1", "rating": 4.0},
        # excluded: missing, informed, hosted, other seed, decomposition corpus
        {"answer_id": "a2", "item_id": "i1", "condition": "peer_wrong", "judge": "j2", "rating": np.nan,
         "status": "missing"},
        {"answer_id": "a2", "item_id": "i1", "condition": "peer_wrong", "judge": "j1", "rating": 5.0,
         "pass": "informed", "d": -1},
        {"answer_id": "a2", "item_id": "i1", "condition": "peer_wrong", "judge": "h", "rating": 5.0, "hosted": True},
        {"answer_id": "b2", "item_id": "i1", "condition": "peer_wrong", "judge": "j1", "rating": 5.0, "seed": 43},
        {"answer_id": "c2", "item_id": "i1", "condition": "peer_wrong", "judge": "j1", "rating": 5.0,
         "corpus": "decomposition"},
    ])
    t = D.mean_blind_ratings({"truthfulqa": r}, 42).iloc[0]
    assert (t["NoPeer"], t["AllCorrect"], t["Mixed"], t["AllWrong"]) == (3.0, 4.5, 4.0, 2.0)
    assert t[D.DELTA_CW] == 2.5 and t["n_ratings"] == 5
    # Table 2 itself: every execution pooled first (the seed-43 rating enters), then seed 42 alone.
    table = D.table2({"truthfulqa": r}, 42)
    assert list(table[D.EXECUTIONS]) == ["pooled", "seed 42 only"]
    pooled, primary = table.iloc[0], table.iloc[1]
    assert pooled["AllWrong"] == 3.5 and pooled[D.DELTA_CW] == 1.0 and pooled["n_ratings"] == 6
    assert primary["AllWrong"] == 2.0 and primary[D.DELTA_CW] == 2.5 and primary["n_ratings"] == 5


def test_tables_2_and_19_share_one_set_of_ratings():
    """Seed 002's Table 19 tercile means give its Table 2 gaps to three decimals (TruthfulQA:
    mean over terciles of Delta_AC - Delta_AW = (0.199 + 0.230 + 0.195) / 3 = 0.208 = Table 2's
    4.503 - 4.295). Here too, on the rows that share a scope; across scopes the identity fails
    when the executions differ, which is what the issue's mixed scopes did."""
    from context_effects.metrics import summaries

    rows = []
    # Three questions (one per tercile), one generator, two executions whose ratings differ.
    for seed, bump in ((42, 0.0), (43, 1.0)):
        for q, (r1, ac, aw) in {"q0": (2.0, 3.0, 1.0), "q1": (3.0, 4.0, 3.0), "q2": (4.0, 5.0, 4.0)}.items():
            wrong = aw if seed == 42 else min(5.0, aw + bump)
            for cond, rating in (("round1", r1), ("peer_correct", ac), ("peer_mixed", r1), ("peer_wrong", wrong),
                                 ("no_peer", r1)):
                rows.append({"answer_id": f"{seed}|{q}|{cond}", "item_id": q, "condition": cond, "judge": "j1",
                             "rating": rating, "seed": seed})
    r = _ratings(rows)
    t2 = D.table2({"truthfulqa": r}, 42).set_index(D.EXECUTIONS)
    t19 = summaries.difficulty_table(r, n_resamples=50, seed=0, primary_seed=42)
    for scope in ("pooled", "seed 42 only"):
        strata = t19[t19[D.EXECUTIONS] == scope]
        assert len(strata) == 3
        gap19 = (strata["Delta All-Correct"] - strata["Delta All-Wrong"]).mean()
        assert gap19 == pytest.approx(t2.loc[scope, D.DELTA_CW])
    # Pooled: AllWrong = (1 + 3 + 4 + 2 + 4 + 5) / 6 = 19/6, AllCorrect = 4, gap = 5/6; seed 42: gap = 4/3.
    assert t2.loc["pooled", D.DELTA_CW] == pytest.approx(4 - 19 / 6)
    assert t2.loc["seed 42 only", D.DELTA_CW] == pytest.approx(4 / 3)
    assert t2.loc["pooled", D.DELTA_CW] != pytest.approx(t2.loc["seed 42 only", D.DELTA_CW])


def test_anchor_audit_by_hand():
    rows = []
    # (item, judge): free ratings (correct, incorrect), augmented ratings (correct, incorrect)
    for item, judge, free, aug in [("i1", "j1", (4, 4), (5, 1)), ("i1", "j2", (3, 2), (5, 2)),
                                   ("i2", "j1", (2, 3), (4, 1)), ("i2", "j2", (5, 1), (5, np.nan))]:
        for ref, (c, w) in (("free", free), ("augmented", aug)):
            for cond, v in (("anchor_correct", c), ("anchor_incorrect", w)):
                rows.append({"answer_id": f"{item}|{cond}", "item_id": item, "judge": judge, "condition": cond,
                             "corpus": "anchor", "seed": None, "reference": ref, "rating": float(v),
                             "status": "missing" if np.isnan(v) else "ok"})
    t = D.anchor_audit({"truthfulqa": _ratings(rows)})
    t = t[t["Dataset"] == "truthfulqa"].set_index("Audit Quantity")
    # free, per (item, judge): correct > incorrect in 2 of 4 pairs (the tie does not count)
    assert t.at[D.RANKED_PER_PAIR, "Reference-Free"] == 50.0
    # free, per question (panel means): i1 3.5 > 3.0 and i2 3.5 > 2.0, so 2 of 2 questions --
    # the reading of seed 002's "73.3% of questions", which the pair share would misstate here
    assert t.at[D.RANKED_PER_QUESTION, "Reference-Free"] == 100.0
    assert t.at["Questions", "Reference-Free"] == 2
    # augmented: the pair with a missing rating is left out -> 3 of 3 pairs, 2 of 2 questions
    assert t.at[D.RANKED_PER_PAIR, "Reference-Augmented"] == 100.0
    assert t.at[D.RANKED_PER_QUESTION, "Reference-Augmented"] == 100.0
    assert t.at["Pairs (item x judge)", "Reference-Augmented"] == 3
    assert t.at["Mean Correct-Anchor Rating", "Reference-Free"] == pytest.approx(3.5)
    assert t.at["Mean Incorrect-Anchor Rating", "Reference-Augmented"] == pytest.approx(4 / 3)
    assert t.at["Mean Separation", "Reference-Free"] == pytest.approx(3.5 - 2.5)


def test_krippendorff_interval_alpha_matches_hand_computation():
    # Two coders, three units, no missing: interval alpha = 1 - D_o / D_e with
    # D_o = mean within-unit squared difference over pairable values, D_e over all pairs.
    ratings = {("j1", "a"): 1, ("j2", "a"): 2, ("j1", "b"): 3, ("j2", "b"): 3, ("j1", "c"): 5, ("j2", "c"): 4}
    r = _ratings([{"answer_id": a, "item_id": a, "condition": "round1", "judge": j, "rating": float(v)}
                  for (j, a), v in ratings.items()])
    values = np.array(list(ratings.values()), dtype=float)
    n = len(values)
    d_o = sum(2 * (x - y) ** 2 for x, y in [(1, 2), (3, 3), (5, 4)]) / n  # each unit: m_u = 2, 2 ordered pairs
    d_e = sum((x - y) ** 2 for x in values for y in values) / (n * (n - 1))
    t = D.blind_agreement({"truthfulqa": r}, 42).set_index("Dataset")
    assert t.at["truthfulqa", "alpha_interval"] == pytest.approx(1 - d_o / d_e)
    assert t.at["truthfulqa", "judges"] == 2 and t.at["truthfulqa", "answers"] == 3


def test_krippendorff_alpha_undefined_with_one_judge():
    r = _ratings([{"answer_id": a, "item_id": a, "condition": "round1", "judge": "j1", "rating": v}
                  for a, v in (("a", 1.0), ("b", 4.0))])
    t = D.blind_agreement({"truthfulqa": r}, 42).iloc[0]
    assert math.isnan(t["alpha_ordinal"]) and "fewer than two judges" in t["note"]


def test_flip_share_and_example_selection():
    rev = pd.DataFrame({
        "answer_id": ["x3", "x1", "x2", "x4"],
        "unchanged": [True, True, True, False],
        "rating_round1": [4.0, 5.0, 4.0, 5.0],
        "rating_revision": [2.0, 3.0, 3.5, 1.0],
    })
    rev["rating_drop"] = rev["rating_round1"] - rev["rating_revision"]
    t = D.flip_share({"truthfulqa": rev}).iloc[0]
    assert t["unchanged_by_flip_indicator"] == 3 and t["unchanged_but_lost_1pt"] == 2
    assert t["share_unchanged_but_lost_1pt"] == pytest.approx(2 / 3) and t["flip_rate"] == 0.25
    row, branch = D.select_example(rev)  # x1 and x3 both dropped 2.0: the smaller id wins; x4 is a flip
    assert row["answer_id"] == "x1" and branch.startswith("unchanged")


def test_alpha_and_flip_share_pool_every_execution_as_table_2(tmp_path):
    """Krippendorff's alpha and the flip share are compared with seed 002 on rows that pool
    every execution, as Tables 2 and 19 are (docs/deviations.yaml#model-free-scope: App. A.5's
    255,000 rating tasks = 147,000 blind + 108,000 informed, so all three executions were
    rated blind); the primary execution alone follows as sensitivity rows. Table 1's example
    stays in the primary execution."""
    import krippendorff

    from context_effects.conformity.outputs import REGISTRY

    # Seed 42: the two judges agree on three answers; seed 43: they disagree on two more.
    pairs = {("a", 42): (5, 5), ("b", 42): (2, 2), ("c", 42): (4, 4), ("d", 43): (5, 1), ("e", 43): (1, 5)}
    r = _ratings([{"answer_id": f"{a}|{seed}", "item_id": a, "condition": "no_peer", "seed": seed, "judge": j,
                   "rating": float(v)} for (a, seed), vs in pairs.items() for j, v in zip(("j1", "j2"), vs)])
    r.to_parquet(tmp_path / "ratings.parquet")
    settings = {"datasets": ["truthfulqa"], "primary_seed": 42, "seeds": [42, 43], "run_kind": "paper"}
    t = REGISTRY.table("agreement").build({"ratings": [str(tmp_path / "ratings.parquet")]}, settings).df
    t = t.set_index(["Dataset", D.EXECUTIONS])
    assert t.at[("All", "pooled"), "answers"] == 5 and t.at[("All", "seed 42 only"), "answers"] == 3
    values = np.array([[vs[0] for vs in pairs.values()], [vs[1] for vs in pairs.values()]], dtype=float)
    assert t.at[("All", "pooled"), "alpha_ordinal"] == pytest.approx(
        krippendorff.alpha(reliability_data=values, level_of_measurement="ordinal", value_domain=[1, 2, 3, 4, 5]))
    assert t.at[("All", "seed 42 only"), "alpha_ordinal"] == pytest.approx(1.0)

    # Flip share: one all-wrong revision per execution, each beside its own execution's Round 1;
    # the flip indicator calls both unchanged; only seed 43's lost a point.
    items = pd.DataFrame({"item_id": ["i1"], "gold_answer": ["An octopus has three hearts"],
                          "wrong_attractor": ["An octopus has one heart"], "correct_answers": [[]],
                          "incorrect_answers": [[]]})
    answers, rows = [], []
    for seed, (before, after) in ((42, (5.0, 5.0)), (43, (5.0, 3.0))):
        for cond, rating in (("round1", before), ("peer_wrong", after)):
            answers.append({"answer_id": f"{cond}|{seed}", "corpus": "main", "seed": seed, "condition": cond,
                            "text": "It has three hearts.", "round1_answer_id": f"round1|{seed}", "item_id": "i1",
                            "dataset": "truthfulqa", "generator": "g", "authority": "absent", "question": "Q?"})
            rows.append({"answer_id": f"{cond}|{seed}", "item_id": "i1", "condition": cond, "seed": seed,
                         "judge": "j1", "rating": rating})
    rev = D.wrong_peer_revisions(pd.DataFrame(answers), _ratings(rows), items, 42)
    assert sorted(rev["seed"]) == [42, 43] and rev["unchanged"].all()
    f = D.flip_share({"truthfulqa": rev}, 42).set_index(D.EXECUTIONS)
    assert (f.at["pooled", "unchanged_by_flip_indicator"], f.at["pooled", "unchanged_but_lost_1pt"]) == (2, 1)
    assert f.at["pooled", "share_unchanged_but_lost_1pt"] == 0.5
    primary = f.loc["seed 42 only"]
    assert (primary["unchanged_by_flip_indicator"], primary["unchanged_but_lost_1pt"]) == (1, 0)
    row, _ = D.select_example(rev)  # seed 43 dropped more, but Table 1 draws from the primary execution
    assert row["answer_id"] == "peer_wrong|42"


def test_parse_failures_counts_and_reasons():
    r = _ratings([
        {"answer_id": f"a{i}", "item_id": "i", "condition": "round1", "judge": "j1", "rating": np.nan,
         "status": "missing", "error": "no_json_object", "attempts": 3} for i in range(3)
    ] + [{"answer_id": "b", "item_id": "i", "condition": "round1", "judge": "j1", "rating": 2.0}])
    t = D.parse_failures({"truthfulqa": r}).iloc[0]
    assert (t["requests"], t["missing"], t["missing_rate"]) == (4, 3, 0.75)
    assert t["top_reason"] == "no_json_object (3)" and t["mean_attempts"] == 2.5


# ----------------------------------------------------- request counts and anchors


def test_shard_sizing_counts_every_judge_request():
    items = read_items_demo()
    gen_cfg = {"backend": "synthetic", "model_id": "qwen-sim", "synthetic": {"empty_rate": 0.0}}
    cfg = validate_config({
        "run": {"kind": "synthetic"},
        "datasets": {"truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl", "n_items": 3}},
        "models": {"qwen-sim": gen_cfg},
        "conformity": {"datasets": ["truthfulqa"], "generators": ["qwen-sim"], "judges": ["qwen-sim"],
                       "hosted_judges": [], "seeds": [42, 43], "primary_seed": 42},
        "amel": {"enabled": False}, "anchoring": {"enabled": False},
    })
    c = cfg["conformity"]
    backend = SyntheticBackend(model_name="qwen-sim", params=gen_cfg["synthetic"], seed=0)
    frames = []
    for seed in (42, 43):
        r1 = creq.round1_requests(items, "qwen-sim", gen_cfg, c["generation"], seed)
        texts = [res.text for res in backend.run(r1)]
        r2 = creq.round2_requests(items, {q.meta["item_id"]: t for q, t in zip(r1, texts)}, "qwen-sim", gen_cfg,
                                  c["generation"], seed)
        frames.append(creq.answers_frame(r1 + r2, texts + [res.text for res in backend.run(r2)]))
    r1 = creq.round1_requests(items, "qwen-sim", gen_cfg, c["generation"], 42, "decomposition")
    texts = [res.text for res in backend.run(r1)]
    r2 = creq.round2_requests(items, {q.meta["item_id"]: t for q, t in zip(r1, texts)}, "qwen-sim", gen_cfg,
                              c["generation"], 42, "decomposition")
    frames.append(creq.answers_frame(r1 + r2, texts + [res.text for res in backend.run(r2)]))
    anchors = creq.anchor_requests(items, "qwen-sim", gen_cfg, c["generation"], 42)
    frames.append(creq.answers_frame(anchors, [res.text for res in backend.run(anchors)]))
    answers = pd.concat(frames, ignore_index=True)
    ids = items["item_id"].tolist()
    n = len(creq.judge_requests(judged_answers(answers, ids, False, 42), "qwen-sim", gen_cfg, c["judging"], 1))
    assert n == len(items) * requests_per_item(c)
    hosted = len(creq.judge_requests(judged_answers(answers, ids, True, 42), "qwen-sim", gen_cfg, c["judging"], 1))
    assert hosted == len(items) * requests_per_item(c, hosted=True)
    # Synthetic anchors must not share a cache key with Round 1 (the store would serve Round 1's answer).
    assert not {q.key for q in anchors} & {q.key for q in creq.round1_requests(items, "qwen-sim", gen_cfg,
                                                                               c["generation"], 42)}


def read_items_demo():
    from context_effects.datasets import build_item_table

    source = {"kind": "local", "path": str(REPO / "data/demo/truthfulqa.jsonl")}
    return build_item_table("truthfulqa", source, n_items=3, sample_seed=42, attractor_seed=42)


# ------------------------------------------------------------------ end to end

#: Planted condition shifts far apart (in latent units) and sharp judges (α = 3), so
#: that 8 items settle the ordering of mean ratings; the expected order is read from
#: planted_effects below, not typed here.
ETA = {"no_peer": 0.0, "content_correct": 0.5, "content_wrong": -1.0, "content_mixed": -0.5,
       "peer_correct": 0.9, "peer_wrong": -1.8, "peer_mixed": -0.9}
GEN = {"profile": "none", "eta": ETA, "quality_mean": 0.5, "sigma_b": 0.3, "sigma_theta": 0.1, "empty_rate": 0.2}
E2E = {
    "run": {"label": "synthetic-judging", "kind": "synthetic"},
    "datasets": {"truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl", "n_items": 8}},
    "models": {
        "gen-sim": {"backend": "synthetic", "model_id": "gen-sim",
                    "synthetic": GEN},
        "judge-a": {"backend": "synthetic", "model_id": "judge-a", "synthetic": {"profile": "none", "alpha": 3.0}},
        # A judge whose replies are often malformed: its misses must be recorded, never scored.
        "judge-b": {"backend": "synthetic", "model_id": "judge-b",
                    "synthetic": {"profile": "none", "alpha": 3.0, "parse_failure_rate": 0.5}},
    },
    "conformity": {
        "datasets": ["truthfulqa"], "generators": ["gen-sim"], "judges": ["judge-a", "judge-b"],
        "hosted_judges": [], "seeds": [42], "primary_seed": 42, "decomposition": {"enabled": False},
        "judging": {"max_attempts": 2},
    },
    "amel": {"enabled": False},
    "anchoring": {"enabled": False},
}


def test_rules_end_to_end_recover_planted_condition_order(workdir):
    (workdir / "config.yaml").write_text(yaml.safe_dump(E2E))
    targets = [f"results/tables/conformity/{t}.csv" for t in ("table1", "table2", "table5", "agreement",
                                                               "flip_share", "parse_failures", "table8_requests")]
    res = run_snakemake("--cores", "2", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                        "--configfile=" + str(workdir / "config.yaml"), *targets,
                        "figures/conformity/rating_distributions.pdf")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    t2 = pd.read_csv(workdir / "results/tables/conformity/table2.csv").iloc[0]
    eta = planted_effects("gen-sim", E2E["models"]["gen-sim"]["synthetic"])["conformity"]["eta"]
    planted_order = sorted(D.TABLE2_COLUMNS, key=lambda col: eta[D.TABLE2_COLUMNS[col]])
    observed_order = sorted(D.TABLE2_COLUMNS, key=lambda col: t2[col])
    assert observed_order == planted_order, t2.to_dict()
    assert t2[D.DELTA_CW] > 0

    # Empty generations were retried as seed 002 App. A.6 says, and each answer records how it was obtained.
    answers = pd.read_parquet(workdir / "results/conformity/answers/truthfulqa.parquet")
    gen = answers[answers["corpus"] == "main"]
    retried = gen[gen["attempt"] > 0]
    assert len(retried) > 0 and gen["text"].notna().all()
    # The step is added once per re-ask, so compare as floats (0.1 + 0.1 + 0.1 != 0.3).
    assert np.allclose(retried["temperature"], (0.1 * retried["attempt"]).clip(upper=1.0))
    assert (retried["sampling_seed"] == 42 + retried["attempt"]).all()
    assert gen["messages_json"].map(lambda m: '"user"' in m).all()

    # Table 8's settings are read from what each model's requests carried.
    sent = pd.read_csv(workdir / "results/tables/conformity/table8_requests.csv").set_index(["Stage", "Model"])
    assert set(sent.index) == {("generation", "gen-sim"), ("judging", "judge-a"), ("judging", "judge-b")}
    judge = sent.loc[("judging", "judge-b")]
    assert (judge["temperature"], judge["max_tokens"], judge["seed"], judge["Asks"]) == (0.0, 16, 42, 2)
    assert judge["Re-ask"] == "temperature +0.1 (cap 1), seed +1" and judge["Decoding"] == "free"
    assert sent.loc[("generation", "gen-sim"), "max_tokens"] == 300

    ratings = pd.read_parquet(workdir / "results/conformity/ratings/truthfulqa.parquet")
    # Every judge rated every answer (8 blind + 6 informed per trial, 4 anchor scorings per item).
    assert len(ratings) == 2 * 8 * (14 + 4)
    missing = ratings[ratings["status"] == "missing"]
    assert len(missing) > 0 and missing["rating"].isna().all() and missing["error"].notna().all()
    assert set(missing["judge"]) == {"judge-b"}
    # The paper's free decoding is the default and is recorded on every rating.
    assert (ratings["decoding"] == "free").all()
    assert ratings.loc[ratings["status"] == "ok", "rating"].between(1, 5).all()
    pf = pd.read_csv(workdir / "results/tables/conformity/parse_failures.csv")
    assert pf.loc[pf["judge"] == "judge-b", "missing"].sum() == len(missing)
    # Planted anchors at ±1.5 with the gold shown: the audit separates them clearly.
    t5 = pd.read_csv(workdir / "results/tables/conformity/table5.csv").set_index(["Dataset", "Audit Quantity"])
    assert t5.at[("All", "Mean Separation"), "Reference-Augmented"] > 1.5
    assert (workdir / "results/tables/conformity/table1.tex").read_text().count("Selection rule") == 1


def test_judge_shard_is_retried_by_the_papers_loop(tmp_path, monkeypatch):
    """A judge shard carries the retry loop of its settings; answered by a provider whose
    first two replies are not ratings, the third ask (temperature 0.2, seed 44, the same
    prompt) gives the rating."""
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from provider_server import ProviderServer, Reply, default_reply

    from context_effects.conformity.judging import ratings_frame, write_judge_shard
    from context_effects.llm.backends.openai_api import OpenAIBackend
    from context_effects.llm.shards import answer_shard, read_request_shard
    from context_effects.llm.store.responses import ResponseStore

    from context_effects.conformity.requests import anchor_texts
    from context_effects.datasets import build_item_table, write_items

    table = build_item_table("truthfulqa", {"kind": "local", "path": str(REPO / "data/demo/truthfulqa.jsonl")},
                             n_items=1, sample_seed=42, attractor_seed=42)
    items = tmp_path / "items.parquet"
    write_items(table, items)
    answers = tmp_path / "answers.parquet"
    anchor_texts(table).iloc[:1].to_parquet(answers, index=False)
    from context_effects.config import fill_defaults, load_schema

    judging = fill_defaults({}, load_schema())["conformity"]["judging"]
    cfg = {"backend": "openai", "model_id": "gpt-4o"}
    shard = tmp_path / "req.parquet"
    write_judge_shard({"truthfulqa": items}, {"truthfulqa": answers}, shard, blocks=[("truthfulqa", 0)], judge="j",
                      judge_cfg=cfg, items_per_shard=1, hosted=True, primary_seed=42, judging=judging, seed=42)
    reqs, policy = read_request_shard(shard)
    assert policy["policy_params"]["reask"] == "warmer" and policy["max_attempts"] == 6
    seen: dict[str, int] = {}

    def flaky(prompt: str) -> Reply:
        seen[prompt] = seen.get(prompt, 0) + 1
        return Reply(["I", " think", " 4"]) if seen[prompt] <= 2 else default_reply(prompt)

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-retry")
    with ProviderServer(openai_key="sk-test-retry", reply=flaky) as srv:
        backend = OpenAIBackend(base_url=srv.base_url, backoff_base_s=0.02, request_timeout_s=5.0)
        answer_shard(shard, tmp_path / "resp.parquet", tmp_path / "ledger.json", backend,
                     ResponseStore(tmp_path / "store"), progress=False, handle_signals=False)
        bodies = [c.body for c in srv.generation_calls()]
    first = [b for b in bodies if b["messages"] == bodies[0]["messages"]]
    assert [(b["temperature"], b["seed"]) for b in first] == [(0.0, 42), (0.1, 43), (0.2, 44)]
    ratings = ratings_frame([tmp_path / "resp.parquet"], request_paths=[shard])
    assert (ratings["status"] == "ok").all() and set(ratings["attempts"]) == {3}
