"""A model that is not served stops the run before anything is paid; a model answered
by another model stops it after one probe call per hosted model.

The local provider server answers its models endpoints as the real APIs do: an id
outside ``served_models`` gets HTTP 404 with ``model_not_found`` (OpenAI) or
``not_found_error`` (Anthropic); Anthropic's model objects say whether a model is
retired or deprecated and which thinking types it accepts. A model the models endpoints
refuse stops the run with no generation call made. Otherwise each hosted model gets one
probe call, and its reply's ``model`` field (``routed_models`` sets it: a routed id, or
an alias answered by a dated snapshot) must name the model the config expects.
"""

from __future__ import annotations

import os
import subprocess

import pytest
import yaml

import provider_server
from conftest import REPO, snakemake_cmd
from provider_server import ProviderServer
from context_effects.config import validate_config
from context_effects.llm.factory import model_ref
from context_effects.llm.preflight import PROBE_MAX_TOKENS, ModelNotServed, check_served, same_model
from context_effects.llm.shards import write_request_shard
from context_effects.llm.types import LLMRequest, Sampling

OPENAI_KEY, ANTHROPIC_KEY = "sk-test-preflight-openai", "sk-ant-test-preflight"
ENV = {"OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}
GEMINI_ENV = {**ENV, "GEMINI_API_KEY": OPENAI_KEY}
#: The local server speaks OpenAI's API, which refuses `reasoning_effort` to a model it
#: does not know as a reasoning model; Google's endpoint takes it. Its Gemini models are
#: therefore sent none (the OpenAI model's probe shows the effort sent).
NO_EFFORT = {"reasoning_effort": None}


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
        # Stopped at the models endpoint: nothing sent, not even a probe.
        assert not srv.generation_calls()
        warnings = check_served({"haiku": claude("claude-haiku-4-5"), "sonnet": claude("claude-sonnet-4-5")},
                                environ=ENV)
        # Then one probe each, as small as a call can be, with the thinking type the profile sends.
        probes = sorted((c.body["model"], c.body["max_tokens"], c.body["thinking"]) for c in srv.generation_calls())
    assert probes == [("claude-haiku-4-5", PROBE_MAX_TOKENS, {"type": "disabled"}),
                      ("claude-sonnet-4-5", PROBE_MAX_TOKENS, {"type": "disabled"})]
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
                    "api_key_env": "GEMINI_API_KEY", "capabilities": NO_EFFORT}

        env = {"GEMINI_API_KEY": OPENAI_KEY}
        assert check_served({"flash": server_model("gemini-3.5-flash"), "local": server_model("local-model")},
                            environ=env) == []
        with pytest.raises(ModelNotServed, match=r"pro: models.pro.model_id = 'gemini-2.5-pro' .*does not list it"):
            check_served({"pro": server_model("gemini-2.5-pro")}, environ=env)


def _roster(srv: ProviderServer) -> dict:
    """A model of each kind the paper config runs: Google's endpoint, an OpenAI reasoning
    model asked by alias, an Anthropic model asked by alias."""
    return {
        "flash": {"backend": "openai_compatible", "model_id": "gemini-3.5-flash", "base_url": srv.base_url,
                  "api_key_env": "GEMINI_API_KEY", "capabilities": dict(NO_EFFORT)},
        "nano": {"backend": "openai", "model_id": "gpt-5-nano", "base_url": srv.base_url},
        "haiku": {"backend": "anthropic", "model_id": "claude-haiku-4-5", "base_url": srv.anthropic_base_url},
    }


#: Google lists the retired id and routes it to a newer Flash; the aliases answer under
#: their dated snapshots (the server's gpt-5-nano, a reasoning model, as `-2026-08-07`).
ROUTED = {"gemini-3.5-flash": "gemini-3.8-flash", "claude-haiku-4-5": "claude-haiku-4-5-20251001"}


def test_a_routed_model_stops_the_run_naming_the_requested_and_the_served_id():
    with _server(served_models=("models/gemini-3.5-flash", "gpt-5-nano", "claude-haiku-4-5"),
                 reasoning_models=("gpt-5-nano",), routed_models=ROUTED) as srv:
        with pytest.raises(ModelNotServed) as err:
            check_served(_roster(srv), environ=GEMINI_ENV)
        sent = {c.body["model"]: c.body for c in srv.generation_calls()}
    # The listing passed for all three; one probe each followed, the only calls paid.
    assert sorted(sent) == ["claude-haiku-4-5", "gemini-3.5-flash", "gpt-5-nano"]
    # Only Flash is another model: the snapshots of the aliases are the models asked for.
    assert list(err.value.problems) == ["flash"]
    text = str(err.value)
    assert ("flash: models.flash.model_id = 'gemini-3.5-flash' (openai_compatible at http://127.0.0.1") in text
    assert "requested 'gemini-3.5-flash', but 'gemini-3.8-flash' answered" in text, text
    assert "models.flash.served_id: gemini-3.8-flash" in text, text
    assert "only the preflight's probe calls were sent (3 probe call(s)" in text, text
    assert "nothing has been sent" not in text and OPENAI_KEY not in text
    # Each probe is as small as a call can be, with the effort its capability profile sends,
    # its budget in the parameter the model's backend sends it in.
    assert sent["gemini-3.5-flash"]["max_tokens"] == PROBE_MAX_TOKENS
    assert "max_tokens" not in sent["gpt-5-nano"]
    assert (sent["gpt-5-nano"]["max_completion_tokens"], sent["gpt-5-nano"]["reasoning_effort"]) == (
        PROBE_MAX_TOKENS, "minimal")
    assert sent["claude-haiku-4-5"]["max_tokens"] == PROBE_MAX_TOKENS


