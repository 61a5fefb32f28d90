"""Cost estimates from a price table (USD per million tokens).

An unknown price is ``None``, never 0: a ledger that silently adds zero for a
model nobody priced would under-report what a run cost.

Where a model's price comes from (:func:`model_price`): ``models.<name>.price`` in the
config, else the dated table of hosted-model prices shipped as data in ``costs.yaml``
beside this module (with the date the prices were read and the pages they were read
from), else nowhere: unknown.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

PRICE_FIELDS = ("input_per_mtok", "output_per_mtok")
#: Characters per token of the prompt estimate: no tokenizer of the hosted models is
#: available offline, and four characters per token is the usual rule for English text.
CHARS_PER_TOKEN = 4
#: Prices of hosted models and the GPU throughput assumption (docs/costs.md).
COSTS = Path(__file__).with_name("costs.yaml")
#: Backends that bill per token (the others run on hardware the run holds).
BILLED = frozenset({"openai", "anthropic", "openai_compatible"})
#: The Batch APIs of these backends bill half the synchronous price
#: (``HostedAPIBackend.batch_discount``).
BATCH_DISCOUNT = {"openai": 0.5, "anthropic": 0.5}


def estimate_cost(
    model_id: str,
    tokens_in: int | None,
    tokens_out: int | None,
    price_table: Mapping[str, Mapping[str, float]] | None,
) -> float | None:
    """USD for one call, or ``None`` when the model is unpriced or token counts are unknown."""
    if not price_table or model_id not in price_table:
        return None
    if tokens_in is None or tokens_out is None:
        return None
    price = price_table[model_id]
    missing = [f for f in PRICE_FIELDS if f not in price]
    if missing:
        # A half-filled entry is a config mistake, not an unknown price.
        raise ValueError(f"price entry for {model_id!r} lacks {', '.join(missing)}")
    rate_in, rate_out = float(price["input_per_mtok"]), float(price["output_per_mtok"])
    if rate_in < 0 or rate_out < 0:
        raise ValueError(f"negative price for {model_id!r}: {dict(price)}")
    return (tokens_in * rate_in + tokens_out * rate_out) / 1_000_000


def price_table_from_models(models_config: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Build ``model_id -> price`` from the ``models:`` config block (entries with a ``price``).

    Keyed by the provider's model id because that is what a request carries.
    """
    table: dict[str, dict[str, float]] = {}
    for name, cfg in models_config.items():
        price = cfg.get("price")
        if not price:
            continue
        table[str(cfg.get("model_id", name))] = {f: float(price[f]) for f in PRICE_FIELDS}
    return table


@functools.lru_cache(maxsize=4)
def load_costs(path: str | Path = COSTS) -> dict[str, Any]:
    """``costs.yaml``: ``prices`` (``read``, ``from``, ``models``) and ``gpu_throughput``."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    for model_id, entry in data["prices"]["models"].items():
        missing = [f for f in (*PRICE_FIELDS, "backend") if f not in entry]
        if missing:
            raise ValueError(f"{path}: prices.models.{model_id} lacks {', '.join(missing)}")
    return data


def prices_read() -> str:
    """The date the shipped prices were read (``costs.yaml``)."""
    return str(load_costs()["prices"]["read"])


def model_price(cfg: Mapping[str, Any]) -> tuple[dict[str, float] | None, str]:
    """``(price, where it comes from)`` for one ``models:`` entry.

    The config's ``price`` wins; else a hosted model's entry in ``costs.yaml`` under its
    exact model id and backend; else ``(None, "unpriced")``. A model of a local backend
    (vLLM, synthetic, replay) costs no USD per token: ``({0, 0}, "local")``, its cost is
    GPU time, which the estimate reports apart.
    """
    if cfg.get("price"):
        return {f: float(cfg["price"][f]) for f in PRICE_FIELDS}, "config"
    backend = str(cfg.get("backend", ""))
    if backend not in BILLED:
        return {f: 0.0 for f in PRICE_FIELDS}, "local"
    entry = load_costs()["prices"]["models"].get(str(cfg.get("model_id")))
    if entry is None or entry["backend"] != backend:
        return None, "unpriced"
    return {f: float(entry[f]) for f in PRICE_FIELDS}, f"costs.yaml, read {prices_read()}"


def effective_prices(cfg: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """The price table a hosted backend is given for one model (``model_id -> price``):
    the config's price or the shipped one, nothing for an unpriced model."""
    price, _ = model_price(cfg)
    if price is None or str(cfg.get("backend", "")) not in BILLED:
        return {}
    return {str(cfg["model_id"]): price}


def batch_factor(cfg: Mapping[str, Any]) -> float:
    """What a model's calls cost relative to the listed price (0.5 through a Batch API)."""
    if cfg.get("use_batch_api"):
        return BATCH_DISCOUNT.get(str(cfg.get("backend", "")), 1.0)
    return 1.0


def prompt_tokens_bound(request: Any) -> int:
    """The estimate's prompt tokens of one request: characters / ``CHARS_PER_TOKEN``."""
    return math.ceil(sum(len(text) for _, text in request.messages) / CHARS_PER_TOKEN)


def call_cost_bound(request: Any, price: Mapping[str, float], factor: float = 1.0) -> float:
    """What one call of ``request`` costs at most, as the estimate counts it (docs/costs.md):
    its prompt tokens estimated, its output at ``max_tokens`` (which also bounds a reasoning
    model's hidden reasoning), at ``price`` times ``factor`` (a Batch API's discount).

    A reservation of the run's budget holds this much for a call until its answer says what
    it cost; an answer whose reply reports no token usage is counted at it."""
    tokens_out = int(request.sampling.max_tokens)
    usd = prompt_tokens_bound(request) * float(price["input_per_mtok"]) + tokens_out * float(price["output_per_mtok"])
    return usd / 1_000_000 * factor
