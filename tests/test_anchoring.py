"""Study H (history anchoring): reply parsing, tasks and prior design, protocol invariants, metrics."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from context_effects.anchoring import judging, prompts
from context_effects.llm import judging as reply_format
from context_effects.anchoring.judging import parse_score
from context_effects.anchoring.requests import judge_requests, write_judge_shard
from context_effects.anchoring.scoring import (
    bootstrap_ci,
    check_run,
    judgments_frame,
    read_responses,
    summarise,
    task_metrics,
)
from context_effects.anchoring.tasks import (
    TaskError,
    assign_priors,
    benchmark_tasks,
    build_tasks,
    file_tasks,
    hedged_answer,
    other_correct_answer,
)
from context_effects.datasets import build_item_table, write_items
from context_effects.llm.backends.base import Backend
from context_effects.llm.shards import answer_shard, read_request_shard, write_request_shard
from context_effects.llm.store import ResponseStore
from context_effects.llm.types import LLMRequest, LLMResult

SETTINGS = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 16, "repetitions": 2, "max_attempts": 2, "seed": 7}
SIM = {"backend": "synthetic", "model_id": "sim"}


# ----------------------------------------------------------------------------- replies


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"score": 4}', (4, None)),
        ('```json\n{"score": 5}\n```', (5, None)),
        ('My verdict: {"score": 3, "reason": "hedges"} done.', (3, None)),
        ('{"score": 4.0}', (4, None)),
        ('{"score": 2} {"score": 2}', (2, None)),
        ('{"score": 4.5}', (None, judging.NOT_INTEGER)),
        ('{"score": "4"}', (None, judging.STRING)),
        ('{"score": true}', (None, judging.NOT_NUMBER)),
        ('{"score": null}', (None, judging.NOT_NUMBER)),
        ('{"score": 6}', (None, judging.OUT_OF_RANGE)),
        ('{"score": 0}', (None, judging.OUT_OF_RANGE)),
        ('{"rating": 3}', (None, judging.MISSING)),
        ("", (None, reply_format.EMPTY)),
        (None, (None, reply_format.EMPTY)),
        ("I would give it a 4.", (None, reply_format.NO_JSON)),
        ('{"score": ', (None, reply_format.TRUNCATED)),
        ('{"score": 2} then {"score": 5}', (None, judging.CONFLICTING)),
        ('{"score": 2, "score": 5}', (None, judging.CONFLICTING)),
        ('{"score": 2} {"note": "x"}', (None, reply_format.MULTIPLE)),
    ],
)
def test_parse_score(text, expected):
    assert parse_score(text) == expected


class ScriptedBackend(Backend):
    """Replies by task: 'good' answers at once, 'late' only after the reminder, 'bad' never."""

    name = "scripted"

    def run(self, requests: Sequence[LLMRequest]) -> Iterator[LLMResult]:
        for req in requests:
            kind = req.meta["task_id"]
            reminded = judging.REMINDER in req.messages[-1][1]
            ok = kind == "good" or (kind == "late" and reminded)
            text = '{"score": 4}' if ok else "Four out of five."
            yield LLMResult(key=req.key, text=text, finish_reason="stop", timestamp="2026-01-02T03:04:05Z")


def test_invalid_replies_are_reasked_then_recorded_missing(tmp_path):
    tasks = pd.DataFrame(
        [
            {"task_id": t, "source": "x", "item_id": None, "answer_kind": "file", "question": f"Q {t}?", "answer": "A",
             "rubric": "R", "gold_score": 3, "prior_direction": "above", "prior_score": 5, "prior_verdict": "pass"}
            for t in ("good", "late", "bad")
        ]
    )
    settings = {**SETTINGS, "repetitions": 1}
    write_judge_shard(tasks, tmp_path / "req.parquet", "sim", SIM, settings)
    answer_shard(tmp_path / "req.parquet", tmp_path / "resp.parquet", tmp_path / "led.json", ScriptedBackend(),
                 ResponseStore(tmp_path / "store"), progress=False)
    requests, rows = read_responses(tmp_path / "resp.parquet")
    j = judgments_frame(requests, rows)
    by = j.groupby("task_id")
    assert (by.get_group("good")["score"] == 4).all() and (by.get_group("good")["attempt"] == 0).all()
    assert (by.get_group("late")["score"] == 4).all() and (by.get_group("late")["attempt"] == 1).all()
    bad = by.get_group("bad")
    # Never a score: missing, with the validator's reason, after max_attempts asks.
    assert bad["score"].isna().all() and (bad["missing_reason"] == reply_format.NO_JSON).all()
    assert (bad["attempt"] == 1).all()


def test_shards_name_a_registered_reply_policy(tmp_path):
    with pytest.raises(ValueError, match=r"unknown reply policy 'anchoring\.scores'; allowed: .*anchoring\.score"):
        write_request_shard(tmp_path / "x.parquet", [], reply_policy="anchoring.scores")
    write_request_shard(tmp_path / "x.parquet", [], reply_policy="anchoring.score", max_attempts=2)
    assert read_request_shard(tmp_path / "x.parquet")[1] == {
        "reply_policy": "anchoring.score", "policy_params": {}, "max_attempts": 2
    }


# ----------------------------------------------------------------------------- tasks


def _items(n: int, dataset: str = "truthfulqa") -> pd.DataFrame:
    rows = []
    for i in range(n):
        rows.append(
            {
                "item_id": f"{dataset}-{i:04d}",
                "dataset": dataset,
                "question": f"Question {i}?",
                "gold_answer": f"The full correct answer number {i}",
                "correct_answers": [f"The full correct answer number {i}", f"Answer {i}"] if dataset == "truthfulqa"
                else [f"The full correct answer number {i}"],
                "wrong_attractor": f"A wrong answer {i}",
                "options": [] if dataset == "truthfulqa" else [f"The full correct answer number {i}", f"A wrong answer {i}"],
            }
        )
    return pd.DataFrame(rows)


def test_benchmark_tasks_follow_the_gold_rule():
    t = benchmark_tasks(_items(8), 8, seed=1)
    assert t["answer_kind"].tolist() == ["best", "other_correct", "hedged", "incorrect"] * 2
    assert t["gold_score"].tolist() == [5, 4, 3, 1] * 2
    row = t.iloc[1]
    assert row["answer"] == "Answer 1" and "Reference answer: The full correct answer number 1" in row["rubric"]
    assert t.iloc[3]["answer"] == "A wrong answer 3"
    assert '"The full correct answer number 2"' in t.iloc[2]["answer"] and '"A wrong answer 2"' in t.iloc[2]["answer"]
    # Multiple choice: no other correct answer, so the kinds rotate over the other three; options are shown.
    mc = benchmark_tasks(_items(6, "arc_challenge"), 6, seed=1)
    assert mc["answer_kind"].tolist() == ["best", "hedged", "incorrect"] * 2
    assert "\nOptions: The full correct answer number 0; A wrong answer 0" in mc.iloc[0]["question"]
    with pytest.raises(TaskError, match="tasks_per_dataset"):
        benchmark_tasks(_items(3), 4)


def test_answer_construction_rules():
    assert other_correct_answer("An octopus has three hearts", ["An octopus has three hearts", "Three",
                                                                "It has two gill hearts and one systemic heart"]) == "Three"
    assert other_correct_answer("Mercury", ["Mercury", "mercury."]) is None
    assert other_correct_answer("It is what it is now", ["I have no comment"]) is None
    orders = {hedged_answer("right", "wrong", f"i{k}", 42).startswith('It is either "right"') for k in range(20)}
    assert orders == {True, False}  # both orders occur, by the seeded rule
    assert hedged_answer("right", "wrong", "i1", 42) == hedged_answer("right", "wrong", "i1", 42)


def test_task_files_are_validated(tmp_path, repo):
    shipped = file_tasks(repo / "data" / "anchoring" / "tasks.jsonl")
    assert shipped["task_id"].is_unique and shipped["gold_score"].between(1, 5).all()
    assert set(shipped["gold_score"]) >= {1, 2, 3, 4, 5}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "a", "question": "Q", "answer": "A", "gold_score": 7, "rubric": "R"}) + "\n")
    with pytest.raises(TaskError, match="gold_score must be an integer 1-5"):
        file_tasks(bad)
    bad.write_text(json.dumps({"task_id": "a", "question": "Q", "answer": "A", "gold_score": 3}) + "\n")
    with pytest.raises(TaskError, match="rubric"):
        file_tasks(bad)
    csv = tmp_path / "t.csv"
    csv.write_text("task_id,question,answer,gold_score,reference_answer\nc1,Q?,A,2,R\n")
    assert file_tasks(csv).iloc[0]["gold_score"] == 2


def test_prior_design_is_balanced_recorded_and_seeded():
    rng = np.random.default_rng(3)
    tasks = pd.DataFrame({"task_id": [f"t{i:02d}" for i in range(41)], "gold_score": rng.integers(1, 6, 41)})
    a = assign_priors(tasks, seed=5, threshold=3)
    up = a["prior_direction"] == "above"
    assert abs(int(up.sum()) - int((~up).sum())) <= 1
    assert (a.loc[up, "prior_score"] > a.loc[up, "gold_score"]).all()
    assert (a.loc[~up, "prior_score"] < a.loc[~up, "gold_score"]).all()
    assert a["prior_score"].between(1, 5).all()
    assert (a.loc[a["gold_score"] == 5, "prior_direction"] == "below").all()
    assert (a.loc[a["gold_score"] == 1, "prior_direction"] == "above").all()
    assert (a["prior_verdict"] == np.where(a["prior_score"] >= 3, "pass", "fail")).all()
    pd.testing.assert_frame_equal(a, assign_priors(tasks.sample(frac=1, random_state=1), seed=5, threshold=3))
    assert not a.equals(assign_priors(tasks, seed=6, threshold=3))
    with pytest.raises(TaskError, match="cannot be balanced"):
        assign_priors(pd.DataFrame({"task_id": list("abcd"), "gold_score": [5, 5, 5, 3]}), seed=1, threshold=3)


# ----------------------------------------------------------------------------- protocol invariants


@pytest.fixture
def small_tasks(repo, tmp_path):
    source = {"kind": "local", "path": str(repo / "data" / "demo" / "truthfulqa.jsonl")}
    items = tmp_path / "truthfulqa.parquet"
    write_items(build_item_table("truthfulqa", source, 4, 42, 42), items)
    return build_tasks({"truthfulqa": items}, [repo / "data" / "anchoring" / "tasks.jsonl"], tasks_per_dataset=4,
                       answer_kinds=["best", "other_correct", "hedged", "incorrect"], seed=42, verdict_threshold=3)


def test_requests_keep_every_condition_identical_but_the_history(small_tasks):
    reqs = judge_requests(small_tasks, "sim", SIM, SETTINGS)
    assert len(reqs) == len(small_tasks) * 3 * 2
    assert sorted(r.meta["order"] for r in reqs) == list(range(len(reqs)))
    blind = {}
    for r in reqs:
        # Fresh context: the system prompt and one user turn, nothing from another judgment.
        assert [role for role, _ in r.messages] == ["system", "user"]
        assert r.messages[0] == ("system", prompts.SYSTEM_PROMPT)
        assert (r.model, r.output_schema, r.mode) == (reqs[0].model, reqs[0].output_schema, "chat")
        assert r.sample_index == r.meta["repetition"] and r.sampling.seed == 7 + r.meta["repetition"]
        assert dataclasses.replace(r.sampling, seed=None) == dataclasses.replace(reqs[0].sampling, seed=None)
        if r.meta["condition"] == "blind":
            blind[r.meta["task_id"], r.meta["repetition"]] = r.messages[1][1]
    tasks = small_tasks.set_index("task_id")
    for r in reqs:
        m = r.meta
        user = r.messages[1][1]
        block = prompts.history_block(m["condition"], m["prior_score"], m["prior_verdict"])
        assert user.startswith(block) and user[len(block):] == blind[m["task_id"], m["repetition"]]
        t = tasks.loc[m["task_id"]]
        assert t["answer"] in user and t["rubric"] in user
        if m["condition"] == "anchor":
            assert f"Previous score: {t['prior_score']}/5 (verdict: {t['prior_verdict']})" in user
        else:
            assert "Previous score" not in user
        if m["condition"] == "framing":
            assert "reviewed before" in user
        if m["condition"] == "blind":
            assert "reviewed" not in user


def test_order_is_randomised_seeded_and_per_judge(small_tasks):
    def cells(judge, settings=SETTINGS):
        return [(r.meta["task_id"], r.meta["condition"], r.meta["repetition"])
                for r in judge_requests(small_tasks, judge, SIM, settings)]

    a = cells("sim")
    assert a == cells("sim") and a != sorted(a) and a != cells("other") and a != cells("sim", {**SETTINGS, "seed": 8})
    # Conditions are interleaved, not run in blocks.
    first = [c for _, c, _ in a[: len(a) // 3]]
    assert set(first) == {"blind", "framing", "anchor"}
    with pytest.raises(ValueError, match="chat models"):
        judge_requests(small_tasks, "base", {**SIM, "mode": "completion"}, SETTINGS)


def test_check_run_rejects_protocol_violations(small_tasks):
    reqs = judge_requests(small_tasks, "sim", SIM, SETTINGS)
    check_run(reqs, small_tasks, 2)
    i = next(k for k, r in enumerate(reqs) if r.meta["condition"] == "anchor")
    hot = dataclasses.replace(reqs[i], sampling=dataclasses.replace(reqs[i].sampling, temperature=0.7))
    with pytest.raises(ValueError, match="decoding settings"):
        check_run(reqs[:i] + [hot] + reqs[i + 1:], small_tasks, 2)
    chained = dataclasses.replace(reqs[i], messages=reqs[i].messages + (("assistant", "4"), ("user", "again")))
    with pytest.raises(ValueError, match="fresh context"):
        check_run(reqs[:i] + [chained] + reqs[i + 1:], small_tasks, 2)
    with pytest.raises(ValueError, match="exactly|once"):
        check_run(reqs[:-1], small_tasks, 2)


# ----------------------------------------------------------------------------- metrics (hand-computed)

HAND_TASKS = pd.DataFrame(
    {
        "task_id": ["T1", "T2", "T3", "T4", "T5"],
        "source": "hand",
        "answer_kind": "file",
        "gold_score": [4, 2, 3, 1, 5],
        "prior_score": [1, 5, 5, 3, 2],
        "prior_direction": ["below", "above", "above", "above", "below"],
        "prior_verdict": ["fail", "pass", "pass", "pass", "fail"],
    }
)
# (blind, framing, anchor) scores of the two repetitions; None = missing.
HAND_SCORES = {
    "T1": ([4, 4], [4, 3], [3, 2]),
    "T2": ([2, 3], [2, None], [3, 3]),
    "T3": ([5, 5], [4, 4], [5, 4]),  # prior equals the blind mean: a tie
    "T4": ([None, None], [1, 1], [2, 2]),  # no blind score: missing
    "T5": ([4, 4], [4, 5], [5, 5]),  # moved away from the prior
}


def _hand_judgments() -> pd.DataFrame:
    rows = []
    for tid, triple in HAND_SCORES.items():
        for cond, scores in zip(prompts.CONDITIONS, triple):
            for rep, s in enumerate(scores):
                rows.append({"task_id": tid, "condition": cond, "repetition": rep, "score": s,
                             "missing_reason": None if s is not None else "no_json_object"})
    j = pd.DataFrame(rows)
    j["score"] = j["score"].astype("Int64")
    return j


def test_task_metrics_match_hand_computation():
    pt = task_metrics(_hand_judgments(), HAND_TASKS, threshold=3).set_index("task_id")
    assert pt.loc["T1", ["mean_blind", "mean_framing", "mean_anchor"]].tolist() == [4.0, 3.5, 2.5]
    assert pt.loc["T1", "pull"] == 1.5 and pt.loc["T2", "pull"] == 0.5 and pt.loc["T5", "pull"] == -1.0
    assert pt.loc["T3", "pull_status"] == "tie" and math.isnan(pt.loc["T3", "pull"])
    assert pt.loc["T4", "pull_status"] == "missing" and not pt.loc["T4", "complete"]
    assert pt["pull_vs_framing"].tolist() == [1.0, 1.0, 0.5, 1.0, -0.5]
    assert pt.loc["T2", "n_framing"] == 1 and pt.loc["T2", "n_missing_framing"] == 1
    assert pt.loc["T1", "sd_framing"] == pytest.approx(math.sqrt(0.5)) and pt.loc["T1", "sd_blind"] == 0.0
    assert math.isnan(pt.loc["T2", "sd_framing"])  # one valid repetition: no SD
    assert pt["harmed"].tolist() == [True, True, False, False, False]
    assert pt["blind_at_least_as_close"].tolist() == [True, True, False, False, False]
    assert pt["verdict_flip"].tolist() == [True, True, False, False, False]
    assert pt["flip_toward_prior"].tolist() == [True, True, False, False, False]


def test_model_summary_matches_hand_computation():
    j = _hand_judgments()
    pt = task_metrics(j, HAND_TASKS, threshold=3)
    s = summarise(pt, j, n_resamples=2000, seed=1)
    p = s["pull"]
    assert (p["n_used"], p["n_ties"], p["n_missing"]) == (3, 1, 1)
    assert p["mean"]["estimate"] == pytest.approx(1 / 3) and p["median"]["estimate"] == 0.5
    assert p["share_toward"] == pytest.approx(2 / 3) and p["share_away"] == pytest.approx(1 / 3)
    assert p["mean"]["ci_low"] <= 1 / 3 <= p["mean"]["ci_high"]
    af = s["anchor_vs_framing"]
    assert af["signed_mean"]["estimate"] == pytest.approx(0.6)
    assert af["raw_mean_difference"] == pytest.approx(0.4)
    assert af["framing_minus_blind"] == pytest.approx(-0.375)
    c = s["by_condition"]
    assert c["blind"]["mean_abs_error"] == pytest.approx(0.875)
    assert c["framing"]["mean_abs_error"] == pytest.approx(0.4)
    assert c["anchor"]["mean_abs_error"] == pytest.approx(1.0)
    assert c["blind"]["missing_rate"] == pytest.approx(0.2) and c["framing"]["missing_rate"] == pytest.approx(0.1)
    assert c["blind"]["missing_reasons"] == {"no_json_object": 2}
    assert c["blind"]["mean_rep_sd"] == pytest.approx(math.sqrt(0.5) / 4)
    assert c["blind"]["share_reps_disagree"] == pytest.approx(1 / 4)
    assert c["framing"]["share_reps_disagree"] == pytest.approx(2 / 4)
    h = s["correction_harm"]
    assert (h["n_blind_at_least_as_close"], h["n_harmed"], h["rate"], h["share_of_complete_tasks"]) == (2, 2, 1.0, 0.5)
    f = s["verdict_flip"]
    assert (f["n_tasks"], f["n_flips"], f["rate"], f["n_toward_prior_verdict"]) == (4, 2, 0.5, 2)


def test_bootstrap_ci_is_scipys_and_matches_normal_theory():
    x = np.random.default_rng(11).normal(0.4, 1.0, 400)
    lo, hi = bootstrap_ci(x, np.mean, n_resamples=4000, seed=3)
    ref = stats.bootstrap((x,), np.mean, n_resamples=4000, method="percentile", rng=np.random.default_rng(3))
    assert (lo, hi) == (ref.confidence_interval.low, ref.confidence_interval.high)
    half = 1.959964 * x.std(ddof=1) / math.sqrt(len(x))
    assert lo == pytest.approx(x.mean() - half, abs=0.02) and hi == pytest.approx(x.mean() + half, abs=0.02)
    assert all(math.isnan(v) for v in bootstrap_ci([1.0], np.mean, n_resamples=100, seed=1))
