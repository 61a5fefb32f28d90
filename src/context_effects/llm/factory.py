"""From a `models:` config entry to a ModelRef and a ready backend.

One place decides how config maps onto engines, so study rules never import a
particular backend and a reviewer's `run.replay: true` swaps every model for the
response store without touching any rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from context_effects.llm.backends.base import Backend
from context_effects.llm.pricing import effective_prices
from context_effects.llm.store.responses import ResponseStore
from context_effects.llm.types import ModelRef

LOCAL_BACKENDS = frozenset({"vllm"})
HOSTED_BACKENDS = frozenset({"openai", "anthropic", "openai_compatible"})


def synthetic_seed(cfg: Mapping[str, Any]) -> int:
    """A synthetic model's world seed: ``sampling.synthetic_seed``, which
    ``dag.model_settings`` puts in the settings every job gets (0 when absent)."""
    return int(cfg.get("synthetic_seed", 0))


def model_ref(name: str, cfg: Mapping[str, Any]) -> ModelRef:
    """The identity of a model as it enters every request key."""
    backend = cfg["backend"]
    revision = cfg.get("revision")
    if backend == "synthetic":
        from context_effects.llm.backends.synthetic import model_revision

        # Planted values are part of the model's identity: change one, change every key.
        revision = model_revision(name, cfg.get("synthetic") or {}, synthetic_seed(cfg))
    return ModelRef(
        provider=backend,
        model_id=str(cfg["model_id"]),
        revision=revision,
        base_url=cfg.get("base_url") if backend == "openai_compatible" else None,
    )


def make_backend(
    name: str,
    cfg: Mapping[str, Any],
    *,
    store: ResponseStore | None = None,
    state_dir: str | Path | None = None,
    seed: int = 0,
    replay: bool = False,
) -> Backend:
    """Build the backend for model ``name``; ``replay`` serves everything from ``store``."""
    backend = cfg["backend"]
    state = Path(state_dir) if state_dir is not None else None
    if replay or backend == "replay":
        if store is None:
            raise ValueError(f"model {name!r}: replay needs the response store")
        from context_effects.llm.backends.replay import ReplayBackend

        return ReplayBackend(store, state_dir=state)
    if backend == "vllm":
        from context_effects.llm.backends.vllm_engine import VLLMBackend

        engine = cfg.get("engine", {})
        return VLLMBackend(
            cfg["model_id"],
            revision=cfg.get("revision"),
            dtype=engine.get("dtype", "auto"),
            max_model_len=engine.get("max_model_len", 4096),
            enforce_eager=engine.get("enforce_eager", False),
            gpu_memory_utilization=engine.get("gpu_memory_utilization", 0.9),
            tensor_parallel_size=engine.get("tensor_parallel_size", 1),
            seed=seed,
            system_role=cfg.get("system_role", True),
            state_dir=state,
        )
    if backend == "synthetic":
        from context_effects.llm.backends.synthetic import SyntheticBackend

        return SyntheticBackend(
            model_name=name, params=dict(cfg.get("synthetic") or {}), seed=synthetic_seed(cfg), state_dir=state
        )
    if backend in HOSTED_BACKENDS:
        common: dict[str, Any] = {
            "state_dir": state,
            "concurrency": cfg.get("concurrency", 8),
            "max_retries": cfg.get("max_retries", 5),
            "max_retry_time_s": cfg.get("max_retry_time_s", 600.0),
            "use_batch_api": cfg.get("use_batch_api", False),
        }
        # The config's price, else the shipped dated one (llm/costs.yaml): a ledger, and
        # so run.budget_usd, can count only the calls whose price is known.
        prices = effective_prices(cfg)
        if prices:
            common["prices"] = prices
        if cfg.get("api_key_env"):
            common["api_key_env"] = cfg["api_key_env"]
        if backend == "openai":
            from context_effects.llm.backends.openai_api import OpenAIBackend

            return OpenAIBackend(base_url=cfg.get("base_url"), **common)
        if backend == "openai_compatible":
            from context_effects.llm.backends.openai_api import OpenAICompatibleBackend

            return OpenAICompatibleBackend(base_url=cfg["base_url"], **common)
        from context_effects.llm.backends.anthropic_api import AnthropicBackend

        return AnthropicBackend(base_url=cfg.get("base_url"), **common)
    raise ValueError(f"model {name!r}: unknown backend {backend!r}")
