"""Every collector checks that a response shard answers its request shard one to one.

A response shard carries its own copy of each request, so a truncated file used to be
read as complete and the lost request vanished from the ratings table. Each study's
collector (Study C answers and ratings, Study A scores, Study H scorer) is run here on
real shards (the study's request builder, answered by the synthetic backend), then on
the same response shard truncated, with a duplicated row and without a column: each
must fail naming the file and the key(s) or column.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO
from context_effects.amel.items import load_item_file, select_items
from context_effects.amel.requests import write_model_shard
from context_effects.amel.scores import probabilities
from context_effects.anchoring import dag as anchoring_dag
from context_effects.anchoring.requests import write_judge_shard as write_anchoring_shard
from context_effects.anchoring.results import result_record
from context_effects.anchoring.tasks import assign_priors, file_tasks
from context_effects.config import validate_config
from context_effects.conformity.judging import ratings_frame, write_judge_shard
from context_effects.conformity.stages import collect_answers, write_round1_shard
from context_effects.datasets import build_item_table, write_items
from context_effects.llm.factory import make_backend
from context_effects.llm.shards import ShardMismatch, answer_shard, read_response_shard
from context_effects.llm.store.rows import request_from_json

CONFIG = validate_config({
    "run": {"label": "shard-completeness", "kind": "synthetic"},
    "datasets": {"truthfulqa": {"source": "local", "local_path": str(REPO / "data/demo/truthfulqa.jsonl"),
                                "n_items": 3}},
    "models": {
        "gen-sim": {"backend": "synthetic", "model_id": "gen-sim", "synthetic": {"empty_rate": 0.0}},
        "judge-sim": {"backend": "synthetic", "model_id": "judge-sim"},
    },
    "conformity": {"datasets": ["truthfulqa"], "generators": ["gen-sim"], "judges": ["judge-sim"],
                   "hosted_judges": [], "seeds": [42], "primary_seed": 42, "decomposition": {"enabled": False}},
    "amel": {"models": ["gen-sim"], "benchmark_datasets": [], "history_lengths": [2],
             "framing_swap": False},
    "anchoring": {"judges": ["judge-sim"], "benchmark_datasets": [], "repetitions": 1,
                  "task_files": [str(REPO / "data/anchoring/tasks.jsonl")]},
})


def _answer(requests: Path, responses: Path, model: str, tmp: Path) -> None:
    from context_effects.llm.store.responses import ResponseStore

    store = ResponseStore(tmp / "store")
    backend = make_backend(model, CONFIG["models"][model], store=store)
    answer_shard(requests, responses, tmp / f"{responses.stem}.ledger.json", backend, store, progress=False)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> dict:
    """Per collector: (request shard, response shard, the collector as a function of both)."""
    tmp = tmp_path_factory.mktemp("shards")
    c = CONFIG["conformity"]
    out = {}

    # Study C generation -> conformity_answers (collect_answers).
    items = build_item_table("truthfulqa", {"kind": "local", "path": str(REPO / "data/demo/truthfulqa.jsonl")},
                             n_items=3, sample_seed=42, attractor_seed=42)
    items_path = tmp / "items.parquet"
    write_items(items, items_path)
    gen_req, gen_resp = tmp / "gen-req.parquet", tmp / "gen-resp.parquet"
    write_round1_shard({"truthfulqa": items_path}, gen_req, blocks=[("truthfulqa", 0)], generator="gen-sim", model_cfg=CONFIG["models"]["gen-sim"],
                       settings=c["generation"], seed=42, corpus="main")
    _answer(gen_req, gen_resp, "gen-sim", tmp)
    out["conformity_answers"] = (gen_req, gen_resp, lambda resp, req: collect_answers(
        items_path, [resp], [], c["generation"], request_paths=[req]))

    # Study C judging -> conformity_ratings (ratings_frame): the generated answers, rated blind.
    answers = collect_answers(items_path, [gen_resp], [], c["generation"], request_paths=[gen_req])
    answers_path = tmp / "answers.parquet"
    answers[answers["corpus"] == "main"].to_parquet(answers_path, index=False)
    judge_req, judge_resp = tmp / "judge-req.parquet", tmp / "judge-resp.parquet"
    write_judge_shard({"truthfulqa": items_path}, {"truthfulqa": answers_path}, judge_req, blocks=[("truthfulqa", 0)],
                      judge="judge-sim",
                      judge_cfg=CONFIG["models"]["judge-sim"], items_per_shard=3, hosted=False, primary_seed=42,
                      judging=c["judging"], seed=1)
    _answer(judge_req, judge_resp, "judge-sim", tmp)
    out["conformity_ratings"] = (judge_req, judge_resp, lambda resp, req: ratings_frame(
        [resp], [], request_paths=[req]))

    # Study A -> amel_scores (probabilities).
    amel_items = select_items(load_item_file(REPO / "data/amel/code_review.jsonl", "code_review"), 4, seed=1)
    amel_items_path = tmp / "amel-items.parquet"
    amel_items.to_parquet(amel_items_path, index=False)
    amel_req, amel_resp = tmp / "amel-req.parquet", tmp / "amel-resp.parquet"
    write_model_shard([amel_items_path], amel_req, model_name="gen-sim", model_cfg=CONFIG["models"]["gen-sim"],
                       amel_cfg=CONFIG["amel"])
    _answer(amel_req, amel_resp, "gen-sim", tmp)
    out["amel_scores"] = (amel_req, amel_resp, lambda resp, req: probabilities([resp], [req]))

    # Study H -> anchoring_score (result_record).
    h = CONFIG["anchoring"]
    tasks = assign_priors(file_tasks(REPO / "data/anchoring/tasks.jsonl").head(6), h["seed"], h["verdict_threshold"])
    tasks_path = tmp / "tasks.parquet"
    tasks.to_parquet(tasks_path, index=False)
    h_req, h_resp = tmp / "h-req.parquet", tmp / "h-resp.parquet"
    write_anchoring_shard(tasks, h_req, "judge-sim", CONFIG["models"]["judge-sim"], anchoring_dag.request_settings(CONFIG))
    _answer(h_req, h_resp, "judge-sim", tmp)
    out["anchoring_score"] = (h_req, h_resp, lambda resp, req: result_record(
        tasks_path, resp, judge="judge-sim", model_cfg=CONFIG["models"]["judge-sim"],
        settings=anchoring_dag.score_settings(CONFIG), run_cfg=CONFIG["run"], requests_path=req))
    return out


COLLECTORS = ("conformity_answers", "conformity_ratings", "amel_scores", "anchoring_score")


def _keys(path: Path) -> list[str]:
    return [request_from_json(b).key for b in pq.read_table(path, columns=["request_json"])["request_json"].to_pylist()]


def _tampered(resp: Path, out: Path, how: str) -> tuple[Path, str]:
    """A copy of the response shard with one row dropped or duplicated, or a column removed;
    returns it with the key (or column) the error must name."""
    table = pq.read_table(resp)
    keys = _keys(resp)
    i = len(keys) // 2
    if how == "truncated":
        table = pa.concat_tables([table.slice(0, i), table.slice(i + 1)])
        named = keys[i]
    elif how == "duplicated":
        table = pa.concat_tables([table, table.slice(i, 1)])
        named = keys[i]
    else:
        named = "text"
        table = table.drop_columns([named])
    pq.write_table(table, out)
    return out, named


@pytest.mark.parametrize("collector", COLLECTORS)
def test_complete_shards_are_accepted(shards, collector):
    req, resp, collect = shards[collector]
    assert len(_keys(resp)) > 2
    collect(resp, req)  # no error


@pytest.mark.parametrize("how", ["truncated", "duplicated", "no_column"])
@pytest.mark.parametrize("collector", COLLECTORS)
def test_incomplete_response_shard_fails_naming_file_and_key(shards, collector, how, tmp_path):
    req, resp, collect = shards[collector]
    bad, named = _tampered(resp, tmp_path / f"{collector}-{how}.parquet", how)
    with pytest.raises(ShardMismatch) as err:
        collect(bad, req)
    message = str(err.value)
    assert str(bad) in message and named in message, message
    if how == "truncated":
        assert "1 missing key(s)" in message and str(req) in message
    elif how == "duplicated":
        assert "1 duplicated key(s)" in message and "missing" not in message
    else:
        assert re.search(r"lacks column\(s\) \['text'\]", message)


def test_extra_request_from_another_shard_is_named(shards, tmp_path):
    """A response row answering a request its request shard never held is an extra key."""
    req, resp, _ = shards["conformity_ratings"]
    other = shards["conformity_answers"][1]
    table = pq.read_table(resp)
    stray = pq.read_table(other).select(table.schema.names).slice(0, 1).cast(table.schema)
    bad = tmp_path / "extra.parquet"
    pq.write_table(pa.concat_tables([table, stray]), bad)
    with pytest.raises(ShardMismatch, match=rf"1 extra key\(s\) not in the request shard: {_keys(other)[0]}"):
        read_response_shard(bad, ["text"], requests_path=req)


def test_repeated_request_needs_a_row_per_copy(shards, tmp_path):
    """Keys are a multiset: a request shard asking one question twice needs two rows."""
    from context_effects.llm.shards import read_request_shard, write_request_shard

    req, resp, _ = shards["conformity_ratings"]
    requests, policy = read_request_shard(req)
    twice = tmp_path / "twice.parquet"
    write_request_shard(twice, [*requests, requests[0]], reply_policy=policy["reply_policy"],
                        max_attempts=policy["max_attempts"])
    with pytest.raises(ShardMismatch, match=rf"1 missing key\(s\): {requests[0].key}"):
        read_response_shard(resp, ["text"], requests_path=twice)
    table = pq.read_table(resp)
    both = tmp_path / "both.parquet"
    pq.write_table(pa.concat_tables([table, table.slice(0, 1)]), both)
    got, _ = read_response_shard(both, ["text"], requests_path=twice)
    assert len(got) == len(requests) + 1


def test_answers_rule_pairs_response_and_request_shards():
    with pytest.raises(ValueError, match="1 response shards but 0 request shards"):
        collect_answers("unused.parquet", ["r.parquet"], [], CONFIG["conformity"]["generation"], request_paths=[])
    with pytest.raises(ValueError, match="judge response shards but"):
        ratings_frame(["r.parquet"], [], request_paths=[])
    with pytest.raises(ValueError, match="response shards but"):
        probabilities(["r.parquet"], [])


def test_collector_rules_declare_their_request_shards():
    """The rules hand the request shards to the scripts, and the scripts pass them on."""
    rules = REPO / "workflow" / "rules"
    scripts = REPO / "workflow" / "scripts"
    expect = {
        ("conformity_generate.smk", "conformity_answers.py"): ("conformity_dag.request_shards",
                                                                 "conformity_dag.anchor_request_shards"),
        ("conformity_judge.smk", "conformity_ratings.py"): ("conformity_dag.judge_request_shards",),
        ("amel.smk", "amel_scores.py"): ("amel_dag.request_shards",),
        ("anchoring.smk", "anchoring_score.py"): ("anchoring_dag.request_shard",),
    }
    for (rule_file, script), helpers in expect.items():
        text = (rules / rule_file).read_text()
        assert all(h in text for h in helpers), (rule_file, helpers)
        assert "snakemake.input.requests" in (scripts / script).read_text(), script


def test_response_frame_is_unchanged_by_the_check(shards):
    req, resp, _ = shards["amel_scores"]
    plain = read_response_shard(resp, ["text", "ok"])[1]
    checked = read_response_shard(resp, ["text", "ok"], requests_path=req)[1]
    pd.testing.assert_frame_equal(plain, checked)
