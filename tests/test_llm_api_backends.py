"""Hosted-API backends (openai, openai_compatible, anthropic) against a real local server.

Everything goes through the official SDKs over real sockets to tests/provider_server.py
on 127.0.0.1, so the SDKs' error mapping and httpx's handling of timeouts and
truncated bodies are part of what is tested, not mocked away.
"""

from __future__ import annotations

import csv
import dataclasses
import email.utils
import json
import os
import re
import secrets
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
try:
    import context_effects  # noqa: F401
except ModuleNotFoundError:  # not installed yet: test the checkout
    sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

pytest.importorskip("openai")
pytest.importorskip("anthropic")

from provider_server import (  # noqa: E402
    Fault,
    ProviderServer,
    Reply,
    content_filter_reply,
    default_reply,
    empty_reply,
    rating_for,
    refusal_reply,
    yes_probability,
)

from context_effects.llm.backends.anthropic_api import AnthropicBackend  # noqa: E402
from context_effects.llm.backends.openai_api import OpenAIBackend, OpenAICompatibleBackend  # noqa: E402
from context_effects.llm.concurrency import AdaptiveLimiter, AIMDController  # noqa: E402
from context_effects.llm.retry import RetryPolicy, SDKErrors, call_with_retries, parse_retry_after  # noqa: E402
from context_effects.llm.secrets import MissingAPIKeyError  # noqa: E402
from context_effects.llm.types import LLMRequest, ModelRef, Sampling  # noqa: E402

OPENAI_KEY = "sk-test-openai-fixture"
ANTHROPIC_KEY = "sk-ant-test-fixture"
RATING_SCHEMA = {
    "type": "object",
    "properties": {"rating": {"type": "integer", "minimum": 1, "maximum": 5}},
    "required": ["rating"],
}
# Fast retry settings so the whole file stays well under a minute on 2 cores.
FAST = dict(backoff_base_s=0.02, backoff_max_s=0.1, request_timeout_s=2.0, max_retry_time_s=10.0)


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)


def server(**kw) -> ProviderServer:
    kw.setdefault("openai_key", OPENAI_KEY)
    kw.setdefault("anthropic_key", ANTHROPIC_KEY)
    return ProviderServer(**kw)


def req(i: int = 0, *, provider: str = "openai", model: str = "gpt-test", text: str | None = None, **kw) -> LLMRequest:
    sampling = kw.pop("sampling", Sampling(max_tokens=300))
    messages = kw.pop("messages", (("system", "You are a strict judge."), ("user", text or f"Rate answer {i}.")))
    return LLMRequest(ModelRef(provider, model), messages, sampling, **kw)


def openai_backend(srv: ProviderServer, **kw) -> OpenAIBackend:
    return OpenAIBackend(base_url=srv.base_url, **{**FAST, **kw})


def anthropic_backend(srv: ProviderServer, **kw) -> AnthropicBackend:
    return AnthropicBackend(base_url=srv.anthropic_base_url, **{**FAST, **kw})


# ---------------------------------------------------------------------------
# Pure pieces
# ---------------------------------------------------------------------------


def test_parse_retry_after_seconds_and_http_date() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("0.5") == 0.5
    assert parse_retry_after("-2") == 0.0
    now = 1_800_000_000.0
    date = email.utils.formatdate(now + 7, usegmt=True)
    assert parse_retry_after(date, now=now) == pytest.approx(7.0, abs=1.0)
    assert parse_retry_after(email.utils.formatdate(now - 60, usegmt=True), now=now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_aimd_one_cut_per_congestion_epoch_and_additive_regrowth() -> None:
    c = AIMDController(initial=8, maximum=10)
    epoch = c.epoch
    assert c.on_rate_limited(epoch) is True
    # Other requests dispatched under the old limit report the same congestion: no further cut.
    assert c.on_rate_limited(epoch) is False
    assert c.current == 4
    assert c.on_rate_limited(c.epoch) is True and c.current == 2
    for _ in range(200):
        c.on_success()
    assert c.current == 10  # additive increase up to the cap, never beyond
    c.on_server_error()  # 5xx pauses growth, does not cut
    assert c.current == 10
    assert [e for e, _ in c.history].count("decrease") == 2


def test_backoff_has_a_floor_and_a_cap() -> None:
    import random

    p = RetryPolicy(backoff_base_s=1.0, backoff_max_s=8.0)
    rng = random.Random(0)
    for n in range(1, 10):
        d = p.backoff(n, rng)
        ceiling = min(8.0, 2 ** (n - 1))
        assert ceiling / 2 <= d <= ceiling


# ---------------------------------------------------------------------------
# Construction and keys
# ---------------------------------------------------------------------------


def test_missing_key_fails_at_construction_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(MissingAPIKeyError, match="OPENAI_API_KEY"):
        OpenAIBackend()
    with pytest.raises(MissingAPIKeyError, match="MY_JUDGE_KEY"):
        AnthropicBackend(api_key_env="MY_JUDGE_KEY")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    with pytest.raises(MissingAPIKeyError, match="ANTHROPIC_API_KEY"):
        AnthropicBackend()


def test_pickled_backend_carries_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    key = "sk-test-" + secrets.token_hex(16)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    blob = pickle.dumps(OpenAIBackend(base_url="http://127.0.0.1:1/v1"))
    assert key.encode() not in blob and key not in repr(OpenAIBackend())
    assert pickle.loads(blob)._api_key == key  # re-read from the environment


def test_invalid_configurations_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="state_dir"):
        OpenAIBackend(use_batch_api=True)
    with pytest.raises(ValueError, match="Batch API"):
        OpenAICompatibleBackend(base_url="http://127.0.0.1:1/v1", use_batch_api=True, state_dir=tmp_path)
    with pytest.raises(ValueError, match="base_url"):
        OpenAICompatibleBackend()
    with pytest.raises(ValueError):
        OpenAIBackend(concurrency=0)


