"""The hierarchical ordinal measurement model of seed 002 (§2.3, Eq. 6-8; priors App. C.1).

    θ_i   = b_t(i) + r_i·η_c(i) + σ_θ·ε_i,   b_t = σ_b·z_t,  z_t, ε_i ~ N(0, 1)   (non-centred)
    μ_ijp = α_j (θ_i − β_j) + 1[p = informed]·γ_j·d_i
    y_ijp ~ OrderedLogistic(μ_ijp, κ),   κ = sort(κ_raw)

Anchors have θ pinned at ±θ_a. Priors: η ~ N(0, 1), σ_b, σ_θ ~ HalfNormal(1),
log α_j ~ N(0, 0.4), β_j ~ N(0, 1), γ_j ~ N(0, 0.5), κ_raw ~ N(0, 1).

Sensitivity variant (``generator_mean=True``; this project's addition, not the paper's
model): b_t = μ_g(t) + σ_b·z_t with a per-generator baseline mean μ_g ~ N(0, 1). In the
paper's model every trial baseline shrinks toward 0; when generators differ in mean
quality, that shrinkage is absorbed into each generator's shifts η (all of a generator's
Round-2 cells move by a common offset at the cost of its Round-1 answers alone), so the
better generator's shifts come out too high and the weaker one's too low. μ_g is
identified: the anchors pin θ at ±θ_a, which fixes origin and unit of θ (and with them
each judge's β_j and α_j), and μ_g is then the mean latent quality of generator g's
Round-1 answers on that scale.

Two layouts compute the same log-likelihood: ``"long"`` gathers per rating (the
straightforward form), ``"grid"`` broadcasts over a dense answer × judge array
(no per-rating scatter-add in the gradient; faster on CPU).

``split_means`` (a tuple of local sites, ``("z_b",)``, ``("eps",)`` or both; True = both)
samples the same non-centred locals in another orthonormal basis: per group (for z_b the
trials of one generator; for ε the answers of one generator × condition cell, Round 1
included) the normalised group mean z̄·√n and the group's Helmert contrasts. The map is a
rotation, so the N(0, I) prior, the likelihood and the posterior are unchanged; what changes
is that the few directions that trade off against η — shifting every baseline of a
generator against its shifts, or every answer deviation of a cell against that cell's η —
become single coordinates, which join the dense mass-matrix block of the globals
(``global_sites``) instead of being spread over thousands of diagonal ones. ``z_b`` and
``eps`` are still recorded (deterministic sites), so everything downstream reads the same
draws. Why z_b's: a generator's Round-1 answers alone place its mean baseline, while its
Round-2 cells place baseline + shift, so each shift's posterior leans on that mean
(correlation about −0.66 on simulated 1/4-scale data) and its cells on each other (0.5–0.7);
spread over a generator's trials, that mean is a direction the diagonal metric cannot scale,
and it was the slowest-mixing quantity of the fit.

``marginal=True`` (grid layout) integrates ε_i out instead of sampling it. Given the
globals and b_t, the ratings of answer i (blind and informed, all judges) are independent
given θ_i, so p(y_i· | ·) = ∫ N(ε; 0, 1) Π_j p(y_ij | m_i + σ_θ ε) dε with m_i = b_t(i) + r_i η_c(i),
computed by adaptive Gauss–Hermite quadrature (nodes centred and scaled per answer by a
Laplace approximation) with ``quadrature_nodes`` nodes. The posterior of the
remaining parameters is the same (up to the quadrature error); θ_i is recovered afterwards
from the quadrature node weights (``theta_moments``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

from context_effects.measurement.data import CONTENT_OF_PEER, MeasurementData

LAYOUTS = ("grid", "long")
ORDINALS = ("stable", "numpyro")
SHIFT_PRIORS = ("cell", "increment")
#: Sites whose posterior is strongly correlated (cutpoints vs severities vs
#: discriminations vs shifts); a dense mass-matrix block over them cut the leapfrog
#: steps per draw ~8x at full scale (about 63 instead of about 511 after full adaptation,
#: measured on simulated paper-scale data while the model was developed; see
#: bench/measurement_speed.py for the comparison at 1/10 scale).
GLOBAL_SITES = ("sigma_b", "sigma_theta", "eta", "log_alpha", "beta", "gamma", "kappa_raw")
#: The per-generator baseline means μ_g of the ``generator_mean`` variant (a global site:
#: joins the dense block when the option is on; μ_g trades off against η and z_b directly).
GENERATOR_MEAN_SITE = "mu_gen"
LOCAL_SITES = ("z_b", "eps")
#: ModelOptions.split_means: the group-mean coordinates (global: the dense block) and the
#: within-group contrasts (local) that replace z_b and eps as sample sites.
SPLIT_MEAN_SITES = {"z_b": "z_b_mean", "eps": "eps_mean"}
SPLIT_CONTRAST_SITES = {"z_b": "z_b_contrast", "eps": "eps_contrast"}
#: Newton steps that centre the adaptive Gauss–Hermite rule (ModelOptions.marginal).
NEWTON_STEPS = 3
PRIOR_SD = {"log_alpha": 0.4, "beta": 1.0, "gamma": 0.5, "kappa_raw": 1.0, "eta": 1.0, GENERATOR_MEAN_SITE: 1.0}


@dataclass(frozen=True)
class ModelOptions:
    """Model variants that share one code path.

    theta_anchor: anchor magnitude θ_a (sensitivity fits use 1.0, 1.5, 2.0).
    marginal: integrate the answer deviations ε out by adaptive Gauss–Hermite quadrature
        (grid layout only) instead of sampling them; ``quadrature_nodes`` nodes. Against a
        brute-force integral the 9-node rule's log-likelihood error is ~1e-11 per answer at
        σ_θ = 0.3 and ~2e-7 at σ_θ = 1 (simulated data), growing beyond σ_θ ≈ 2. Off by
        default: same posterior, but not faster (bench/measurement_speed.py, variant m): a
        gradient costs ~15-35x the sampled-ε one, steps per draw only halve, and η's ESS
        is limited by the globals and trial baselines, not by ε.
    layout: "grid" (fast) or "long" (per-rating gathers); same likelihood.
    ordinal: "stable" log-diff-of-sigmoids, or "numpyro" = dist.OrderedLogistic, which
        forms probabilities before the log and underflows to -inf in float32 at large |μ|.
    shift_prior: "cell" puts η ~ N(0, 1) on each (generator, condition) cell; "increment"
        puts N(0, 1) on Δ_sp, Δ_content,k and Δ_pp,c (the App. C.1 reading with separate
        η_regen / η_content) and builds the cells as their sums. Decomposition corpora only.
    generator_mean: the sensitivity variant b_t ~ N(μ_g(t), σ_b) with μ_g ~ N(0, 1) per
        generator (module docstring); off = the paper's b_t ~ N(0, σ_b). Any layout, either
        shift prior, sampled or marginal ε; still non-centred (b_t = μ_g + σ_b z_t).
    split_means: the local sites (``"z_b"``, ``"eps"``) sampled as group means + Helmert
        contrasts (module docstring): the same posterior in a basis where the directions
        that trade off against η are in the dense mass-matrix block. True = both, False = none.
    """

    theta_anchor: float = 1.5
    layout: str = "grid"
    ordinal: str = "stable"
    shift_prior: str = "cell"
    marginal: bool = False
    quadrature_nodes: int = 9
    generator_mean: bool = False
    split_means: tuple[str, ...] = ()

    def __post_init__(self):
        split = {True: LOCAL_SITES, False: ()}.get(self.split_means, self.split_means) \
            if isinstance(self.split_means, bool) else tuple(self.split_means)
        if set(split) - set(LOCAL_SITES):
            raise ValueError(f"split_means takes sites of {LOCAL_SITES}, got {self.split_means!r}")
        object.__setattr__(self, "split_means", tuple(s for s in LOCAL_SITES if s in split))
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.ordinal not in ORDINALS:
            raise ValueError(f"ordinal must be one of {ORDINALS}, got {self.ordinal!r}")
        if self.shift_prior not in SHIFT_PRIORS:
            raise ValueError(f"shift_prior must be one of {SHIFT_PRIORS}, got {self.shift_prior!r}")
        if not self.theta_anchor > 0:
            raise ValueError("theta_anchor must be positive")
        if self.marginal and self.layout != "grid":
            raise ValueError("marginal=True (quadrature over ε) needs layout='grid'")
        if self.marginal and not 2 <= self.quadrature_nodes <= 200:
            raise ValueError(f"quadrature_nodes must be in 2..200, got {self.quadrature_nodes}")


def standard_local_sites(options: ModelOptions) -> tuple[str, ...]:
    """z_b and ε as the model records them (ε is absent when integrated out)."""
    return ("z_b",) if options.marginal else LOCAL_SITES


def split_sites(options: ModelOptions) -> tuple[str, ...]:
    """The recorded local sites this variant samples as group means + contrasts."""
    return tuple(s for s in standard_local_sites(options) if s in options.split_means)


def local_sites(options: ModelOptions) -> tuple[str, ...]:
    """Names of the per-trial / per-answer sample sites of this variant."""
    split = split_sites(options)
    return tuple(SPLIT_CONTRAST_SITES[s] if s in split else s for s in standard_local_sites(options))


def helmert_layout(group: np.ndarray) -> dict[str, np.ndarray]:
    """Index arrays for ``helmert_combine``: elements labelled ``group`` (0..G−1, every group
    non-empty) laid out as a (G, M) grid, M the largest group, with each group's contrasts
    numbered consecutively (a group of n elements has n − 1)."""
    group = np.asarray(group, np.int64)
    n_groups = int(group.max()) + 1 if group.size else 0
    sizes = np.bincount(group, minlength=n_groups)
    if (sizes == 0).any():
        raise ValueError("helmert_layout: every group needs at least one element")
    width = int(sizes.max()) if n_groups else 1
    order = np.argsort(group, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    position = np.empty_like(group)
    position[order] = np.arange(group.size) - np.repeat(starts, sizes)
    n_contrasts = sizes - 1
    first = np.concatenate([[0], np.cumsum(n_contrasts)[:-1]]).astype(np.int64)
    # index into [contrasts..., 0]: unused grid slots read the trailing zero
    source = np.full((n_groups, width - 1), int(n_contrasts.sum()), np.int64)
    for g in range(n_groups):
        source[g, : n_contrasts[g]] = first[g] + np.arange(n_contrasts[g])
    return {
        "slot": group * width + position,
        "contrast_source": source.reshape(-1),
        "inv_sqrt_n": 1.0 / np.sqrt(sizes.astype(np.float64)),
    }


def helmert_combine(mean, contrast, slot, contrast_source, inv_sqrt_n):
    """x = Q·[mean, contrast] for the orthonormal Q whose columns are, per group, the
    normalised ones vector and the Helmert contrasts (k-th: 1/√(k(k+1)) on the first k
    elements, −k/√(k(k+1)) on element k+1). O(N) by a reverse cumulative sum, no matrix."""
    n_groups = inv_sqrt_n.shape[0]
    v = jnp.concatenate([contrast, jnp.zeros((1,), contrast.dtype)])[contrast_source].reshape(n_groups, -1)
    k = jnp.arange(1, v.shape[1] + 1, dtype=v.dtype)
    cv = v * jax.lax.rsqrt(k * (k + 1))
    zero = jnp.zeros((n_groups, 1), v.dtype)
    upper = jnp.concatenate([jnp.cumsum(cv[:, ::-1], axis=1)[:, ::-1], zero], axis=1)  # Σ_{k ≥ i} c_k v_k
    lower = jnp.concatenate([zero, k * cv], axis=1)  # (i − 1) c_{i−1} v_{i−1}
    grid = (mean * inv_sqrt_n)[:, None] + upper - lower
    return grid.reshape(-1)[slot]


def split_groups(data: MeasurementData) -> dict[str, np.ndarray]:
    """Group labels of the locals under ``split_means``: a trial's generator; an answer's cell
    (Round-1 answers: one group per generator after the Round-2 cells)."""
    trial_generator = np.zeros(data.n_trials, np.int64)
    trial_generator[data.answer_trial] = data.answer_generator
    answer_group = np.where(data.answer_cell >= 0, data.answer_cell, data.n_cells + data.answer_generator)
    # groups numbered densely (a generator may have no Round-1 answers in a subset)
    return {"z_b": np.unique(trial_generator, return_inverse=True)[1],
            "eps": np.unique(answer_group, return_inverse=True)[1]}


def gauss_hermite_normal(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes x_k and log weights of ∫ N(ε; 0, 1) f(ε) dε ≈ Σ_k w_k f(x_k) (Σ w_k = 1)."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return x, np.log(w / w.sum())


def global_sites(options: ModelOptions) -> tuple[str, ...]:
    """Names of the global sample sites (the dense mass-matrix block)."""
    sites = GLOBAL_SITES
    if options.shift_prior == "increment":
        sites = tuple("eta_increment" if s == "eta" else s for s in sites)
    if options.generator_mean:
        sites = (*sites, GENERATOR_MEAN_SITE)
    sites = (*sites, *(SPLIT_MEAN_SITES[s] for s in split_sites(options)))
    return sites


# ----------------------------------------------------------------------------- ordinal


@jax.custom_jvp
def log_sigmoid(x):
    """log σ(x) = min(x, 0) − log1p(e^{−|x|}), with a hand-written derivative that reuses
    e^{−|x|}: autodiff of ``jax.nn.log_sigmoid`` spends extra exp/log calls, and these
    transcendental calls dominate the gradient's cost (~4x in float64 on CPU)."""
    e = jnp.exp(-jnp.abs(x))
    return jnp.minimum(x, 0.0) - jnp.log1p(e)


