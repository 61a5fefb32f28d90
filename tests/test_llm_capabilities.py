"""Capability profiles: a hosted model is sent only what it takes, and the key says so.

The profiles are data (``llm/capabilities.yaml``), one entry per model id or snapshot
pattern with the documents it was taken from; every model of the paper roster is
pinned to its entry and profile here. The local provider server plays a GPT-5-family
model the way the OpenAI API treats one (HTTP 400 with the provider's error body for
``temperature`` other than 1 and for ``logprobs``, reasoning tokens spent out of
``max_completion_tokens``, a dated snapshot named in every response) and a GPT-5.1+
model, which reasons only when asked to.
"""

from __future__ import annotations

import dataclasses
import json
import re

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
MINI = {"backend": "openai", "model_id": "gpt-5.4-mini"}
JUDGING = {"temperature": 0.0, "top_p": 1.0, "max_tokens": 16, "max_attempts": 2, "decoding": "free"}


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def _server() -> ProviderServer:
    return ProviderServer(openai_key=KEY, reasoning_models=("gpt-5-nano",), reasoning_tokens=200,
                          hybrid_models=("gpt-5.4-mini",))


def _paper_models() -> dict:
    from context_effects.config import validate_config

    return validate_config(yaml.safe_load((REPO / "config/config.yaml").read_text()))["models"]


# Every model of the paper configuration, pinned: entry of capabilities.yaml, then
# temperature, top_p, seed, logprobs, reasoning_effort, thinking, min_output_tokens.
ROSTER = {
    "gpt-4o": ("openai-chat", True, True, True, True, None, None, 1),
    "gpt-5.4-mini": ("gpt-5.4-mini", True, True, True, False, "none", None, 1),
    "gpt-5-nano": ("gpt-5", False, False, True, False, "minimal", None, 2048),
    "gpt-5.2": ("gpt-5.2", True, True, True, True, "none", None, 1),
    "claude-haiku": ("claude-haiku-4-5", False, False, False, False, None, "disabled", 1),
    "claude-sonnet": ("claude-sonnet-4-6", False, False, False, False, None, "disabled", 1),
    "claude-opus": ("claude-opus-4-7", False, False, False, False, None, "disabled", 1),
    "gemini-flash": ("gemini-3-flash", False, False, False, False, "minimal", None, 2048),
    "gemini-pro": ("gemini-3-pro", False, False, False, False, "low", None, 2048),
    "qwen2.5-7b": ("vllm", True, True, True, True, None, None, 1),
    "mistral-7b": ("vllm", True, True, True, True, None, None, 1),
    "gemma-2-9b": ("vllm", True, True, True, True, None, None, 1),
    "llama-3.1-8b": ("vllm", True, True, True, True, None, None, 1),
}


def test_every_paper_model_has_its_pinned_profile():
    models = _paper_models()
    assert set(models) == set(ROSTER), "a model was added to or removed from the paper config: pin its profile"
    for name, cfg in models.items():
        p = caps.profile(cfg)
        assert (p["family"], *(p[k] for k in caps.KEYS)) == ROSTER[name], name


def test_gpt5_nanos_stand_in_named_by_the_paper_config_has_a_profile_and_a_price_of_its_own():
    """OpenAI shuts gpt-5-nano down on 2026-12-11; the paper config names gpt-5.4-nano as
    the model_id to put in its place. Without an entry it fell to the openai-reasoning
    fallback: forced reasoning at effort low, no temperature, a 2,048-token budget."""
    from context_effects.llm.pricing import model_price

    assert "#   model_id: gpt-5.4-nano\n" in (REPO / "config/config.yaml").read_text()
    stand_in = {"backend": "openai", "model_id": "gpt-5.4-nano"}
    assert (caps.profile(stand_in)["family"], *(caps.profile(stand_in)[k] for k in caps.KEYS)) == (
        "gpt-5.4-nano", True, True, True, False, "none", None, 1)
    # As Study A asks it (temperature 1, 4 tokens): sent as asked, at its API's default effort.
    sent = caps.conform_sampling(Sampling(temperature=1.0, top_p=1.0, max_tokens=4, seed=7), stand_in)
    assert (sent.temperature, sent.top_p, sent.max_tokens, sent.reasoning_effort) == (1.0, 1.0, 4, "none")
    price, basis = model_price(stand_in)
    assert price == {"input_per_mtok": 0.2, "output_per_mtok": 1.25} and basis.startswith("costs.yaml")


