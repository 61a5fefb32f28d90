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
    PRIOR_DESIGN,
    TaskError,
    assign_priors,
    category_quotas,
    prior_gold_correlation,
    benchmark_tasks,
    build_tasks,
    file_tasks,
    hedged_answer,
    other_correct_answer,
)
from context_effects.config import load_config, validate_config
from context_effects.datasets import build_item_table, write_items
from context_effects.llm.backends.base import Backend
from context_effects.llm.shards import answer_shard, read_request_shard, write_request_shard
from context_effects.llm.store.responses import ResponseStore
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
    t = benchmark_tasks(_items(8), 8, seed=1).set_index("item_id")
    assert sorted(t["answer_kind"]) == sorted(["best", "other_correct", "hedged", "incorrect"] * 2)
    assert (t["gold_score"] == t["answer_kind"].map({"best": 5, "other_correct": 4, "hedged": 3, "incorrect": 1})).all()
    assert (t["task_id"] == t.index + ":" + t["answer_kind"]).all()
    for item_id, row in t.iterrows():
        i = int(item_id.rsplit("-", 1)[1])
        assert f"Reference answer: The full correct answer number {i}" in row["rubric"]
        expected = {"best": f"The full correct answer number {i}", "other_correct": f"Answer {i}",
                    "incorrect": f"A wrong answer {i}"}.get(row["answer_kind"])
        if expected is None:
            assert f'"The full correct answer number {i}"' in row["answer"] and f'"A wrong answer {i}"' in row["answer"]
        else:
            assert row["answer"] == expected
    # Multiple choice: no other correct answer, so the three other kinds are balanced; options are shown.
    mc = benchmark_tasks(_items(6, "arc_challenge"), 6, seed=1)
    assert sorted(mc["answer_kind"]) == sorted(["best", "hedged", "incorrect"] * 2)
    first = mc.set_index("item_id").loc["arc_challenge-0000"] if "arc_challenge-0000" in set(mc["item_id"]) else None
    assert all("\nOptions: The full correct answer number" in q for q in mc["question"])
    assert first is None or "\nOptions: The full correct answer number 0; A wrong answer 0" in first["question"]
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


def _categorised_items(sizes: dict[str, int], dataset: str = "truthfulqa") -> pd.DataFrame:
    items = _items(sum(sizes.values()), dataset)
    items["category"] = [c for c, n in sizes.items() for _ in range(n)]
    return items


def _realistic_tasks(repo, seed: int = 42) -> pd.DataFrame:
    """The paper's shape: 50 tasks from each of three 500-item benchmarks plus the shipped task file."""
    frames = [
        benchmark_tasks(_categorised_items({"Health": 200, "Law": 180, "Misconceptions": 120}, ds), 50, seed=seed,
                        source=ds)
        for ds in ("truthfulqa", "mmlu_pro", "arc_challenge")
    ]
    frames.append(file_tasks(repo / "data" / "anchoring" / "tasks.jsonl"))
    return pd.concat(frames, ignore_index=True)