def test_dated_snapshots_and_a_stated_served_id_are_accepted_and_the_probes_cost_is_said():
    """gpt-5-nano answered by gpt-5-nano-2026-08-07 and claude-haiku-4-5 by
    claude-haiku-4-5-20251001 are the models asked for; a routed Flash is accepted once
    the config says it is the model meant (served_id). What the probes cost is reported
    from their replies' usage at the shipped prices."""
    reported: list[str] = []
    with _server(served_models=("models/gemini-3.5-flash", "gpt-5-nano", "claude-haiku-4-5"),
                 reasoning_models=("gpt-5-nano",), routed_models=ROUTED) as srv:
        models = _roster(srv)
        models["flash"]["served_id"] = "gemini-3.8-flash"
        assert check_served(models, environ=GEMINI_ENV, report=reported.append) == []
        # Per call: the probes run at once, so the bill's order need not be the calls' order.
        usage = {c.body["model"]: c.usage for c in srv.generation_calls()}
    assert len(usage) == 3
    prices = {"gemini-3.5-flash": (1.5, 9.0), "gpt-5-nano": (0.05, 0.4), "claude-haiku-4-5": (1.0, 5.0)}
    tokens = {m: ((u["prompt_tokens"], u["completion_tokens"]) if "prompt_tokens" in u
                  else (u["input_tokens"], u["output_tokens"])) for m, u in usage.items()}
    # The reasoning model's reply spent the whole budget on reasoning, as the real API bills it.
    assert tokens["gpt-5-nano"][1] == PROBE_MAX_TOKENS
    usd = sum(t_in * prices[m][0] + t_out * prices[m][1] for m, (t_in, t_out) in tokens.items()) / 1e6
    t_in, t_out = (sum(t[i] for t in tokens.values()) for i in (0, 1))
    assert reported == [f"3 probe call(s), one per hosted model, at most {PROBE_MAX_TOKENS} output tokens each: "
                        f"{t_in} prompt and {t_out} output tokens, USD {usd:.6f}"]


def test_a_probe_the_provider_refuses_stops_the_run_with_its_answer_and_bills_nothing():
    """A listed model whose call is refused (here HTTP 400) would fail every call of the
    run: the probe's answer is the problem, and an error answer costs nothing."""
    with _server(always="400") as srv:
        models = {"gpt": {"backend": "openai", "model_id": "gpt-4o", "base_url": srv.base_url}}
        with pytest.raises(ModelNotServed) as err:
            check_served(models, environ=ENV)
    problem = err.value.problems["gpt"]
    assert "the probe call was answered HTTP 400 invalid_request_error: Invalid value for 'messages'." in problem
    assert err.value.probes == (f"1 probe call(s), one per hosted model, at most {PROBE_MAX_TOKENS} output tokens "
                                "each: 0 prompt and 0 output tokens, USD 0.000000")


@pytest.mark.parametrize("expected, served, same", [
    ("gpt-5-nano", "gpt-5-nano-2025-08-07", True),          # OpenAI's dated snapshot
    ("claude-haiku-4-5", "claude-haiku-4-5-20251001", True),  # Anthropic's
    ("gemini-2.0-flash", "gemini-2.0-flash-001", True),     # Google's stable version
    ("gemini-3.5-flash", "models/gemini-3.5-flash", True),  # Google's list form
    ("gpt-5.4-mini", "gpt-5.4-mini", True),
    ("gemini-3.5-flash", "gemini-3.8-flash", False),        # another version
    ("gpt-5", "gpt-5-nano-2025-08-07", False),               # another model of the family
    ("gpt-5-nano", "gpt-5.4-nano-2026-03-17", False),        # its successor
    ("gpt-5-nano-2025-08-07", "gpt-5-nano", False),          # an alias cannot say which snapshot answered
    ("claude-haiku-4-5", "claude-haiku-4-5-latest", False),
])
def test_only_a_dated_snapshot_of_the_id_is_the_same_model(expected, served, same):
    assert same_model(expected, served) is same