@log_sigmoid.defjvp
def _log_sigmoid_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    e = jnp.exp(-jnp.abs(x))
    value = jnp.minimum(x, 0.0) - jnp.log1p(e)
    # d/dx log σ(x) = σ(−x) = e/(1+e) for x ≥ 0 and 1/(1+e) for x < 0
    return value, t * jnp.where(x >= 0, e, 1.0) / (1.0 + e)


def _log1mexp(x):
    """log(1 − exp(x)) for x < 0 without cancellation (Mächler 2012)."""
    return jnp.where(x > -0.6931471805599453, jnp.log(-jnp.expm1(x)), jnp.log1p(-jnp.exp(x)))


def select_by_rating(y, values, first: int = 0):
    """``values[y − first]`` where ``first ≤ y < first + len(values)``, else 0, for a short
    1-D table (the cutpoints, their gaps), as one select per entry.

    Indexing the table with every rating is a gather whose gradient is a scatter-add, and
    with the ratings an argument of the compiled program (as in the sampler) XLA on CPU then
    keeps the rating grid's intermediates apart; selects fuse with the rest of the
    likelihood into one loop over the grid. Same values; one gradient of the rehearsal's
    blind-quality fit took 0.34 instead of 1.35 ms, of its main fit 0.24 instead of 0.41
    (docs/benchmarks.md, "The documented rehearsal")."""
    out = jnp.zeros(jnp.shape(y), values.dtype)
    for k in range(values.shape[0]):
        out = jnp.where(y == first + k, values[k], out)
    return out