# ---------------------------------------------------------------------------
# Retries and concurrency
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault",
    [
        Fault("429"),
        Fault("500"),
        Fault("503"),
        Fault("delay", delay_s=3.0),
        Fault("truncate"),
        Fault("malformed"),
    ],
    ids=lambda f: f.kind,
)
def test_every_failure_kind_is_retried_until_success(fault: Fault) -> None:
    with server(faults={0: fault, 1: fault}) as srv:
        # The timeout only has to be shorter than the 3 s delay; a loaded 2-core machine
        # may need more than a few tenths of a second for the answer that succeeds.
        backend = openai_backend(srv, request_timeout_s=1.5, concurrency=1)
        [result] = list(backend.run([req()]))
        calls = srv.generation_calls()
    assert result.ok, result.error
    assert result.text == json.dumps({"rating": rating_for("Rate answer 0.")})
    assert len(calls) == 3 and [c.fault for c in calls] == [fault.kind, fault.kind, None]
    assert "retried 2x" in result.notes


def test_anthropic_retries_429_5xx_and_truncated_bodies() -> None:
    with server(faults={0: "429", 1: "503", 2: "truncate", 3: "malformed"}) as srv:
        [result] = list(anthropic_backend(srv, concurrency=1).run([req(provider="anthropic", model="claude-test")]))
        assert len(srv.generation_calls()) == 5
    assert result.ok, result.error
    assert "retried 4x" in result.notes


@pytest.mark.parametrize("status", ["429", "503"])
def test_retry_after_seconds_is_honoured(status: str) -> None:
    with server(faults={0: Fault(status, retry_after="1")}) as srv:
        [result] = list(openai_backend(srv).run([req()]))
        first, second = srv.generation_calls()
    assert result.ok
    assert second.t_mono - first.t_done >= 1.0


def test_retry_after_http_date_is_honoured() -> None:
    target = time.time() + 1.5
    header = email.utils.formatdate(target, usegmt=True)  # whole seconds, as on the wire
    not_before = email.utils.parsedate_to_datetime(header).timestamp()
    with server(faults={0: Fault("429", retry_after=header)}) as srv:
        [result] = list(openai_backend(srv).run([req()]))
        first, second = srv.generation_calls()
    assert result.ok
    assert second.t_wall >= not_before - 0.01
    assert second.t_wall - first.t_wall < 3.0


def test_429s_lower_the_concurrency_once_per_burst() -> None:
    faults = {i: Fault("429", retry_after="0") for i in range(4)}
    with server(faults=faults, latency_s=0.05) as srv:
        backend = openai_backend(srv, concurrency=8, max_concurrency=16)
        results = list(backend.run([req(i) for i in range(24)]))
        max_seen = srv.max_in_flight
    assert all(r.ok for r in results)
    assert len(results) == 24
    decreases = [limit for event, limit in backend.controller.history if event == "decrease"]
    # Four 429s from requests in flight together are one congestion signal.
    assert decreases == [4.0]
    assert backend.controller.min_seen == 4.0
    assert max_seen <= 8


# The one stamp format of every record (context_effects.utc), failures included.
UTC_STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z"


def test_non_retriable_400_fails_fast() -> None:
    with server(faults={0: "400"}) as srv:
        t0 = time.monotonic()
        [result] = list(openai_backend(srv, backoff_base_s=5.0).run([req()]))
        elapsed = time.monotonic() - t0
        assert len(srv.generation_calls()) == 1
    assert not result.ok
    assert "HTTP 400" in result.error and "not retried" in result.error
    assert re.fullmatch(UTC_STAMP, result.timestamp), result.timestamp
    assert elapsed < 2.0


def test_wrong_key_is_a_clear_non_retried_401(monkeypatch: pytest.MonkeyPatch) -> None:
    wrong = "sk-wrong-" + secrets.token_hex(8)
    monkeypatch.setenv("OPENAI_API_KEY", wrong)
    with server() as srv:
        [result] = list(openai_backend(srv).run([req()]))
        assert len(srv.generation_calls()) == 1
    assert "HTTP 401" in result.error and wrong not in result.error


def test_max_retries_bounds_the_attempts() -> None:
    with server(always="500") as srv:
        [result] = list(openai_backend(srv, max_retries=2).run([req()]))
        assert len(srv.generation_calls()) == 3
    assert "gave up" in result.error and "HTTP 500" in result.error


