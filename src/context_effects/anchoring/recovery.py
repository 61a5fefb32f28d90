"""Study H's planted values against the scorer's estimates (``context_effects.recovery``
gathers every study's rows into ``results/synthetic/recovery.csv``).

Per judge, every statistic the pull table prints (``anchoring.results.pull_table``, from
the scorer's summary in ``results/anchoring/runs/<judge>.json``) against the value λ and
δ_framing imply for the run's tasks, each with the scorer's bootstrap interval over tasks:

* the signed pull ``sign(prior − B̄)·(Ā − B̄)`` (the primary estimand, ties scored 0) and
  the signed anchor − framing difference ``sign(prior − F̄)·(Ā − F̄)``, each as the mean
  with ties scored 0 and the mean with ties left out; the pull's medians too;
* framing − blind, with a t interval over the tasks computed here (the scorer prints none).

Each statistic is a function of repetition means, and its expectation is taken exactly
(:func:`task_distribution`): the distribution of a task's reference mean R̄ (blind or
framing) and anchor mean Ā by convolution of the reply rule's score probabilities
(``anchoring.synthetic.score_probs``) over as many repetitions as the task has valid
scores, a tie (prior = R̄) scored 0 as the scorer scores it, over the tasks the scorer
used (every task with both scores: ties stay in, scored 0). Two shortcuts miss it: the
statistic at the expected scores, ``sign(prior − E R̄)·(E Ā − E R̄)``, is off by up to a
quarter of a point on a task whose prior lies near its reference mean, where R̄ falls on
either side of the prior or on it (the sign is that of the *observed* R̄); and the mean
over the tasks that happened not to tie conditions on the data and drops the ties' zeros
(in ``config/synthetic.yaml``'s runs the two put the anchor − framing target up to 0.17
too high). A mean with ties left out is a ratio over tasks (sum of pulls over
the number of non-tied tasks); its target is the ratio of the expectations. A median's
target is the median of the tasks' pooled distribution (the sample median of independent
tasks converges to it). λ and δ_framing themselves are latent values the scorer does not
estimate (listed, not compared).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from context_effects.recovery_rows import row

#: The scorer's tie tolerance (``anchoring.scoring.TIE_TOL``): |prior − reference| within it is a tie.
TIE_TOL = 1e-9


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


def repetition_mean_distribution(probs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Values and probabilities of the mean of ``n`` independent scores, ``probs[i]`` = P(score = 1 + i)."""
    from context_effects.anchoring.judging import SCORE_MIN

    total = np.array([1.0])
    for _ in range(int(n)):
        total = np.convolve(total, probs)
    return (np.arange(len(total)) + SCORE_MIN * n) / n, total


