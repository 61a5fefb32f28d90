"""A real local HTTP server speaking just enough of the OpenAI and Anthropic APIs.

The backends are tested through the official SDKs over real sockets, so what is
exercised is what runs in production: the SDK's request building, its error
mapping, httpx's handling of timeouts and truncated bodies, and our retry layer
on top. Nothing is mocked inside the process under test.

Usage::

    with ProviderServer(faults={0: Fault("429", retry_after="1")}) as srv:
        backend = OpenAIBackend(base_url=srv.base_url, ...)
        ...
        srv.calls("POST", "/v1/chat/completions")

Endpoints: OpenAI ``/v1/chat/completions``, ``/v1/completions``, ``/v1/files``
(multipart upload), ``/v1/files/{id}/content``, ``/v1/batches``,
``/v1/batches/{id}``; Anthropic ``/v1/messages``, ``/v1/messages/batches``,
``/v1/messages/batches/{id}``, ``/v1/messages/batches/{id}/results``; both
providers' ``/v1/models`` and ``/v1/models/{id}`` (Anthropic's when the request
carries an ``anthropic-version`` header). With ``served_models`` set, an id outside
it is answered as the real APIs answer a retired or unknown model: HTTP 404,
``model_not_found`` (OpenAI) or ``not_found_error`` (Anthropic); Anthropic's model
objects carry ``lifecycle`` (``retired_models``, ``deprecated_models``) and whether
``thinking: disabled`` is accepted (``thinking_always_on``).

Faults are injected on the n-th request (0-based, in arrival order) to any path
in ``fault_paths`` (default: the three generation endpoints), or on every such
request with ``always=``.

Replies that carry no answer are sent the way the real APIs send them (see
:class:`Reply`): a refusal (OpenAI ``message.refusal`` with ``content: null``, or
``finish_reason: "content_filter"``; Anthropic ``stop_reason: "refusal"``) and an
empty reply (OpenAI ``content: ""``; Anthropic an empty ``content`` list).

``reasoning_models`` answer like the GPT-5 family: reasoning tokens (``reasoning_tokens``,
a number or a function of the prompt) are spent first and count against
``max_completion_tokens``, so a budget below them buys an empty reply with
``finish_reason: "length"``, billed in full, as the real API sends it; they refuse
``reasoning_effort: "none"``. ``hybrid_models`` answer like GPT-5.1 and later: reasoning
effort ``none`` (their default) spends no reasoning tokens and takes temperature,
top_p and logprobs; any other effort makes them a reasoning model.

``routed_models`` maps a requested model id to the id its replies are sent under: a
provider that routes a retired alias to another model (Google's deprecated ids answered
by a newer Flash), or an alias answered by a dated snapshot (``gpt-5-nano`` ->
``gpt-5-nano-2025-08-07``), as the ``model`` field of every reply names it.

``hold_after=n`` answers the first ``n`` generation requests and holds every later
one unanswered until :meth:`ProviderServer.release_held`, which drops them without
a reply: a provider that never got to generate them, as when the client is killed
while they wait. :meth:`ProviderServer.answered_calls` counts only the answered ones.
"""

from __future__ import annotations

import hashlib
import json
import math
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email.parser import BytesParser
from email.policy import default as email_policy
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from collections.abc import Callable
from typing import Any

GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/messages")
FAULT_KINDS = ("429", "400", "500", "503", "delay", "truncate", "malformed")


@dataclass(frozen=True)
class Fault:
    kind: str
    # Sent verbatim as the Retry-After header (delta-seconds or an HTTP date).
    retry_after: str | None = None
    # For "delay": how long the server sits on the request before answering.
    delay_s: float = 3.0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; one of {FAULT_KINDS}")


@dataclass
class LoggedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    t_mono: float
    t_wall: float
    index: int | None = None  # position among fault-path requests
    status: int | None = None
    fault: str | None = None
    t_done: float | None = None
    # Held by ``hold_after`` and dropped unanswered.
    held: bool = False
    # The body never fully arrived (its client died while sending).
    partial: bool = False
    # The token usage of the reply generated for it (whether or not the reply carried it).
    usage: dict | None = None


# ---------------------------------------------------------------------------
# Deterministic replies
# ---------------------------------------------------------------------------


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8")).hexdigest(), 16)


def yes_probability(prompt: str) -> float:
    """P("Yes") at position 0 for a yes/no prompt (0.55 .. 0.94), for tests to check against."""
    return 0.55 + (_h(prompt) % 40) / 100