def test_total_retry_time_is_bounded() -> None:
    with server(always="503") as srv:
        backend = openai_backend(srv, max_retries=1000, max_retry_time_s=1.0, backoff_base_s=0.05, backoff_max_s=0.2)
        t0 = time.monotonic()
        [result] = list(backend.run([req()]))
        elapsed = time.monotonic() - t0
        n_calls = len(srv.generation_calls())
    assert not result.ok and "503" in result.error and "budget" in result.error
    assert elapsed < 1.0 + 0.8
    assert n_calls >= 3


def test_retry_after_beyond_the_budget_gives_up_at_once() -> None:
    with server(always=Fault("503", retry_after="30")) as srv:
        t0 = time.monotonic()
        [result] = list(openai_backend(srv, max_retry_time_s=2.0).run([req()]))
        assert time.monotonic() - t0 < 1.0
        assert len(srv.generation_calls()) == 1
    assert "budget" in result.error


ABSURD_RETRY_AFTER = "1000000000"  # about 32 years


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_absurd_retry_after_fails_every_request_within_seconds(provider: str) -> None:
    """A 429 with ``Retry-After: 1000000000``: the requests that got it and those waiting
    for a slot behind the pause it sets all fail at once, naming the provider's answer and
    the setting to raise. The waiting ones used to sit the pause out: the job hung until
    it was killed, far past ``max_retry_time_s``."""
    with server(always=Fault("429", retry_after=ABSURD_RETRY_AFTER), latency_s=0.05) as srv:
        if provider == "openai":
            backend, requests = openai_backend(srv, concurrency=2, max_retry_time_s=5.0), [req(i) for i in range(6)]
        else:
            backend = anthropic_backend(srv, concurrency=2, max_retry_time_s=5.0)
            requests = [req(i, provider="anthropic", model="claude-test") for i in range(6)]
        results = []
        t0 = time.monotonic()
        stream = backend.stream(requests, heartbeat_s=0.2)
        try:
            for result in stream:
                if result is not None:
                    results.append(result)
                if time.monotonic() - t0 > 15.0:
                    break
        finally:
            stream.close()  # cancels what still waits, so a failure here does not hang the suite
        elapsed = time.monotonic() - t0
        n_calls = len(srv.generation_calls())
    assert len(results) == 6, f"{len(results)} of 6 results after {elapsed:.1f}s: the rest held by the pause"
    assert elapsed < 3.0
    assert 1 <= n_calls <= 2  # only the requests in flight when the first 429 came were sent
    for result in results:
        assert not result.ok
        assert f"HTTP 429 with Retry-After: {ABSURD_RETRY_AFTER}s" in result.error, result.error
        assert "max_retry_time_s" in result.error and "retry time budget of 5s" in result.error, result.error
    assert sum("not sent:" in r.error for r in results) == 6 - n_calls


class _NoSDKError(Exception):
    pass


NO_SDK = SDKErrors(status=_NoSDKError, timeout=_NoSDKError, connection=_NoSDKError, validation=_NoSDKError)


def test_a_shared_pause_past_the_deadline_is_not_waited_for() -> None:
    """The limiter's pause never holds a request past its deadline: a pause ending after it
    stops the request at once, before its first dispatch and between retries; a pause
    inside the budget is waited out."""
    import asyncio
    import random

    policy = RetryPolicy(max_retry_time_s=2.0, backoff_base_s=0.01, backoff_max_s=0.02)

    async def run(limiter: AdaptiveLimiter, op) -> tuple[object, float]:
        t0 = time.monotonic()
        outcome = await asyncio.wait_for(
            call_with_retries(op, limiter=limiter, policy=policy, errors=NO_SDK, rng=random.Random(0)), 10.0)
        return outcome, time.monotonic() - t0

    sent: list[float] = []

    async def answer(timeout: float) -> str:
        sent.append(time.monotonic())
        return "ok"

    async def scenario() -> None:
        # Before the first dispatch: the request has no deadline yet, only its budget.
        limiter = AdaptiveLimiter(AIMDController(initial=1))
        limiter.pause(1e9, "HTTP 429 with Retry-After: 1000000000s")
        outcome, took = await run(limiter, answer)
        assert outcome.error is not None and not sent and took < 0.5
        assert "not sent: the provider answered another request HTTP 429 with Retry-After: 1000000000s" in outcome.error
        assert "max_retry_time_s" in outcome.error

        # Between retries: another request's 429 pauses everyone past this one's deadline.
        limiter = AdaptiveLimiter(AIMDController(initial=1))

        async def fails_once(timeout: float) -> str:
            if not sent:
                sent.append(time.monotonic())
                limiter.pause(1e9, "HTTP 429 with Retry-After: 1000000000s")
                raise ConnectionError("reset")
            return await answer(timeout)

        outcome, took = await run(limiter, fails_once)
        assert outcome.error is not None and "not sent again" in outcome.error and len(sent) == 1
        assert took < 1.0  # not the 2 s deadline

        # A pause inside the budget is waited out, then the request is sent.
        sent.clear()
        limiter = AdaptiveLimiter(AIMDController(initial=1))
        limiter.pause(0.3, "HTTP 429 with Retry-After: 0.3s")
        outcome, took = await run(limiter, answer)
        assert outcome.value == "ok" and took >= 0.3 and len(sent) == 1

    asyncio.run(scenario())


