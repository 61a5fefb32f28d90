"""Anthropic Messages API through the official SDK (anthropic 2.x).

What the API cannot do is recorded in each result, not papered over, so a reader
of the responses sees which settings a hosted model actually ran with:

- no logprobs, so ``first_token_logprobs``/``probe_probs`` stay empty;
- recent models take no ``temperature``/``top_p`` (the 2.x SDK dropped them) and
  the API has no ``seed``: the Claude capability profiles rule them out, so a
  conformed request holds None for them (the store key says what was sent), and a
  request that still carries one gets a note saying it was not sent; an Anthropic
  judge can therefore not be made greedy — variance comes from repeated samples;
- whether a model thinks when ``thinking`` is omitted depends on the model, so the
  profiles send ``thinking: {type: disabled}`` (the request's ``sampling.thinking``),
  and a short answer is never spent on thinking;
- no base-model completion endpoint, so ``mode == "completion"`` fails the request.

System turns go to the ``system`` parameter; a JSON schema goes to
``output_config.format`` (the runner validates every reply anyway).
"""

from __future__ import annotations

from typing import Any

from context_effects.llm.backends.hosted import HostedAPIBackend, RunContext
from context_effects.llm.capabilities import SERVED_MODEL_NOTE
from context_effects.llm.retry import SDKErrors
from context_effects.llm.types import LLMRequest, LLMResult

# Anthropic's stop reasons mapped onto the OpenAI vocabulary the rest of the
# pipeline checks ("length" = truncated); others are kept verbatim.
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length"}
NOT_SUPPORTED = "not supported by the Anthropic API"


def _sdk() -> Any:
    import anthropic

    return anthropic


def _as_dict(obj: Any) -> dict[str, Any]:
    if isinstance(obj, dict):
        return obj
    return obj.model_dump(mode="json", exclude_none=False)