def rating_for(prompt: str) -> int:
    return _h(prompt) % 5 + 1


@dataclass
class Reply:
    tokens: list[str]
    # Alternatives at position 0, best first: (token, probability).
    first_alternatives: list[tuple[str, float]] = field(default_factory=list)
    # A refusal: OpenAI chat sends it in ``message.refusal`` with ``content: null``
    # (finish_reason "stop"); Anthropic ends the message with stop_reason "refusal".
    # ``tokens`` is whatever partial text came before it (usually none).
    refusal: str | None = None
    # OpenAI's moderation cut the reply: finish_reason "content_filter", content
    # null when nothing was generated (Anthropic has no such reason: sent as a refusal).
    content_filter: bool = False

    @property
    def text(self) -> str:
        return "".join(self.tokens)


def default_reply(prompt: str) -> Reply:
    """Yes/No with known probabilities if asked for Yes or No, else a rating JSON."""
    if "Yes or No" in prompt:
        p_yes = yes_probability(prompt)
        alts = [("Yes", p_yes), ("No", 1 - p_yes - 0.015), ("Maybe", 0.01), ("yes", 0.005)]
        return Reply(["Yes"], alts)
    r = rating_for(prompt)
    return Reply(["{", '"rating"', ": ", str(r), "}"], [("{", 0.97), ("```", 0.02), ("Rating", 0.01)])


def refusal_reply(message: str = "I'm sorry, I can't help with that.") -> Reply:
    return Reply([], refusal=message)


def content_filter_reply() -> Reply:
    return Reply([], content_filter=True)


def empty_reply() -> Reply:
    """No text at all: OpenAI ``content: ""`` (finish_reason "stop"), Anthropic ``content: []`` (end_turn)."""
    return Reply([])