def test_identical_requests_are_paid_once() -> None:
    with server() as srv:
        results = list(openai_backend(srv).run([req(1), req(1), req(2)]))
        assert len(srv.generation_calls()) == 2
    assert len(results) == 3 and all(r.ok for r in results)
    assert sorted(r.key for r in results) == sorted([req(1).key, req(1).key, req(2).key])


def test_closing_the_iterator_early_does_not_hang() -> None:
    with server(latency_s=0.2) as srv:
        it = openai_backend(srv, concurrency=1).run([req(i) for i in range(20)])
        first = next(it)
        t0 = time.monotonic()
        it.close()
        assert time.monotonic() - t0 < 2.0
    assert first.ok


# ---------------------------------------------------------------------------
# Request mapping and parsing
# ---------------------------------------------------------------------------


def test_chat_request_mapping_logprobs_and_probe_probs() -> None:
    prompt = "Is the answer correct? Answer Yes or No."
    sampling = Sampling(
        temperature=0.0, top_p=0.9, max_tokens=5, seed=7, logprobs=3, probe_tokens=("Yes", "No", "Absent")
    )
    prices = {"gpt-test": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}
    with server() as srv:
        backend = openai_backend(srv, prices=prices)
        [result] = list(backend.run([req(text=prompt, sampling=sampling, output_schema=RATING_SCHEMA)]))
        [call] = srv.generation_calls()
    body = call.body
    assert body["temperature"] == 0.0 and body["top_p"] == 0.9 and body["seed"] == 7
    assert body["max_completion_tokens"] == 5 and "max_tokens" not in body
    assert body["logprobs"] is True and body["top_logprobs"] == 3
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == RATING_SCHEMA
    assert body["response_format"]["json_schema"]["strict"] is False  # open schema: strict would be a 400
    assert body["messages"][0] == {"role": "system", "content": "You are a strict judge."}

    p_yes = yes_probability(prompt)
    assert result.ok and result.text == "Yes" and result.finish_reason == "stop"
    assert set(result.first_token_logprobs) == {"Yes", "No", "Maybe"}
    assert result.probe_probs["Yes"] == pytest.approx(p_yes)
    assert result.probe_probs["No"] == pytest.approx(1 - p_yes - 0.015)
    assert "Absent" not in result.probe_probs  # missing is absent, never 0
    assert result.tokens_in > 0 and result.tokens_out == 1
    assert result.engine_version.startswith("openai 3.")
    assert "system_fingerprint=fp_fake" in result.notes
    assert result.latency_s is not None and result.latency_s > 0
    assert re.fullmatch(UTC_STAMP, result.timestamp), result.timestamp
    assert result.backend == "openai"
    assert result.cost_usd == pytest.approx((result.tokens_in * 1.0 + result.tokens_out * 2.0) / 1e6)


def test_probe_tokens_without_logprobs_ask_for_top_alternatives() -> None:
    with server() as srv:
        [result] = list(
            openai_backend(srv).run(
                [req(text="Answer Yes or No.", sampling=Sampling(max_tokens=300, probe_tokens=("No",)))]
            )
        )
        [call] = srv.generation_calls()
    assert call.body["top_logprobs"] == 20
    assert set(result.probe_probs) == {"No"}


def test_strict_schema_when_closed_and_truncation_reported() -> None:
    closed = {**RATING_SCHEMA, "additionalProperties": False}
    with server() as srv:
        [result] = list(openai_backend(srv).run([req(sampling=Sampling(max_tokens=2), output_schema=closed)]))
        [call] = srv.generation_calls()
    assert call.body["response_format"]["json_schema"]["strict"] is True
    assert result.finish_reason == "length" and result.tokens_out == 2


def test_completion_mode_uses_the_legacy_endpoint() -> None:
    few_shot = "Q: 2+2?\nA: 4\nQ: Is the sky green? Answer Yes or No.\nA:"
    sampling = Sampling(max_tokens=300, logprobs=3, probe_tokens=("Yes", "No"))
    with server() as srv:
        backend = openai_backend(srv)
        [result] = list(backend.run([req(messages=(("user", few_shot),), sampling=sampling, mode="completion")]))
        [call] = srv.generation_calls()
    assert call.path == "/v1/completions"
    assert call.body["prompt"] == few_shot and call.body["logprobs"] == 3
    assert result.ok and result.text == "Yes"
    assert result.probe_probs["Yes"] == pytest.approx(yes_probability(few_shot))


def test_openai_compatible_server_without_key_never_sends_the_openai_key() -> None:
    # The local server accepts only the placeholder, so success proves
    # $OPENAI_API_KEY (set by the fixture) was not sent to it.
    with server(openai_key="EMPTY") as srv:
        backend = OpenAICompatibleBackend(base_url="http://127.0.0.1:9/v1", **FAST)
        request = LLMRequest(
            ModelRef("openai_compatible", "smollm2", base_url=srv.base_url),
            (("user", "Rate this."),),
            Sampling(max_tokens=300, seed=1),
        )
        [result] = list(backend.run([request]))
        [call] = srv.generation_calls()
    assert result.ok, result.error
    assert result.backend == "openai_compatible"
    assert call.body["max_tokens"] == 300 and "max_completion_tokens" not in call.body