@pytest.mark.parametrize("model_id, family", [
    ("gpt-5.4-mini", "gpt-5.4-mini"), ("gpt-5.4-mini-2026-03-17", "gpt-5.4-mini"),
    ("gpt-5.4-nano", "gpt-5.4-nano"), ("gpt-5.4-nano-2026-03-17", "gpt-5.4-nano"),
    ("gpt-5.2", "gpt-5.2"), ("gpt-5.2-2025-12-11", "gpt-5.2"), ("gpt-5.1", "gpt-5.1"),
    ("gpt-5-nano", "gpt-5"), ("gpt-5-nano-2025-08-07", "gpt-5"), ("gpt-5", "gpt-5"), ("gpt-5-mini", "gpt-5"),
    # Ids without an entry of their own get the restrictive fallback, never a newer model's rules.
    ("gpt-5.2-pro", "openai-reasoning"), ("gpt-5.5", "openai-reasoning"), ("o3-mini", "openai-reasoning"),
    ("gpt-4o", "openai-chat"), ("gpt-4o-2024-08-06", "openai-chat"),
])
def test_openai_ids_and_snapshots_find_their_entry(model_id, family):
    assert caps.family_of({"backend": "openai", "model_id": model_id}) == family


def test_later_gpt5_models_are_not_given_the_gpt5_reasoning_profile():
    """The old single pattern ^(gpt-5|o[1-9]) sent GPT-5.2 and GPT-5.4-mini no temperature,
    effort low and 2,048 tokens; they default to no reasoning and take temperature."""
    for cfg in (MINI, {"backend": "openai", "model_id": "gpt-5.2"}):
        sent = caps.conform_sampling(Sampling(temperature=0.0, top_p=1.0, max_tokens=16, seed=42), cfg)
        assert (sent.temperature, sent.top_p, sent.max_tokens, sent.reasoning_effort) == (0.0, 1.0, 16, "none")


@pytest.mark.parametrize("cfg, family", [
    ({"backend": "anthropic", "model_id": "claude-haiku-4-5"}, "claude-haiku-4-5"),
    ({"backend": "anthropic", "model_id": "claude-haiku-4-5-20251001"}, "claude-haiku-4-5"),
    ({"backend": "anthropic", "model_id": "claude-opus-4-1"}, "anthropic"),
    ({"backend": "openai_compatible", "model_id": "gemini-2.5-pro", "base_url": "https://x/v1"}, "gemini-openai"),
    ({"backend": "openai_compatible", "model_id": "models/gemini-3.5-flash"}, "gemini-3-flash"),
    ({"backend": "openai_compatible", "model_id": "Qwen/Qwen2.5-7B-Instruct"}, "openai-compatible"),
    ({"backend": "vllm", "model_id": "Qwen/Qwen2.5-7B-Instruct"}, "vllm"),
    ({"backend": "openai", "model_id": "gpt-4o", "capabilities": {"family": "openai-reasoning"}}, "openai-reasoning"),
])
def test_family_defaults(cfg, family):
    assert caps.family_of(cfg) == family
    assert caps.profile(cfg)["family"] == family


def test_every_entry_cites_its_documents_and_date(tmp_path):
    for entry in caps.ENTRIES.values():
        assert entry.source["docs"] and re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(entry.source["checked"])), entry.name
    # Each backend's fallback comes after every entry of its backend with a pattern.
    for backend in {e.backend for e in caps.ENTRIES.values()}:
        names = [e for e in caps.ENTRIES.values() if e.backend == backend]
        assert names[-1].match == "" and all(e.match for e in names[:-1]), backend
    # A malformed entry is refused naming it: a missing source, a profile key short.
    raw = yaml.safe_load(caps.DATA.read_text())
    raw["profiles"][0]["source"] = {"docs": [], "checked": None, "says": "", "unverified": None}
    del raw["profiles"][1]["profile"]["thinking"]
    bad = tmp_path / "caps.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match="'gpt-5.4-mini': source needs"):
        caps.load_entries(bad)


def test_config_keys_override_the_family_and_the_schema_knows_every_family():
    cfg = {**NANO, "capabilities": {"logprobs": True, "min_output_tokens": 64, "reasoning_effort": None}}
    p = caps.profile(cfg)
    assert (p["logprobs"], p["min_output_tokens"], p["reasoning_effort"], p["temperature"]) == (True, 64, None, False)
    assert caps.source(cfg)["config_overrides"] == ["logprobs", "min_output_tokens", "reasoning_effort"]
    schema = yaml.safe_load((REPO / "workflow/schemas/config.schema.yaml").read_text())
    declared = schema["$defs"]["model"]["properties"]["capabilities"]["properties"]
    assert set(declared["family"]["enum"]) == set(caps.FAMILIES)
    assert set(declared) - {"family"} == set(caps.KEYS)


