"""Study C shards: the small last blocks of several datasets share one shard.

A small run (the embedded demo) then asks one answering job per model and stage instead
of one per dataset, while a run of full blocks keeps one shard per block. Each
dataset's collectors must still see exactly their own answers and ratings.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO
from context_effects.config import load_config, validate_config
from context_effects.conformity import dag as conformity_dag
from context_effects.conformity.judging import ratings_frame, write_judge_shard
from context_effects.conformity.stages import (
    collect_answers,
    packed_shards,
    write_round1_shard,
    write_round2_shard,
)
from context_effects.datasets import build_item_table, write_items
from context_effects.llm.factory import make_backend
from context_effects.llm.shards import answer_shard
from context_effects.llm.store.responses import ResponseStore


def _n_items(n: dict[str, int], k: int, blocks) -> int:
    return sum(min(k, n[d] - i * k) for d, i in blocks)


def test_full_blocks_stand_alone_and_last_blocks_share_first_fit():
    n = {"a": 60, "b": 10, "c": 30, "d": 5, "e": 24}
    k = 25
    shards = packed_shards(n, k)
    assert shards == {
        "a-000": [("a", 0)], "a-001": [("a", 1)], "c-000": [("c", 0)],
        # a's last block (10 items), then b (10) and c's last block (5): 25 items, full.
        "a-002+b-000+c-001": [("a", 2), ("b", 0), ("c", 1)],
        # d (5) opens a second shard; e (24) fits neither, so it opens a third.
        "d-000": [("d", 0)], "e-000": [("e", 0)],
    }
    # Every block of every dataset is in exactly one shard, and no shard holds more than k items.
    blocks = [b for bs in shards.values() for b in bs]
    assert sorted(blocks) == sorted((d, i) for d, m in n.items() for i in range(-(-m // k)))
    assert all(_n_items(n, k, bs) <= k for bs in shards.values())


def test_a_later_small_block_fills_an_earlier_shard():
    # First fit: d's 3 items go back to the first shard that still has room.
    assert packed_shards({"a": 20, "b": 20, "d": 3}, 25) == {"a-000+d-000": [("a", 0), ("d", 0)],
                                                              "b-000": [("b", 0)]}


def test_the_demo_answers_each_stage_in_one_shard_and_the_paper_keeps_its_blocks():
    demo = validate_config(load_config(REPO / "config" / "demo.yaml"))
    datasets = conformity_dag.datasets(demo)
    (name, blocks), = conformity_dag.generation_shards(demo).items()
    assert [d for d, _ in blocks] == datasets
    for judge in conformity_dag.all_judges(demo):
        assert list(conformity_dag.judge_shard_blocks(demo, judge)) == [name]
    for d in datasets:
        assert conformity_dag.shards(demo, d) == [name]
    paper = validate_config(load_config(REPO / "config" / "config.yaml"))
    for shards in [conformity_dag.generation_shards(paper)] + [
            conformity_dag.judge_shard_blocks(paper, j) for j in conformity_dag.all_judges(paper)]:
        assert all(len(bs) == 1 and name == f"{bs[0][0]}-{bs[0][1]:03d}" for name, bs in shards.items())
    with pytest.raises(ValueError, match="not a generation shard"):
        conformity_dag.shard_blocks(paper, "truthfulqa-999")


CONFIG = validate_config({
    "run": {"label": "packed-shards", "kind": "synthetic"},
    "datasets": {
        "truthfulqa": {"source": "local", "local_path": str(REPO / "data/demo/truthfulqa.jsonl"), "n_items": 3},
        "mmlu_pro": {"source": "local", "local_path": str(REPO / "data/demo/mmlu_pro.jsonl"), "n_items": 2},
    },
    "models": {
        "gen-sim": {"backend": "synthetic", "model_id": "gen-sim", "synthetic": {"empty_rate": 0.0}},
        "judge-sim": {"backend": "synthetic", "model_id": "judge-sim"},
    },
    "conformity": {"datasets": ["truthfulqa", "mmlu_pro"], "generators": ["gen-sim"], "judges": ["judge-sim"],
                   "hosted_judges": [], "seeds": [42], "primary_seed": 42, "decomposition": {"enabled": False}},
    "amel": {"enabled": False},
    "anchoring": {"enabled": False},
})


def _answer(requests: Path, responses: Path, model: str, tmp: Path) -> None:
    store = ResponseStore(tmp / "store")
    backend = make_backend(model, CONFIG["models"][model], store=store)
    answer_shard(requests, responses, tmp / f"{responses.stem}.ledger.json", backend, store, progress=False)


def test_each_dataset_collects_its_own_rows_from_a_shared_shard(tmp_path):
    c = CONFIG["conformity"]
    (shard, blocks), = conformity_dag.generation_shards(CONFIG).items()
    assert shard == "truthfulqa-000+mmlu_pro-000"
    items = {}
    for d in c["datasets"]:
        spec = CONFIG["datasets"][d]
        table = build_item_table(d, {"kind": "local", "path": spec["local_path"]}, n_items=spec["n_items"],
                                 sample_seed=42, attractor_seed=42)
        items[d] = tmp_path / f"{d}.parquet"
        write_items(table, items[d])
    common = dict(blocks=blocks, generator="gen-sim", model_cfg=CONFIG["models"]["gen-sim"],
                  settings=c["generation"], seed=42, corpus="main")
    r1_req, r1_resp = tmp_path / "r1-req.parquet", tmp_path / "r1-resp.parquet"
    write_round1_shard(items, r1_req, **common)
    _answer(r1_req, r1_resp, "gen-sim", tmp_path)
    r2_req, r2_resp = tmp_path / "r2-req.parquet", tmp_path / "r2-resp.parquet"
    write_round2_shard(items, r1_resp, r2_req, peers=c["peers"], **common)
    _answer(r2_req, r2_resp, "gen-sim", tmp_path)

    answers = {}
    for d in c["datasets"]:
        answers[d] = collect_answers(items[d], [r1_resp, r2_resp], [], c["generation"],
                                     request_paths=[r1_req, r2_req])
        own = set(pd.read_parquet(items[d])["item_id"])
        assert set(answers[d]["item_id"]) == own and set(answers[d]["dataset"]) == {d}
        # Round 1 and a Round-2 arm for every item of the dataset, not just some.
        generated = answers[d][answers[d]["corpus"] == "main"]
        assert set(generated.loc[generated["condition"] == "round1", "item_id"]) == own
        assert set(generated.loc[generated["condition"] == "no_peer", "item_id"]) == own
        # The synthetic judge rates tagged answers: the generated ones (fixed anchor texts carry no tag).
        generated.to_parquet(tmp_path / f"answers-{d}.parquet", index=False)
    n_generated = sum(int((a["corpus"] == "main").sum()) for a in answers.values())
    assert n_generated == len(pd.read_parquet(r1_resp)) + len(pd.read_parquet(r2_resp))

    (jshard, jblocks), = conformity_dag.judge_shard_blocks(CONFIG, "judge-sim").items()
    assert jshard == shard
    j_req, j_resp = tmp_path / "j-req.parquet", tmp_path / "j-resp.parquet"
    write_judge_shard(items, {d: tmp_path / f"answers-{d}.parquet" for d in c["datasets"]}, j_req, blocks=jblocks,
                      judge="judge-sim", judge_cfg=CONFIG["models"]["judge-sim"],
                      items_per_shard=conformity_dag.judge_block(CONFIG, "judge-sim")["items_per_shard"],
                      hosted=False, primary_seed=42, judging=c["judging"], seed=1)
    _answer(j_req, j_resp, "judge-sim", tmp_path)
    n_rated = 0
    for d in c["datasets"]:
        ratings = ratings_frame([j_resp], [], request_paths=[j_req], dataset=d)
        assert set(ratings["dataset"]) == {d}
        # Every generated answer of the dataset is rated blind.
        blind = ratings[ratings["pass"] == "blind"]
        assert set(blind["answer_id"]) == set(answers[d].loc[answers[d]["corpus"] == "main", "answer_id"])
        n_rated += len(ratings)
    assert n_rated == len(pd.read_parquet(j_resp))