def test_task_draw_is_stratified_by_category_and_gold_level_and_reproducible():
    sizes = {"Health": 250, "Law": 150, "Misconceptions": 93, "Weather": 7}
    items = _categorised_items(sizes)
    n = 50
    t = benchmark_tasks(items, n, seed=42, source="truthfulqa")
    assert len(t) == n and t["item_id"].is_unique
    # Categories in proportion to the item table (largest remainder: within one of n * share).
    got = t["category"].value_counts()
    for cat, size in sizes.items():
        assert abs(got.get(cat, 0) - n * size / len(items)) < 1, (cat, got.get(cat, 0))
    assert got.sum() == n
    # Gold levels balanced overall and within each category (every item supports every kind here).
    kinds = t["answer_kind"].value_counts()
    assert set(kinds.index) == {"best", "other_correct", "hedged", "incorrect"} and kinds.max() - kinds.min() <= 1
    for _, part in t.groupby("category"):
        per = part["answer_kind"].value_counts().reindex(list(kinds.index), fill_value=0)
        assert per.max() - per.min() <= 1
    # A seeded draw, not the head of the table: reproducible, different under another seed.
    pd.testing.assert_frame_equal(t, benchmark_tasks(items, n, seed=42, source="truthfulqa"))
    assert set(t["item_id"]) != set(items["item_id"].head(n))
    other = benchmark_tasks(items, n, seed=43, source="truthfulqa")
    assert set(other["item_id"]) != set(t["item_id"])
    assert other["category"].value_counts().to_dict() == got.to_dict()  # the quotas do not depend on the seed
    # Each dataset draws with its own stream: equal tables do not give equal draws.
    assert set(benchmark_tasks(items, n, seed=42, source="mmlu_pro")["item_id"]) != set(t["item_id"])
    # Many small categories (MMLU-Pro has 14): gold levels stay balanced overall and per category.
    for draw_seed in range(10):
        sizes14 = {f"c{i:02d}": int(k) for i, k in enumerate(np.random.default_rng(draw_seed).integers(1, 80, 14))}
        for ds in ("truthfulqa", "mmlu_pro"):
            d = benchmark_tasks(_categorised_items(sizes14, ds), n, seed=draw_seed, source=ds)
            counts = d["answer_kind"].value_counts()
            assert counts.max() - counts.min() <= 1
            for _, part in d.groupby("category"):
                per = part["answer_kind"].value_counts().reindex(list(counts.index), fill_value=0)
                assert per.max() - per.min() <= 1
    # Items without a category form one stratum.
    plain = benchmark_tasks(_items(20, "arc_challenge"), 9, seed=1)
    assert set(plain["category"]) == {"(none)"}
    assert sorted(plain["answer_kind"].value_counts().tolist()) == [3, 3, 3]


def test_category_quotas_hand_computed():
    rng = np.random.default_rng(0)
    # 6 of 15: exact shares 2.8, 2.0, 1.2 -> floors 2, 2, 1 and the one left goes to the largest remainder (0.8).
    assert category_quotas({"a": 7, "b": 5, "c": 3}, 6, rng) == {"a": 3, "b": 2, "c": 1}
    assert category_quotas({"a": 1, "b": 1}, 2, rng) == {"a": 1, "b": 1}


def test_prior_design_is_independent_of_gold_recorded_and_seeded(repo):
    tasks = _realistic_tasks(repo)
    assert len(tasks) == 158 and set(tasks["gold_score"]) == {1, 2, 3, 4, 5}
    a = assign_priors(tasks, seed=5, threshold=3)
    assert (a["prior_design"] == PRIOR_DESIGN).all()
    high = a["prior_side"] == "high"
    assert a.loc[high, "prior_score"].isin([4, 5]).all() and a.loc[~high, "prior_score"].isin([1, 2]).all()
    # Half high, half low within every gold level (up to one task), and overall.
    assert abs(int(high.sum()) - int((~high).sum())) <= 1
    for _, part in a.groupby("gold_score"):
        h = int((part["prior_side"] == "high").sum())
        assert abs(h - (len(part) - h)) <= 1
    assert (a["prior_direction"] == np.select([a["prior_score"] > a["gold_score"], a["prior_score"] < a["gold_score"]],
                                              ["above", "below"], "equal")).all()
    assert (a["prior_verdict"] == np.where(a["prior_score"] >= 3, "pass", "fail")).all()
    # Uninformative about quality: r(prior, gold) is 0 within sampling error. Under independence
    # atanh(r) * sqrt(n - 3) is about N(0, 1); |z| < 2.576 is the two-sided 1% bound.
    n = len(a)
    for design_seed in range(20):
        d = assign_priors(tasks, seed=design_seed, threshold=3)
        r = np.corrcoef(d["gold_score"], d["prior_score"])[0, 1]
        assert abs(np.arctanh(r)) * math.sqrt(n - 3) < 2.576, (design_seed, r)
        c = prior_gold_correlation(d)
        assert c["n"] == n and c["r"] == pytest.approx(r) and c["ci_low"] < 0 < c["ci_high"]
    # The recorded design is reproducible from the seed and does not depend on the input order.
    pd.testing.assert_frame_equal(a, assign_priors(tasks.sample(frac=1, random_state=1), seed=5, threshold=3))
    assert not a.equals(assign_priors(tasks, seed=6, threshold=3))
    # Even a one-sided gold distribution gets a design (the old gold-relative design could not balance this).
    only5 = assign_priors(pd.DataFrame({"task_id": list("abcd"), "gold_score": [5, 5, 5, 3]}), seed=1, threshold=3)
    assert sorted(only5["prior_side"]) == ["high", "high", "low", "low"]