def test_conformed_sampling_holds_what_is_sent_and_keys_differ():
    asked = Sampling(temperature=0.0, top_p=1.0, max_tokens=16, seed=42)
    sent = caps.conform_sampling(asked, NANO)
    assert (sent.temperature, sent.top_p, sent.seed, sent.max_tokens, sent.reasoning_effort) == (
        None, None, 42, 2048, "minimal")
    # A model that takes everything is sent exactly what was asked, key unchanged.
    assert caps.conform_sampling(asked, {"backend": "vllm", "model_id": "m"}) is asked
    ref = model_ref("gpt-5-nano", NANO)
    a, b = LLMRequest(ref, (("user", "q"),), asked), LLMRequest(ref, (("user", "q"),), sent)
    assert a.key != b.key
    assert b.canonical()["sampling"]["temperature"] is None
    # Keys of older requests stay as they were.
    assert not {"reasoning_effort", "thinking"} & set(a.canonical()["sampling"])
    claude = caps.conform_sampling(asked, {"backend": "anthropic", "model_id": "claude-haiku-4-5"})
    assert (claude.temperature, claude.seed, claude.thinking) == (None, None, "disabled")
    assert LLMRequest(ref, (("user", "q"),), claude).canonical()["sampling"]["thinking"] == "disabled"


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
        assert body["reasoning_effort"] == "minimal" and body["max_completion_tokens"] == 2048 and body["seed"] == 42
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
    assert sent["temperature"] is None and sent["reasoning_effort"] == "minimal"
    assert dataclasses.replace(reqs[0], sampling=Sampling(max_tokens=16, seed=42)).key != reqs[0].key


def test_hosted_judge_without_reasoning_as_the_seed_ran_it(tmp_path):
    """GPT-5.4-mini judges at temperature 0 with 16 output tokens (seed 002 Table 8): sent
    with reasoning off, the provider takes every setting and answers in the budget."""
    answers = pd.DataFrame([
        {"answer_id": f"truthfulqa|main|42|gen|q{i}|no_peer", "dataset": "truthfulqa", "corpus": "main", "seed": 42,
         "item_id": f"q{i}", "generator": "gen", "condition": "no_peer", "question": f"Question {i}?",
         "text": f"Answer {i}."} for i in range(4)
    ])
    reqs = creq.judge_requests(answers, "gpt-5.4-mini", MINI, JUDGING, 42)
    shard, responses, ledger = tmp_path / "req.parquet", tmp_path / "resp.parquet", tmp_path / "ledger.json"
    write_request_shard(shard, reqs, reply_policy="conformity.rating", max_attempts=2)
    with _server() as srv:
        answer_shard(shard, responses, ledger, OpenAIBackend(base_url=srv.base_url, **FAST),
                     ResponseStore(tmp_path / "store"), progress=False, handle_signals=False)
        bodies = [c.body for c in srv.generation_calls()]
        # The same request at the old reasoning profile's effort would reason and spend the budget.
        [reasoned] = _run(OpenAIBackend(base_url=srv.base_url, **FAST), [dataclasses.replace(
            reqs[0], sampling=dataclasses.replace(reqs[0].sampling, temperature=None, top_p=None,
                                                  reasoning_effort="low"))])
    assert len(bodies) == len(reqs)
    for body in bodies:
        assert (body["temperature"], body["top_p"], body["max_completion_tokens"], body["seed"]) == (0.0, 1.0, 16, 42)
        assert body["reasoning_effort"] == "none"
    ratings = ratings_frame([responses], request_paths=[shard])
    assert (ratings["status"] == "ok").all() and set(ratings["served_model"]) == {"gpt-5.4-mini-2026-03-17"}
    assert reasoned.text == "" and reasoned.finish_reason == "length"


def test_paper_config_dry_run_lists_capability_profiles():
    lines = {name: caps.describe(cfg) for name, cfg in _paper_models().items()}
    assert lines["gpt-5-nano"].startswith("gpt-5; no logprobs; not sent: temperature, top_p")
    assert lines["claude-haiku"].startswith(
        "claude-haiku-4-5; no logprobs; not sent: temperature, top_p, seed; thinking=disabled")
    # Every hosted model's line names the document its profile was taken from, and when.
    for name in ("gpt-4o", "gpt-5.4-mini", "gpt-5.2", "claude-opus", "gemini-pro"):
        assert "; source: " in lines[name] and "(read 2026-12-02)" in lines[name], lines[name]
    assert lines["gpt-5.4-mini"].endswith("partly unverified")
    assert lines["qwen2.5-7b"] == "vllm; logprobs"


