"""Before a run pays for anything: is every hosted model it calls still served?

Providers retire model ids (a retired id answers HTTP 404, or is quietly routed to
another model), so a paper run can stop at its first hosted call, or worse, hours in,
after the local models were paid for. ``check_served`` asks each hosted provider about
every model id a run's answering jobs call, through its models endpoint, which costs
nothing:

- OpenAI (``openai``): ``GET /models/{id}``; a 404 (``model_not_found``) is not served.
- Anthropic (``anthropic``): ``GET /v1/models/{id}``; a 404, or ``lifecycle: retired``,
  is not served; ``deprecated`` is a warning naming the retirement date; a model whose
  capabilities say it refuses ``thinking: disabled`` while its capability profile sends
  it is a problem too (every call would answer 400).
- OpenAI-compatible servers and Google's endpoint (``openai_compatible``): ``GET
  /models``; the id (or ``models/<id>``, as Google lists them) must be among those
  listed. A server without a models endpoint is a warning, not a stop.

An answer that is not a model (or, from ``GET /models``, not a model list), such as a
proxy's HTML login page sent with HTTP 200, is a problem too, and so is an error status;
each is named by its HTTP status and the start of its body (``BODY_CHARS``, secrets
redacted before it is cut), since that is what tells a wrong ``base_url`` from an outage.

Every problem is collected before anything is raised, so one ``ModelNotServed`` names
each model, its config key, the id and the provider's answer. Keys are read as the
backends read them and never appear in a message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from context_effects.llm.capabilities import HOSTED, profile
from context_effects.llm.secrets import ENV_VARS, redact

#: Seconds one question to a provider may take.
TIMEOUT_S = 30.0
#: How many characters of a provider's error message go into a problem.
ANSWER_CHARS = 300
#: How many characters of a body that is not what was asked for go into a problem.
BODY_CHARS = 200

Scrub = Callable[[str], str]


class ModelNotServed(RuntimeError):
    """One or more configured model ids are not served by their provider."""

    def __init__(self, problems: Mapping[str, str]) -> None:
        self.problems = dict(problems)
        lines = ["Model(s) not served by their provider; nothing has been sent or paid:"]
        lines += [f"  {name}: {text}" for name, text in sorted(self.problems.items())]
        lines.append(
            "Replace each id with one the provider serves (docs/deviations.yaml#hosted-stand-ins names the "
            "stand-ins of retired seed models), or set run.preflight: false to skip this check."
        )
        super().__init__("\n".join(lines))


def _key(cfg: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
    var = cfg.get("api_key_env") or ENV_VARS.get(str(cfg["backend"]))
    if not var:
        return None
    return (environ.get(var) or "").strip() or None


def _where(name: str, cfg: Mapping[str, Any]) -> str:
    url = cfg.get("base_url")
    return f"models.{name}.model_id = {cfg['model_id']!r} ({cfg['backend']}{f' at {url}' if url else ''})"


def _body(text: str, scrub: Scrub) -> str:
    """The start of a body, on one line: redacted first, so that no cut can keep part of a key."""
    flat = " ".join(scrub(text).split())
    if not flat:
        return "an empty body"
    more = f"... ({len(flat)} characters)" if len(flat) > BODY_CHARS else ""
    return f"body {flat[:BODY_CHARS]!r}{more}"


def _answer(exc: Exception, scrub: Scrub) -> str:
    """What the provider said, as the SDK reports it: status, error code, message; the start
    of the body when it holds no error message (an HTML error page, plain text)."""
    status = getattr(exc, "status_code", None)
    body = getattr(exc, "body", None)
    err = body.get("error", body) if isinstance(body, Mapping) else None
    code = (err.get("code") or err.get("type")) if isinstance(err, Mapping) else None
    message = err.get("message") if isinstance(err, Mapping) else None
    response = getattr(exc, "response", None)
    head = " ".join(str(x) for x in (f"HTTP {status}" if status else "no answer", code) if x)
    if not message and status and response is not None:
        return f"{head}: {_body(response.text, scrub)}"
    return f"{head}: {scrub(str(message or exc))[:ANSWER_CHARS]}"


def _json(response: Any) -> Any:
    try:
        return response.json()
    except ValueError:  # not JSON (an HTML page), or not text at all
        return None


def _model_ids(response: Any) -> set[str] | None:
    """The ids a models list (``{"data": [{"id": ...}, ...]}``) holds; None when the body is none."""
    body = _json(response)
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list) or not all(isinstance(m, Mapping) and isinstance(m.get("id"), str) for m in data):
        return None
    return {m["id"] for m in data}


def _is_model(response: Any) -> bool:
    body = _json(response)
    return isinstance(body, Mapping) and isinstance(body.get("id"), str)


def _not(what: str, name: str, response: Any, scrub: Scrub) -> str:
    return (f"the provider's models endpoint answered HTTP {response.status_code} with "
            f"{_body(response.text, scrub)}, which is not {what}; check models.{name}.base_url")


def _openai(name: str, cfg: Mapping[str, Any], key: str | None, timeout_s: float,
            scrub: Scrub) -> tuple[str | None, str | None]:
    import openai

    compatible = cfg["backend"] == "openai_compatible"
    client = openai.OpenAI(api_key=key or "EMPTY", base_url=cfg.get("base_url"), max_retries=1, timeout=timeout_s)
    model_id = str(cfg["model_id"])
    try:
        # Raw: the SDK builds a model out of any body (an HTML page included) without a word.
        if not compatible:
            raw = client.models.with_raw_response.retrieve(model_id)
            if not _is_model(raw.http_response):
                return _not("a model", name, raw.http_response, scrub), None
            return None, None
        raw = client.models.with_raw_response.list()
    except openai.NotFoundError as exc:
        if compatible:
            return None, f"cannot check: the server has no models endpoint ({_answer(exc, scrub)})"
        return f"the provider answered {_answer(exc, scrub)}", None
    except openai.OpenAIError as exc:
        return f"the provider could not be asked: {_answer(exc, scrub)}", None
    listed = _model_ids(raw.http_response)
    if listed is None:
        return _not("a model list", name, raw.http_response, scrub), None
    if model_id in listed or f"models/{model_id}" in listed:
        return None, None
    return f"the provider's models endpoint does not list it ({len(listed)} models listed)", None


def _anthropic(name: str, cfg: Mapping[str, Any], key: str | None, timeout_s: float,
               scrub: Scrub) -> tuple[str | None, str | None]:
    import anthropic

    client = anthropic.Anthropic(api_key=key, base_url=cfg.get("base_url"), max_retries=1, timeout=timeout_s)
    try:
        raw = client.models.with_raw_response.retrieve(str(cfg["model_id"]))
    except anthropic.NotFoundError as exc:
        return f"the provider answered {_answer(exc, scrub)}", None
    except anthropic.AnthropicError as exc:
        return f"the provider could not be asked: {_answer(exc, scrub)}", None
    if not _is_model(raw.http_response):
        return _not("a model", name, raw.http_response, scrub), None
    info = raw.parse()
    lifecycle = getattr(info, "lifecycle", None)
    retires = getattr(info, "retires_at", None)
    if lifecycle == "retired":
        return "the provider lists it as retired (lifecycle: retired)", None
    thinking = profile(cfg)["thinking"]
    types = getattr(getattr(getattr(info, "capabilities", None), "thinking", None), "types", None)
    accepts = getattr(getattr(types, thinking, None), "supported", None) if thinking else None
    if accepts is False:
        return (f"its capabilities say it refuses thinking type {thinking!r}, which its capability profile "
                f"sends; set models.{name}.capabilities.thinking (and min_output_tokens)"), None
    if lifecycle == "deprecated":
        return None, f"deprecated by the provider{f', retires {retires:%Y-%m-%d}' if retires else ''}"
    return None, None


def check_model(name: str, cfg: Mapping[str, Any], environ: Mapping[str, str] = os.environ,
                timeout_s: float = TIMEOUT_S) -> tuple[str | None, str | None]:
    """``(problem, warning)`` for one model: each None, or a sentence saying what the provider answered."""
    key = _key(cfg, environ)

    def scrub(text: str) -> str:
        return _scrub(text, key, environ)

    if cfg["backend"] == "anthropic":
        problem, warning = _anthropic(name, cfg, key, timeout_s, scrub)
    else:
        problem, warning = _openai(name, cfg, key, timeout_s, scrub)
    where = _where(name, cfg)
    return (scrub(f"{where}: {problem}") if problem else None,
            scrub(f"{name} ({where}): {warning}") if warning else None)


def _scrub(text: str, key: str | None, environ: Mapping[str, str]) -> str:
    # An SDK may echo part of a key in its error; the one in use is removed whatever its variable.
    text = redact(text, environ) or ""
    return text.replace(key, "<key>") if key and len(key) >= 8 else text


def check_served(models: Mapping[str, Mapping[str, Any]], environ: Mapping[str, str] = os.environ,
                 timeout_s: float = TIMEOUT_S) -> list[str]:
    """Ask each hosted model's provider whether it serves the configured id (module
    docstring); raise ``ModelNotServed`` naming every one that is not, else return the
    warnings (deprecated models, servers that cannot be asked)."""
    hosted = {name: cfg for name, cfg in models.items() if cfg.get("backend") in HOSTED}
    if not hosted:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(hosted))) as pool:
        answers = dict(zip(hosted, pool.map(lambda n: check_model(n, hosted[n], environ, timeout_s), hosted)))
    problems = {name: problem for name, (problem, _) in answers.items() if problem}
    if problems:
        raise ModelNotServed(problems)
    return [warning for _, warning in answers.values() if warning]
