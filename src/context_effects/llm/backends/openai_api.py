"""OpenAI chat/completions through the official SDK, and any server speaking that API.

``OpenAIBackend`` ("openai") talks to api.openai.com (or a configured base_url);
``OpenAICompatibleBackend`` ("openai_compatible") is the same client pointed at
``vllm serve``, a llama.cpp server or Ollama. Concurrency, retries and batch-id
persistence come from :class:`~context_effects.llm.backends.hosted.HostedAPIBackend`.

The SDK is imported lazily so that building the DAG (``snakemake -n``) or using
another backend never needs it installed.
"""

from __future__ import annotations

import json
import math
from typing import Any

from context_effects.llm.backends.hosted import HostedAPIBackend, RunContext
from context_effects.llm.replies import REFUSAL
from context_effects.llm.retry import SDKErrors
from context_effects.llm.capabilities import FINGERPRINT_NOTE, SERVED_MODEL_NOTE
from context_effects.llm.types import LLMRequest, LLMResult, Sampling

CHAT_ENDPOINT = "/v1/chat/completions"
COMPLETION_ENDPOINT = "/v1/completions"
# OpenAI's caps on alternatives per position: chat top_logprobs <= 20, legacy completions logprobs <= 5.
CHAT_TOP_LOGPROBS_MAX = 20
TERMINAL_BATCH_STATUSES = {"completed", "failed", "expired", "cancelled"}
# How much of a refusal message goes into a result's notes.
REFUSAL_NOTE_CHARS = 300


def _sdk() -> Any:
    import openai

    return openai


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    return obj.model_dump(mode="json", exclude_none=False)


def render_prompt(request: LLMRequest) -> tuple[str, str]:
    """The text prompt of a completion-mode request, and a note if rendering lost anything.

    Base models get plain few-shot text: one message is sent verbatim; several are
    joined by blank lines without role labels (any chat markup would be noise to a
    base model), which is recorded.
    """
    if len(request.messages) == 1:
        return request.messages[0][1], ""
    return "\n\n".join(content for _, content in request.messages), (
        f"completion mode: {len(request.messages)} messages joined by blank lines, roles dropped"
    )


def _add_sampling(body: dict[str, Any], s: Sampling) -> None:
    # None means the model's capability profile rules the setting out: not sent at all,
    # since reasoning models answer HTTP 400 even to their own default value.
    for name in ("temperature", "top_p", "seed"):
        value = getattr(s, name)
        if value is not None:
            body[name] = value


def probe_probabilities(top: dict[str, float] | None, probes: tuple[str, ...]) -> dict[str, float] | None:
    """exp(logprob) of each probe token found among the first position's alternatives.

    Exact token-string match. A probe that is not among the returned alternatives
    is left out rather than set to 0: all we know is that it is below the k-th
    alternative, and a 0 would silently enter downstream averages.
    """
    if not probes or top is None:
        return None
    return {p: math.exp(top[p]) for p in probes if p in top}