def test_anthropic_drops_unsupported_parameters_and_says_so() -> None:
    with server() as srv:
        backend = anthropic_backend(srv)
        plain, sampled, completion = (
            req(provider="anthropic", model="claude-test"),
            req(
                1,
                provider="anthropic",
                model="claude-test",
                sampling=Sampling(top_p=0.8, max_tokens=300, seed=3, logprobs=5),
                output_schema=RATING_SCHEMA,
            ),
            req(2, provider="anthropic", model="claude-test", mode="completion"),
        )
        results = {r.key: r for r in backend.run([plain, sampled, completion])}
        calls = srv.generation_calls()
    assert len(calls) == 2  # completion mode never reaches the API
    for call in calls:
        assert not {"temperature", "top_p", "top_k", "seed", "logprobs"} & set(call.body)
        assert call.body["system"] == "You are a strict judge."
        assert [m["role"] for m in call.body["messages"]] == ["user"]
    [with_schema] = [c for c in calls if "output_config" in c.body]
    assert with_schema.body["output_config"] == {"format": {"type": "json_schema", "schema": RATING_SCHEMA}}

    r = results[plain.key]
    assert r.ok and r.text == json.dumps({"rating": rating_for("Rate answer 0.")})
    assert r.notes == "temperature not sent: not supported by the Anthropic API; served_model=claude-test"
    assert r.first_token_logprobs is None and r.probe_probs is None
    assert r.finish_reason == "stop" and r.tokens_out == 5 and r.engine_version.startswith("anthropic 2.")
    s = results[sampled.key]
    assert "top_p not sent" in s.notes and "seed not sent" in s.notes and "no logprobs available" in s.notes
    c = results[completion.key]
    assert not c.ok and "completion mode" in c.error


def test_anthropic_sends_the_thinking_type_of_the_profile() -> None:
    """A Claude model that would think is told not to: the conformed request's
    ``thinking`` goes out as ``thinking: {type: ...}``, and only when set."""
    with server() as srv:
        backend = anthropic_backend(srv)
        off = req(provider="anthropic", model="claude-test",
                  sampling=Sampling(temperature=None, top_p=None, max_tokens=4, thinking="disabled"))
        plain = req(1, provider="anthropic", model="claude-test", sampling=Sampling(temperature=None, max_tokens=4))
        results = list(backend.run([off, plain]))
        bodies = {c.body["messages"][0]["content"]: c.body for c in srv.generation_calls()}
    assert all(r.ok for r in results)
    assert bodies["Rate answer 0."]["thinking"] == {"type": "disabled"}
    assert "thinking" not in bodies["Rate answer 1."]


# ---------------------------------------------------------------------------
# Batch APIs
# ---------------------------------------------------------------------------


def test_openai_batch_round_trip(tmp_path: Path) -> None:
    requests = [req(i, sampling=Sampling(max_tokens=300, logprobs=2), output_schema=RATING_SCHEMA) for i in range(5)]
    prices = {"gpt-test": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}
    with server(batch_in_progress_polls=3) as srv:
        srv.batch_error_ids = {requests[0].key}
        srv.batch_expired_ids = {requests[1].key}
        backend = openai_backend(srv, use_batch_api=True, state_dir=tmp_path, batch_poll_interval_s=0.05, prices=prices)
        results = {r.key: r for r in backend.run(requests)}
        assert len(srv.calls("POST", "/v1/batches")) == 1
        assert len([c for c in srv.calls("GET") if c.path.startswith("/v1/batches/")]) == 4
        assert srv.generation_calls() == []
        [upload] = srv.calls("POST", "/v1/files")
    lines = [json.loads(x) for x in upload.body["file"]["content"].decode().splitlines()]
    assert upload.body["purpose"] == "batch"
    assert {x["custom_id"] for x in lines} == {r.key for r in requests}
    assert all(x["url"] == "/v1/chat/completions" and x["body"]["top_logprobs"] == 2 for x in lines)

    assert len(results) == 5
    assert "invalid_value" in results[requests[0].key].error
    assert "batch_expired" in results[requests[1].key].error
    for request in requests[2:]:
        r = results[request.key]
        assert r.ok and json.loads(r.text) == {"rating": rating_for(request.messages[-1][1])}
        assert r.first_token_logprobs and "batch_api=batch_" in r.notes
        assert r.cost_usd == pytest.approx((r.tokens_in + 2.0 * r.tokens_out) / 1e6 * 0.5)  # batch price
    # Failures forget the batch, so rerunning the same requests resubmits them.
    assert list(tmp_path.iterdir()) == []