def ordered_logistic_logprob(y, mu, cutpoints):
    """log P(y | μ, κ) for 0-based categories y ∈ {0..K−1}, stable at any |μ| in float32.

    With a = κ_y − μ and b = κ_{y−1} − μ, σ(a) − σ(b) = σ(a)·σ(−b)·(1 − e^{−(κ_y − κ_{y−1})}),
    so log p = log σ(a) + log σ(−b) + log1mexp(−(κ_y − κ_{y−1})): no difference of two
    nearly equal probabilities is ever formed, and the last term depends on κ only.
    """
    cutpoints = jnp.asarray(cutpoints)
    mu = jnp.asarray(mu)
    k1 = cutpoints.shape[-1]
    lp = jnp.where(y < k1, log_sigmoid(select_by_rating(y, cutpoints) - mu), 0.0)
    lp = lp + jnp.where(y > 0, log_sigmoid(mu - select_by_rating(y, cutpoints, first=1)), 0.0)
    return lp + select_by_rating(y, _log1mexp(-jnp.diff(cutpoints)), first=1)


def _ordinal_logprob(options: ModelOptions, y, mu, cutpoints):
    if options.ordinal == "numpyro":
        return dist.OrderedLogistic(mu, cutpoints).log_prob(y)
    return ordered_logistic_logprob(y, mu, cutpoints)


