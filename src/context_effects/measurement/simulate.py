"""Draw a ratings table from the measurement model with known parameters.

Written in plain NumPy, independently of ``model.py``, so that a recovery test checks
the model's indexing and likelihood rather than sharing their bugs. Ratings are drawn
by the latent-variable route (y* = μ + Logistic noise, y = 1 + #{κ_k < y*}), which is
the ordered-logistic law without evaluating its probabilities.

Design (seed 002 §2.2, App. A.2): per item × generator one trial; per trial a Round 1
answer and Round 2 answers, every answer rated blind by every judge, peer answers also
rated informed with d = +1/0/-1; per item one correct and one incorrect anchor (θ = ±θ_a)
rated blind by every judge.

Trial baselines are b_t ~ N(μ_g, σ_b) with a mean quality μ_g per generator
(``generator_mean``; 0 for every generator by default, the paper model's assumption).
Unequal μ_g is the case the paper's model misreads (``model.py``, ``generator_mean``).

- ``design="main"``: Round 1, no-peer, and ``peer_variants`` (2 = authority present and
  absent) answers per peer condition — 8 answers per trial, as in the main corpus.
- ``design="decomposition"``: Round 1, no-peer, three content-only and three peer arms
  (one each), as in the decomposition corpora.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from context_effects.measurement.data import CONTENT_CONDITIONS, PEER_CONDITIONS, PEER_D

DEFAULT_ETA = {
    # Δ_sp ≈ 0, content mildly harmful when wrong, peers more so; all-wrong worst (seed 002 Table 3/10 shape).
    "no_peer": 0.0,
    "content_correct": 0.05,
    "content_wrong": -0.20,
    "content_mixed": -0.10,
    "peer_correct": -0.10,
    "peer_wrong": -0.45,
    "peer_mixed": -0.20,
}
DEFAULT_KAPPA = (-2.25, -0.75, 0.5, 1.75)


@dataclass
class SimulationTruth:
    """The planted values. ``eta`` is keyed by (generator, condition); ``mu_gen`` is each
    generator's mean trial baseline μ_g."""

    sigma_b: float
    sigma_theta: float
    eta: dict[tuple[str, str], float]
    alpha: dict[str, float]
    beta: dict[str, float]
    gamma: dict[str, float]
    kappa: np.ndarray
    theta_anchor: float
    b: dict[str, float] = field(repr=False)
    theta: dict[str, float] = field(repr=False)
    mu_gen: dict[str, float] = field(default_factory=dict)

    def as_params(self, data, generator_mean: bool = False) -> dict[str, np.ndarray]:
        """Truth in the model's raw parametrisation, indexed like ``data`` (a MeasurementData).

        ``generator_mean``: in the variant's parametrisation, b_t = μ_g + σ_b z_t (with the
        site ``mu_gen``); otherwise the paper's, z_t = b_t / σ_b (the same b_t, so the same
        θ and η, with μ_g folded into z)."""
        b = self.b_array(data)
        trial_of = np.asarray(data.answer_trial)
        mu = np.array([self.mu_gen.get(g, 0.0) for g in data.generators])
        trial_mu = np.zeros(data.n_trials)
        trial_mu[trial_of] = mu[np.asarray(data.answer_generator)]
        z_b = (b - trial_mu) / self.sigma_b if generator_mean else b / self.sigma_b
        eta = np.array([self.eta[c] for c in data.cells])
        eta1 = np.concatenate([[0.0], eta])
        theta = np.array([self.theta[a] for a in data.answers])
        eps = (theta - b[trial_of] - eta1[np.asarray(data.answer_cell) + 1]) / self.sigma_theta
        extra = {"mu_gen": mu} if generator_mean else {}
        return {
            "sigma_b": np.float64(self.sigma_b),
            "sigma_theta": np.float64(self.sigma_theta),
            "eta": eta,
            "log_alpha": np.log([self.alpha[j] for j in data.judges]),
            "beta": np.array([self.beta[j] for j in data.judges]),
            "gamma": np.array([self.gamma[j] for j in data.judges]),
            "kappa_raw": np.sort(np.asarray(self.kappa, float)),
            "z_b": z_b,
            "eps": eps,
            **extra,
        }

    def b_array(self, data) -> np.ndarray:
        return np.array([self.b[t] for t in data.trials])


def _per(names: Sequence[str], value, default) -> dict[str, float]:
    if value is None:
        value = default
    if isinstance(value, Mapping):
        return {n: float(value[n]) for n in names}
    if np.ndim(value) == 0:
        return {n: float(value) for n in names}
    value = list(value)
    if len(value) != len(names):
        raise ValueError(f"expected {len(names)} values, got {len(value)}")
    return {n: float(v) for n, v in zip(names, value)}