# ----------------------------------------------------------------------------- protocol invariants


@pytest.fixture
def small_tasks(repo, tmp_path):
    source = {"kind": "local", "path": str(repo / "data" / "demo" / "truthfulqa.jsonl")}
    items = tmp_path / "truthfulqa.parquet"
    write_items(build_item_table("truthfulqa", source, 4, 42, 42), items)
    return build_tasks({"truthfulqa": items}, [repo / "data" / "anchoring" / "tasks.jsonl"], tasks_per_dataset=4,
                       answer_kinds=["best", "other_correct", "hedged", "incorrect"], seed=42, verdict_threshold=3)


def test_requests_keep_every_condition_identical_but_the_history(small_tasks):
    from context_effects.anchoring.requests import judgment_seed

    reqs = judge_requests(small_tasks, "sim", SIM, SETTINGS)
    assert len(reqs) == len(small_tasks) * 3 * 2
    assert sorted(r.meta["order"] for r in reqs) == list(range(len(reqs)))
    blind = {}
    for r in reqs:
        # Fresh context: the system prompt and one user turn, nothing from another judgment.
        assert [role for role, _ in r.messages] == ["system", "user"]
        assert r.messages[0] == ("system", prompts.SYSTEM_PROMPT)
        assert (r.model, r.output_schema, r.mode) == (reqs[0].model, reqs[0].output_schema, "chat")
        m = r.meta
        assert r.sample_index == m["repetition"]
        assert r.sampling.seed == judgment_seed(7, "sim", m["task_id"], m["condition"], m["repetition"])
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


def test_repetitions_are_distinct_requests_with_distinct_seeds_recorded_per_row(small_tasks, repo):
    settings = {**SETTINGS, "repetitions": 3, "temperature": 1.0}
    reqs = judge_requests(small_tasks, "sim", SIM, settings)
    cells: dict[tuple, list] = {}
    for r in reqs:
        cells.setdefault((r.meta["task_id"], r.meta["condition"]), []).append(r)
    for reps in cells.values():
        assert len({r.key for r in reps}) == 3  # a repetition is its own request, never a cache hit
        assert len({r.sampling.seed for r in reps}) == 3
        assert {r.sampling.temperature for r in reps} == {1.0}
    # Recorded per judgment row.
    rows = pd.DataFrame([{"text": '{"score": 3}', "ok": True, "key": r.key} for r in reqs])
    j = judgments_frame(reqs, rows)
    assert j["sampling_seed"].tolist() == [r.sampling.seed for r in reqs] and (j["temperature"] == 1.0).all()
    assert (j["top_p"] == 1.0).all() and j["key"].is_unique
    # The paper config samples (temperature > 0), so the spread across repetitions is sampling variation.
    paper = validate_config(load_config(repo / "config" / "config.yaml"))["anchoring"]
    assert paper["repetitions"] >= 3 and paper["temperature"] > 0 and paper["top_p"] == 1.0