# ----------------------------------------------------------------------------- arrays


def increment_matrix(data: MeasurementData) -> np.ndarray:
    """M with η_cells = M @ increments, increments labelled like ``data.cells``.

    (g, no_peer) ↦ Δ_sp; (g, content_k) ↦ Δ_content,k; (g, peer_c) ↦ Δ_pp,c (Eq. 1-4).
    """
    n = data.n_cells
    m = np.zeros((n, n))
    for i, (g, c) in enumerate(data.cells):
        m[i, i] = 1.0
        if c == "no_peer":
            continue
        sp = data.cell_index(g, "no_peer")
        if sp is None:
            raise ValueError(f"shift_prior='increment' needs a no_peer cell for generator {g!r}")
        m[i, sp] = 1.0
        if c in CONTENT_OF_PEER:
            k = data.cell_index(g, CONTENT_OF_PEER[c])
            if k is None:
                raise ValueError(f"shift_prior='increment' needs cell ({g!r}, {CONTENT_OF_PEER[c]!r})")
            m[i, k] = 1.0
    return m


def model_arrays(data: MeasurementData, options: ModelOptions, dtype=None) -> dict[str, jax.Array]:
    """Device arrays the model reads (passed as model arguments so a refit of the same
    shapes reuses the compiled sampler)."""
    fdt = dtype or jnp.result_type(float)
    arr: dict[str, np.ndarray] = {
        "answer_trial": data.answer_trial,
        # index into [0, η...]: 0 encodes r_i = 0 (Round 1)
        "answer_cell1": data.answer_cell + 1,
        "anchor_theta": data.anchor_sign.astype(np.float64) * options.theta_anchor,
    }
    if options.layout == "long":
        arr.update(
            row_answer=data.row_answer,
            row_judge=data.row_judge,
            row_infd=(data.row_informed * data.row_d).astype(np.float64),
            row_y=data.row_y,
        )
    else:
        g = data.grid
        arr.update(
            blind_y=g["blind_y"],
            blind_w=g["blind_mask"].astype(np.float64),
            inf_answer=g["inf_answer"],
            inf_y=g["inf_y"],
            inf_w=g["inf_mask"].astype(np.float64),
            inf_d=g["inf_d"].astype(np.float64),
        )
    if options.shift_prior == "increment":
        arr["eta_map"] = increment_matrix(data)
    if options.generator_mean:
        arr["answer_generator"] = data.answer_generator
    if split_sites(options):
        for site, group in split_groups(data).items():
            if site in split_sites(options):
                arr.update({f"{site}_{k}": v for k, v in helmert_layout(group).items()})
    if options.marginal:
        if data.n_answers and np.any(data.grid["inf_answer"] >= data.n_answers):
            raise ValueError("marginal=True expects informed ratings of experimental answers only, not anchors")
        arr["quad_x"], arr["quad_logw"] = gauss_hermite_normal(options.quadrature_nodes)
    return {k: jnp.asarray(v, dtype=fdt if np.issubdtype(v.dtype, np.floating) else jnp.int32) for k, v in arr.items()}


