"""Study A's (AMEL) planted values against the bias scores (``context_effects.recovery``
gathers every study's rows into ``results/synthetic/recovery.csv``).

Per model and design cell, the mean bias score over the items in
``results/amel/bias_scores.parquet`` with its t interval against the planted population
mean (quadrature over the planted item distribution); the no/yes ratio of those means
(no interval); the logit-scale values c, A, τ and the k scale are listed as not directly
estimated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from context_effects.recovery_rows import row

Config = Mapping[str, Any]

#: AMEL settings that decide the design cells (``amel.design.design_cells``).
DESIGN_KEYS = ("saturation_share", "history_lengths", "positions", "position_history_length",
               "position_biased_turns", "framing_swap", "framing_history_lengths")
#: AMEL's logit-scale planted values, listed as not directly estimated.
LOGIT_PARAMS = {"conformity": "amel_conformity", "negativity_asymmetry": "amel_negativity_asymmetry",
                "yes_bias": "amel_yes_bias", "k_scale": "amel_k_scale"}


def planted_inputs(config: Config) -> dict[str, Any]:
    """What AMEL's part of ``planted.json`` needs beyond the models' values: the design."""
    from context_effects.llm.backends.synthetic import jsonable

    return {k: jsonable(config["amel"][k]) for k in DESIGN_KEYS}


def _cells(design: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every saturated cell of the design with the (k, n_biased) its requests give the simulator."""
    from context_effects.amel.design import design_cells
    from context_effects.amel.requests import cell_meta

    cells = []
    for cell in design_cells(design):
        if cell.condition == "baseline":
            continue
        meta = cell_meta(cell, {"item_id": "", "domain": "", "answer": "Yes"}, "", "", 0)
        cells.append({"cell": cell.label, "framing": cell.framing, "condition": cell.condition, "k": cell.k,
                      "position": cell.position, "n_biased": cell.n_biased, "n_simulated": meta["n_biased"]})
    return cells


def _model_planted(eff: Mapping[str, Any], design: Mapping[str, Any]) -> dict[str, Any]:
    from context_effects.amel.synthetic import cell_targets, planted

    p = planted(eff)
    out = {k: p[k] for k in ("yes_bias", "conformity", "negativity_asymmetry", "token_asymmetry", "semantic_asymmetry",
                             "asymmetry_ratio_logit", "k_scale", "position_weights", "deterministic_share")}
    out["deterministic_logit"] = list(eff["amel_deterministic_logit"])
    out["uncertain_logit_sd"] = eff["amel_uncertain_logit_sd"]
    cells = []
    for c in _cells(design):
        cells.append({**c, **cell_targets(eff, c["condition"], c["n_simulated"], c["position"], c["framing"])})
    out["cells"] = cells
    return out


def planted_values(design: Mapping[str, Any], models: Sequence[str],
                   resolved: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """AMEL's part of ``planted.json``: the design and each model's planted values per cell."""
    return {"design": dict(design), "models": {m: _model_planted(resolved[m], design) for m in models}}


def bias_score_rows(planted: Mapping[str, Any], bias_scores: pd.DataFrame) -> list[dict]:
    """AMEL rows: per model and cell the mean bias score (t interval) against the planted population mean."""
    from context_effects.amel.stats import mean_ci

    rows: list[dict] = []
    source = "amel/bias_scores"
    for model, pm in planted["amel"]["models"].items():
        part = bias_scores[bias_scores["model"] == model]
        if "method" in part.columns:
            # The primary measurement only: averaging over methods would mix two estimands.
            from context_effects.amel.requests import PRIMARY_METHOD

            part = part[part["method"] == PRIMARY_METHOD]
        means: dict[tuple[str, str, int, Any], float] = {}
        expected: dict[tuple[str, str, int, Any], float] = {}
        for c in pm["cells"]:
            cell = part[part["cell"] == c["cell"]]
            # A balanced history has no prevailing verdict and so no bias score: its
            # planted effect is a zero shift of P(Yes).
            balanced = c["condition"] == "balanced"
            values = cell["shift"] if balanced else cell["bs"]
            m, lo, hi = mean_ci(values.to_numpy(float))
            key = (c["framing"], c["condition"], c["k"], c["position"])
            means[key], expected[key] = m, c["expected_bias_score"]
            note = (f"mean over {int(np.isfinite(values.to_numpy(float)).sum())} items; planted = population mean "
                    "over the item distribution; P(Yes) from sampled replies")
            name = f"shift[{c['cell']}]" if balanced else f"bias_score[{c['cell']}]"
            planted_value = 0.0 if balanced else c["expected_bias_score"]
            rows.append(row("amel", source, model, name, planted_value, m, lo, hi, note=note))
        for (framing, cond, k, pos), v in sorted(expected.items(), key=lambda kv: str(kv[0])):
            if cond != "no_saturated" or pos is not None:
                continue
            yes = (framing, "yes_saturated", k, None)
            if yes not in expected or expected[yes] == 0:
                continue
            est = abs(means[(framing, cond, k, pos)]) / abs(means[yes]) if means[yes] else math.nan
            rows.append(row("amel", source, model, f"bias_score_ratio[{framing}:k{k}]", abs(v) / abs(expected[yes]),
                            est, note="|mean BS no-saturated| / |mean BS yes-saturated|; no interval"))
        for name, key in LOGIT_PARAMS.items():
            rows.append(row("amel", source, model, key, pm[name], comparable=False,
                            note="logit-scale planted value; the analyses estimate bias scores on the probability "
                                 "scale (the bias_score rows hold what it implies)"))
    return rows
