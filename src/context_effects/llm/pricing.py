"""Cost estimates from a price table (USD per million tokens).

An unknown price is ``None``, never 0: a ledger that silently adds zero for a
model nobody priced would under-report what a run cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PRICE_FIELDS = ("input_per_mtok", "output_per_mtok")


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
