"""Capability profiles: a hosted model is sent only what it takes, and the key says so.

The local provider server plays a GPT-5-family model the way the OpenAI API treats
one: HTTP 400 with the provider's error body for ``temperature`` other than 1 and for
``logprobs``, reasoning tokens spent out of ``max_completion_tokens``, and a dated
snapshot named in every response.
"""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
import yaml

from conftest import REPO
from provider_server import ProviderServer, rating_for
from context_effects.conformity import requests as creq
from context_effects.conformity.judging import ratings_frame
from context_effects.llm import capabilities as caps
from context_effects.llm.backends.openai_api import OpenAIBackend
from context_effects.llm.factory import model_ref
from context_effects.llm.shards import answer_shard, write_request_shard
from context_effects.llm.store.responses import ResponseStore
from context_effects.llm.types import LLMRequest, Sampling

KEY = "sk-test-capabilities"
FAST = dict(backoff_base_s=0.02, backoff_max_s=0.1, request_timeout_s=5.0, max_retry_time_s=10.0)
NANO = {"backend": "openai", "model_id": "gpt-5-nano"}
JUDGING = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 16, "max_attempts": 2, "decoding": "free"}


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def _server() -> ProviderServer:
    return ProviderServer(openai_key=KEY, reasoning_models=("gpt-5-nano",), reasoning_tokens=200)


@pytest.mark.parametrize("cfg, family", [
    (NANO, "openai-reasoning"),
    ({"backend": "openai", "model_id": "gpt-5.2"}, "openai-reasoning"),
    ({"backend": "openai", "model_id": "o3-mini"}, "openai-reasoning"),
    ({"backend": "openai", "model_id": "gpt-4o"}, "openai-chat"),
    ({"backend": "anthropic", "model_id": "claude-haiku-4-5"}, "anthropic"),
    ({"backend": "openai_compatible", "model_id": "gemini-2.5-pro", "base_url": "https://x/v1"}, "gemini-openai"),
    ({"backend": "openai_compatible", "model_id": "Qwen/Qwen2.5-7B-Instruct"}, "openai-compatible"),
    ({"backend": "vllm", "model_id": "Qwen/Qwen2.5-7B-Instruct"}, "vllm"),
    ({"backend": "openai", "model_id": "gpt-4o", "capabilities": {"family": "openai-reasoning"}}, "openai-reasoning"),
])
def test_family_defaults(cfg, family):
    assert caps.family_of(cfg) == family
    assert caps.profile(cfg)["family"] == family


def test_config_keys_override_the_family_and_the_schema_knows_every_family():
    cfg = {**NANO, "capabilities": {"logprobs": True, "min_output_tokens": 64, "reasoning_effort": None}}
    p = caps.profile(cfg)
    assert (p["logprobs"], p["min_output_tokens"], p["reasoning_effort"], p["temperature"]) == (True, 64, None, False)
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    declared = schema["$defs"]["model"]["properties"]["capabilities"]["properties"]
    assert set(declared["family"]["enum"]) == set(caps.FAMILIES)
    assert set(declared) - {"family"} == set(caps.KEYS)


def test_conformed_sampling_holds_what_is_sent_and_keys_differ():
    asked = Sampling(temperature=0.0, top_p=1.0, max_tokens=16, seed=42)
    sent = caps.conform_sampling(asked, NANO)
    assert (sent.temperature, sent.top_p, sent.seed, sent.max_tokens, sent.reasoning_effort) == (
        None, None, 42, 2048, "low")
    # A model that takes everything is sent exactly what was asked, key unchanged.
    assert caps.conform_sampling(asked, {"backend": "vllm", "model_id": "m"}) is asked
    ref = model_ref("gpt-5-nano", NANO)
    a, b = LLMRequest(ref, (("user", "q"),), asked), LLMRequest(ref, (("user", "q"),), sent)
    assert a.key != b.key
    assert b.canonical()["sampling"]["temperature"] is None
    assert "reasoning_effort" not in a.canonical()["sampling"]  # keys of older requests stay as they were


def test_logprobs_from_a_model_without_them_is_an_error_not_a_silent_drop():
    with pytest.raises(caps.UnsupportedSetting, match="no logprobs.*sampled answers"):
        caps.conform_sampling(Sampling(max_tokens=1, probe_tokens=("Yes", "No")), NANO)
    with pytest.raises(caps.UnsupportedSetting):
        caps.conform_sampling(Sampling(max_tokens=1, logprobs=5), {"backend": "anthropic", "model_id": "claude-x"})