def task_distribution(backend: Any, task_id: str, gold: float, prior: float, reference: str, n_reference: int,
                      n_anchor: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The exact distribution of one task's ``sign(prior − R̄)·(Ā − R̄)`` (R̄ the mean of
    ``n_reference`` scores of ``reference``, blind or framing; Ā of ``n_anchor`` anchor
    scores; independent given the task): values, probabilities and whether each is a tie
    (R̄ = prior, scored 0). The reply rule's probabilities are the simulator's own."""
    from context_effects.anchoring.synthetic import condition_mean, score_probs

    sd = backend.params["anchoring_noise_sd"]
    ref, p_ref = repetition_mean_distribution(score_probs(condition_mean(backend, task_id, gold, reference), sd),
                                              n_reference)
    anc, p_anc = repetition_mean_distribution(
        score_probs(condition_mean(backend, task_id, gold, "anchor", prior), sd), n_anchor)
    tie = np.abs(float(prior) - ref) <= TIE_TOL
    values = np.where(tie[:, None], 0.0, np.sign(float(prior) - ref)[:, None] * (anc[None, :] - ref[:, None]))
    probs = p_ref[:, None] * p_anc[None, :]
    return values.ravel(), probs.ravel(), np.broadcast_to(tie[:, None], values.shape).ravel()


def pooled_median(values: np.ndarray, probs: np.ndarray) -> float:
    """The median of a discrete distribution (``probs`` need not sum to 1): the value where
    the CDF reaches one half, the midpoint of two values where it stops at exactly one half
    (as a sample median of an even count averages its middle two)."""
    keep = probs > 0
    order = np.argsort(values[keep], kind="stable")
    v, p = values[keep][order], probs[keep][order] / probs[keep].sum()
    uniq, start = np.unique(v, return_index=True)
    cdf = np.cumsum(np.add.reduceat(p, start))
    i = int(np.searchsorted(cdf, 0.5 - 1e-12))
    if abs(cdf[i] - 0.5) <= 1e-12 and i + 1 < len(uniq):
        return float((uniq[i] + uniq[i + 1]) / 2.0)
    return float(uniq[i])


def signed_targets(backend: Any, per_task: pd.DataFrame, reference: str) -> dict[str, float]:
    """The planted values of the scorer's statistics of ``sign(prior − R̄)·(Ā − R̄)``, R̄ of
    ``reference`` (``blind``: the pull; ``framing``: anchor vs framing), over the tasks the
    scorer used (a reference and an anchor score: status ``ok`` or ``tie``), each task with
    as many repetitions as it has valid scores: ``mean`` (ties scored 0), ``mean_ties_excluded``,
    ``median``, ``median_ties_excluded``, ``n_tasks``."""
    status = per_task["pull_status" if reference == "blind" else "pull_vs_framing_status"]
    dists = []
    for t in per_task[status.isin(["ok", "tie"]).to_numpy()].to_dict("records"):
        dists.append(task_distribution(backend, t["task_id"], float(t["gold_score"]), float(t["prior_score"]),
                                       reference, int(t[f"n_{reference}"]), int(t["n_anchor"])))
    out = {"n_tasks": len(dists)}
    if not dists:
        return out | dict.fromkeys(("mean", "mean_ties_excluded", "median", "median_ties_excluded"), math.nan)
    values = np.concatenate([v for v, _, _ in dists])
    probs = np.concatenate([p for _, p, _ in dists])
    tie = np.concatenate([t for _, _, t in dists])
    # Each task's distribution sums to 1: the mean over tasks of E[pull] is the pooled sum / tasks.
    out["mean"] = float(np.sum(values * probs) / len(dists))
    untied = float(np.sum(probs[~tie]))
    out["mean_ties_excluded"] = float(np.sum((values * probs)[~tie]) / untied) if untied > 0 else math.nan
    out["median"] = pooled_median(values, probs)
    out["median_ties_excluded"] = pooled_median(values[~tie], probs[~tie]) if untied > 0 else math.nan
    return out


def _t_interval(x: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    from scipy import stats

    x = x[np.isfinite(x)]
    if len(x) < 2:
        return (float(x.mean()) if len(x) else math.nan), math.nan, math.nan
    m, se = float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x)))
    if se == 0:
        return m, m, m
    lo, hi = stats.t.interval(level, len(x) - 1, loc=m, scale=se)
    return m, float(lo), float(hi)


def pull_rows(planted: Mapping[str, Any], runs: Mapping[str, Mapping[str, Any]]) -> list[dict]:
    """Study H rows: each statistic of the pull table against what λ and δ_framing imply for the run's tasks."""
    from context_effects.anchoring.synthetic import anchoring_blind_mean
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
        src = f"anchoring/runs/{judge}"
        for reference, name, key in (("blind", "pull", "pull"), ("framing", "anchor vs framing", "anchor_vs_framing")):
            target = signed_targets(backend, per_task, reference)
            s = summary[key]
            if reference == "blind":
                printed = {"mean": s["mean"], "median": s["median"],
                           "mean_ties_excluded": summary["pull_ties_excluded"]["mean"],
                           "median_ties_excluded": summary["pull_ties_excluded"]["median"]}
            else:
                printed = {"mean": s["signed_mean"], "mean_ties_excluded": s["signed_mean_ties_excluded"]}
            for stat, est in printed.items():
                what = ("signed " if reference == "framing" else "") + stat.split("_")[0]
                ties = ", ties excluded" if stat.endswith("ties_excluded") else ""
                tie_note = ("ties left out (the sensitivity analysis)" if ties else
                            "ties scored 0" + (" (the primary estimand)" if reference == "blind" else ""))
                rows.append(row("anchoring", src, judge, f"{name} ({what}{ties}, implied by λ)", target[stat],
                                est["estimate"], est["ci_low"], est["ci_high"],
                                note=f"{tie_note}; exact expectation over the {target['n_tasks']} tasks with a "
                                     f"{reference} and an anchor score; bootstrap interval over tasks; score scale"))
        sd = ph["noise_sd"]
        e_blind = np.array([anchoring_blind_mean(backend, t, g) for t, g in zip(per_task["task_id"],
                                                                                per_task["gold_score"])])
        both = per_task[["mean_blind", "mean_framing"]].notna().all(axis=1).to_numpy()
        # Linear in the scores: the expectation of framing − blind is the difference of expected scores.
        fmb = expected_score(e_blind + ph["framing_shift"], sd) - expected_score(e_blind, sd)
        planted_fmb = float(np.mean(fmb[both])) if both.any() else math.nan
        _, lo, hi = _t_interval(per_task["framing_minus_blind"].to_numpy(float)[both])
        rows.append(row("anchoring", src, judge, "framing - blind (mean, implied by δ_framing)", planted_fmb,
                        summary["anchor_vs_framing"]["framing_minus_blind"], lo, hi,
                        note=f"over the {int(both.sum())} tasks with both; t interval over tasks computed here "
                             "(the scorer prints none); score scale"))
        for name, key in (("lambda", "anchoring_lambda"), ("framing_shift", "anchoring_framing_shift")):
            rows.append(row("anchoring", src, judge, key, ph[name], comparable=False,
                            note="latent-scale planted value, not estimated by the scorer (the rows above hold "
                                 "what it implies on the score scale)"))
    return rows