def test_openai_batch_completed_state_is_reused_not_resubmitted(tmp_path: Path) -> None:
    requests = [req(i) for i in range(3)]
    with server(batch_in_progress_polls=1) as srv:
        kw = dict(use_batch_api=True, state_dir=tmp_path, batch_poll_interval_s=0.05)
        first = list(openai_backend(srv, **kw).run(requests))
        # Same requests in another order (a job that died before storing its answers).
        second = list(openai_backend(srv, **kw).run(list(reversed(requests))))
        assert len(srv.calls("POST", "/v1/batches")) == 1
    assert all(r.ok for r in first + second)
    assert sorted(r.text for r in first) == sorted(r.text for r in second)


def test_stale_persisted_batch_id_is_forgotten(tmp_path: Path) -> None:
    requests = [req(i) for i in range(2)]
    with server(batch_in_progress_polls=0) as srv:
        kw = dict(use_batch_api=True, state_dir=tmp_path, batch_poll_interval_s=0.05)
        backend = openai_backend(srv, **kw)
        path = backend._batch_state_path(requests)[0]
        path.write_text(json.dumps({"provider": "openai", "batch_id": "batch_gone"}))
        first = list(backend.run(requests))
        assert all("HTTP 404" in r.error for r in first) and not path.exists()
        second = list(openai_backend(srv, **kw).run(requests))
        assert len(srv.calls("POST", "/v1/batches")) == 1
    assert all(r.ok for r in second)


def test_batches_are_sharded_by_size_and_endpoint(tmp_path: Path) -> None:
    chat = [req(i) for i in range(5)]
    base = [req(i, messages=(("user", f"Text {i}"),), mode="completion") for i in range(2)]
    with server(batch_in_progress_polls=0) as srv:
        backend = openai_backend(
            srv, use_batch_api=True, state_dir=tmp_path, batch_poll_interval_s=0.05, batch_max_requests=2
        )
        results = list(backend.run(chat + base))
        endpoints = sorted(c.body["endpoint"] for c in srv.calls("POST", "/v1/batches"))
    assert all(r.ok for r in results) and len(results) == 7
    assert endpoints == ["/v1/chat/completions"] * 3 + ["/v1/completions"]


def test_anthropic_batch_round_trip(tmp_path: Path) -> None:
    requests = [req(i, provider="anthropic", model="claude-test", output_schema=RATING_SCHEMA) for i in range(4)]
    with server(batch_in_progress_polls=2) as srv:
        srv.batch_error_ids = {requests[0].key}
        srv.batch_expired_ids = {requests[1].key}
        backend = anthropic_backend(srv, use_batch_api=True, state_dir=tmp_path, batch_poll_interval_s=0.05)
        results = {r.key: r for r in backend.run(requests)}
        [create] = srv.calls("POST", "/v1/messages/batches")
        assert srv.generation_calls() == []
    sent = {e["custom_id"]: e["params"] for e in create.body["requests"]}
    assert set(sent) == {r.key for r in requests}
    assert all("temperature" not in p and p["system"] == "You are a strict judge." for p in sent.values())
    assert all(p["output_config"]["format"]["schema"] == RATING_SCHEMA for p in sent.values())
    assert "invalid_request_error" in results[requests[0].key].error
    assert "expired" in results[requests[1].key].error
    for request in requests[2:]:
        r = results[request.key]
        assert r.ok and json.loads(r.text) == {"rating": rating_for(request.messages[-1][1])}
        assert "temperature not sent" in r.notes and "batch_api=msgbatch_" in r.notes


def test_anthropic_batch_restart_polls_instead_of_resubmitting(tmp_path: Path) -> None:
    requests = [req(i, provider="anthropic", model="claude-test") for i in range(3)]
    kw = dict(use_batch_api=True, state_dir=tmp_path, batch_poll_interval_s=0.05)
    with server(batch_in_progress_polls=10_000) as srv:
        # A job that gives up waiting (its wall-time limit) ...
        first = list(anthropic_backend(srv, batch_max_wait_s=0.2, **kw).run(requests))
        assert all(not r.ok and "still in_progress" in r.error for r in first)
        [state_file] = tmp_path.iterdir()
        state = json.loads(state_file.read_text())
        # ... and its rerun, after the provider finished the batch.
        srv.batch_in_progress_polls = 0
        second = list(anthropic_backend(srv, **kw).run(requests))
        assert len(srv.calls("POST", "/v1/messages/batches")) == 1
    assert all(r.ok for r in second)
    assert all(state["batch_id"] in r.notes for r in second)