def _prompt_of_chat(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # Anthropic content blocks
                return "".join(b.get("text", "") for b in content if isinstance(b, dict))
            return str(content)
    return ""


def _word_count(messages: list[dict[str, Any]] | str) -> int:
    if isinstance(messages, str):
        return len(messages.split())
    return sum(len(str(m.get("content", "")).split()) for m in messages)


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------


class ProviderServer:
    def __init__(
        self,
        *,
        openai_key: str = "sk-test-fake",
        anthropic_key: str = "sk-ant-test-fake",
        faults: dict[int, Fault | str] | None = None,
        always: Fault | str | None = None,
        fault_paths: tuple[str, ...] = GENERATION_PATHS,
        batch_in_progress_polls: int = 2,
        reply=default_reply,
        # Small artificial latency on generation calls, so concurrent requests overlap.
        latency_s: float = 0.0,
        hold_after: int | None = None,
        # OpenAI chat models that behave like the GPT-5 family (see _reasoning_rejection).
        reasoning_models: tuple[str, ...] = (),
        # Reasoning tokens per reply: a number, or a function of the prompt.
        reasoning_tokens: int | Callable[[str], int] = 200,
        # OpenAI chat models that behave like GPT-5.1 and later (see _effort).
        hybrid_models: tuple[str, ...] = (),
        # Model ids the models endpoints know; None = every id is served.
        served_models: tuple[str, ...] | None = None,
        # Anthropic lifecycle of served ids: retired ids stay listed; deprecated ids -> retirement date.
        retired_models: tuple[str, ...] = (),
        deprecated_models: dict[str, str] | None = None,
        # Anthropic ids whose model object says `thinking: disabled` is refused.
        thinking_always_on: tuple[str, ...] = (),
        # Requested model id -> the id its replies name in `model` (routing, snapshots).
        routed_models: dict[str, str] | None = None,
        # False: replies carry no token usage (as some OpenAI-compatible servers answer);
        # the calls are billed all the same (``usage_log``).
        report_usage: bool = True,
    ) -> None:
        self.openai_key = openai_key
        self.anthropic_key = anthropic_key
        self.faults = {i: (f if isinstance(f, Fault) else Fault(f)) for i, f in (faults or {}).items()}
        self.always = Fault(always) if isinstance(always, str) else always
        self.fault_paths = fault_paths
        self.batch_in_progress_polls = batch_in_progress_polls
        self.reply = reply
        self.latency_s = latency_s
        # Answer this many generation requests, then hold the rest (see the module docstring).
        self.hold_after = hold_after
        self.reasoning_models = tuple(reasoning_models)
        self.reasoning_tokens = reasoning_tokens
        self.hybrid_models = tuple(hybrid_models)
        self.served_models = None if served_models is None else tuple(served_models)
        self.retired_models = tuple(retired_models)
        self.deprecated_models = dict(deprecated_models or {})
        self.thinking_always_on = tuple(thinking_always_on)
        self.routed_models = dict(routed_models or {})
        self.report_usage = report_usage
        #: The usage of every generation answered, whether or not the reply carried it: the bill.
        self.usage_log: list[dict[str, Any]] = []
        self._admitted = 0
        self._release = threading.Event()
        # custom_ids the batch endpoints answer with an error / leave expired.
        self.batch_error_ids: set[str] = set()
        self.batch_expired_ids: set[str] = set()

        self.log: list[LoggedRequest] = []
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.msg_batches: dict[str, dict[str, Any]] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self._fault_index = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> "ProviderServer":
        handler = type("Handler", (_Handler,), {"provider": self})
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._release.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "ProviderServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def root_url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def base_url(self) -> str:
        """OpenAI SDK base_url (with /v1)."""
        return self.root_url + "/v1"

    @property
    def anthropic_base_url(self) -> str:
        """Anthropic SDK base_url (the SDK adds /v1 itself)."""
        return self.root_url

    # -- inspection ------------------------------------------------------------

    def calls(self, method: str | None = None, path: str | None = None) -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.log if (method is None or r.method == method) and (path is None or r.path == path)]

    def generation_calls(self) -> list[LoggedRequest]:
        with self._lock:
            return [r for r in self.log if r.method == "POST" and r.path in GENERATION_PATHS and not r.partial]

    def answered_calls(self) -> list[LoggedRequest]:
        """Generation requests the server answered with a reply (200), i.e. generated and sent."""
        return [r for r in self.generation_calls() if r.status == 200 and r.fault is None]

    def held_calls(self) -> list[LoggedRequest]:
        return [r for r in self.generation_calls() if r.held]

    def release_held(self) -> None:
        """Drop every held request without an answer (their client is gone)."""
        self._release.set()

    # -- internals used by the handler -----------------------------------------

    def _next_fault(self, path: str) -> tuple[int | None, Fault | None]:
        if path not in self.fault_paths:
            return None, None
        with self._lock:
            index = self._fault_index
            self._fault_index += 1
        return index, self.faults.get(index, self.always)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client killed mid-request (the kill tests) resets its connections: not a server bug.
        if isinstance(sys.exc_info()[1], (ConnectionError, socket.timeout)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    provider: ProviderServer
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDKs' pooled connections expect

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr
        pass

    # -- I/O helpers -----------------------------------------------------------

    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(
        self, status: int, body: bytes, content_type: str = "application/json", headers: dict[str, str] | None = None
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()
        self._entry.status = status

    def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode("utf-8"), headers=headers)

    def _error(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> None:
        if self._is_anthropic:
            self._json(status, {"type": "error", "error": {"type": kind, "message": message}}, headers)
        else:
            self._json(status, {"error": {"message": message, "type": kind, "param": None, "code": kind}}, headers)

    # -- dispatch --------------------------------------------------------------

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def _handle(self, method: str) -> None:
        p = self.provider
        path = self.path.split("?", 1)[0]
        raw = self._read_body()
        body: Any = raw
        content_type = self.headers.get("Content-Type", "")
        if raw and "json" in content_type:
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode("utf-8", "replace")
        elif raw and content_type.startswith("multipart/form-data"):
            body = _parse_multipart(content_type, raw)
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in ("authorization", "x-api-key")}
        self._entry = LoggedRequest(method, path, headers, body, time.monotonic(), time.time())
        with p._lock:
            p.log.append(self._entry)
        self._is_anthropic = path.startswith("/v1/messages") or (
            path.startswith("/v1/models") and bool(self.headers.get("anthropic-version"))
        )
        try:
            if not self._authorised():
                return
            if method == "POST" and path in GENERATION_PATHS and not isinstance(body, dict):
                # A body cut short (its client was killed while sending) is not JSON;
                # not counted as a generation call: nothing could be generated.
                self._entry.partial = True
                return self._error(400, "invalid_request_error", "could not parse the JSON body")
            index, fault = p._next_fault(path)
            self._entry.index = index
            if fault is not None:
                self._entry.fault = fault.kind
                if self._inject(fault):
                    return
            self._route(method, path, body)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, socket.timeout):
            self.close_connection = True
        finally:
            self._entry.t_done = time.monotonic()

    def _authorised(self) -> bool:
        p = self.provider
        if self._is_anthropic:
            # anthropic 2.x sends the key as a Bearer token; older clients and curl use x-api-key.
            if (
                self.headers.get("x-api-key") != p.anthropic_key
                and self.headers.get("Authorization") != f"Bearer {p.anthropic_key}"
            ):
                self._error(401, "authentication_error", "invalid x-api-key")
                return False
            if not self.headers.get("anthropic-version"):
                self._error(400, "invalid_request_error", "anthropic-version header is required")
                return False
            return True
        if self.headers.get("Authorization") != f"Bearer {p.openai_key}":
            # The real API echoes a masked key; this one echoes nothing.
            self._error(401, "invalid_api_key", "Incorrect API key provided.")
            return False
        return True

    def _inject(self, fault: Fault) -> bool:
        """Apply a fault; True if the response is finished (no normal reply)."""
        retry = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
        if fault.kind == "429":
            self._error(
                429, "rate_limit_error" if self._is_anthropic else "rate_limit_exceeded", "Rate limit reached.", retry
            )
        elif fault.kind == "400":
            self._error(400, "invalid_request_error", "Invalid value for 'messages'.")
        elif fault.kind == "500":
            self._error(500, "api_error", "The server had an error while processing your request.")
        elif fault.kind == "503":
            self._error(
                503,
                "overloaded_error" if self._is_anthropic else "server_error",
                "The engine is currently overloaded.",
                retry,
            )
        elif fault.kind == "truncate":
            full = b'{"id": "x", "object": "chat.completion", "choices": [], "padding": "' + b"x" * 200 + b'"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(full) + 500))
            self.end_headers()
            self.wfile.write(full[: len(full) // 2])
            self.wfile.flush()
            self._entry.status = 200
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        elif fault.kind == "malformed":
            self._send(200, b'{"id": "chatcmpl-broken", "choices": [{"index": 0, "message": ')
        elif fault.kind == "delay":
            # Sit on the request past the client's timeout, then answer normally to
            # whoever is still listening (nobody, if the client gave up as it should).
            self.provider._stop.wait(fault.delay_s)
            return False
        return True

    def _route(self, method: str, path: str, body: Any) -> None:
        parts = [s for s in path.split("/") if s]
        if method == "POST" and path == "/v1/chat/completions":
            rejection = _reasoning_rejection(self.provider, body)
            if rejection is not None:
                return self._json(400, rejection)
            return self._generate(lambda: _chat_completion(self.provider, body))
        if method == "POST" and path == "/v1/completions":
            return self._generate(lambda: _text_completion(self.provider, body))
        if method == "POST" and path == "/v1/messages":
            return self._generate(lambda: _anthropic_message(self.provider, body))
        if method == "GET" and parts[:2] == ["v1", "models"] and len(parts) in (2, 3):
            return self._models(parts[2] if len(parts) == 3 else None)
        if method == "POST" and path == "/v1/files":
            return self._json(200, _store_file(self.provider, body))
        if method == "GET" and len(parts) == 4 and parts[:2] == ["v1", "files"] and parts[3] == "content":
            f = self.provider.files.get(parts[2])
            if f is None:
                return self._error(404, "not_found", f"No such file {parts[2]}")
            return self._send(200, f["content"], content_type="application/octet-stream")
        if method == "POST" and path == "/v1/batches":
            return self._json(200, _create_batch(self.provider, body))
        if method == "GET" and len(parts) == 3 and parts[:2] == ["v1", "batches"]:
            batch = _poll_batch(self.provider, parts[2])
            return self._json(200, batch) if batch else self._error(404, "not_found", "No such batch")
        if method == "POST" and path == "/v1/messages/batches":
            return self._json(200, _create_msg_batch(self.provider, body))
        if method == "GET" and len(parts) == 4 and parts[:3] == ["v1", "messages", "batches"]:
            batch = _poll_msg_batch(self.provider, parts[3])
            return self._json(200, batch) if batch else self._error(404, "not_found_error", "No such batch")
        if method == "GET" and len(parts) == 5 and parts[:3] == ["v1", "messages", "batches"] and parts[4] == "results":
            lines = _msg_batch_results(self.provider, parts[3])
            if lines is None:
                return self._error(404, "not_found_error", "No results (yet)")
            return self._send(200, lines, content_type="application/x-jsonl")
        return self._error(404, "not_found", f"Unknown route {method} {path}")

    def _models(self, model_id: str | None) -> None:
        p = self.provider
        known = list(p.served_models) if p.served_models is not None else []
        if model_id is None:
            objs = [_model_object(p, m, self._is_anthropic) for m in known]
            if self._is_anthropic:
                return self._json(200, {"data": objs, "has_more": False,
                                        "first_id": known[0] if known else None, "last_id": known[-1] if known else None})
            return self._json(200, {"object": "list", "data": objs})
        if p.served_models is not None and model_id not in p.served_models:
            if self._is_anthropic:
                return self._error(404, "not_found_error", f"model: {model_id}")
            return self._json(404, {"error": {
                "message": f"The model `{model_id}` does not exist or you do not have access to it.",
                "type": "invalid_request_error", "param": None, "code": "model_not_found"}})
        return self._json(200, _model_object(p, model_id, self._is_anthropic))

    def _generate(self, make: Any) -> None:
        p = self.provider
        with p._lock:
            hold = p.hold_after is not None and p._admitted >= p.hold_after
            if not hold:
                p._admitted += 1
        if hold:
            self._entry.held = True
            p._release.wait()
            self.close_connection = True
            return
        with p._lock:
            p.in_flight += 1
            p.max_in_flight = max(p.max_in_flight, p.in_flight)
        try:
            if p.latency_s:
                p._stop.wait(p.latency_s)
            reply = make()
            usage = dict(reply.get("usage") or {})
            with p._lock:
                p.usage_log.append(usage)
                self._entry.usage = dict(usage)  # its own copy: a test may change either
            if not p.report_usage:
                reply.pop("usage", None)
            self._json(200, reply)
        finally:
            with p._lock:
                p.in_flight -= 1


def _parse_multipart(content_type: str, raw: bytes) -> dict[str, Any]:
    message = BytesParser(policy=email_policy).parsebytes(b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
    fields: dict[str, Any] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True) or b""
        filename = part.get_filename()
        fields[name] = {"filename": filename, "content": payload} if filename else payload.decode("utf-8")
    return fields


# ---------------------------------------------------------------------------
# Response bodies
# ---------------------------------------------------------------------------


def _truncate(reply: Reply, max_tokens: int | None) -> tuple[list[str], str]:
    if max_tokens is not None and len(reply.tokens) > max_tokens:
        return reply.tokens[:max_tokens], "length"
    return reply.tokens, "stop"


def _invalid(message: str, param: str, code: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


def _support(state: bool) -> dict[str, bool]:
    return {"supported": state}


def _model_object(p: ProviderServer, model_id: str, anthropic: bool) -> dict[str, Any]:
    """A model as the models endpoints describe it (Anthropic's with lifecycle and capabilities)."""
    if not anthropic:
        return {"id": model_id, "object": "model", "created": 1767225600, "owned_by": "system"}
    lifecycle = ("retired" if model_id in p.retired_models
                 else "deprecated" if model_id in p.deprecated_models else "active")
    no = _support(False)
    thinking_off = model_id not in p.thinking_always_on
    return {
        "id": model_id, "type": "model", "display_name": model_id, "created_at": "2026-01-01T00:00:00Z",
        "lifecycle": lifecycle,
        "deprecated_at": None if lifecycle == "active" else "2026-06-01T00:00:00Z",
        "retires_at": p.deprecated_models.get(model_id),
        "max_input_tokens": 200000, "max_tokens": 64000, "line": None,
        "capabilities": {
            "batch": _support(True), "citations": no, "code_execution": no,
            "context_management": {"supported": False, "clear_thinking_20251015": None,
                                   "clear_tool_uses_20250919": None, "compact_20260112": None},
            "effort": {"supported": False, "low": no, "medium": no, "high": no, "max": no, "xhigh": None},
            "image_input": no, "pdf_input": no,
            "server_tools": {"supported": False, "code_execution": no, "web_fetch": no, "web_search": no},
            "structured_outputs": _support(True),
            "thinking": {"supported": True, "types": {
                "adaptive": _support(True), "between_tools": no, "disabled": _support(thinking_off),
                "enabled": _support(thinking_off)}},
        },
    }


def _effort(p: ProviderServer, body: dict[str, Any]) -> str | None:
    """The reasoning effort a request runs at: a hybrid model's default is none."""
    if body.get("model") in p.hybrid_models:
        return body.get("reasoning_effort") or "none"
    return body.get("reasoning_effort")


def _reasons(p: ProviderServer, body: dict[str, Any]) -> bool:
    model = body.get("model")
    return model in p.reasoning_models or (model in p.hybrid_models and _effort(p, body) != "none")


def _reasoning_rejection(p: ProviderServer, body: dict[str, Any]) -> dict[str, Any] | None:
    """The HTTP 400 body the OpenAI API sends a GPT-5-family model for a setting it rejects
    (wording as the real API words it), or None when the request is acceptable."""
    model = body.get("model")
    if model not in p.reasoning_models and model not in p.hybrid_models:
        if "reasoning_effort" in body:
            return _invalid("Unrecognized request argument supplied: reasoning_effort", "reasoning_effort",
                            "unsupported_parameter")
        return None
    if model in p.reasoning_models and body.get("reasoning_effort") == "none":
        return _invalid(f"Unsupported value: 'none' is not supported with the '{model}' model. Supported values "
                        "are: 'minimal', 'low', 'medium', and 'high'.", "reasoning_effort", "unsupported_value")
    if "max_tokens" in body:
        return _invalid("Unsupported parameter: 'max_tokens' is not supported with this model. Use "
                        "'max_completion_tokens' instead.", "max_tokens", "unsupported_parameter")
    if not _reasons(p, body):
        return None
    for param in ("temperature", "top_p"):
        if param in body and body[param] != 1:
            return _invalid(f"Unsupported value: '{param}' does not support {body[param]} with this model. Only "
                            "the default (1) value is supported.", param, "unsupported_value")
    for param in ("logprobs", "top_logprobs"):
        if body.get(param):
            return _invalid(f"Unsupported parameter: '{param}' is not supported with this model.", param,
                            "unsupported_parameter")
    return None


def _chat_completion(p: ProviderServer, body: dict[str, Any]) -> dict[str, Any]:
    prompt = _prompt_of_chat(body.get("messages", []))
    reply = p.reply(prompt)
    budget = body.get("max_completion_tokens") or body.get("max_tokens")
    reasoning = 0
    if _reasons(p, body):
        # Reasoning tokens are spent first and count against max_completion_tokens: a
        # small budget ends in an empty reply cut off for length, as the real API does.
        wanted = p.reasoning_tokens(prompt) if callable(p.reasoning_tokens) else p.reasoning_tokens
        reasoning = min(wanted, budget) if budget is not None else wanted
        budget = None if budget is None else budget - reasoning
    tokens, finish = _truncate(reply, budget)
    message: str | None = "".join(tokens)
    if reply.refusal is not None:
        message, finish = None, "stop"
    elif reply.content_filter:
        message, finish = (message or None), "content_filter"
    logprobs = None
    if body.get("logprobs") and message:
        k = int(body.get("top_logprobs") or 0)
        content = []
        for i, tok in enumerate(tokens):
            alts = reply.first_alternatives if i == 0 else [(tok, 1.0)]
            chosen = dict(alts).get(tok, 1.0)
            content.append(
                {
                    "token": tok,
                    "logprob": math.log(chosen),
                    "bytes": list(tok.encode()),
                    "top_logprobs": [
                        {"token": t, "logprob": math.log(pr), "bytes": list(t.encode())} for t, pr in alts[:k]
                    ],
                }
            )
        logprobs = {"content": content, "refusal": None}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        # Aliases answer under a dated snapshot, as the real API reports it.
        "model": (p.routed_models[body["model"]] if body.get("model") in p.routed_models
                  else f"{body.get('model')}-2026-08-07" if body.get("model") in p.reasoning_models
                  else f"{body.get('model')}-2026-03-17" if body.get("model") in p.hybrid_models
                  else body.get("model")),
        "system_fingerprint": "fp_fake",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": message, "refusal": reply.refusal},
                "logprobs": logprobs,
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": _word_count(body.get("messages", [])),
            "completion_tokens": len(tokens) + reasoning,
            "total_tokens": _word_count(body.get("messages", [])) + len(tokens) + reasoning,
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        },
    }


def _text_completion(p: ProviderServer, body: dict[str, Any]) -> dict[str, Any]:
    prompt = body.get("prompt", "")
    reply = p.reply(prompt)
    tokens, finish = _truncate(reply, body.get("max_tokens"))
    logprobs = None
    if body.get("logprobs") is not None and tokens:
        k = int(body["logprobs"])
        alts = [dict(reply.first_alternatives[:k])] + [{t: 0.0} for t in tokens[1:]]
        alts[0] = {t: math.log(pr) for t, pr in alts[0].items()}
        logprobs = {
            "tokens": tokens,
            "token_logprobs": [math.log(dict(reply.first_alternatives).get(tokens[0], 1.0))]
            + [0.0] * (len(tokens) - 1),
            "top_logprobs": alts,
            "text_offset": [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))],
        }
    return {
        "id": f"cmpl-{uuid.uuid4().hex[:12]}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": p.routed_models.get(body.get("model"), body.get("model")),
        "system_fingerprint": "fp_fake",
        "choices": [{"index": 0, "text": "".join(tokens), "finish_reason": finish, "logprobs": logprobs}],
        "usage": {
            "prompt_tokens": _word_count(prompt),
            "completion_tokens": len(tokens),
            "total_tokens": _word_count(prompt) + len(tokens),
        },
    }