# ----------------------------------------------------------------------------- pieces


def constrained(params: Mapping[str, jax.Array], arrays: Mapping[str, jax.Array]) -> dict[str, jax.Array]:
    """α, κ and cell shifts η from the sampled (raw) parameters."""
    eta = params["eta"] if "eta" in params else arrays["eta_map"] @ params["eta_increment"]
    return {
        "alpha": jnp.exp(params["log_alpha"]),
        "kappa": jnp.sort(params["kappa_raw"], axis=-1),
        "eta": eta,
    }


def latent_mean(params: Mapping[str, jax.Array], arrays: Mapping[str, jax.Array], eta=None) -> jax.Array:
    """m_i = b_t(i) + r_i η_c(i) for the experimental answers (θ_i = m_i + σ_θ ε_i), with
    b_t = σ_b z_t, or b_t = μ_g(t) + σ_b z_t when the draw has μ_g (``generator_mean``)."""
    if eta is None:
        eta = constrained(params, arrays)["eta"]
    eta1 = jnp.concatenate([jnp.zeros((1,), eta.dtype), eta])
    m = params["sigma_b"] * params["z_b"][arrays["answer_trial"]] + eta1[arrays["answer_cell1"]]
    if GENERATOR_MEAN_SITE in params:
        if "answer_generator" not in arrays:
            raise ValueError("a draw with generator means μ_g needs arrays built with generator_mean=True")
        m = m + params[GENERATOR_MEAN_SITE][arrays["answer_generator"]]
    return m