class OpenAIBackend(HostedAPIBackend):
    name = "openai"
    default_key_env = "OPENAI_API_KEY"
    batch_limit = 50_000
    # Newer OpenAI models reject `max_tokens`; compatible servers often only know it.
    default_max_tokens_param = "max_completion_tokens"
    completion_logprobs_max = 5
    supports_batch = True

    def __init__(
        self,
        *,
        max_tokens_param: str | None = None,
        json_schema_strict: bool | None = None,
        **common: Any,
    ) -> None:
        if common.get("use_batch_api") and not self.supports_batch:
            raise ValueError(f"{self.name}: this endpoint has no Batch API; set use_batch_api: false")
        super().__init__(**common)
        self.max_tokens_param = max_tokens_param or self.default_max_tokens_param
        if self.max_tokens_param not in ("max_tokens", "max_completion_tokens"):
            raise ValueError("max_tokens_param must be 'max_tokens' or 'max_completion_tokens'")
        # None = strict exactly when the schema is already strict-compatible (closed
        # objects): OpenAI answers 400 to strict mode on an open schema.
        self.json_schema_strict = json_schema_strict
        self._errors: SDKErrors | None = None

    # -- SDK plumbing ----------------------------------------------------------

    @property
    def sdk_errors(self) -> SDKErrors:
        if self._errors is None:
            openai = _sdk()
            self._errors = SDKErrors(
                status=openai.APIStatusError,
                timeout=openai.APITimeoutError,
                connection=openai.APIConnectionError,
                validation=openai.APIResponseValidationError,
            )
        return self._errors

    def engine_version(self) -> str:
        try:
            return f"openai {_sdk().__version__}"
        except ImportError:  # pragma: no cover - SDK missing
            return "openai (not installed)"

    def _client_key(self) -> str:
        return self._api_key or ""

    def _new_client(self, base_url: str | None) -> Any:
        openai = _sdk()
        return openai.AsyncOpenAI(
            api_key=self._client_key(),
            base_url=base_url,
            # Ours is the only retry loop (see llm/retry.py); the SDK default of 2
            # would multiply it and hide its sleeps from the total-time bound.
            max_retries=0,
            timeout=self.retry_policy.request_timeout_s,
        )

    # -- request mapping -------------------------------------------------------

    def _strict(self, schema: dict[str, Any]) -> bool:
        if self.json_schema_strict is not None:
            return self.json_schema_strict
        return schema.get("type") == "object" and schema.get("additionalProperties") is False

    def _chat_body(self, request: LLMRequest) -> tuple[dict[str, Any], list[str]]:
        s = request.sampling
        notes: list[str] = []
        body: dict[str, Any] = {
            "model": request.model.model_id,
            "messages": [{"role": role, "content": content} for role, content in request.messages],
            self.max_tokens_param: s.max_tokens,
        }
        _add_sampling(body, s)
        if s.reasoning_effort is not None:
            body["reasoning_effort"] = s.reasoning_effort
        if s.thinking is not None:
            notes.append(f"thinking={s.thinking} not sent: an Anthropic setting")
        k = s.logprobs
        if k is None and s.probe_tokens:
            # Probe probabilities can only be read off the top alternatives, so ask for as many as allowed.
            k = CHAT_TOP_LOGPROBS_MAX
        if k is not None:
            if k > CHAT_TOP_LOGPROBS_MAX:
                notes.append(f"top_logprobs capped at {CHAT_TOP_LOGPROBS_MAX} (asked {k})")
            body["logprobs"] = True
            body["top_logprobs"] = max(0, min(k, CHAT_TOP_LOGPROBS_MAX))
        if request.output_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": str(request.output_schema.get("title") or "reply"),
                    "schema": request.output_schema,
                    "strict": self._strict(request.output_schema),
                },
            }
        return body, notes

    def _completion_body(self, request: LLMRequest) -> tuple[dict[str, Any], list[str]]:
        s = request.sampling
        prompt, note = render_prompt(request)
        notes = [note] if note else []
        body: dict[str, Any] = {
            "model": request.model.model_id,
            "prompt": prompt,
            "max_tokens": s.max_tokens,
        }
        _add_sampling(body, s)
        k = s.logprobs
        if k is None and s.probe_tokens:
            k = self.completion_logprobs_max
        if k is not None:
            if k > self.completion_logprobs_max:
                notes.append(f"logprobs capped at {self.completion_logprobs_max} (asked {k})")
            body["logprobs"] = max(0, min(k, self.completion_logprobs_max))
        if request.output_schema is not None:
            notes.append("output_schema not enforced: the completions endpoint has no structured output")
        return body, notes

    def _body(self, request: LLMRequest) -> tuple[str, dict[str, Any], list[str]]:
        if request.mode == "completion":
            return (COMPLETION_ENDPOINT, *self._completion_body(request))
        return (CHAT_ENDPOINT, *self._chat_body(request))

    # -- response parsing ------------------------------------------------------

    def _parse(
        self, request: LLMRequest, endpoint: str, data: dict[str, Any], notes: list[str], batch_id: str | None
    ) -> LLMResult:
        notes = list(notes)
        choices = data.get("choices") or []
        if not choices:
            raise ValueError("response has no choices")
        choice = choices[0]
        top: dict[str, float] | None = None
        finish_reason = choice.get("finish_reason")
        if endpoint == CHAT_ENDPOINT:
            message = choice.get("message") or {}
            text = message.get("content")
            if message.get("refusal"):
                # A refusal is a reply, paid for like any other: returned as an answer
                # with no text and finish reason "refusal", so it is stored and the
                # runner re-asks it and finally records it missing with that reason
                # (llm/replies.py, no_answer_reason) instead of failing every rerun.
                notes.append(f"refusal (finish_reason={finish_reason}): {message['refusal'][:REFUSAL_NOTE_CHARS]}")
                finish_reason = REFUSAL
            content = (choice.get("logprobs") or {}).get("content") or []
            if content:
                first = content[0]
                top = {alt["token"]: float(alt["logprob"]) for alt in first.get("top_logprobs") or []}
                top.setdefault(first["token"], float(first["logprob"]))
        else:
            text = choice.get("text")
            lp = choice.get("logprobs") or {}
            tops = lp.get("top_logprobs") or []
            tokens, token_lps = lp.get("tokens") or [], lp.get("token_logprobs") or []
            if tops and tops[0] is not None:
                top = {tok: float(v) for tok, v in tops[0].items()}
            if tokens and token_lps and token_lps[0] is not None:
                top = top or {}
                top.setdefault(tokens[0], float(token_lps[0]))
        if text is None:
            # content: null - a refusal, or an empty reply when there is none.
            if finish_reason != REFUSAL:
                notes.append("no content in the reply")
            text = ""
        wants_lp = request.sampling.logprobs is not None or bool(request.sampling.probe_tokens)
        if wants_lp and top is None and text:
            notes.append("no logprobs in the response")
        # The snapshot that answered, not only the configured alias (capabilities.served_version).
        if data.get("model"):
            notes.append(f"{SERVED_MODEL_NOTE}={data['model']}")
        if data.get("system_fingerprint"):
            notes.append(f"{FINGERPRINT_NOTE}={data['system_fingerprint']}")
        if batch_id:
            notes.append(f"batch_api={batch_id}")
        usage = data.get("usage") or {}
        tokens_in, tokens_out = usage.get("prompt_tokens"), usage.get("completion_tokens")
        return self._result(
            request,
            text=text,
            finish_reason=finish_reason,
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            first_token_logprobs=top,
            probe_probs=probe_probabilities(top, request.sampling.probe_tokens),
            cost_usd=self._cost(request.model.model_id, tokens_in, tokens_out, batch=bool(batch_id)),
            notes="; ".join(n for n in notes if n),
        )

    async def _call(self, client: Any, request: LLMRequest, timeout: float) -> LLMResult:
        endpoint, body, notes = self._body(request)
        if endpoint == CHAT_ENDPOINT:
            response = await client.chat.completions.create(**body, timeout=timeout)
        else:
            response = await client.completions.create(**body, timeout=timeout)
        return self._parse(request, endpoint, _as_dict(response), notes, None)

    # -- Batch API ---------------------------------------------------------------

    def _batch_group(self, request: LLMRequest) -> Any:
        # One endpoint and one model per input file, as the Batch API requires.
        return (request.mode, request.model.model_id)

    async def _batch_submit(
        self, ctx: RunContext, client: Any, requests: list[LLMRequest], digest: str
    ) -> dict[str, Any]:
        endpoint = self._body(requests[0])[0]
        lines = []
        for request in requests:
            _, body, _ = self._body(request)
            lines.append(json.dumps({"custom_id": request.key, "method": "POST", "url": endpoint, "body": body}))
        payload = ("\n".join(lines) + "\n").encode("utf-8")
        uploaded = await self._control(
            ctx,
            lambda t: client.files.create(
                file=(f"batch-{digest[:16]}.jsonl", payload, "application/jsonl"), purpose="batch", timeout=t
            ),
            "openai files.create",
        )
        batch = await self._control(
            ctx,
            lambda t: client.batches.create(
                input_file_id=uploaded.id,
                endpoint=endpoint,
                completion_window="24h",
                metadata={"source": "context_effects", "keys_sha256": digest[:32]},
                timeout=t,
            ),
            "openai batches.create",
        )
        return {"batch_id": batch.id, "input_file_id": uploaded.id, "endpoint": endpoint}

    async def _batch_poll(self, ctx: RunContext, client: Any, state: dict[str, Any]) -> tuple[bool, str, Any]:
        batch = await self._control(
            ctx, lambda t: client.batches.retrieve(state["batch_id"], timeout=t), "openai batches.retrieve"
        )
        return batch.status in TERMINAL_BATCH_STATUSES, batch.status, batch

    async def _file_lines(self, ctx: RunContext, client: Any, file_id: str | None) -> list[dict[str, Any]]:
        if not file_id:
            return []
        content = await self._control(ctx, lambda t: client.files.content(file_id, timeout=t), "openai files.content")
        return [json.loads(line) for line in content.text.splitlines() if line.strip()]

    async def _batch_collect(
        self, ctx: RunContext, client: Any, state: dict[str, Any], batch: Any, requests: list[LLMRequest]
    ) -> dict[str, LLMResult]:
        by_key = {r.key: r for r in requests}
        batch_id = state["batch_id"]
        results: dict[str, LLMResult] = {}
        if batch.status == "failed":
            errors = getattr(batch, "errors", None)
            details = "; ".join(
                f"{e.code}: {e.message}" + (f" (line {e.line})" if getattr(e, "line", None) else "")
                for e in (getattr(errors, "data", None) or [])
            )
            message = f"batch {batch_id} failed validation: {details or 'no details'}"
            return {k: self._failed(r, message) for k, r in by_key.items()}
        lines = await self._file_lines(ctx, client, batch.output_file_id)
        lines += await self._file_lines(ctx, client, getattr(batch, "error_file_id", None))
        for line in lines:
            request = by_key.get(line.get("custom_id", ""))
            if request is None:
                continue
            response = line.get("response") or {}
            status = response.get("status_code")
            if line.get("error") is None and status == 200:
                endpoint = state.get("endpoint") or self._body(request)[0]
                _, _, notes = self._body(request)
                try:
                    results[request.key] = self._parse(request, endpoint, response.get("body") or {}, notes, batch_id)
                except (ValueError, KeyError, TypeError) as exc:
                    results[request.key] = self._failed(request, f"batch {batch_id}: malformed result line ({exc})")
                continue
            err = line.get("error") or ((response.get("body") or {}).get("error")) or {}
            code = err.get("code") or err.get("type") or (f"HTTP {status}" if status else "error")
            results[request.key] = self._failed(
                request, f"batch {batch_id} ({batch.status}): {code}: {err.get('message') or 'request failed'}"
            )
        return results