def test_openai_batch_restart_after_a_crash(tmp_path: Path) -> None:
    """Kill -9 a job while it polls; the next job with the same requests polls the same batch."""
    state_dir = tmp_path / "state"
    requests = [req(i) for i in range(3)]
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""
            import sys
            sys.path[:0] = [{str(REPO / 'src')!r}, {str(Path(__file__).parent)!r}]
            from context_effects.llm.backends.openai_api import OpenAIBackend
            from test_llm_api_backends import req
            backend = OpenAIBackend(base_url=sys.argv[1], use_batch_api=True, state_dir={str(state_dir)!r},
                                    batch_poll_interval_s=0.05)
            for r in backend.run([req(i) for i in range(3)]):
                print(r)
            """))
    with server(batch_in_progress_polls=10_000) as srv:
        proc = subprocess.Popen([sys.executable, str(script), srv.base_url], env=dict(os.environ))
        try:
            deadline = time.monotonic() + 30
            while not (state_dir.exists() and any(state_dir.glob("*.json"))) or not srv.calls("GET"):
                assert proc.poll() is None, "job ended before it was killed"
                assert time.monotonic() < deadline, "job never persisted its batch"
                time.sleep(0.05)
        finally:
            proc.kill()
            proc.wait()
        srv.batch_in_progress_polls = 0
        backend = openai_backend(srv, use_batch_api=True, state_dir=state_dir, batch_poll_interval_s=0.05)
        results = list(backend.run(requests))
        assert len(srv.calls("POST", "/v1/batches")) == 1
        assert len(srv.calls("POST", "/v1/files")) == 1
    assert all(r.ok for r in results) and len(results) == 3


# ---------------------------------------------------------------------------
# Secrets
# ---------------------------------------------------------------------------


def test_api_key_never_reaches_any_written_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    key = "sk-test-" + secrets.token_hex(24)
    monkeypatch.setenv("OPENAI_API_KEY", key)
    out = tmp_path / "run"
    out.mkdir()
    # Everything, SDK and httpx debug logging included, goes to a file under tmp.
    handler = logging.FileHandler(out / "debug.log")
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        with server(
            openai_key=key, faults={0: Fault("429", retry_after="0"), 2: "400"}, batch_in_progress_polls=1
        ) as srv:
            direct = openai_backend(srv, state_dir=out / "state", concurrency=1)
            results = list(direct.run([req(i, sampling=Sampling(max_tokens=300, logprobs=2)) for i in range(3)]))
            batch = openai_backend(srv, use_batch_api=True, state_dir=out / "state", batch_poll_interval_s=0.05)
            results += list(batch.run([req(i) for i in range(10, 13)]))
            # A wrong key too: the 401 path must not echo anything either.
            monkeypatch.setenv("OPENAI_API_KEY", key[::-1])
            results += list(openai_backend(srv).run([req(99)]))
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
        handler.close()

    assert sum(r.ok for r in results) == 5 and sum(not r.ok for r in results) == 2
    with open(out / "results.jsonl", "w") as fh:
        for r in results:
            fh.write(json.dumps(dataclasses.asdict(r)) + "\n")
    with open(out / "ledger.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["key", "backend", "engine", "tokens_in", "tokens_out", "cost", "error"])
        for r in results:
            w.writerow([r.key, r.backend, r.engine_version, r.tokens_in, r.tokens_out, r.cost_usd, r.error])
    (out / "notes.txt").write_text("\n".join([repr(direct), repr(batch)] + [f"{r.notes} | {r.error}" for r in results]))

    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.parent.name == "state" for p in written)  # the batch state file was written and kept
    assert (out / "debug.log").stat().st_size > 0
    for path in written:
        data = path.read_bytes()
        for secret in (key, key[::-1]):
            assert secret.encode() not in data, f"API key leaked into {path}"


# ---------------------------------------------------------------------------
# Answers stream out as they complete; a stop sends nothing more
# ---------------------------------------------------------------------------


def test_stream_yields_each_result_as_it_completes_with_heartbeats_between() -> None:
    with server(latency_s=0.3) as srv:
        backend = openai_backend(srv, concurrency=1, max_concurrency=1)
        t0 = time.monotonic()
        stream = backend.stream([req(i) for i in range(3)], heartbeat_s=0.05)
        arrivals = [(time.monotonic() - t0, item) for item in stream]
    results = [(t, r) for t, r in arrivals if r is not None]
    assert len(results) == 3 and all(r.ok for _, r in results)
    # One at a time, about 0.3 s apart: the first is out long before the last is done.
    assert results[0][0] < results[-1][0] - 0.4
    assert sum(r is None for _, r in arrivals) >= 5
    assert backend.incremental


def test_request_stop_waits_for_calls_in_flight_and_sends_no_more() -> None:
    with server(latency_s=0.2) as srv:
        backend = openai_backend(srv, concurrency=2, max_concurrency=2)
        results = []
        for result in backend.run([req(i) for i in range(10)]):
            results.append(result)
            if len(results) == 1:
                backend.request_stop()
        sent = len(srv.generation_calls())
    # The call sent alongside the first and any sent in the instant before the
    # stop came back answered; the rest were never sent and have no result.
    assert 2 <= sent <= 4 and len(results) == sent
    assert all(r.ok for r in results)


def test_stop_while_a_batch_runs_keeps_its_id_and_the_rerun_polls_it(tmp_path: Path) -> None:
    import threading

    requests = [req(i) for i in range(3)]
    # batch_max_wait_s: without a working stop the first run gives up after 5 s instead of hanging.
    kw = dict(use_batch_api=True, state_dir=tmp_path, batch_poll_interval_s=0.05, batch_max_wait_s=5.0)
    with server(batch_in_progress_polls=10_000) as srv:
        backend = openai_backend(srv, **kw)

        def stop_once_polling() -> None:
            while not srv.calls("GET"):
                time.sleep(0.01)
            backend.request_stop()  # what the answering job's SIGTERM handler does

        threading.Thread(target=stop_once_polling, daemon=True).start()
        assert list(backend.run(requests)) == []  # nothing came back, nothing failed
        assert list(tmp_path.glob("*.json")), "the batch id is kept for the rerun"
        srv.batch_in_progress_polls = 0
        again = list(openai_backend(srv, **kw).run(requests))
        assert len(srv.calls("POST", "/v1/batches")) == 1, "the rerun polls the same batch, it does not pay again"
    assert len(again) == 3 and all(r.ok for r in again)


# ---------------------------------------------------------------------------
# Replies with no answer: refusals and empty replies are answers (paid for)
# ---------------------------------------------------------------------------


def _no_answer_reply(prompt: str) -> Reply:
    if "REFUSE" in prompt:
        return refusal_reply()
    if "FILTER" in prompt:
        return content_filter_reply()
    if "EMPTY" in prompt or ("FLAKY" in prompt and "exactly one JSON object" not in prompt):
        return empty_reply()
    return default_reply(prompt)


def test_openai_refusal_content_filter_and_empty_reply_are_parsed_as_answers() -> None:
    reqs = [req(0, text="REFUSE"), req(1, text="FILTER"), req(2, text="EMPTY"), req(3)]
    with server(reply=_no_answer_reply) as srv:
        got = {r.key: r for r in openai_backend(srv).run(reqs)}
    refusal, filtered, empty, normal = (got[r.key] for r in reqs)
    assert refusal.error is None and refusal.text == "" and refusal.finish_reason == "refusal"
    assert "I'm sorry" in refusal.notes
    assert filtered.error is None and filtered.text == "" and filtered.finish_reason == "content_filter"
    assert empty.error is None and empty.text == "" and empty.finish_reason == "stop"
    assert normal.ok and normal.text


def test_anthropic_refusal_and_empty_reply_are_parsed_as_answers() -> None:
    reqs = [req(0, provider="anthropic", text="REFUSE"), req(1, provider="anthropic", text="EMPTY")]
    with server(reply=_no_answer_reply) as srv:
        got = {r.key: r for r in anthropic_backend(srv).run(reqs)}
    refusal, empty = (got[r.key] for r in reqs)
    assert refusal.error is None and refusal.text == "" and refusal.finish_reason == "refusal"
    assert empty.error is None and empty.text == "" and empty.finish_reason == "stop"


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_shard_with_refusals_and_empty_replies_completes_and_reruns_free(tmp_path: Path, provider: str) -> None:
    import pyarrow.parquet as pq

    from context_effects.llm.ledger import Ledger
    from context_effects.llm.shards import answer_shard, write_request_shard
    from context_effects.llm.store.responses import ResponseStore

    texts = ["REFUSE a", "REFUSE b", "EMPTY c", "EMPTY d", "FLAKY e", "Rate f."]
    expected = ["refusal", "refusal", "empty", "empty", None, None]
    if provider == "openai":
        texts.append("FILTER g")
        expected.append("refusal")
    reqs = [req(i, provider=provider, text=t) for i, t in enumerate(texts)]
    shard = tmp_path / "requests.parquet"
    write_request_shard(shard, reqs, reply_policy="conformity.rating", max_attempts=3)
    make = openai_backend if provider == "openai" else anthropic_backend

    def answer(srv: ProviderServer, name: str) -> Ledger:
        with make(srv) as backend:
            return answer_shard(
                shard, tmp_path / f"{name}.parquet", tmp_path / f"{name}.json", backend,
                ResponseStore(tmp_path / "store"), progress=False,
            )

    import signal

    handlers = [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)]
    with server(reply=_no_answer_reply) as srv:
        ledger = answer(srv, "first")
        # The job's SIGTERM/SIGINT handling is in place only while it answers.
        assert [signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM)] == handlers
        calls = len(srv.generation_calls())
        rerun = answer(srv, "rerun")
        assert len(srv.generation_calls()) == calls, "a rerun pays for no refusal or empty reply again"

    misses = expected.count("refusal") + expected.count("empty")
    assert calls == 3 * misses + 2 + 1  # three asks each; FLAKY twice; the plain one once
    rows = pq.read_table(tmp_path / "first.parquet").to_pandas()
    assert list(rows["invalid_reason"]) == expected
    assert list(rows["ok"]) == [r is None for r in expected]
    assert list(rows["attempt"]) == [2 if r else int("FLAKY" in t) for r, t in zip(expected, texts)]
    # Every reply was paid for and is in the store, refusals and empty ones included.
    store = ResponseStore(tmp_path / "store")
    assert len(store) == calls
    assert store.get(reqs[0].key).finish_reason == "refusal" and store.get(reqs[2].key).text == ""
    assert ledger.failures == 0 and ledger.invalid_reasons == {
        "refusal": expected.count("refusal"),
        "empty": expected.count("empty"),
    }
    again = pq.read_table(tmp_path / "rerun.parquet").to_pandas()
    assert list(again["invalid_reason"]) == list(rows["invalid_reason"]) and rerun.calls == 0