def _run(backend, requests):
    return list(backend.run(requests))


def test_unconformed_settings_fail_with_the_providers_400():
    """Without a profile the run does not quietly drop what the model rejects: it fails, naming it."""
    ref = model_ref("gpt-5-nano", NANO)
    with _server() as srv:
        backend = OpenAIBackend(base_url=srv.base_url, **FAST)
        [temp] = _run(backend, [LLMRequest(ref, (("user", "Rate answer 1."),), Sampling(max_tokens=16))])
        [lp] = _run(backend, [LLMRequest(ref, (("user", "Yes or No?"),),
                                         Sampling(temperature=1.0, top_p=1.0, max_tokens=4000, logprobs=5))])
        assert len(srv.generation_calls()) == 2  # a 400 is not retried
    assert not temp.ok and "temperature" in temp.error and "Only the default (1) value" in temp.error
    assert not lp.ok and "'logprobs' is not supported" in lp.error


def test_small_budget_on_a_reasoning_model_is_spent_on_reasoning():
    ref = model_ref("gpt-5-nano", NANO)
    no_temp = Sampling(temperature=None, top_p=None, max_tokens=16)
    with _server() as srv:
        [res] = _run(OpenAIBackend(base_url=srv.base_url, **FAST), [LLMRequest(ref, (("user", "Rate it."),), no_temp)])
    assert res.text == "" and res.finish_reason == "length"


def test_hosted_reasoning_judge_end_to_end(tmp_path):
    """Study C judge requests for a GPT-5-family judge: built to its profile, answered by the
    fault server without a 400, parsed into ratings that name the snapshot that answered."""
    answers = pd.DataFrame([
        {"answer_id": f"truthfulqa|main|42|gen|q{i}|no_peer", "dataset": "truthfulqa", "corpus": "main", "seed": 42,
         "item_id": f"q{i}", "generator": "gen", "condition": "no_peer", "question": f"Question {i}?",
         "text": f"Answer {i}."} for i in range(6)
    ])
    reqs = creq.judge_requests(answers, "gpt-5-nano", NANO, JUDGING, 42)
    assert all(r.sampling.temperature is None and r.sampling.max_tokens == 2048 for r in reqs)
    shard, responses, ledger = tmp_path / "req.parquet", tmp_path / "resp.parquet", tmp_path / "ledger.json"
    write_request_shard(shard, reqs, reply_policy="conformity.rating", max_attempts=2)
    with _server() as srv:
        backend = OpenAIBackend(base_url=srv.base_url, **FAST)
        answer_shard(shard, responses, ledger, backend, ResponseStore(tmp_path / "store"), progress=False,
                     handle_signals=False)
        bodies = [c.body for c in srv.generation_calls()]
    assert len(bodies) == len(reqs)
    for body in bodies:
        assert not {"temperature", "top_p", "logprobs", "max_tokens"} & set(body)
        assert body["reasoning_effort"] == "low" and body["max_completion_tokens"] == 2048 and body["seed"] == 42
        assert "response_format" not in body  # the paper's free decoding
    ratings = ratings_frame([responses], request_paths=[shard])
    assert (ratings["status"] == "ok").all()
    expected = [rating_for(r.messages[0][1]) for r in reqs]
    assert ratings["rating"].astype(int).tolist() == expected
    assert set(ratings["served_model"]) == {"gpt-5-nano-2026-08-07"}
    assert set(ratings["system_fingerprint"]) == {"fp_fake"}
    # The store key records what was sent: the same question at the configured
    # temperature would be a different request.
    sent = json.loads(json.dumps(reqs[0].canonical()))["sampling"]
    assert sent["temperature"] is None and sent["reasoning_effort"] == "low"
    assert dataclasses.replace(reqs[0], sampling=Sampling(max_tokens=16, seed=42)).key != reqs[0].key


def test_paper_config_dry_run_lists_capability_profiles():
    from context_effects.config import validate_config

    config = validate_config(yaml.safe_load((REPO / "config/config.yaml").read_text()))
    lines = {name: caps.describe(cfg) for name, cfg in config["models"].items()}
    assert lines["gpt-5-nano"].startswith("openai-reasoning; no logprobs; not sent: temperature, top_p")
    assert lines["claude-haiku"].startswith("anthropic; no logprobs; not sent: temperature, top_p, seed")
    assert lines["qwen2.5-7b"] == "vllm; logprobs"