def latent_quality(params: Mapping[str, jax.Array], arrays: Mapping[str, jax.Array], eta=None) -> jax.Array:
    """θ for ``[experimental answers..., anchors...]`` (Eq. 6; anchors pinned)."""
    theta = latent_mean(params, arrays, eta) + params["sigma_theta"] * params["eps"]
    return jnp.concatenate([theta, arrays["anchor_theta"].astype(theta.dtype)])


def ordered_logistic_derivs(y, mu, cutpoints):
    """(∂/∂μ, −∂²/∂μ²) of log P(y | μ, κ): with a = κ_y − μ, b = κ_{y−1} − μ,
    log p = log σ(a) + log σ(−b) + const, so the score is σ(b) − σ(−a) and the (positive)
    curvature σ(a)σ(−a) + σ(b)σ(−b) — the ordered logit is log-concave in μ."""
    k1 = cutpoints.shape[-1]
    has_up = y < k1
    has_lo = y > 0
    s_a = jax.nn.sigmoid(select_by_rating(y, cutpoints) - mu)
    s_b = jax.nn.sigmoid(select_by_rating(y, cutpoints, first=1) - mu)
    score = jnp.where(has_lo, s_b, 0.0) - jnp.where(has_up, 1.0 - s_a, 0.0)
    curv = jnp.where(has_up, s_a * (1.0 - s_a), 0.0) + jnp.where(has_lo, s_b * (1.0 - s_b), 0.0)
    return score, curv


def _per_answer(params, arrays, c, theta, fn):
    """Σ over each answer's ratings (blind and informed, all judges) of ``fn(y, μ)``, for θ of
    shape (n_answers, *S) → (n_answers, *S) per output of ``fn``."""
    alpha, beta, gamma = c["alpha"], params["beta"], params["gamma"]
    n, extra = theta.shape[0], (None,) * (theta.ndim - 1)
    inf = arrays["inf_answer"]
    blind = fn(arrays["blind_y"][:n][(slice(None), *extra)], alpha * (theta[..., None] - beta))
    informed = fn(
        arrays["inf_y"][(slice(None), *extra)],
        alpha * (theta[inf][..., None] - beta) + arrays["inf_d"][(slice(None), *extra, None)] * gamma,
    )
    w_b = arrays["blind_w"][:n][(slice(None), *extra)] > 0
    w_i = arrays["inf_w"][(slice(None), *extra)] > 0
    return tuple(
        jnp.sum(jnp.where(w_b, vb, 0.0), -1).at[inf].add(jnp.sum(jnp.where(w_i, vi, 0.0), -1))
        for vb, vi in zip(blind, informed)
    )