def simulate_ratings(
    *,
    n_items: int = 50,
    generators: Sequence[str] = ("gen_a", "gen_b", "gen_c", "gen_d"),
    judges: Sequence[str] = ("judge_a", "judge_b", "judge_c", "judge_d"),
    design: str = "main",
    peer_variants: int = 2,
    anchors: bool = True,
    informed: bool = True,
    theta_anchor: float = 1.5,
    sigma_b: float = 0.7,
    sigma_theta: float = 0.3,
    generator_mean=None,
    eta: Mapping | None = None,
    alpha=None,
    beta=None,
    gamma=None,
    kappa: Sequence[float] = DEFAULT_KAPPA,
    missing_rate: float = 0.0,
    seed: int = 0,
    seed_label: int = 42,
) -> tuple[pd.DataFrame, SimulationTruth]:
    """Return ``(ratings table, truth)``; the table follows the data contract of ``data.py``.

    ``eta`` maps a condition to one shift for every generator, or (generator, condition) to a
    cell shift. ``alpha``/``beta``/``gamma`` are a scalar, a sequence (one per judge) or a
    mapping judge → value; defaults spread the judges (γ of both signs). ``generator_mean``
    (μ_g, the mean of each generator's trial baselines) is a scalar, a sequence (one per
    generator) or a mapping generator → value; default 0 for every generator.
    ``missing_rate`` deletes that share of rating rows at random (recorded misses).
    """
    if design not in ("main", "decomposition"):
        raise ValueError("design must be 'main' or 'decomposition'")
    rng = np.random.default_rng(seed)
    generators, judges = list(generators), list(judges)
    nj = len(judges)
    mu_gen = _per(generators, generator_mean, 0.0)
    alpha_d = _per(judges, alpha, np.linspace(1.2, 1.8, nj))
    beta_d = _per(judges, beta, np.linspace(-0.2, 0.2, nj))
    gamma_d = _per(judges, gamma, np.resize([-0.33, 0.64, -0.24, 0.0, -0.1], nj))
    kappa = np.sort(np.asarray(kappa, float))

    if design == "main":
        arms = [("round1", 0), ("no_peer", 0)] + [(c, v) for c in PEER_CONDITIONS for v in range(peer_variants)]
    else:
        arms = (
            [("round1", 0), ("no_peer", 0)] + [(c, 0) for c in CONTENT_CONDITIONS] + [(c, 0) for c in PEER_CONDITIONS]
        )
    eta_cells: dict[tuple[str, str], float] = {}
    for g in generators:
        for c, _ in arms:
            if c == "round1":
                continue
            if eta is not None and (g, c) in eta:
                eta_cells[(g, c)] = float(eta[(g, c)])
            elif eta is not None and c in eta:
                eta_cells[(g, c)] = float(eta[c])
            else:
                eta_cells[(g, c)] = DEFAULT_ETA[c]

    answer_rows: list[dict] = []
    b: dict[str, float] = {}
    theta: dict[str, float] = {}
    for q in range(n_items):
        item = f"q{q:04d}"
        for g in generators:
            trial = f"{item}|{g}|seed{seed_label}"
            b[trial] = mu_gen[g] + sigma_b * rng.standard_normal()
            for c, v in arms:
                aid = f"{trial}|{c}|{v}"
                shift = 0.0 if c == "round1" else eta_cells[(g, c)]
                theta[aid] = b[trial] + shift + sigma_theta * rng.standard_normal()
                answer_rows.append(
                    {"answer_id": aid, "trial_id": trial, "generator": g, "condition": c, "item_id": item}
                )
        if anchors:
            for c, s in (("anchor_correct", 1.0), ("anchor_incorrect", -1.0)):
                aid = f"{item}|{c}"
                theta[aid] = s * theta_anchor
                answer_rows.append(
                    {"answer_id": aid, "trial_id": f"{item}|anchor", "generator": "", "condition": c, "item_id": item}
                )

    ans = pd.DataFrame(answer_rows)
    blind = ans.merge(pd.DataFrame({"judge": judges}), how="cross")
    blind["pass"] = "blind"
    blind["d"] = 0
    parts = [blind]
    if informed:
        peer = ans.loc[ans["condition"].isin(PEER_CONDITIONS)].merge(pd.DataFrame({"judge": judges}), how="cross")
        peer["pass"] = "informed"
        peer["d"] = peer["condition"].map(PEER_D).astype(int)
        parts.append(peer)
    table = pd.concat(parts, ignore_index=True)

    th = table["answer_id"].map(theta).to_numpy()
    a = table["judge"].map(alpha_d).to_numpy()
    be = table["judge"].map(beta_d).to_numpy()
    ga = table["judge"].map(gamma_d).to_numpy()
    inf = (table["pass"] == "informed").to_numpy()
    mu = a * (th - be) + inf * ga * table["d"].to_numpy()
    ystar = mu + rng.logistic(size=len(table))
    table["rating"] = 1 + (ystar[:, None] > kappa[None, :]).sum(axis=1)
    table["d"] = table["d"].astype(int)
    if missing_rate > 0:
        keep = rng.random(len(table)) >= missing_rate
        table = table.loc[keep].reset_index(drop=True)
    truth = SimulationTruth(
        sigma_b=float(sigma_b),
        sigma_theta=float(sigma_theta),
        eta=eta_cells,
        alpha=alpha_d,
        beta=beta_d,
        gamma=gamma_d,
        kappa=kappa,
        theta_anchor=float(theta_anchor),
        b=b,
        theta=theta,
        mu_gen=mu_gen,
    )
    return table, truth