def test_every_judgment_is_its_own_draw_not_paired_across_conditions(small_tasks):
    """vLLM seeds a generator per request (docs/llm-layer.md, "Sampling seeds"), so judgments
    sharing a seed share their noise. Each judgment's seed is a hash of the run seed and its
    judge, task, condition and repetition: a task's three conditions in one repetition, two
    tasks, and two judges never share one; the same run rebuilt gives the same seeds."""
    from context_effects.llm.seeds import SEED_BITS

    settings = {**SETTINGS, "repetitions": 3, "temperature": 1.0}
    reqs = judge_requests(small_tasks, "sim", SIM, settings)
    seeds = {(r.meta["task_id"], r.meta["condition"], r.meta["repetition"]): r.sampling.seed for r in reqs}
    assert len(set(seeds.values())) == len(seeds) == len(small_tasks) * 3 * 3
    task, other = sorted(small_tasks["task_id"])[:2]
    assert len({seeds[(task, c, 0)] for c in prompts.CONDITIONS}) == 3  # not paired across conditions
    assert seeds[(task, "blind", 0)] != seeds[(other, "blind", 0)]
    assert all(0 <= v < 2**SEED_BITS for v in seeds.values())
    assert [r.sampling.seed for r in judge_requests(small_tasks, "sim", SIM, settings)] == list(seeds.values())
    for changed in (judge_requests(small_tasks, "other", SIM, settings),
                    judge_requests(small_tasks, "sim", SIM, {**settings, "seed": 8})):
        assert not {r.sampling.seed for r in changed} & set(seeds.values())
    # The run's protocol check takes judgments with seeds of their own.
    check_run(reqs, small_tasks, 3)
    # A judge whose API takes no seed (llm/capabilities.py) is sent none.
    claude = {"backend": "anthropic", "model_id": "claude-x"}
    assert {r.sampling.seed for r in judge_requests(small_tasks, "claude", claude, settings)} == {None}


def test_paper_config_pins_every_local_judge_to_a_hub_commit(repo):
    """Model updates change results (the protocol): a local judge loads one commit of its weights."""
    import re

    cfg = validate_config(load_config(repo / "config" / "config.yaml"))
    local = [j for j in cfg["anchoring"]["judges"] if cfg["models"][j]["backend"] == "vllm"]
    assert len(local) == 4
    for judge in local:
        assert re.fullmatch(r"[0-9a-f]{40}", cfg["models"][judge]["revision"] or ""), judge


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


def test_a_run_answered_by_two_model_versions_fails_and_the_result_names_the_version(small_tasks):
    from context_effects.anchoring.scoring import check_one_version, judgments_frame, served_versions
    from context_effects.llm.capabilities import SERVED_MODEL_NOTE

    reqs = judge_requests(small_tasks, "sim", SIM, SETTINGS)
    snapshot = [f"{SERVED_MODEL_NOTE}=gpt-4o-2024-08-06"] * len(reqs)
    rows = pd.DataFrame({"ok": True, "text": '{"score": 3}', "notes": snapshot})
    rows.loc[0, ["ok", "notes"]] = [False, None]  # a failed call answered nothing: no version
    frame = judgments_frame(reqs, rows)
    assert served_versions(frame) == {"gpt-4o-2024-08-06": len(reqs) - 1}
    assert check_one_version(frame) == "gpt-4o-2024-08-06"
    # The alias moved to a new snapshot for the last three judgments: the run is refused.
    rows.loc[len(reqs) - 3:, "notes"] = f"{SERVED_MODEL_NOTE}=gpt-4o-2024-11-20"
    with pytest.raises(ValueError, match=r"2 model versions: gpt-4o-2024-08-06 \(\d+ judgments\), "
                                         r"gpt-4o-2024-11-20 \(3 judgments\)"):
        check_one_version(judgments_frame(reqs, rows))


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
    # The seed's formula as written: prior = blind mean gives sign 0, so the pull is 0 (kept);
    # the sensitivity column leaves it out.
    assert pt.loc["T3", "pull_status"] == "tie" and pt.loc["T3", "pull"] == 0.0
    assert math.isnan(pt.loc["T3", "pull_ties_excluded"]) and pt.loc["T1", "pull_ties_excluded"] == 1.5
    assert math.isnan(pt.loc["T4", "pull"]) and math.isnan(pt.loc["T4", "pull_ties_excluded"])
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
    # Primary: pulls 1.5, 0.5, 0 (tie), -1.0 -> mean 0.25, median 0.25.
    p = s["pull"]
    assert p["tie_handling"] == "ties scored 0 (primary)"
    assert (p["n_used"], p["n_ties"], p["n_missing"]) == (4, 1, 1)
    assert p["mean"]["estimate"] == pytest.approx(0.25) and p["median"]["estimate"] == pytest.approx(0.25)
    assert (p["share_toward"], p["share_away"], p["share_zero"]) == (0.5, 0.25, 0.25)
    assert p["mean"]["ci_low"] <= 0.25 <= p["mean"]["ci_high"]
    # Sensitivity: the tie left out -> 1.5, 0.5, -1.0.
    x = s["pull_ties_excluded"]
    assert x["tie_handling"] == "ties excluded (sensitivity)"
    assert (x["n_used"], x["n_ties"], x["n_missing"]) == (3, 1, 1)
    assert x["mean"]["estimate"] == pytest.approx(1 / 3) and x["median"]["estimate"] == 0.5
    assert x["share_toward"] == pytest.approx(2 / 3) and x["share_away"] == pytest.approx(1 / 3)
    af = s["anchor_vs_framing"]
    assert af["signed_mean"]["estimate"] == pytest.approx(0.6)
    assert af["signed_mean_ties_excluded"]["estimate"] == pytest.approx(0.6) and af["n_used_ties_excluded"] == 5
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