def _quadrature_nodes(params, arrays, options: ModelOptions, c):
    """Adaptive Gauss–Hermite nodes ε_ik = ε̂_i + τ_i x_k and log-weights for
    ∫ N(ε; 0, 1) e^{L_i(ε)} dε ≈ τ_i Σ_k w_k e^{x_k²/2} N(ε_ik; 0, 1)/N(x_k; 0, 1) e^{L_i(ε_ik)}.

    ε̂_i, τ_i: ``NEWTON_STEPS`` damped Newton steps from ε = 0 on the log-concave
    −ε²/2 + L_i(ε) and the curvature there (a Laplace approximation). Any smooth centre and scale give a valid
    rule, and these are differentiable, so NUTS sees one consistent function; centring on
    each answer's conditional posterior keeps the rule accurate when the ratings pin θ_i
    tightly (large σ_θ α_j), where fixed nodes at the prior need many more points.
    """
    m = latent_mean(params, arrays, eta=c["eta"])
    s, kappa, alpha = params["sigma_theta"], c["kappa"], c["alpha"]

    def score_curv(eps):
        g, h = _per_answer(params, arrays, c, m + s * eps, lambda y, mu: _scaled_derivs(y, mu, kappa, alpha))
        return s * g, s * s * h

    # Damped Newton: far in a tail the ordered logit is nearly linear (curvature → 0), so an
    # undamped step from ε = 0 can overshoot by many prior SDs; steps are capped at 1.
    centre = jnp.zeros_like(m)
    for _ in range(NEWTON_STEPS):
        g, h = score_curv(centre)
        centre = centre + jnp.clip((g - centre) / (1.0 + h), -1.0, 1.0)
    g, h = score_curv(centre)
    tau = jax.lax.rsqrt(1.0 + h)
    x = arrays["quad_x"]
    eps = centre[:, None] + tau[:, None] * x
    logw = arrays["quad_logw"] + jnp.log(tau)[:, None] + 0.5 * x**2 - 0.5 * eps**2
    return m, eps, logw


def _scaled_derivs(y, mu, kappa, alpha):
    g, h = ordered_logistic_derivs(y, mu, kappa)
    return alpha * g, alpha * alpha * h


def _answer_node_loglik(params, arrays, options: ModelOptions, c):
    """θ at the nodes (n_answers, K), log node weights + each answer's log-likelihood there,
    and the anchors' (fixed-θ) blind log-likelihood."""
    alpha, kappa, beta = c["alpha"], c["kappa"], params["beta"]
    m, eps, logw = _quadrature_nodes(params, arrays, options, c)
    theta = m[:, None] + params["sigma_theta"] * eps
    (node,) = _per_answer(params, arrays, c, theta, lambda y, mu: (_ordinal_logprob(options, y, mu, kappa),))
    n = m.shape[0]
    mu_a = alpha * (arrays["anchor_theta"].astype(m.dtype)[:, None] - beta)
    lp_a = jnp.where(arrays["blind_w"][n:] > 0, _ordinal_logprob(options, arrays["blind_y"][n:], mu_a, kappa), 0.0)
    return theta, logw + node, jnp.sum(lp_a)


def theta_moments(params: Mapping[str, jax.Array], arrays: Mapping[str, jax.Array], options: ModelOptions):
    """E[θ_i | y, globals, b] and E[θ_i² | y, globals, b] for the experimental answers of a
    ``marginal`` model: the posterior of ε_i given the rest puts weight ∝ (node weight) ×
    p(y_i· | ε_ik) on node ε_ik (the likelihood's own quadrature: both are ratios of integrals)."""
    c = constrained(params, arrays)
    theta, lw, _ = _answer_node_loglik(params, arrays, options, c)
    post = jax.nn.softmax(lw, axis=-1)
    return jnp.sum(post * theta, axis=-1), jnp.sum(post * theta**2, axis=-1)


