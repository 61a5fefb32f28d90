"""The LLM layer through Snakemake: a request shard answered by the generic rule."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import REPO, run_snakemake
from context_effects.config import validate_config
from context_effects.llm.factory import model_ref
from context_effects.conformity.replies import RATING_SCHEMA
from context_effects.llm.shards import write_request_shard
from context_effects.llm.types import LLMRequest, Sampling

SYNTH_CONFIG = {
    "run": {"label": "synthetic-test", "kind": "synthetic"},
    "datasets": {},
    "models": {"mistral-sim": {"backend": "synthetic", "model_id": "mistral-sim"}},
    "conformity": {"enabled": False},
    "amel": {"enabled": False},
    "anchoring": {"enabled": False},
}


def _judge_requests(cfg, n):
    ref = model_ref("mistral-sim", cfg["models"]["mistral-sim"])
    reqs = []
    for i in range(n):
        q = (i % 7 - 3) / 2
        prompt = f"Question: Q{i}?. Answer to grade: [synthetic q={q:+.4f}] An answer.. Respond ONLY with JSON: \"rating\": <integer 1--5>."
        reqs.append(
            LLMRequest(
                model=ref,
                messages=(("user", prompt),),
                sampling=Sampling(temperature=0.0, max_tokens=16, seed=42),
                output_schema=RATING_SCHEMA,
                meta={"study": "conformity", "role": "judge", "judge": "mistral-sim", "pass": "blind"},
            )
        )
    return reqs


@pytest.fixture
def synth_workdir(tmp_path):
    cfg_path = tmp_path / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(SYNTH_CONFIG))
    cfg = validate_config(SYNTH_CONFIG)
    write_request_shard(
        tmp_path / "results/requests/smoke/judge/mistral-sim/0000.parquet",
        _judge_requests(cfg, 200),
        reply_policy="conformity.rating",
        max_attempts=3,
    )
    return tmp_path, cfg_path


def _run(workdir, cfg_path, *extra):
    return run_snakemake(
        "--cores", "1", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile=" + str(cfg_path), *extra, "results/responses/smoke/judge/mistral-sim/0000.parquet",
    )


def test_shard_is_answered_validated_and_free_on_rerun(synth_workdir):
    workdir, cfg_path = synth_workdir
    res = _run(workdir, cfg_path)
    assert res.returncode == 0, res.stdout + res.stderr
    out = pq.read_table(workdir / "results/responses/smoke/judge/mistral-sim/0000.parquet").to_pandas()
    assert len(out) == 200
    # The synthetic judge plants malformed replies: re-asked, never scored as a number.
    ratings = [json.loads(t)["rating"] for t, ok in zip(out["text"], out["ok"]) if ok]
    assert set(ratings) <= {1, 2, 3, 4, 5} and len(ratings) >= 195
    assert (out.loc[~out["ok"], "invalid_reason"].notna()).all()
    ledger = json.loads((workdir / "results/ledgers/smoke/judge/mistral-sim/0000.json").read_text())
    assert ledger["reasks"] > 0 and ledger["calls"] == 200 + ledger["reasks"]

    # Rerun from scratch (outputs deleted): everything comes from the store, zero calls.
    res = _run(workdir, cfg_path, "--forcerun", "answer_requests_synthetic")
    assert res.returncode == 0, res.stdout + res.stderr
    again = json.loads((workdir / "results/ledgers/smoke/judge/mistral-sim/0000.json").read_text())
    # Snakemake removed the old outputs (ledger included); the new ledger still counts
    # what the first run paid, and the rerun's own attempt paid nothing.
    first, rerun = again["attempts"]
    assert rerun["calls"] == 0, "a rerun must not pay for any call twice"
    assert rerun["cache_hits"] == ledger["calls"]
    assert first["calls"] == again["calls"] == ledger["calls"], "every call paid for the shard, counted once"


def test_replay_serves_from_store_and_names_a_miss(synth_workdir, tmp_path):
    workdir, cfg_path = synth_workdir
    assert _run(workdir, cfg_path).returncode == 0
    replay_cfg = {**SYNTH_CONFIG, "run": {**SYNTH_CONFIG["run"], "replay": True}}
    replay_path = tmp_path / "replay.yaml"
    replay_path.write_text(yaml.safe_dump(replay_cfg))
    res = _run(workdir, replay_path, "--forcerun", "answer_requests_synthetic")
    assert res.returncode == 0, res.stdout + res.stderr

    # A request that was never answered: replay fails and names it.
    cfg = validate_config(SYNTH_CONFIG)
    new = _judge_requests(cfg, 201)[-1:]
    write_request_shard(workdir / "results/requests/smoke/judge/mistral-sim/0001.parquet", new, reply_policy="conformity.rating")
    res = run_snakemake(
        "--cores", "1", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        "--configfile=" + str(replay_path), "results/responses/smoke/judge/mistral-sim/0001.parquet",
    )
    assert res.returncode != 0
    log = (workdir / "logs/answer_requests/smoke/judge/mistral-sim/0001.log").read_text()
    assert "ReplayMiss" in log and new[0].key[:12] in log


def test_missing_api_key_stops_before_any_job(workdir):
    """The paper's full run answers shards of gpt-4o: without its key, no job starts.
    (A target that needs no hosted model needs no key: tests/test_llm_api_keys.py.)"""
    cfg = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    res = run_snakemake(
        "--cores", "1", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
        env={"OPENAI_API_KEY": ""},
    )
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "OPENAI_API_KEY" in out and "gpt-4o" in out
    assert not (workdir / "results").exists()
    assert cfg["models"]["gpt-4o"]["backend"] == "openai"


@pytest.mark.slow
def test_vllm_rule_converts_the_packaged_model_and_answers_a_shard(tmp_path):
    """The real path of the embedded default: GGUF from PyPI -> conversion rule ->
    vLLM (CPU) answering a judge shard in one job, replies validated."""
    (tmp_path / "data").symlink_to(REPO / "data")
    cfg = validate_config(yaml.safe_load((REPO / "config" / "demo.yaml").read_text()))
    ref = model_ref("smollm2-135m", cfg["models"]["smollm2-135m"])
    reqs = [
        LLMRequest(
            model=ref,
            messages=(("user", f'Question: What is {i} + {i}?. Answer to grade: {2 * i}. Respond ONLY with JSON: "rating": <integer 1--5>.'),),
            sampling=Sampling(temperature=0.0, max_tokens=16, seed=42),
            output_schema=RATING_SCHEMA,
        )
        for i in range(4)
    ]
    write_request_shard(tmp_path / "results/requests/smoke/judge/smollm2-135m/0000.parquet", reqs, reply_policy="conformity.rating", max_attempts=2)
    res = run_snakemake(
        "--cores", "2", "--snakefile", str(REPO / "Snakefile"), "--directory", str(tmp_path),
        "--configfile=" + str(REPO / "config" / "demo.yaml"),
        "results/responses/smoke/judge/smollm2-135m/0000.parquet", timeout=900,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert (tmp_path / "resources/models/smollm2-135m/conversion.json").exists()
    out = pq.read_table(tmp_path / "results/responses/smoke/judge/smollm2-135m/0000.parquet").to_pandas()
    assert len(out) == 4 and out["engine_version"].str.startswith("vllm").all()
    ledger = json.loads((tmp_path / "results/ledgers/smoke/judge/smollm2-135m/0000.json").read_text())
    assert ledger["calls"] >= 4 and ledger["failures"] == 0