def test_require_served_models_probes_a_real_run_and_nothing_offline_or_on_replay(caplog):
    """The onstart check on a validated config: served_id is a model setting of the schema;
    run.preflight: false and replay send nothing, not even the probes."""
    import logging

    from context_effects.dag import require_served_models

    with _server(served_models=("models/gemini-3.5-flash",), routed_models=ROUTED) as srv:
        raw = {
            "run": {"label": "preflight", "kind": "paper"},
            "datasets": {"truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl", "n_items": 4}},
            "models": {"flash": _roster(srv)["flash"]},
            "conformity": {"enabled": False},
            "amel": {"enabled": False},
            "anchoring": {"judges": ["flash"], "benchmark_datasets": ["truthfulqa"], "tasks_per_dataset": 4},
        }
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("GEMINI_API_KEY", OPENAI_KEY)
            with pytest.raises(ModelNotServed, match="requested 'gemini-3.5-flash', but 'gemini-3.8-flash' answered"):
                require_served_models(validate_config(raw))
            assert len(srv.generation_calls()) == 1
            raw["models"]["flash"]["served_id"] = "gemini-3.8-flash"
            with caplog.at_level(logging.INFO, logger="snakemake.logging"):
                require_served_models(validate_config(raw))
            assert "Model check: 1 probe call(s)" in caplog.text
            asked = len(srv.log)
            require_served_models(validate_config({**raw, "run": {**raw["run"], "preflight": False}}))
            require_served_models(validate_config({**raw, "run": {**raw["run"], "replay": True}}))
            assert len(srv.log) == asked


def _models_answer(monkeypatch, status: int, body: str, content_type: str) -> None:
    """Every models endpoint of the servers started after this answers ``body`` with ``status``."""
    def models(handler, model_id):
        handler._send(status, body.encode(), content_type=content_type)

    monkeypatch.setattr(provider_server._Handler, "_models", models)


#: A key of no known shape (not `sk-...`): only the redaction by value can remove it.
PAGE_KEY = "AIzaSyPreflightPageKey0123456789abcdef"


def test_an_answer_that_is_no_model_list_is_named_by_its_status_and_body(monkeypatch):
    """A proxy's sign-in page sent with HTTP 200 (a wrong base_url) is neither a model list
    nor a model: each model is stopped, with the status and the body's first 200 characters,
    the key that page echoes redacted before the cut (it straddles the 200th character)."""
    head = "<!DOCTYPE html><html><head><title>Sign in</title></head><body><p>"
    page = head + "x" * (190 - len(head)) + PAGE_KEY + "</p></body></html>"
    _models_answer(monkeypatch, 200, page, "text/html")
    env = {"GEMINI_API_KEY": PAGE_KEY, "OPENAI_API_KEY": PAGE_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}
    with ProviderServer(openai_key=PAGE_KEY, anthropic_key=ANTHROPIC_KEY) as srv:
        models = {
            "flash": {"backend": "openai_compatible", "model_id": "gemini-3.5-flash", "base_url": srv.base_url,
                      "api_key_env": "GEMINI_API_KEY"},
            "gpt": {"backend": "openai", "model_id": "gpt-4o", "base_url": srv.base_url},
            "claude": {"backend": "anthropic", "model_id": "claude-haiku-4-5", "base_url": srv.anthropic_base_url},
        }
        with pytest.raises(ModelNotServed) as err:
            check_served(models, environ=env)
        assert not srv.generation_calls()
    problems = err.value.problems
    assert set(problems) == {"flash", "gpt", "claude"}
    start = "answered HTTP 200 with body '<!DOCTYPE html><html><head><title>Sign in</title>"
    for name, what in (("flash", "a model list"), ("gpt", "a model"), ("claude", "a model")):
        text = problems[name]
        assert start in text, text
        assert f"which is not {what}; check models.{name}.base_url" in text, text
        excerpt = text.split("with body '", 1)[1].split("'", 1)[0]
        # Cut at 200 characters, in the marker the key's value was replaced by.
        assert len(excerpt) == 200 and excerpt[190] == "<" and "AIza" not in text, text


def test_an_error_status_without_an_error_message_is_named_by_its_body(monkeypatch):
    """A gateway's HTML error page: its status and the start of the page, not just "Error code: 502"."""
    _models_answer(monkeypatch, 502, "<html><head><title>502 Bad Gateway</title></head>\n<body>nginx</body></html>",
                   "text/html")
    with _server() as srv:
        models = {"gpt": {"backend": "openai", "model_id": "gpt-4o", "base_url": srv.base_url},
                  "claude": {"backend": "anthropic", "model_id": "claude-haiku-4-5",
                             "base_url": srv.anthropic_base_url}}
        with pytest.raises(ModelNotServed) as err:
            check_served(models, environ=ENV)
    for name in ("gpt", "claude"):
        assert ("the provider could not be asked: HTTP 502: body "
                "'<html><head><title>502 Bad Gateway</title></head> <body>nginx</body></html>'") in \
            err.value.problems[name], err.value.problems[name]


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