def _anthropic_message(p: ProviderServer, body: dict[str, Any]) -> dict[str, Any]:
    reply = p.reply(_prompt_of_chat(body.get("messages", [])))
    tokens, finish = _truncate(reply, body.get("max_tokens"))
    stop = "end_turn" if finish == "stop" else "max_tokens"
    if reply.refusal is not None or reply.content_filter:
        stop = "refusal"
    return {
        "id": f"msg_{uuid.uuid4().hex[:16]}",
        "type": "message",
        "role": "assistant",
        "model": p.routed_models.get(body.get("model"), body.get("model")),
        # An empty reply is an empty content list, as the real API sends it.
        "content": [{"type": "text", "text": "".join(tokens)}] if tokens else [],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": _word_count(body.get("messages", [])), "output_tokens": len(tokens)},
    }


def _store_file(p: ProviderServer, form: dict[str, Any]) -> dict[str, Any]:
    upload = form.get("file") or {}
    file_id = f"file-{uuid.uuid4().hex[:16]}"
    content = upload.get("content", b"") if isinstance(upload, dict) else b""
    record = {
        "id": file_id,
        "object": "file",
        "bytes": len(content),
        "created_at": int(time.time()),
        "filename": upload.get("filename") if isinstance(upload, dict) else "upload",
        "purpose": form.get("purpose", "batch"),
        "status": "processed",
    }
    with p._lock:
        p.files[file_id] = {**record, "content": content}
    return record