class AnthropicBackend(HostedAPIBackend):
    name = "anthropic"
    default_key_env = "ANTHROPIC_API_KEY"
    batch_limit = 100_000

    def __init__(self, *, structured_output: bool = True, **common: Any) -> None:
        super().__init__(**common)
        self.structured_output = bool(structured_output)
        self._errors: SDKErrors | None = None

    @property
    def sdk_errors(self) -> SDKErrors:
        if self._errors is None:
            anthropic = _sdk()
            self._errors = SDKErrors(
                status=anthropic.APIStatusError,
                timeout=anthropic.APITimeoutError,
                connection=anthropic.APIConnectionError,
                validation=anthropic.APIResponseValidationError,
            )
        return self._errors

    def engine_version(self) -> str:
        try:
            return f"anthropic {_sdk().__version__}"
        except ImportError:  # pragma: no cover - SDK missing
            return "anthropic (not installed)"

    def _new_client(self, base_url: str | None) -> Any:
        return _sdk().AsyncAnthropic(
            api_key=self._api_key,
            base_url=base_url,
            max_retries=0,  # ours is the only retry loop (llm/retry.py)
            timeout=self.retry_policy.request_timeout_s,
        )

    def _unsupported(self, request: LLMRequest) -> str | None:
        if request.mode == "completion":
            return "completion mode (base-model prompting) is not available on the Anthropic API"
        return None

    # -- request mapping -------------------------------------------------------

    def _params(self, request: LLMRequest) -> tuple[dict[str, Any], list[str]]:
        s = request.sampling
        system = "\n\n".join(content for role, content in request.messages if role == "system")
        params: dict[str, Any] = {
            "model": request.model.model_id,
            "max_tokens": s.max_tokens,
            "messages": [{"role": role, "content": content} for role, content in request.messages if role != "system"],
        }
        if system:
            params["system"] = system
        if s.thinking is not None:
            params["thinking"] = {"type": s.thinking}
        # A conformed request (llm/capabilities.py) holds None for what the profile rules
        # out; a request built without a profile may still carry settings, and each one
        # is listed as asked for but not sent.
        dropped = []
        if s.temperature is not None:
            dropped.append(f"temperature not sent: {NOT_SUPPORTED}")
        if s.top_p is not None and s.top_p != 1.0:
            dropped.append(f"top_p not sent: {NOT_SUPPORTED}")
        if s.seed is not None:
            dropped.append(f"seed not sent: {NOT_SUPPORTED}")
        if s.reasoning_effort is not None:
            dropped.append(f"reasoning_effort not sent: {NOT_SUPPORTED}")
        if s.logprobs is not None or s.probe_tokens:
            dropped.append("no logprobs available (logprobs/probe_tokens requested)")
        if request.output_schema is not None:
            if self.structured_output:
                params["output_config"] = {"format": {"type": "json_schema", "schema": request.output_schema}}
            else:
                dropped.append("output_schema not sent: structured_output disabled, prompt only")
        return params, dropped

    # -- response parsing ------------------------------------------------------

    def _parse(self, request: LLMRequest, data: dict[str, Any], notes: list[str], batch_id: str | None) -> LLMResult:
        notes = list(notes)
        blocks = data.get("content") or []
        texts = [b.get("text", "") for b in blocks if b.get("type") == "text"]
        stop = data.get("stop_reason")
        # An empty content list and stop_reason "refusal" are replies, paid for like
        # any other: returned as answers (text "" and finish reason "refusal" kept
        # verbatim), so they are stored and the runner re-asks them and finally records
        # them missing as "empty"/"refusal" (llm/replies.py, no_answer_reason); with
        # stop_reason "max_tokens" (thinking spent the budget) as "budget_exhausted",
        # never re-asked.
        if not texts:
            notes.append(f"no text in the reply (stop_reason={stop})")
        if data.get("model"):
            notes.append(f"{SERVED_MODEL_NOTE}={data['model']}")
        if batch_id:
            notes.append(f"batch_api={batch_id}")
        usage = data.get("usage") or {}
        tokens_in, tokens_out = usage.get("input_tokens"), usage.get("output_tokens")
        return self._result(
            request,
            text="".join(texts),
            finish_reason=STOP_REASONS.get(stop, stop),
            tokens_in=tokens_in,
            tokens_out=tokens_out,
            cost_usd=self._cost(request.model.model_id, tokens_in, tokens_out, batch=bool(batch_id)),
            notes="; ".join(notes),
        )

    async def _call(self, client: Any, request: LLMRequest, timeout: float) -> LLMResult:
        params, notes = self._params(request)
        message = await client.messages.create(**params, timeout=timeout)
        return self._parse(request, _as_dict(message), notes, None)

    # -- Message Batches ---------------------------------------------------------

    async def _batch_submit(
        self, ctx: RunContext, client: Any, requests: list[LLMRequest], digest: str
    ) -> dict[str, Any]:
        # custom_id must match ^[a-zA-Z0-9_-]{1,64}$: a sha256 hex key is exactly 64.
        entries = [{"custom_id": r.key, "params": self._params(r)[0]} for r in requests]
        batch = await self._control(
            ctx, lambda t: client.messages.batches.create(requests=entries, timeout=t), "anthropic batches.create"
        )
        return {"batch_id": batch.id}

    async def _batch_poll(self, ctx: RunContext, client: Any, state: dict[str, Any]) -> tuple[bool, str, Any]:
        batch = await self._control(
            ctx, lambda t: client.messages.batches.retrieve(state["batch_id"], timeout=t), "anthropic batches.retrieve"
        )
        return batch.processing_status == "ended", batch.processing_status, batch

    async def _batch_collect(
        self, ctx: RunContext, client: Any, state: dict[str, Any], batch: Any, requests: list[LLMRequest]
    ) -> dict[str, LLMResult]:
        by_key = {r.key: r for r in requests}
        batch_id = state["batch_id"]

        async def read_all(timeout: float) -> list[Any]:
            decoder = await client.messages.batches.results(batch_id, timeout=timeout)
            return [entry async for entry in decoder]

        entries = await self._control(ctx, read_all, "anthropic batches.results")
        results: dict[str, LLMResult] = {}
        for entry in entries:
            request = by_key.get(entry.custom_id)
            if request is None:
                continue
            outcome = entry.result
            if outcome.type == "succeeded":
                results[request.key] = self._parse(
                    request, _as_dict(outcome.message), self._params(request)[1], batch_id
                )
            elif outcome.type == "errored":
                err = getattr(getattr(outcome, "error", None), "error", None)
                detail = f"{getattr(err, 'type', 'error')}: {getattr(err, 'message', '')}" if err else "errored"
                results[request.key] = self._failed(request, f"batch {batch_id}: {detail}")
            else:  # canceled / expired
                results[request.key] = self._failed(request, f"batch {batch_id}: request {outcome.type}")
        return results