def test_table8_prints_what_each_models_requests_carried(tmp_path):
    """Table 8 and table8_requests read the request shards: a judge whose API takes no
    temperature shows "not sent" and the budget it was sent, whatever the config says; the
    published Table 8 rows agree only with what was sent."""
    from context_effects.config import validate_config
    from context_effects.conformity.replies import judge_policy_params
    from context_effects.metrics import budget
    from context_effects.paper.reproduction import compare_row, read_published

    config = validate_config(yaml.safe_load((REPO / "config/config.yaml").read_text()))
    judging = config["conformity"]["judging"]
    answers = pd.DataFrame([
        {"answer_id": f"truthfulqa|main|42|gen|q{i}|no_peer", "dataset": "truthfulqa", "corpus": "main", "seed": 42,
         "item_id": f"q{i}", "generator": "gen", "condition": "no_peer", "question": f"Question {i}?",
         "text": f"Answer {i}."} for i in range(3)
    ])
    shards = []
    for judge in ("gpt-5-nano", "gpt-5.4-mini"):
        path = tmp_path / "results/requests/conformity/judge" / judge / "0000.parquet"
        write_request_shard(path, creq.judge_requests(answers, judge, config["models"][judge], judging, 42),
                            reply_policy="conformity.rating", policy_params=judge_policy_params(judging),
                            max_attempts=int(judging["max_attempts"]))
        shards.append(path)
    sent = budget.sent_settings(shards, config["models"]).set_index("Model")
    nano, mini = sent.loc["gpt-5-nano"], sent.loc["gpt-5.4-mini"]
    assert (nano["temperature"], nano["max_tokens"], nano["reasoning_effort"]) == ("not sent", 2048, "minimal")
    assert (mini["temperature"], mini["top_p"], mini["max_tokens"], mini["seed"]) == (0.0, 1.0, 16, 42)
    assert (mini["reasoning_effort"], mini["Requests"], mini["Asks"]) == ("none", 3, 6)
    assert mini["Re-ask"] == "temperature +0.1 (cap 1), seed +1" and mini["Decoding"] == "free"

    csv = tmp_path / "results/tables/conformity/table8_requests.csv"
    csv.parent.mkdir(parents=True)
    sent.reset_index().to_csv(csv, index=False)
    table = budget.packages_table(config, [], {}, {}, sent=pd.read_csv(csv, dtype=str, keep_default_na=False))
    rows = table.set_index("Purpose")["Configuration"]
    assert rows["Judging: GPT-5-nano"].startswith("max_tokens=2048, seed=42, reasoning_effort=minimal; "
                                                  "temperature, top_p not sent; free decoding; up to 6 asks")
    assert rows["Judging: GPT-5.4-mini"].startswith("temperature=0.0, top_p=1.0, max_tokens=16, seed=42")

    published = read_published([REPO / "paper/published/conformity/table8.csv"]).set_index("id")

    def status(row_id: str) -> str:
        return compare_row(published.loc[row_id].to_dict() | {"id": row_id}, tmp_path / "results", "paper",
                           {})["status"]

    assert status("table8.openai.temperature") == status("table8.openai.max_completion_tokens") == "agrees"
    # Had the judge been sent the reasoning profile, the same rows would not agree.
    sent.loc["gpt-5.4-mini", ["temperature", "max_tokens"]] = ["not sent", 2048]
    sent.reset_index().to_csv(csv, index=False)
    assert status("table8.openai.temperature") != "agrees" and status("table8.openai.max_completion_tokens") == "differs"


def test_a_hosted_models_jobs_carry_its_resolved_profile(monkeypatch):
    """The profile is data, not code: the rules' model params hold it, so an edit of a
    model's entry reruns that model's jobs and no others."""
    from context_effects import dag
    from context_effects.config import validate_config

    config = validate_config(yaml.safe_load((REPO / "config/config.yaml").read_text()))
    before = {m: dag.model_settings(config, m) for m in ("gpt-5.4-mini", "gpt-4o", "qwen2.5-7b")}
    assert before["gpt-5.4-mini"]["capabilities"] == caps.profile(config["models"]["gpt-5.4-mini"])
    assert "capabilities" not in before["qwen2.5-7b"]
    # Requests built from the params are the requests built from the config.
    sampling = Sampling(temperature=0.0, top_p=1.0, max_tokens=16, seed=42)
    assert caps.conform_sampling(sampling, before["gpt-5.4-mini"]) == caps.conform_sampling(
        sampling, config["models"]["gpt-5.4-mini"])
    backend, pattern, prof = caps.FAMILIES["gpt-5.4-mini"]
    monkeypatch.setitem(caps.FAMILIES, "gpt-5.4-mini", (backend, pattern, {**prof, "min_output_tokens": 64}))
    after = {m: dag.model_settings(config, m) for m in before}
    assert after["gpt-5.4-mini"] != before["gpt-5.4-mini"]
    assert after["gpt-4o"] == before["gpt-4o"] and after["qwen2.5-7b"] == before["qwen2.5-7b"]