def test_tie_rule_primary_counts_ties_as_zero_and_sensitivity_excludes_them():
    """Hand-computed on a toy set of one repetition per cell: pull = sign(prior - blind) * (anchor - blind)."""
    # task: (prior, blind, anchor)
    toy = {"A": (5, 3, 4), "B": (1, 3, 4), "C": (2, 2, 4), "D": (4, 4, 1), "E": (5, 2, 5)}
    tasks = pd.DataFrame({"task_id": list(toy), "source": "toy", "answer_kind": "file", "gold_score": 3,
                          "prior_score": [v[0] for v in toy.values()], "prior_direction": "equal",
                          "prior_verdict": "pass"})
    j = pd.DataFrame([{"task_id": t, "condition": c, "repetition": 0, "score": s, "missing_reason": None}
                      for t, (_, b, a) in toy.items() for c, s in (("blind", b), ("framing", b), ("anchor", a))])
    j["score"] = j["score"].astype("Int64")
    pt = task_metrics(j, tasks, threshold=3).set_index("task_id")
    # A: +1 (toward), B: -1 (away), C and D: prior = blind, sign 0 -> 0 whatever the anchor did, E: +3.
    assert pt["pull"].tolist() == [1.0, -1.0, 0.0, 0.0, 3.0]
    assert pt["pull_status"].tolist() == ["ok", "ok", "tie", "tie", "ok"]
    s = summarise(pt, j, n_resamples=500, seed=1)
    # Primary: mean (1 - 1 + 0 + 0 + 3) / 5 = 0.6, median of [-1, 0, 0, 1, 3] = 0.
    assert s["pull"]["mean"]["estimate"] == pytest.approx(0.6) and s["pull"]["median"]["estimate"] == 0.0
    assert (s["pull"]["n_used"], s["pull"]["n_ties"]) == (5, 2)
    # Sensitivity: ties excluded -> [1, -1, 3]: mean 1, median 1.
    x = s["pull_ties_excluded"]
    assert x["mean"]["estimate"] == pytest.approx(1.0) and x["median"]["estimate"] == 1.0
    assert (x["n_used"], x["n_ties"]) == (3, 2)


def test_bootstrap_ci_is_scipys_and_matches_normal_theory():
    x = np.random.default_rng(11).normal(0.4, 1.0, 400)
    lo, hi = bootstrap_ci(x, np.mean, n_resamples=4000, seed=3)
    ref = stats.bootstrap((x,), np.mean, n_resamples=4000, method="percentile", rng=np.random.default_rng(3))
    assert (lo, hi) == (ref.confidence_interval.low, ref.confidence_interval.high)
    half = 1.959964 * x.std(ddof=1) / math.sqrt(len(x))
    assert lo == pytest.approx(x.mean() - half, abs=0.02) and hi == pytest.approx(x.mean() + half, abs=0.02)
    assert all(math.isnan(v) for v in bootstrap_ci([1.0], np.mean, n_resamples=100, seed=1))
