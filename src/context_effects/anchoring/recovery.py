"""Study H's planted values against the scorer's estimates (``context_effects.recovery``
gathers every study's rows into ``results/synthetic/recovery.csv``).

Per judge, the scorer's signed pull and anchor-vs-framing means with their bootstrap
intervals (``results/anchoring/runs/<judge>.json``) against the values λ and δ_framing
imply for the run's tasks: expected scores under the planted per-task blind mean, noise,
rounding and clipping, over the tasks the scorer used, with the sign taken at the
expected reference score (the scorer takes it at the observed one). λ itself is a latent
slope the scorer does not estimate (listed, not compared).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from context_effects.recovery_rows import row


def planted_values(judges: Sequence[str], resolved: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Study H's part of ``planted.json``: each judge's planted values."""
    from context_effects.llm.backends.synthetic import simulator

    sim = simulator("anchoring")
    return {"judges": {j: sim.planted(resolved[j]) for j in judges}}


def expected_score(mu: float | np.ndarray, sd: float) -> np.ndarray:
    """E[clip(round_half_up(x), 1, 5)] for x ~ N(mu, sd): the synthetic judge's reply rule (Study H)."""
    from scipy.stats import norm

    mu = np.asarray(mu, dtype=float)
    cut = np.arange(1, 5) + 0.5
    if sd <= 0:
        return 1.0 + (mu[..., None] >= cut).sum(axis=-1)
    cdf = norm.cdf((cut - mu[..., None]) / sd)
    return 5.0 - cdf.sum(axis=-1)


def pull_rows(planted: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]) -> list[dict]:
    """Study H rows: the scorer's pull estimates against what λ and δ_framing imply for the run's tasks."""
    from context_effects.anchoring.synthetic import anchoring_blind_mean, expected_pull
    from context_effects.llm.backends.synthetic import SyntheticBackend

    rows: list[dict] = []
    for judge, ph in planted["anchoring"]["judges"].items():
        run = runs.get(judge)
        if run is None:
            continue
        backend = SyntheticBackend(model_name=judge, params=planted["models"][judge]["config"],
                                   seed=int(planted.get("backend_seed", 0)))
        per_task = pd.DataFrame(run["scorer"]["per_task"])
        summary = run["scorer"]["summary"]
        lam, delta, sd = ph["lambda"], ph["framing_shift"], ph["noise_sd"]
        e_blind = np.array([anchoring_blind_mean(backend, t, g) for t, g in zip(per_task["task_id"],
                                                                                per_task["gold_score"])])
        prior = per_task["prior_score"].to_numpy(float)
        blind = expected_score(e_blind, sd)
        framing = expected_score(e_blind + delta, sd)
        anchor = expected_score(e_blind + (delta if ph["framing_in_anchor"] else 0.0) + lam * (prior - e_blind), sd)
        src = f"anchoring/runs/{judge}"
        # The primary estimand keeps ties (scored 0): its expectation is taken over the
        # distribution of each task's blind mean, with as many repetitions as were valid.
        used = per_task["pull_status"].isin(["ok", "tie"]).to_numpy()
        pulls = [expected_pull(backend, t, g, p, int(n)) for t, g, p, n, u in zip(
            per_task["task_id"], per_task["gold_score"], per_task["prior_score"], per_task["n_blind"], used) if u]
        pull = float(np.mean(pulls)) if pulls else math.nan
        est = summary["pull"]["mean"]
        rows.append(row("anchoring", src, judge, "pull (mean, implied by λ)", pull, est["estimate"], est["ci_low"],
                        est["ci_high"], note=f"over the {int(used.sum())} tasks with a pull (ties scored 0); "
                                             "score scale"))
        used_f = (per_task["pull_vs_framing_status"] == "ok").to_numpy()
        pvf = np.mean((np.sign(prior - framing) * (anchor - framing))[used_f]) if used_f.any() else math.nan
        est = summary["anchor_vs_framing"]["signed_mean"]
        rows.append(row("anchoring", src, judge, "anchor vs framing (signed mean, implied by λ)", pvf,
                        est["estimate"], est["ci_low"], est["ci_high"],
                        note=f"over the {int(used_f.sum())} tasks with a direction; score scale"))
        both = per_task[["mean_blind", "mean_framing"]].notna().all(axis=1).to_numpy()
        fmb = float(np.mean((framing - blind)[both])) if both.any() else math.nan
        rows.append(row("anchoring", src, judge, "framing - blind (mean, implied by δ_framing)", fmb,
                        summary["anchor_vs_framing"]["framing_minus_blind"], note="no interval; score scale"))
        for name, key in (("lambda", "anchoring_lambda"), ("framing_shift", "anchoring_framing_shift")):
            rows.append(row("anchoring", src, judge, key, ph[name], comparable=False,
                            note="latent-scale planted value, not estimated by the scorer (the rows above hold "
                                 "what it implies on the score scale)"))
    return rows
