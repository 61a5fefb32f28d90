"""Before a run pays for anything: is every hosted model it calls still served, and by
the model it names?

Providers retire model ids (a retired id answers HTTP 404, or is quietly routed to
another model), so a paper run can stop at its first hosted call, or worse, hours in,
after the local models were paid for, or run to the end on a model it never named.
``check_served`` asks each hosted provider about every model id a run's answering jobs
call, in two steps.

First, through its models endpoint, which costs nothing:

- OpenAI (``openai``): ``GET /models/{id}``; a 404 (``model_not_found``) is not served.
- Anthropic (``anthropic``): ``GET /v1/models/{id}``; a 404, or ``lifecycle: retired``,
  is not served; ``deprecated`` is a warning naming the retirement date; a model whose
  capabilities say it refuses ``thinking: disabled`` while its capability profile sends
  it is a problem too (every call would answer 400).
- OpenAI-compatible servers and Google's endpoint (``openai_compatible``): ``GET
  /models``; the id (or ``models/<id>``, as Google lists them) must be among those
  listed. A server without a models endpoint is a warning, not a stop.

A problem there stops the run before anything is paid. Then, since a listed id can be
answered by another model (Google lists deprecated ids it routes to a newer model), one
probe call per hosted model (:data:`PROBE_PROMPT`, at most :data:`PROBE_MAX_TOKENS` output
tokens, the reasoning effort or thinking type the model's capability profile sends)
reads the name of the model that answered, the reply's ``model`` field, and compares it
with the id expected to answer: ``models.<name>.served_id`` where the config sets one,
else the configured ``model_id``. The same model under a dated snapshot name of that id
(:data:`SNAPSHOT_SUFFIXES`: ``gpt-5-nano`` answered by ``gpt-5-nano-2025-08-07``,
``claude-haiku-4-5`` by ``claude-haiku-4-5-20251001``) is the model asked for; any other
name is a problem naming both ids. The probes are paid: their tokens and their cost at
the run's prices are reported (``report``), and they stay out of the run's ledgers.

An answer that is not a model (or, from ``GET /models``, not a model list; from a probe,
not a completion), such as a proxy's HTML login page sent with HTTP 200, is a problem
too, and so is an error status; each is named by its HTTP status and the start of its
body (``BODY_CHARS``, secrets redacted before it is cut), since that is what tells a
wrong ``base_url`` from an outage.

Every problem of a step is collected before anything is raised, so one
``ModelNotServed`` names each model, its config key, the id and the provider's answer.
Keys are read as the backends read them and never appear in a message.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from context_effects.llm.capabilities import HOSTED, profile
from context_effects.llm.pricing import CHARS_PER_TOKEN, effective_prices, estimate_cost
from context_effects.llm.secrets import ENV_VARS, redact

#: Seconds one question to a provider may take.
TIMEOUT_S = 30.0
#: How many characters of a provider's error message go into a problem.
ANSWER_CHARS = 300
#: How many characters of a body that is not what was asked for go into a problem.
BODY_CHARS = 200

#: What a probe asks: one short user turn, so the prompt costs a handful of tokens.
PROBE_PROMPT = "Reply with the word OK."
#: The output budget of a probe. Enough for a model that does not reason to say OK; a
#: reasoning model is cut off inside its reasoning, which costs no more: the reply's
#: ``model`` field is all the probe reads, and no probe is billed more output than this.
PROBE_MAX_TOKENS = 16
#: The parameter that carries a probe's output budget, as the backends send it
#: (``OpenAIBackend.default_max_tokens_param``: OpenAI's reasoning models refuse
#: ``max_tokens``; OpenAI-compatible servers often know only ``max_tokens``).
PROBE_BUDGET_PARAM = {"openai": "max_completion_tokens", "openai_compatible": "max_tokens"}
#: How providers name the snapshot behind an alias, appended to the alias: the same
#: model, not a routing. OpenAI ``-YYYY-MM-DD`` (``gpt-5-nano-2025-08-07``), Anthropic
#: ``-YYYYMMDD`` (``claude-haiku-4-5-20251001``), Google's stable versions ``-NNN``
#: (``gemini-2.0-flash-001``).
SNAPSHOT_SUFFIXES = (r"-\d{4}-\d{2}-\d{2}", r"-\d{8}", r"-\d{3}")

Scrub = Callable[[str], str]


class ModelNotServed(RuntimeError):
    """One or more configured model ids are not served by their provider, or are answered
    by another model. ``probes`` says what the probe calls cost when they were made
    (None: the run stopped before any was sent)."""

    def __init__(self, problems: Mapping[str, str], probes: str | None = None) -> None:
        self.problems = dict(problems)
        self.probes = probes
        head = ("Model(s) not served by their provider; nothing has been sent or paid:" if probes is None else
                f"Model(s) not served as configured; only the preflight's probe calls were sent ({probes}):")
        lines = [head, *(f"  {name}: {text}" for name, text in sorted(self.problems.items()))]
        lines.append(
            "Replace each id with one the provider serves (docs/deviations.yaml#hosted-stand-ins names the "
            "stand-ins of retired seed models); where another model answers, set model_id to the model you "
            "mean to run, or models.<name>.served_id to the id that answers if it is that model "
            "(docs/deviations.yaml#hosted-served-model); or set run.preflight: false to skip this check."
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


def _not(what: str, name: str, response: Any, scrub: Scrub, asked: str = "the provider's models endpoint") -> str:
    return (f"{asked} answered HTTP {response.status_code} with "
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


# ------------------------------------------------------------------ which model answers


def _bare(model_id: str) -> str:
    # Google names its models `models/<id>` in lists (and may in replies); the id is the rest.
    return model_id[len("models/"):] if model_id.startswith("models/") else model_id


def same_model(expected: str, served: str) -> bool:
    """Whether a reply's ``model`` names the model expected: the id itself, or a dated
    snapshot of it (:data:`SNAPSHOT_SUFFIXES`). Only that direction: an alias answering
    a requested snapshot, or another family or version, is another model."""
    want, got = _bare(expected), _bare(served)
    return got == want or any(re.fullmatch(re.escape(want) + suffix, got) for suffix in SNAPSHOT_SUFFIXES)


@dataclass(frozen=True)
class Probe:
    """What one probe call found and used: a problem or warning (each a sentence or None),
    the model its reply names, and the tokens billed (None where the reply gave no usage)."""

    problem: str | None = None
    warning: str | None = None
    served: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None


def _failed(exc: Exception, scrub: Scrub) -> Probe:
    # An error answer (HTTP 4xx/5xx) bills nothing; a call that timed out or lost its
    # connection may have run, so it counts at its bound (tokens unknown).
    billed = None if getattr(exc, "status_code", None) is None else 0
    return Probe(problem=f"the probe call was answered {_answer(exc, scrub)}", tokens_in=billed, tokens_out=billed)


def _usage_openai(body: Mapping[str, Any]) -> tuple[int | None, int | None]:
    usage = body.get("usage")
    if not isinstance(usage, Mapping) or not isinstance(usage.get("prompt_tokens"), int):
        return None, None
    tokens_in = int(usage["prompt_tokens"])
    out = usage.get("completion_tokens")
    total = usage.get("total_tokens")
    # Some OpenAI-compatible servers leave thinking tokens out of completion_tokens but
    # bill them; the total, less the prompt, holds them.
    candidates = [int(x) for x in (out, (total - tokens_in) if isinstance(total, int) else None) if isinstance(x, int)]
    return tokens_in, (max(candidates) if candidates else None)


def _usage_anthropic(body: Mapping[str, Any]) -> tuple[int | None, int | None]:
    usage = body.get("usage")
    if not isinstance(usage, Mapping) or not isinstance(usage.get("input_tokens"), int):
        return None, None
    out = usage.get("output_tokens")
    return int(usage["input_tokens"]), (int(out) if isinstance(out, int) else None)


def _probe_openai(cfg: Mapping[str, Any], key: str | None, timeout_s: float, scrub: Scrub, name: str) -> Probe:
    import openai

    client = openai.OpenAI(api_key=key or "EMPTY", base_url=cfg.get("base_url"), max_retries=1, timeout=timeout_s)
    effort = profile(cfg)["reasoning_effort"]
    extra = {"reasoning_effort": effort} if effort is not None else {}
    try:
        raw = client.chat.completions.with_raw_response.create(
            model=str(cfg["model_id"]), messages=[{"role": "user", "content": PROBE_PROMPT}],
            **{PROBE_BUDGET_PARAM[str(cfg["backend"])]: PROBE_MAX_TOKENS}, **extra)
    except openai.OpenAIError as exc:
        return _failed(exc, scrub)
    return _read_probe(raw.http_response, _usage_openai, "a chat completion", scrub, name)


def _probe_anthropic(cfg: Mapping[str, Any], key: str | None, timeout_s: float, scrub: Scrub, name: str) -> Probe:
    import anthropic

    client = anthropic.Anthropic(api_key=key, base_url=cfg.get("base_url"), max_retries=1, timeout=timeout_s)
    thinking = profile(cfg)["thinking"]
    extra = {"thinking": {"type": thinking}} if thinking is not None else {}
    try:
        raw = client.messages.with_raw_response.create(
            model=str(cfg["model_id"]), max_tokens=PROBE_MAX_TOKENS,
            messages=[{"role": "user", "content": PROBE_PROMPT}], **extra)
    except anthropic.AnthropicError as exc:
        return _failed(exc, scrub)
    return _read_probe(raw.http_response, _usage_anthropic, "a message", scrub, name)


def _read_probe(response: Any, usage: Callable[[Mapping[str, Any]], tuple[int | None, int | None]], what: str,
                scrub: Scrub, name: str) -> Probe:
    body = _json(response)
    if not isinstance(body, Mapping):
        return Probe(problem=_not(what, name, response, scrub, asked="the probe call"))
    tokens_in, tokens_out = usage(body)
    served = body.get("model")
    if not isinstance(served, str) or not served.strip():
        return Probe(warning="cannot check which model answers: the probe's reply names no model",
                     tokens_in=tokens_in, tokens_out=tokens_out)
    return Probe(served=served, tokens_in=tokens_in, tokens_out=tokens_out)


def probe_model(name: str, cfg: Mapping[str, Any], environ: Mapping[str, str] = os.environ,
                timeout_s: float = TIMEOUT_S) -> Probe:
    """One probe call to a hosted model (module docstring); its problem says which id was
    asked for, which answered and how to go on."""
    key = _key(cfg, environ)

    def scrub(text: str) -> str:
        return _scrub(text, key, environ)

    call = _probe_anthropic if cfg["backend"] == "anthropic" else _probe_openai
    found = call(cfg, key, timeout_s, scrub, name)
    where = _where(name, cfg)
    problem, warning = found.problem, found.warning
    expected = str(cfg.get("served_id") or cfg["model_id"])
    if found.served is not None and not same_model(expected, found.served):
        said = (f"requested {cfg['model_id']!r}, expected to be answered by {expected!r} "
                f"(models.{name}.served_id)" if cfg.get("served_id") else f"requested {expected!r}")
        problem = (f"{said}, but {found.served!r} answered (the provider routes this id to another model); set "
                   f"models.{name}.model_id to the model you mean to run, or, if {found.served!r} is that "
                   f"model, models.{name}.served_id: {found.served}")
    return Probe(problem=scrub(f"{where}: {problem}") if problem else None,
                 warning=scrub(f"{name} ({where}): {warning}") if warning else None,
                 served=found.served, tokens_in=found.tokens_in, tokens_out=found.tokens_out)


def probe_cost(models: Mapping[str, Mapping[str, Any]], probes: Mapping[str, Probe]) -> str:
    """One line: how many probe calls were sent, their tokens and what they cost at the
    run's prices (the config's ``price``, else ``costs.yaml``). A reply without usage
    counts at its bound (the prompt's characters / 4, :data:`PROBE_MAX_TOKENS`); an
    unpriced model's share is unknown, never 0."""
    bound_in = math.ceil(len(PROBE_PROMPT) / CHARS_PER_TOKEN)
    tokens_in = tokens_out = 0
    usd, unpriced = 0.0, []
    for name, p in sorted(probes.items()):
        t_in = p.tokens_in if p.tokens_in is not None else bound_in
        t_out = p.tokens_out if p.tokens_out is not None else PROBE_MAX_TOKENS
        tokens_in, tokens_out = tokens_in + t_in, tokens_out + t_out
        cost = estimate_cost(str(models[name]["model_id"]), t_in, t_out, effective_prices(models[name]))
        if cost is None:
            unpriced.append(name)
        else:
            usd += cost
    money = f"USD {usd:.6f}" + (f" + unknown (unpriced: {', '.join(unpriced)})" if unpriced else "")
    return (f"{len(probes)} probe call(s), one per hosted model, at most {PROBE_MAX_TOKENS} output tokens each: "
            f"{tokens_in} prompt and {tokens_out} output tokens, {money}")


def _scrub(text: str, key: str | None, environ: Mapping[str, str]) -> str:
    # An SDK may echo part of a key in its error; the one in use is removed whatever its variable.
    text = redact(text, environ) or ""
    return text.replace(key, "<key>") if key and len(key) >= 8 else text


def check_served(models: Mapping[str, Mapping[str, Any]], environ: Mapping[str, str] = os.environ,
                 timeout_s: float = TIMEOUT_S, probe: bool = True,
                 report: Callable[[str], None] | None = None) -> list[str]:
    """Ask each hosted model's provider whether it serves the configured id, then (with
    ``probe``) which model answers it (module docstring); raise ``ModelNotServed`` naming
    every one that is not served as configured, else return the warnings (deprecated
    models, servers that cannot be asked, replies that name no model). ``report`` is
    given the line saying what the probes cost, whether or not the run goes on."""
    hosted = {name: cfg for name, cfg in models.items() if cfg.get("backend") in HOSTED}
    if not hosted:
        return []
    with ThreadPoolExecutor(max_workers=min(8, len(hosted))) as pool:
        answers = dict(zip(hosted, pool.map(lambda n: check_model(n, hosted[n], environ, timeout_s), hosted)))
        problems = {name: problem for name, (problem, _) in answers.items() if problem}
        if problems:
            # Nothing paid yet: no probe is sent to a run that cannot start anyway.
            raise ModelNotServed(problems)
        warnings = [warning for _, warning in answers.values() if warning]
        if not probe:
            return warnings
        probes = dict(zip(hosted, pool.map(lambda n: probe_model(n, hosted[n], environ, timeout_s), hosted)))
    cost = probe_cost(hosted, probes)
    if report is not None:
        report(cost)
    problems = {name: p.problem for name, p in probes.items() if p.problem}
    if problems:
        raise ModelNotServed(problems, probes=cost)
    return warnings + [p.warning for p in probes.values() if p.warning]
