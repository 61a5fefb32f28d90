"""A model that is not served stops the run before anything is paid.

The local provider server answers its models endpoints as the real APIs do: an id
outside ``served_models`` gets HTTP 404 with ``model_not_found`` (OpenAI) or
``not_found_error`` (Anthropic); Anthropic's model objects say whether a model is
retired or deprecated and which thinking types it accepts. The preflight asks only
those endpoints: no generation call is ever made.
"""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

from conftest import REPO, snakemake_cmd
from provider_server import ProviderServer
from context_effects.config import validate_config
from context_effects.llm.factory import model_ref
from context_effects.llm.preflight import ModelNotServed, check_served
from context_effects.llm.shards import write_request_shard
from context_effects.llm.types import LLMRequest, Sampling

OPENAI_KEY, ANTHROPIC_KEY = "sk-test-preflight-openai", "sk-ant-test-preflight"
ENV = {"OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}


def _server(**kw) -> ProviderServer:
    return ProviderServer(openai_key=OPENAI_KEY, anthropic_key=ANTHROPIC_KEY, **kw)


def test_an_unknown_openai_id_is_named_with_its_config_key_and_the_providers_answer():
    with _server(served_models=("gpt-4o",)) as srv:
        models = {
            "judge": {"backend": "openai", "model_id": "gpt-4o", "base_url": srv.base_url},
            "old": {"backend": "openai", "model_id": "gpt-9-retired", "base_url": srv.base_url},
        }
        with pytest.raises(ModelNotServed) as err:
            check_served(models, environ=ENV)
        asked = [c.path for c in srv.calls("GET")]
        assert not srv.generation_calls()
    assert sorted(asked) == ["/v1/models/gpt-4o", "/v1/models/gpt-9-retired"]
    assert list(err.value.problems) == ["old"]
    text = str(err.value)
    assert "old: models.old.model_id = 'gpt-9-retired' (openai at http://127.0.0.1" in text
    assert "HTTP 404 model_not_found: The model `gpt-9-retired` does not exist" in text
    assert "nothing has been sent or paid" in text and OPENAI_KEY not in text


def test_anthropic_retired_deprecated_and_thinking_refused():
    with _server(served_models=("claude-haiku-4-5", "claude-sonnet-4-5", "claude-opus-4-1", "claude-always"),
                 retired_models=("claude-opus-4-1",), deprecated_models={"claude-sonnet-4-5": "2026-11-30T00:00:00Z"},
                 thinking_always_on=("claude-always",)) as srv:
        def claude(model_id: str) -> dict:
            return {"backend": "anthropic", "model_id": model_id, "base_url": srv.anthropic_base_url}

        with pytest.raises(ModelNotServed) as err:
            check_served({"haiku": claude("claude-haiku-4-5"), "opus": claude("claude-opus-4-1"),
                          "gone": claude("claude-opus-3"), "always": claude("claude-always")}, environ=ENV)
        warnings = check_served({"haiku": claude("claude-haiku-4-5"), "sonnet": claude("claude-sonnet-4-5")},
                                environ=ENV)
        assert not srv.generation_calls()
    problems = err.value.problems
    assert set(problems) == {"opus", "gone", "always"}
    assert "lifecycle: retired" in problems["opus"]
    assert "HTTP 404 not_found_error: model: claude-opus-3" in problems["gone"]
    assert "models.always.capabilities.thinking" in problems["always"]
    assert warnings == [f"sonnet (models.sonnet.model_id = 'claude-sonnet-4-5' (anthropic at {srv.anthropic_base_url})):"
                        " deprecated by the provider, retires 2026-11-30"]


def test_openai_compatible_ids_are_looked_up_in_the_servers_list():
    # Google's OpenAI-compatible endpoint lists its models as models/<id>.
    with _server(served_models=("models/gemini-3.5-flash", "local-model")) as srv:
        def server_model(model_id: str) -> dict:
            return {"backend": "openai_compatible", "model_id": model_id, "base_url": srv.base_url,
                    "api_key_env": "GEMINI_API_KEY"}

        env = {"GEMINI_API_KEY": OPENAI_KEY}
        assert check_served({"flash": server_model("gemini-3.5-flash"), "local": server_model("local-model")},
                            environ=env) == []
        with pytest.raises(ModelNotServed, match=r"pro: models.pro.model_id = 'gemini-2.5-pro' .*does not list it"):
            check_served({"pro": server_model("gemini-2.5-pro")}, environ=env)


def test_no_hosted_model_asks_nothing():
    assert check_served({"sim": {"backend": "synthetic", "model_id": "sim"},
                         "qwen": {"backend": "vllm", "model_id": "Qwen/Qwen2.5-7B-Instruct"}}) == []


def test_a_run_with_a_retired_id_stops_before_any_job(workdir):
    """The whole path: snakemake's onstart asks the provider and the run stops, naming
    the model, its config key and the provider's 404, with no job started and no
    generation call made."""
    with _server(served_models=("gpt-4o",)) as srv:
        config = {
            "run": {"label": "preflight", "kind": "paper"},
            "datasets": {"truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl", "n_items": 4}},
            "models": {"sim": {"backend": "synthetic", "model_id": "sim"},
                       "old": {"backend": "openai", "model_id": "gpt-9-retired", "base_url": srv.base_url}},
            "conformity": {"enabled": False},
            "amel": {"enabled": False},
            "anchoring": {"judges": ["sim", "old"], "benchmark_datasets": ["truthfulqa"], "tasks_per_dataset": 4},
        }
        cfg_path = workdir / "config.yaml"
        cfg_path.write_text(yaml.safe_dump(config))
        cfg = validate_config(config)
        targets = []
        for model in ("sim", "old"):
            request = LLMRequest(model_ref(model, cfg["models"][model]), (("user", "Rate it."),),
                                 Sampling(max_tokens=16, seed=42))
            write_request_shard(workdir / f"results/requests/smoke/judge/{model}/0000.parquet", [request])
            targets.append(f"results/responses/smoke/judge/{model}/0000.parquet")
        env = {**os.environ, **ENV}
        res = subprocess.run(
            snakemake_cmd("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                          f"--configfile={cfg_path}", "--cores", "1", *targets),
            cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
        )
        assert not srv.generation_calls()
        asked = [c.path for c in srv.calls("GET")]
    out = res.stdout + res.stderr
    assert res.returncode != 0, out[-3000:]
    assert "old: models.old.model_id = 'gpt-9-retired'" in out and "HTTP 404 model_not_found" in out, out[-3000:]
    assert asked == ["/v1/models/gpt-9-retired"]
    # Stopped before any job: not even the free synthetic shard was answered.
    assert not (workdir / "results" / "responses").exists() and not (workdir / "logs").exists()