def _add_output_file(p: ProviderServer, lines: list[dict[str, Any]], name: str) -> str | None:
    if not lines:
        return None
    content = ("\n".join(json.dumps(line) for line in lines) + "\n").encode()
    file_id = f"file-{uuid.uuid4().hex[:16]}"
    p.files[file_id] = {
        "id": file_id,
        "object": "file",
        "bytes": len(content),
        "created_at": int(time.time()),
        "filename": name,
        "purpose": "batch_output",
        "status": "processed",
        "content": content,
    }
    return file_id


def _create_batch(p: ProviderServer, body: dict[str, Any]) -> dict[str, Any]:
    batch_id = f"batch_{uuid.uuid4().hex[:16]}"
    batch = {
        "id": batch_id,
        "object": "batch",
        "endpoint": body.get("endpoint"),
        "input_file_id": body.get("input_file_id"),
        "completion_window": body.get("completion_window"),
        "metadata": body.get("metadata"),
        "status": "validating",
        "created_at": int(time.time()),
        "output_file_id": None,
        "error_file_id": None,
        "request_counts": {"total": 0, "completed": 0, "failed": 0},
        "_polls": 0,
    }
    with p._lock:
        p.batches[batch_id] = batch
    return {k: v for k, v in batch.items() if not k.startswith("_")}


