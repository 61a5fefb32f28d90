"""API keys: environment only, checked up front, never written anywhere."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from context_effects.llm.backends.base import Backend  # noqa: E402
from context_effects.llm.ledger import Ledger  # noqa: E402
from context_effects.llm.runner import run_requests  # noqa: E402
from context_effects.llm.secrets import (  # noqa: E402
    ENV_VARS,
    MissingSecretError,
    SecretInConfigError,
    check_env,
    get_key,
    redact,
    required_env_vars,
)
from context_effects.llm.store import transfer  # noqa: E402
from context_effects.llm.store.responses import ResponseStore  # noqa: E402
from context_effects.llm.types import LLMRequest, LLMResult, ModelRef, Sampling  # noqa: E402

MODELS = {
    "qwen": {"backend": "vllm", "model_id": "Qwen/Qwen2.5-7B-Instruct"},
    "gpt-4o": {"backend": "openai", "model_id": "gpt-4o"},
    "gpt-mini": {"backend": "openai", "model_id": "gpt-5.4-mini"},
    "claude": {"backend": "anthropic", "model_id": "claude-x"},
    "local-server": {"backend": "openai_compatible", "model_id": "m", "base_url": "http://localhost:8000/v1"},
    "together": {"backend": "openai_compatible", "model_id": "m2", "api_key_env": "TOGETHER_API_KEY"},
    "synthetic": {"backend": "synthetic"},
}


def test_env_var_table() -> None:
    assert ENV_VARS == {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def test_required_env_vars() -> None:
    assert required_env_vars(MODELS) == ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "TOGETHER_API_KEY"]
    assert required_env_vars({"a": {"backend": "vllm"}, "b": {"backend": "openai_compatible"}}) == []
    assert required_env_vars({}) == []


def test_check_env_names_every_missing_variable_and_its_models() -> None:
    env = {"ANTHROPIC_API_KEY": "sk-ant-present", "OPENAI_API_KEY": ""}  # empty counts as missing
    with pytest.raises(MissingSecretError) as exc:
        check_env(MODELS, environ=env)
    err = exc.value
    assert err.missing == {"OPENAI_API_KEY": ["gpt-4o", "gpt-mini"], "TOGETHER_API_KEY": ["together"]}
    msg = str(err)
    assert "OPENAI_API_KEY" in msg and "gpt-4o, gpt-mini" in msg and "TOGETHER_API_KEY" in msg
    assert "export OPENAI_API_KEY=" in msg
    assert "ANTHROPIC_API_KEY" not in msg and "sk-ant-present" not in msg


def test_check_env_passes_when_all_set() -> None:
    env = {"OPENAI_API_KEY": "a", "ANTHROPIC_API_KEY": "b", "TOGETHER_API_KEY": "c"}
    assert check_env(MODELS, environ=env) == ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "TOGETHER_API_KEY"]
    assert check_env({"q": {"backend": "vllm"}}, environ={}) == []


def test_get_key() -> None:
    assert get_key("OPENAI_API_KEY", environ={"OPENAI_API_KEY": "sk-1"}) == "sk-1"
    with pytest.raises(MissingSecretError, match="OPENAI_API_KEY"):
        get_key("OPENAI_API_KEY", environ={})


def test_config_may_not_hold_keys() -> None:
    with pytest.raises(SecretInConfigError, match="api_key"):
        required_env_vars({"m": {"backend": "openai", "api_key": "sk-live-123"}})
    with pytest.raises(SecretInConfigError) as exc:
        required_env_vars({"m": {"backend": "openai_compatible", "api_key_env": "sk-live-1234567890"}})
    assert "sk-live" not in str(exc.value)


def test_redact() -> None:
    env = {"OPENAI_API_KEY": "sk-proj-SECRETSECRET123", "MY_API_KEY": "zzzz-private-zzzz"}
    text = "401: Incorrect API key provided: sk-proj-SECRETSECRET123; other zzzz-private-zzzz"
    out = redact(text, environ=env)
    assert "SECRETSECRET" not in out and "private" not in out
    assert "<OPENAI_API_KEY>" in out
    assert redact("key sk-abcdefghijklmnop leaked", environ={}) == "key <redacted-key> leaked"
    assert redact(None) is None


class LeakyBackend(Backend):
    """A provider whose error messages echo the key, as some SDK errors do."""

    name = "leaky"

    def run(self, requests: Sequence[LLMRequest]) -> Iterator[LLMResult]:
        for r in requests:
            if r.messages[-1][1].endswith("0"):
                yield LLMResult(
                    key=r.key,
                    text=None,
                    finish_reason=None,
                    error="AuthenticationError: Incorrect API key provided: sk-test-TOPSECRET987654",
                )
            else:
                yield LLMResult(key=r.key, text="fine", finish_reason="stop")


def test_keys_never_reach_results_ledger_or_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "sk-test-TOPSECRET987654"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    reqs = [
        LLMRequest(model=ModelRef("openai", "gpt-4o"), messages=(("user", f"q{i}"),), sampling=Sampling(max_tokens=16))
        for i in range(3)
    ]
    store = ResponseStore(tmp_path / "store")
    led = Ledger(tmp_path / "ledger.json")
    out = run_requests(reqs, LeakyBackend(), store, ledger=led, progress=False)
    assert not out[0].ok and out[1].ok
    assert secret not in (out[0].error or "") and "AuthenticationError" in out[0].error
    export = tmp_path / "export.parquet"
    transfer.export(store, export)
    for path in [tmp_path / "ledger.json", export, *store.seg_dir.iterdir()]:
        assert b"TOPSECRET" not in path.read_bytes(), path
    assert led.failure_reasons == {"AuthenticationError": 1}