class OpenAICompatibleBackend(OpenAIBackend):
    """Any server that speaks the OpenAI API: ``vllm serve``, llama.cpp server, Ollama.

    The endpoint is part of the model's identity, so a request's
    ``ModelRef.base_url`` wins over the configured ``base_url``. Local servers
    usually need no key: ``api_key_env`` defaults to none, and then a placeholder
    is sent — never the SDK's fallback to ``$OPENAI_API_KEY``, which would hand
    the OpenAI key to whatever server the config names.
    """

    name = "openai_compatible"
    default_key_env = None
    default_max_tokens_param = "max_tokens"
    # vLLM's default max_logprobs; llama.cpp and Ollama accept at least this many.
    completion_logprobs_max = 20
    supports_batch = False

    def __init__(self, *, base_url: str | None = None, api_key_env: str | None = None, **common: Any) -> None:
        if not base_url:
            raise ValueError("openai_compatible needs base_url, e.g. http://127.0.0.1:8000/v1")
        super().__init__(base_url=base_url, api_key_env=api_key_env, **common)

    def _client_key(self) -> str:
        return self._api_key or "EMPTY"

    def _base_url_for(self, request: LLMRequest) -> str | None:
        return request.model.base_url or self.base_url

    def _strict(self, schema: dict[str, Any]) -> bool:
        # vLLM and llama.cpp ignore `strict`; sending False avoids surprises on servers that don't.
        return bool(self.json_schema_strict)