def _poll_batch(p: ProviderServer, batch_id: str) -> dict[str, Any] | None:
    with p._lock:
        batch = p.batches.get(batch_id)
        if batch is None:
            return None
        batch["_polls"] += 1
        if batch["status"] in ("validating", "in_progress"):
            if batch["_polls"] <= p.batch_in_progress_polls:
                batch["status"] = "in_progress"
            else:
                _finish_batch(p, batch)
        return {k: v for k, v in batch.items() if not k.startswith("_")}


def _finish_batch(p: ProviderServer, batch: dict[str, Any]) -> None:
    source = p.files.get(batch["input_file_id"])
    if source is None:
        batch["status"] = "failed"
        batch["errors"] = {
            "object": "list",
            "data": [{"code": "invalid_file", "message": "input file not found", "line": None}],
        }
        return
    outputs, errors, expired = [], [], False
    lines = [json.loads(line) for line in source["content"].decode().splitlines() if line.strip()]
    for line in lines:
        cid = line["custom_id"]
        if cid in p.batch_expired_ids:
            expired = True
            errors.append(
                {
                    "id": f"batch_req_{uuid.uuid4().hex[:8]}",
                    "custom_id": cid,
                    "response": None,
                    "error": {
                        "code": "batch_expired",
                        "message": "This request could not be executed before the completion window expired.",
                    },
                }
            )
        elif cid in p.batch_error_ids:
            errors.append(
                {
                    "id": f"batch_req_{uuid.uuid4().hex[:8]}",
                    "custom_id": cid,
                    "response": {
                        "status_code": 400,
                        "request_id": "req_x",
                        "body": {
                            "error": {
                                "message": "Invalid 'messages'.",
                                "type": "invalid_request_error",
                                "code": "invalid_value",
                            }
                        },
                    },
                    "error": None,
                }
            )
        else:
            make = _chat_completion if line["url"].endswith("/chat/completions") else _text_completion
            outputs.append(
                {
                    "id": f"batch_req_{uuid.uuid4().hex[:8]}",
                    "custom_id": cid,
                    "response": {"status_code": 200, "request_id": "req_x", "body": make(p, line["body"])},
                    "error": None,
                }
            )
    outputs.reverse()  # output order is not guaranteed by the real API either
    batch["output_file_id"] = _add_output_file(p, outputs, "output.jsonl")
    batch["error_file_id"] = _add_output_file(p, errors, "errors.jsonl")
    batch["request_counts"] = {"total": len(lines), "completed": len(outputs), "failed": len(errors)}
    batch["status"] = "expired" if expired else "completed"