def log_likelihood(
    params: Mapping[str, jax.Array],
    arrays: Mapping[str, jax.Array],
    options: ModelOptions = ModelOptions(),
    *,
    per_rating: bool = False,
):
    """Σ log p(y | params) over all ratings (Eq. 7-8), or with ``options.marginal`` the
    log-likelihood with ε integrated out; ``per_rating`` returns the terms
    (long layout: one per row in data order; grid: (blind grid, informed grid), 0 where masked)."""
    c = constrained(params, arrays)
    if options.marginal:
        if per_rating:
            raise ValueError("per_rating terms do not exist when ε is integrated out (marginal=True)")
        _, lw, lp_anchor = _answer_node_loglik(params, arrays, options, c)
        return jnp.sum(jax.nn.logsumexp(lw, axis=-1)) + lp_anchor
    alpha, kappa = c["alpha"], c["kappa"]
    beta, gamma = params["beta"], params["gamma"]
    theta = latent_quality(params, arrays, eta=c["eta"])
    if options.layout == "long":
        j = arrays["row_judge"]
        mu = alpha[j] * (theta[arrays["row_answer"]] - beta[j]) + arrays["row_infd"] * gamma[j]
        lp = _ordinal_logprob(options, arrays["row_y"], mu, kappa)
        return lp if per_rating else jnp.sum(lp)
    mu_b = alpha * (theta[:, None] - beta)
    lp_b = jnp.where(arrays["blind_w"] > 0, _ordinal_logprob(options, arrays["blind_y"], mu_b, kappa), 0.0)
    theta_i = theta[arrays["inf_answer"]]
    mu_i = alpha * (theta_i[:, None] - beta) + arrays["inf_d"][:, None] * gamma
    lp_i = jnp.where(arrays["inf_w"] > 0, _ordinal_logprob(options, arrays["inf_y"], mu_i, kappa), 0.0)
    if per_rating:
        return lp_b, lp_i
    return jnp.sum(lp_b) + jnp.sum(lp_i)


#: ``helmert_combine`` as one program (see ``make_model``).
_helmert_combine = jax.jit(helmert_combine)


def make_model(data: MeasurementData, options: ModelOptions = ModelOptions()) -> Callable:
    """The NumPyro model; call it with ``model_arrays(data, options)``.

    The likelihood (and split_means's change of basis) are jitted functions: inside the
    sampler's and the SVI start's compiled programs they are inlined, unchanged; where
    numpyro runs the model eagerly (its sampler loop computes the first state's
    deterministic sites, e.g. η under the increment prior, outside any compiled program)
    they are one program each instead of one per operation (~150 programs to compile)."""
    n_cells, n_judges, n_generators = data.n_cells, data.n_judges, len(data.generators)
    n_trials, n_answers, n_cut = data.n_trials, data.n_answers, data.n_categories - 1
    loglik = jax.jit(functools.partial(log_likelihood, options=options))

    def normal(site, n, sd=1.0):
        return numpyro.sample(site, dist.Normal(0.0, sd).expand([n]).to_event(1))

    def model(arrays):
        params = {
            "sigma_b": numpyro.sample("sigma_b", dist.HalfNormal(1.0)),
            "sigma_theta": numpyro.sample("sigma_theta", dist.HalfNormal(1.0)),
        }
        if options.shift_prior == "increment":
            params["eta_increment"] = normal("eta_increment", n_cells)
            params["eta"] = numpyro.deterministic("eta", arrays["eta_map"] @ params["eta_increment"])
        else:
            params["eta"] = normal("eta", n_cells)
        params["log_alpha"] = normal("log_alpha", n_judges, PRIOR_SD["log_alpha"])
        params["beta"] = normal("beta", n_judges, PRIOR_SD["beta"])
        params["gamma"] = normal("gamma", n_judges, PRIOR_SD["gamma"])
        params["kappa_raw"] = normal("kappa_raw", n_cut, PRIOR_SD["kappa_raw"])
        if options.generator_mean:
            params[GENERATOR_MEAN_SITE] = normal(GENERATOR_MEAN_SITE, n_generators, PRIOR_SD[GENERATOR_MEAN_SITE])
        for site, n in (("z_b", n_trials), ("eps", n_answers)):
            if site not in standard_local_sites(options):
                continue
            if site in split_sites(options):
                n_groups = arrays[f"{site}_inv_sqrt_n"].shape[0]
                mean = normal(SPLIT_MEAN_SITES[site], n_groups)
                contrast = normal(SPLIT_CONTRAST_SITES[site], n - n_groups)
                layout = (arrays[f"{site}_{k}"] for k in ("slot", "contrast_source", "inv_sqrt_n"))
                params[site] = numpyro.deterministic(site, _helmert_combine(mean, contrast, *layout))
            else:
                params[site] = normal(site, n)
        numpyro.factor("ratings", loglik(params, arrays))

    return model