def _iso(dt: datetime) -> str:
    return dt.isoformat().replace("+00:00", "Z")


def _msg_batch_view(p: ProviderServer, batch: dict[str, Any]) -> dict[str, Any]:
    ended = batch["processing_status"] == "ended"
    counts = {
        "processing": 0 if ended else len(batch["_requests"]),
        "succeeded": 0,
        "errored": 0,
        "canceled": 0,
        "expired": 0,
    }
    if ended:
        for line in batch["_results"]:
            counts[line["result"]["type"]] += 1
    return {
        "id": batch["id"],
        "type": "message_batch",
        "processing_status": batch["processing_status"],
        "request_counts": counts,
        "created_at": batch["created_at"],
        "expires_at": batch["expires_at"],
        "ended_at": _iso(datetime.now(timezone.utc)) if ended else None,
        "archived_at": None,
        "cancel_initiated_at": None,
        "results_url": f"{p.root_url}/v1/messages/batches/{batch['id']}/results" if ended else None,
    }


def _create_msg_batch(p: ProviderServer, body: dict[str, Any]) -> dict[str, Any]:
    now = datetime.now(timezone.utc)
    batch_id = f"msgbatch_{uuid.uuid4().hex[:16]}"
    batch = {
        "id": batch_id,
        "processing_status": "in_progress",
        "created_at": _iso(now),
        "expires_at": _iso(now + timedelta(hours=24)),
        "_requests": list(body.get("requests", [])),
        "_results": [],
        "_polls": 0,
    }
    with p._lock:
        p.msg_batches[batch_id] = batch
        return _msg_batch_view(p, batch)


def _poll_msg_batch(p: ProviderServer, batch_id: str) -> dict[str, Any] | None:
    with p._lock:
        batch = p.msg_batches.get(batch_id)
        if batch is None:
            return None
        batch["_polls"] += 1
        if batch["processing_status"] == "in_progress" and batch["_polls"] > p.batch_in_progress_polls:
            results = []
            for entry in batch["_requests"]:
                cid = entry["custom_id"]
                if cid in p.batch_expired_ids:
                    result: dict[str, Any] = {"type": "expired"}
                elif cid in p.batch_error_ids:
                    result = {
                        "type": "errored",
                        "error": {
                            "type": "error",
                            "error": {"type": "invalid_request_error", "message": "messages: invalid"},
                        },
                    }
                else:
                    result = {"type": "succeeded", "message": _anthropic_message(p, entry["params"])}
                results.append({"custom_id": cid, "result": result})
            results.reverse()
            batch["_results"] = results
            batch["processing_status"] = "ended"
        return _msg_batch_view(p, batch)


def _msg_batch_results(p: ProviderServer, batch_id: str) -> bytes | None:
    with p._lock:
        batch = p.msg_batches.get(batch_id)
        if batch is None or batch["processing_status"] != "ended":
            return None
        return ("\n".join(json.dumps(line) for line in batch["_results"]) + "\n").encode()
