"""Tests of the seed 002 measurement model: likelihood, data contract, recovery, derived estimands."""

from __future__ import annotations

import json
import os
import subprocess
import sys

# One thread per process: the test machine has 2 cores shared with other jobs.
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from scipy.special import expit

from context_effects import measurement
from context_effects.measurement import (
    CONDITIONS,
    RatingsError,
    compare_to_truth,
    derived_blocks,
    diagnostics,
    diagnostics_ok,
    exclude_self_ratings,
    fit_nuts,
    fit_nutpie,
    fit_svi,
    model_arrays,
    ordered_logistic_logprob,
    prepare_data,
    rank_normalized_rhat,
    save_fit,
    set_precision,
    simulate_ratings,
    summarize,
)
from context_effects.measurement.fit import answer_quality
from context_effects.measurement.model import ModelOptions, increment_matrix, make_model

set_precision("float64")

#: The likelihood compiled whole, as a fit runs it: called eagerly, each of its jnp
#: operations compiles a program of its own for each new shape (hundreds per test).
log_likelihood = jax.jit(measurement.log_likelihood, static_argnames=("options", "per_rating"))

KAPPA = np.array([-2.1, -0.6, 0.4, 1.9])


def reference_logprob(y: int, mu: float, kappa: np.ndarray) -> float:
    """log P(y | μ, κ) in float64 from the definition, differencing on whichever side of
    the logistic keeps the two probabilities away from 1 (so no cancellation)."""
    k = np.concatenate([[-np.inf], kappa, [np.inf]])
    a, b = k[y + 1] - mu, k[y] - mu  # upper and lower cut relative to μ
    if y == 0:  # log σ(a), exact via logaddexp
        return float(-np.logaddexp(0.0, -a))
    if y == len(kappa):  # log(1 − σ(b)) = log σ(−b)
        return float(-np.logaddexp(0.0, b))
    if b > 0:  # both probabilities near 1: use 1 − σ(x) = σ(−x)
        return float(np.log(expit(-b) - expit(-a)))
    return float(np.log(expit(a) - expit(b)))


# ----------------------------------------------------------------------------- ordinal log-prob


def test_stable_logprob_equals_reference_and_normalises():
    rng = np.random.default_rng(0)
    mus = np.concatenate([rng.uniform(-8, 8, 40), [-50.0, -20.0, 0.0, 20.0, 50.0]])
    ys = np.arange(5)
    got = np.asarray(ordered_logistic_logprob(jnp.asarray(ys)[:, None], jnp.asarray(mus)[None, :], jnp.asarray(KAPPA)))
    ref = np.array([[reference_logprob(int(y), float(m), KAPPA) for m in mus] for y in ys])
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.exp(got).sum(axis=0), 1.0, rtol=1e-12)


def test_stable_logprob_finite_and_accurate_in_float32_at_extremes():
    mus = np.array([-50.0, -30.0, 30.0, 50.0], np.float32)
    kappa = KAPPA.astype(np.float32)
    ys = np.arange(5)
    f = jax.jit(lambda y, m, k: ordered_logistic_logprob(y, m, k))
    got = np.asarray(f(jnp.asarray(ys, jnp.int32)[:, None], jnp.asarray(mus)[None, :], jnp.asarray(kappa)))
    assert got.dtype == np.float32
    assert np.all(np.isfinite(got))
    ref = np.array([[reference_logprob(int(y), float(m), KAPPA) for m in mus] for y in ys])
    np.testing.assert_allclose(got, ref, rtol=2e-5)
    # Gradients stay finite too (NUTS needs them at wild initial points).
    g = jax.grad(
        lambda m: ordered_logistic_logprob(jnp.asarray(ys, jnp.int32)[:, None], m[None, :], jnp.asarray(kappa)).sum()
    )(jnp.asarray(mus))
    assert np.all(np.isfinite(np.asarray(g)))


# ----------------------------------------------------------------------------- likelihood


def _random_params(data, rng) -> dict[str, np.ndarray]:
    return {
        "sigma_b": np.float64(0.8),
        "sigma_theta": np.float64(0.3),
        "eta": rng.normal(0, 0.5, data.n_cells),
        "log_alpha": rng.normal(0, 0.3, data.n_judges),
        "beta": rng.normal(0, 0.5, data.n_judges),
        "gamma": rng.normal(0, 0.5, data.n_judges),
        "kappa_raw": rng.normal(0, 1, data.n_categories - 1),
        "z_b": rng.normal(0, 1, data.n_trials),
        "eps": rng.normal(0, 1, data.n_answers),
    }


def test_vectorised_loglik_equals_naive_loop():
    table, _ = simulate_ratings(
        n_items=3, generators=("g1", "g2"), judges=("j1", "j2", "j3"), design="decomposition", missing_rate=0.15, seed=5
    )
    data = prepare_data(table)
    rng = np.random.default_rng(1)
    p = _random_params(data, rng)
    kappa = np.sort(p["kappa_raw"])
    alpha = dict(zip(data.judges, np.exp(p["log_alpha"])))
    beta = dict(zip(data.judges, p["beta"]))
    gamma = dict(zip(data.judges, p["gamma"]))
    eta = dict(zip(data.cells, p["eta"]))
    b = dict(zip(data.trials, p["sigma_b"] * p["z_b"]))
    eps = dict(zip(data.answers, p["eps"]))

    naive = []
    for row in table.to_dict("records"):
        cond, judge = row["condition"], row["judge"]
        if cond == "anchor_correct":
            theta = 1.5
        elif cond == "anchor_incorrect":
            theta = -1.5
        else:
            shift = 0.0 if cond == "round1" else eta[(row["generator"], cond)]
            theta = b[row["trial_id"]] + shift + p["sigma_theta"] * eps[row["answer_id"]]
        mu = alpha[judge] * (theta - beta[judge]) + (row["pass"] == "informed") * gamma[judge] * row["d"]
        naive.append(reference_logprob(int(row["rating"]) - 1, mu, kappa))
    naive = np.array(naive)

    params = {k: jnp.asarray(v) for k, v in p.items()}
    long = ModelOptions(layout="long")
    per_row = np.asarray(log_likelihood(params, model_arrays(data, long), long, per_rating=True))
    # prepare_data keeps the table's row order (after dropping nothing here).
    np.testing.assert_allclose(per_row, naive, rtol=1e-10)
    for opts in (ModelOptions(layout="grid"), ModelOptions(layout="grid", ordinal="numpyro"), long):
        total = float(log_likelihood(params, model_arrays(data, opts), opts))
        np.testing.assert_allclose(total, naive.sum(), rtol=1e-10)


# ----------------------------------------------------------------------------- recovery

GAMMA_TRUE = (-0.45, 0.6, -0.3)
ETA_TRUE = {"no_peer": 0.0, "peer_correct": -0.1, "peer_mixed": -0.45, "peer_wrong": -0.85}


def _simulate(gamma=GAMMA_TRUE, seed=11):
    return simulate_ratings(
        n_items=20, generators=("g1", "g2"), judges=("j1", "j2", "j3"), gamma=gamma, eta=ETA_TRUE, seed=seed
    )


@pytest.fixture(scope="module")
def jax_cache(tmp_path_factory):
    """One compile cache for the module's fits, which keeps them on one `make test` worker:
    in one process they share its compiled programs, where two workers each compiled them
    (the module alone, from empty caches: 256 CPU-s on two workers, 229 on one)."""
    return tmp_path_factory.mktemp("jaxcache")


@pytest.fixture(scope="module")
def recovery_fit(jax_cache):
    table, truth = _simulate()
    data = prepare_data(table)
    fit = fit_nuts(data, chains=1, warmup=300, samples=300, seed=1, compilation_cache=jax_cache)
    return fit, truth, table


def recovery_failures(fit, truth) -> list[str]:
    """Why a fit does not recover the planted values (empty list = recovered)."""
    data = fit.data
    cmp = compare_to_truth(
        fit, truth.as_params(data), ["sigma_b", "sigma_theta", "eta", "alpha", "beta", "gamma", "kappa"]
    )
    out = []
    if cmp["covered"].mean() < 0.85:
        out.append(
            f"only {cmp['covered'].mean():.0%} of truths inside 95% intervals: "
            + ", ".join(cmp.loc[~cmp["covered"], "parameter"])
        )
    eta = cmp.loc[cmp["block"] == "eta"].set_index(["generator", "condition"])["mean"]
    for g in data.generators:
        if not eta[(g, "peer_wrong")] < eta[(g, "peer_mixed")] < eta[(g, "peer_correct")]:
            out.append(f"η ordering wrong for {g}: {eta.loc[g].to_dict()}")
    gam = cmp.loc[cmp["block"] == "gamma"]
    for row in gam.itertuples():
        pr = (fit.samples["gamma"][..., data.judges.index(row.judge)] > 0).mean()
        if (row.truth > 0 and pr < 0.95) or (row.truth < 0 and pr > 0.05):
            out.append(f"γ sign not recovered for {row.judge}: truth {row.truth:+.2f}, Pr(>0) = {pr:.2f}")
    return out


def test_nuts_recovers_planted_values(recovery_fit):
    fit, truth, _ = recovery_fit
    assert recovery_failures(fit, truth) == []
    diag = diagnostics(fit)
    assert diag["divergences"] == 0
    assert diag["max_rhat"] < 1.1
    # Per-answer latent quality tracks the planted θ.
    aq = answer_quality(fit)
    exp = aq.loc[~aq["anchor"]]
    assert np.corrcoef(exp["theta_mean"], exp["answer_id"].map(truth.theta))[0, 1] > 0.8


def test_nutpie_sampler_recovers_planted_values_and_agrees_with_numpyros(recovery_fit, jax_cache):
    """fit_nutpie, nutpie's sampler over the same log density: the planted values come back,
    the draws have fit_nuts's sites and layout, and η's and γ's posterior means agree with
    numpyro's fit of the same data within their Monte Carlo errors."""
    ours, truth, _ = recovery_fit
    fit = fit_nutpie(ours.data, chains=2, warmup=200, samples=200, seed=3, cores=2, compilation_cache=jax_cache)
    assert recovery_failures(fit, truth) == []
    diag = diagnostics(fit)
    assert diag["divergences"] == 0 and diag["max_rhat"] < 1.1 and diag["chains"] == 2
    assert {k: v.shape[2:] for k, v in fit.samples.items()} == {k: v.shape[2:] for k, v in ours.samples.items()}
    assert fit.settings["sampler"] == "nutpie" and 0 < fit.timings["setup_s"] < fit.timings["total_s"]
    for site in ("eta", "gamma"):
        a, b = (az.convert_to_dataset({site: f.samples[site]}) for f in (fit, ours))
        z = (a[site].mean(("chain", "draw")) - b[site].mean(("chain", "draw"))) / np.sqrt(
            az.mcse(a)[site] ** 2 + az.mcse(b)[site] ** 2)
        assert float(np.abs(z).max()) < 4, (site, z.values)


def test_fit_sets_up_in_a_few_compiled_programs(recovery_fit):
    """Set-up (everything before the first warm-up step) is timed, and the default start
    compiles a handful of programs: run eagerly, numpyro's chain init compiled ~370."""
    fit, _, _ = recovery_fit
    t = fit.timings
    assert 0 < t["setup_s"] <= t["start_s"] + t["warmup_s"] and 0 < t["setup_cpu_s"]
    assert 0 < t["init_s"] < t["setup_s"]
    assert t["compiled_programs"] < 150


def test_recovery_check_fails_when_gamma_sign_flipped_in_dgp(jax_cache):
    """Negative control: data generated with −γ must not pass as recovering +γ."""
    table, _ = _simulate(gamma=tuple(-g for g in GAMMA_TRUE))
    _, claimed = _simulate()
    data = prepare_data(table)
    fit = fit_nuts(data, chains=1, warmup=300, samples=300, seed=1, compilation_cache=jax_cache)
    failures = recovery_failures(fit, claimed)
    assert any("γ sign not recovered" in f for f in failures)


def test_svi_recovers_point_estimates(jax_cache):
    table, truth = _simulate()
    data = prepare_data(table)
    fit = fit_svi(data, steps=2000, num_draws=300, compilation_cache=jax_cache)
    cmp = compare_to_truth(fit, truth.as_params(data), ["eta", "gamma"])
    err = (cmp["mean"] - cmp["truth"]).abs()
    assert err.max() < 0.3, cmp
    gam = cmp.loc[cmp["block"] == "gamma"]
    assert (np.sign(gam["mean"]) == np.sign(gam["truth"])).all()


def test_helmert_rotation_is_orthonormal_with_uneven_groups():
    """split_means's change of basis: Q·[means, contrasts] must be orthonormal (so the N(0, I)
    prior, hence the posterior, is unchanged) and each mean coordinate must be the group's
    normalised ones vector (so it is the direction that trades off against η)."""
    from context_effects.measurement.model import helmert_combine, helmert_layout

    group = np.array([2, 0, 1, 0, 2, 2, 0, 3, 2, 1, 4])  # sizes 3, 2, 4, 1, 1 in scrambled order
    lay = {k: jnp.asarray(v) for k, v in helmert_layout(group).items()}
    n_groups, n = 5, len(group)

    def combine(x):
        return helmert_combine(x[:n_groups], x[n_groups:], lay["slot"], lay["contrast_source"], lay["inv_sqrt_n"])

    q = np.asarray(jax.jit(jax.jacfwd(combine))(jnp.zeros(n)))
    np.testing.assert_allclose(q.T @ q, np.eye(n), atol=1e-12)
    sizes = np.bincount(group)
    for g in range(n_groups):
        np.testing.assert_allclose(q[:, g], (group == g) / np.sqrt(sizes[g]), atol=1e-12)
        # every contrast stays inside one group and sums to zero there
        contrasts = q[:, n_groups:]
        inside = np.abs(contrasts[group == g]).sum(axis=0) > 0
        assert not (np.abs(contrasts[group != g][:, inside]) > 1e-12).any()
        np.testing.assert_allclose(contrasts[group == g][:, inside].sum(axis=0), 0.0, atol=1e-12)
    assert helmert_layout(group)["contrast_source"].max() == n - n_groups  # the zero slot


@pytest.mark.parametrize("marginal, sites", [(False, True), (True, True), (False, ("z_b",)), (False, ("eps",))])
def test_split_means_model_has_the_same_log_density(marginal, sites):
    """The model under split_means is the paper's model in rotated coordinates: at the
    rotated point its log joint (prior + likelihood) is the paper model's, to rounding."""
    from numpyro.infer.util import log_density

    from context_effects.measurement.model import SPLIT_CONTRAST_SITES, SPLIT_MEAN_SITES, split_groups, split_sites

    table, _ = simulate_ratings(n_items=4, generators=("g1", "g2"), judges=("j1", "j2"), missing_rate=0.1, seed=3)
    data = prepare_data(table)
    rng = np.random.default_rng(4)
    p = _random_params(data, rng)
    plain, split = ModelOptions(marginal=marginal), ModelOptions(marginal=marginal, split_means=sites)
    rotated_sites = split_sites(split)
    expected = (("z_b",) if marginal else ("z_b", "eps")) if sites is True else sites
    assert rotated_sites == expected
    raw = {k: jnp.asarray(v) for k, v in p.items() if k not in rotated_sites and not (marginal and k == "eps")}
    groups = split_groups(data)
    for site in rotated_sites:
        n_groups = int(groups[site].max()) + 1
        raw[SPLIT_MEAN_SITES[site]] = jnp.asarray(rng.normal(size=n_groups))
        raw[SPLIT_CONTRAST_SITES[site]] = jnp.asarray(rng.normal(size=len(groups[site]) - n_groups))
    arrays_split = model_arrays(data, split)

    # Each log density compiled whole, as a fit evaluates it (not one program per operation).
    @jax.jit
    def split_density(values):
        lp, trace = log_density(make_model(data, split), (arrays_split,), {}, values)
        return lp, {site: trace[site]["value"] for site in rotated_sites}

    lp_split, values = split_density(raw)
    rotated = {k: v for k, v in raw.items() if not k.startswith(("z_b_", "eps_"))}
    rotated.update(values)
    lp_plain = jax.jit(lambda v: log_density(make_model(data, plain), (model_arrays(data, plain),), {}, v)[0])(rotated)
    np.testing.assert_allclose(float(lp_split), float(lp_plain), rtol=1e-12)
    with pytest.raises(ValueError, match="split_means takes sites"):
        ModelOptions(split_means=("b",))


def test_fast_path_recovers_planted_values(jax_cache):
    """split_means of the baselines with the SVI start (the paper config's sampler): the same
    recovery check as the default fit, and z_b, ε still recorded for the per-answer θ (the
    raw contrasts are not kept)."""
    table, truth = _simulate()
    data = prepare_data(table)
    fit = fit_nuts(data, chains=1, warmup=300, samples=300, seed=2, split_means=("z_b",), init="svi",
                   compilation_cache=jax_cache)
    assert recovery_failures(fit, truth) == []
    assert fit.samples["z_b"].shape == (1, 300, data.n_trials) and "z_b_contrast" not in fit.samples
    assert fit.samples["eps"].shape == (1, 300, data.n_answers)
    assert fit.settings["split_means"] == ["z_b"] and fit.settings["init"] == "svi"
    assert fit.timings["total_s"] >= fit.timings["start_s"] + fit.timings["warmup_s"]
    # the SVI start and the chain's init are compiled programs, not hundreds of eager ones
    assert fit.timings["start_s"] <= fit.timings["setup_s"] <= fit.timings["total_s"]
    assert fit.timings["compiled_programs"] < 150
    exp = answer_quality(fit).query("not anchor")
    assert np.corrcoef(exp["theta_mean"], exp["answer_id"].map(truth.theta))[0, 1] > 0.8


def test_gaussian_vi_fits_what_numpyros_autoguides_fit():
    """The reference: numpyro's AutoMultivariateNormal over the globals + AutoNormal over the
    locals with Trace_ELBO (``fit_svi(guide="mvn_globals")``), at the SVI start's settings
    (2,000 steps of 0.01). Each block's means within 0.75 of the reference's SDs, SDs within
    a factor 1.4. (With L's raw entries as Adam's parameters instead of diag(s)·U, the
    globals came out 1.75 SDs off and β's SDs 3.6× too wide.)"""
    from context_effects.measurement.fit import _prepare, gaussian_vi
    from context_effects.measurement.model import global_sites

    table, _ = simulate_ratings(n_items=8, generators=("g1", "g2"), judges=("j1", "j2", "j3"), seed=6)
    data = prepare_data(table)
    reference = fit_svi(data, steps=2000, guide="mvn_globals", learning_rate=0.01, num_draws=4000,
                        compilation_cache=False)
    _, options, model, arrays = _prepare(data, "float64", False)
    q = jax.jit(lambda key, a: gaussian_vi(model, (a,), global_sites(options), 2000, 0.01, key))(
        jax.random.PRNGKey(1), arrays)
    assert set(q.dense) == set(global_sites(options)) and set(q.diagonal) == {"z_b", "eps"}
    ours = q.draw(jax.random.PRNGKey(2), 4000)
    for site in ("eta", "log_alpha", "beta", "gamma", "z_b", "eps"):
        ref, got = reference.samples[site][0], np.asarray(ours[site])
        assert np.max(np.abs(got.mean(0) - ref.mean(0)) / ref.std(0)) < 0.75, site
        ratio = got.std(0) / ref.std(0)
        assert 1 / 1.4 < ratio.min() and ratio.max() < 1.4, (site, ratio.min(), ratio.max())


def test_svi_start_gives_each_chain_its_own_start_and_a_full_metric(jax_cache):
    """R-hat compares chains that began apart: the SVI start must not put every chain at one
    point. Its metric must cover every sampled site once (dense block + one diagonal)."""
    from context_effects.measurement.fit import _prepare, _svi_start
    from context_effects.measurement.model import global_sites, local_sites

    table, _ = simulate_ratings(n_items=4, generators=("g1", "g2"), judges=("j1", "j2"), seed=6)
    data = prepare_data(table)
    _, options, model, arrays = _prepare(data, "float64", jax_cache)
    starts, metric = _svi_start(model, options, arrays, global_sites(options), 300, 0, 3)
    sites = set(global_sites(options)) | set(local_sites(options))
    assert set(starts) == sites
    assert all(np.shape(v)[0] == 3 for v in starts.values())
    eta = np.asarray(starts["eta"])
    assert np.min(np.abs(eta[0] - eta[1])) > 0 and np.min(np.abs(eta[1] - eta[2])) > 0
    assert sorted(k for key in metric for k in key) == sorted(sites)
    dense = metric[global_sites(options)]
    assert np.allclose(dense, dense.T) and np.all(np.linalg.eigvalsh(dense) > 0)


def _tiny():
    table, _ = simulate_ratings(n_items=4, generators=("g1", "g2"), judges=("j1", "j2"), seed=6)
    return prepare_data(table)


def test_ordered_elbo_is_numpyros_trace_elbo():
    """The SVI loss sums its terms in a fixed order (so its compiled program is the same in
    every process); it must be numpyro's single-sample Trace_ELBO, draw for draw."""
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.optim import Adam

    from context_effects.measurement.fit import _elbo, _prepare, _svi_guide

    _, options, model, arrays = _prepare(_tiny(), "float64", False)
    guide = _svi_guide(model, options, "mvn_globals", 0)
    svi = SVI(model, guide, Adam(0.01), Trace_ELBO())
    # Compiled, as the fit runs them: eager, the guide's set-up alone is thousands of
    # one-operation programs (about a minute).
    params = jax.jit(lambda key: svi.get_params(svi.init(key, arrays)))(jax.random.PRNGKey(3))
    ours = jax.jit(lambda key: _elbo().loss(key, params, model, guide, arrays))
    theirs = jax.jit(lambda key: Trace_ELBO().loss(key, params, model, guide, arrays))
    for key in range(3):
        np.testing.assert_allclose(float(ours(jax.random.PRNGKey(key))), float(theirs(jax.random.PRNGKey(key))),
                                   rtol=1e-12)


def test_svi_start_compiles_to_the_same_program_in_every_process():
    """numpyro's Trace_ELBO orders its terms by a set of site names, which differs between
    processes (string hashing): the compiled SVI start then never hit the persistent cache."""
    import subprocess
    import sys

    code = (
        "import hashlib, jax\n"
        "from context_effects.measurement import prepare_data, simulate_ratings\n"
        "from context_effects.measurement.fit import _prepare, _svi_start_program\n"
        "from context_effects.measurement.model import global_sites\n"
        "t, _ = simulate_ratings(n_items=4, generators=('g1', 'g2'), judges=('j1', 'j2'), seed=6)\n"
        "_, o, m, a = _prepare(prepare_data(t), 'float64', False)\n"
        "low = jax.jit(_svi_start_program(m, o, global_sites(o), 10, 2)).lower(jax.random.PRNGKey(0), a)\n"
        "print(hashlib.sha256(low.as_text().encode()).hexdigest())\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONHASHSEED": str(seed)}) for seed in (1, 2, 3)]
    digests = {p.communicate(timeout=600)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(digests) == 1 and len(next(iter(digests))) == 64, digests


@pytest.mark.parametrize("start", ["median", "svi"])
def test_compiled_chain_init_is_numpyros_init(jax_cache, start):
    """The chain's initialisation runs as one compiled program: same start, same potential
    energy and gradient, same first mass matrix and step size as numpyro's eager init (with
    the SVI start's point and metric, which the program takes as arguments)."""
    from numpyro.infer import NUTS, init_to_median

    from context_effects.measurement.fit import _compiled_init_nuts, _prepare, _svi_start
    from context_effects.measurement.model import global_sites

    _, options, model, arrays = _prepare(_tiny(), "float64", jax_cache)
    settings = dict(model=model, target_accept_prob=0.95, max_tree_depth=10, dense_mass=[global_sites(options)],
                    init_strategy=init_to_median(num_samples=15))
    params = None
    if start == "svi":
        params, settings["inverse_mass_matrix"] = _svi_start(model, options, arrays, global_sites(options), 100, 0, 1)
    key = jax.random.PRNGKey(5)
    ours = _compiled_init_nuts(**settings).init(key, 100, params, model_args=(arrays,))
    theirs = NUTS(**settings).init(key, 100, params, model_args=(arrays,))
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs)):
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-9, atol=1e-12)


def test_adaptation_windows_are_numpyros_at_stan_sizes_and_partition_the_warmup():
    from numpyro.infer.hmc_util import build_adaptation_schedule

    from context_effects.measurement.fit import STAN_WINDOWS, adaptation_windows

    for n in (150, 151, 400, 999, 1500, 3001):
        assert adaptation_windows(n, *STAN_WINDOWS) == [(w.start, w.end) for w in build_adaptation_schedule(n)]
    for n, sizes in ((1500, (75, 100, 50)), (400, (30, 100, 20)), (777, (10, 13, 7))):
        w = adaptation_windows(n, *sizes)
        assert w[0] == (0, sizes[0] - 1) and w[1][1] - w[1][0] + 1 == sizes[1] and w[-1] == (n - sizes[2], n - 1)
        assert all(b[0] == a[1] + 1 for a, b in zip(w, w[1:]))  # contiguous, nothing skipped
        lengths = [b - a + 1 for a, b in w[1:-1]]
        assert all(y == 2 * x for x, y in zip(lengths[:-2], lengths[1:-1]))  # doubling, the last takes the rest
    with pytest.raises(ValueError, match="shorter than the windows"):
        adaptation_windows(100, 75, 100, 50)


def test_fit_uses_the_requested_warmup_windows_and_restores_numpyros(jax_cache, monkeypatch):
    """The schedule swap must reach numpyro's adapter in a real fit and be undone after it."""
    from numpyro.infer import hmc_util

    from context_effects.measurement import fit as fit_module

    calls = []
    real = fit_module.adaptation_windows
    monkeypatch.setattr(fit_module, "adaptation_windows", lambda n, *s: calls.append((n, s)) or real(n, *s))
    original = hmc_util.build_adaptation_schedule
    table, _ = simulate_ratings(n_items=4, generators=("g1", "g2"), judges=("j1", "j2"), seed=6)
    fit = fit_nuts(prepare_data(table), chains=1, warmup=120, samples=20, precision="float64",
                   warmup_windows=(20, 30, 10), keep_locals=False, compilation_cache=jax_cache)
    assert (120, (20, 30, 10)) in calls
    assert hmc_util.build_adaptation_schedule is original
    assert fit.settings["warmup_windows"] == [20, 30, 10]


def test_fast_loop_options_reach_xla_only_in_small_fits_and_numpyro_is_restored(jax_cache, monkeypatch):
    """The sampler loop's XLA options must reach the compile of numpyro's loop (an option XLA
    does not know makes that compile fail, so the failure shows they arrived), only when the
    fit is small enough (FAST_LOOP_MAX_WORK), and numpyro's jit must be its own afterwards,
    also after a failure."""
    import numpyro.util
    from jax.errors import JaxRuntimeError

    from context_effects.measurement import fit as fit_module

    real = fit_module._compiler_options
    monkeypatch.setattr(fit_module, "_compiler_options",
                        lambda name: {"xla_no_such_option": True} if name == "loop" else real(name))
    original = numpyro.util.maybe_jit
    data = _tiny()
    settings = dict(chains=1, warmup=20, samples=20, keep_locals=False, compilation_cache=jax_cache)
    assert 40 * data.n_ratings <= fit_module.FAST_LOOP_MAX_WORK  # small: the fast loop is chosen
    with pytest.raises(JaxRuntimeError, match="xla_no_such_option"):
        fit_nuts(data, **settings)
    assert numpyro.util.maybe_jit is original
    monkeypatch.setattr(fit_module, "FAST_LOOP_MAX_WORK", 40 * data.n_ratings - 1)  # now too large
    fit = fit_nuts(data, **settings)
    assert fit.settings["fast_loop"] is False and numpyro.util.maybe_jit is original
    with pytest.raises(JaxRuntimeError, match="xla_no_such_option"):
        fit_nuts(data, fast_loop=True, **settings)  # asked for: used whatever the size


@pytest.mark.parametrize("fast_loop", [True, False])
def test_the_sampler_loop_is_traced_once_per_fit_and_draws_the_same(jax_cache, monkeypatch, fast_loop):
    """numpyro jits its loop's step function afresh for each phase of each chain, so two
    sequential chains traced and compiled the same loop four times; under the fit's block
    it is traced once when warm-up and draws are the same length, and the draws are the
    ones a fresh jit at every call gives."""
    import jax

    from context_effects.measurement import fit as fit_module

    data = _tiny()
    settings = dict(chains=2, warmup=20, samples=20, chain_method="sequential", keep_locals=False,
                    fast_loop=fast_loop, compilation_cache=jax_cache)

    def traced_loops(**kw):
        seen = []

        def listen(event, duration, **kwargs):
            if event.endswith("jaxpr_trace_duration") and "_fori_collect_loop" in str(kwargs.get("fun_name", "")):
                seen.append(event)

        jax.monitoring.register_event_duration_secs_listener(listen)
        try:
            fit = fit_nuts(data, **{**settings, **kw})
        finally:
            jax.monitoring.unregister_event_duration_listener(listen)
        return len(seen), fit

    once, fit = traced_loops()
    assert once == 1
    assert traced_loops(samples=30)[0] == 2  # draws of another length: a loop of its own

    class Forgetful(dict):
        def __contains__(self, key):
            return False

    class EveryCallJits(fit_module._sampler_loop):
        """The block as it was: the same XLA options, a fresh jit wrapper at every call."""

        def __init__(self, options):
            super().__init__(options)
            self._jitted = Forgetful()

    monkeypatch.setattr(fit_module, "_sampler_loop", EveryCallJits)
    again, own = traced_loops()
    assert again == 4
    for site, draws in fit.samples.items():
        np.testing.assert_array_equal(draws, own.samples[site], err_msg=site)


def test_fast_loop_warns_when_numpyro_compiles_no_loop_through_it():
    """A numpyro that compiles its loop elsewhere leaves the fit right but slower: said, not silent."""
    import jax.numpy as jnp
    from numpyro.util import fori_collect

    from context_effects.measurement.fit import FAST_LOOP_COMPILE, _sampler_loop

    with _sampler_loop(FAST_LOOP_COMPILE) as loop:
        last = fori_collect(0, 3, lambda x: x + 1.0, jnp.zeros(()), progbar=False, return_last_val=True)[1]
    assert loop.loops == 1 and float(last) == 3.0
    with pytest.warns(RuntimeWarning, match="_fori_collect_loop"):
        with _sampler_loop(FAST_LOOP_COMPILE):
            pass


def test_summary_diagnostics_and_netcdf(recovery_fit, tmp_path):
    fit, _, _ = recovery_fit
    summ = summarize(fit)
    assert {"eta", "gamma", "total_shift", "asym_total", "delta_sp", "kappa"} <= set(summ["block"])
    assert summ.loc[summ["block"] == "gamma", "pr_gt0"].between(0, 1).all()
    diag = diagnostics(fit)
    assert diag["blocks"] == ["total_shift", "delta_sp", "gamma", "asym_total"]
    assert diagnostics_ok(diag, max_rhat=10, min_ess_bulk=1, min_ess_tail=1)
    assert not diagnostics_ok(diag, max_rhat=1.0, min_ess_bulk=1e6, min_ess_tail=1e6)
    save_fit(fit, tmp_path / "post.nc", tmp_path / "summary.csv", tmp_path / "diag.json")
    idata = az.from_netcdf(tmp_path / "post.nc")
    assert {"eta", "gamma", "total_shift", "asym_total"} <= set(idata.posterior.data_vars)
    assert "eps" not in idata.posterior.data_vars
    assert list(idata.posterior["gamma"].coords["judge"].values) == ["j1", "j2", "j3"]
    assert len(pd.read_csv(tmp_path / "summary.csv")) == len(summ)


# ----------------------------------------------------------------------------- generator means
#
# The paper's model has b_t ~ N(0, σ_b). When generators differ in mean quality μ_g, the
# shrinkage of b_t toward 0 moves into each generator's shifts η (its Round-2 cells can all
# move by a common offset at the cost of its Round-1 answers alone). The variant
# (ModelOptions.generator_mean) puts b_t ~ N(μ_g, σ_b), μ_g ~ N(0, 1). These tests check
# interval coverage of planted values, not the order of the estimates.

GM_MU = {"g_hi": 0.6, "g_lo": -0.4}
#: Shifts of both signs, different per generator (unlike the simulator's defaults).
GM_ETA = {
    ("g_hi", "no_peer"): 0.15, ("g_hi", "peer_correct"): 0.35, ("g_hi", "peer_wrong"): -0.55,
    ("g_hi", "peer_mixed"): -0.10,
    ("g_lo", "no_peer"): -0.10, ("g_lo", "peer_correct"): 0.25, ("g_lo", "peer_wrong"): -0.35,
    ("g_lo", "peer_mixed"): 0.05,
}
GM_SEEDS = (0, 1, 2)


def _simulate_generator_means(seed, n_items=32, design="main"):
    # σ_b small next to the spread of μ_g and four judges: the paper model's shift error
    # (~±0.3-0.4 here) is a few posterior SDs (~0.12), so its miss is plain at 32 items.
    eta = dict(GM_ETA)
    if design == "decomposition":
        eta.update({(g, c): v for g in GM_MU for c, v in
                    (("content_correct", 0.2), ("content_wrong", -0.3), ("content_mixed", 0.0))})
    return simulate_ratings(
        n_items=n_items, generators=tuple(GM_MU), judges=("j1", "j2", "j3", "j4"), generator_mean=GM_MU,
        eta=eta, sigma_b=0.35, sigma_theta=0.2, design=design, seed=seed,
    )


def _naive_loglik(table, p, generator_mean: bool) -> np.ndarray:
    """Per-row log-likelihood from the model's definition, row by row (no model code)."""
    data = prepare_data(table)
    kappa = np.sort(p["kappa_raw"])
    alpha = dict(zip(data.judges, np.exp(p["log_alpha"])))
    beta = dict(zip(data.judges, p["beta"]))
    gamma = dict(zip(data.judges, p["gamma"]))
    eta = dict(zip(data.cells, p["eta"]))
    mu = dict(zip(data.generators, p["mu_gen"])) if generator_mean else {}
    b = dict(zip(data.trials, p["sigma_b"] * p["z_b"]))
    eps = dict(zip(data.answers, p["eps"]))
    out = []
    for row in table.to_dict("records"):
        cond, judge = row["condition"], row["judge"]
        if cond.startswith("anchor"):
            theta = 1.5 if cond == "anchor_correct" else -1.5
        else:
            shift = 0.0 if cond == "round1" else eta[(row["generator"], cond)]
            base = mu.get(row["generator"], 0.0) + b[row["trial_id"]]
            theta = base + shift + p["sigma_theta"] * eps[row["answer_id"]]
        m = alpha[judge] * (theta - beta[judge]) + (row["pass"] == "informed") * gamma[judge] * row["d"]
        out.append(reference_logprob(int(row["rating"]) - 1, m, kappa))
    return np.array(out)


@pytest.mark.parametrize("design", ["main", "decomposition"])
def test_generator_mean_loglik_equals_naive_loop_in_both_layouts(design):
    table, _ = simulate_ratings(
        n_items=3, generators=("g1", "g2"), judges=("j1", "j2", "j3"), design=design, missing_rate=0.15,
        generator_mean=(0.5, -0.3), seed=5,
    )
    data = prepare_data(table)
    p = _random_params(data, np.random.default_rng(1))
    p["mu_gen"] = np.array([0.7, -0.4])
    naive = _naive_loglik(table, p, generator_mean=True)
    params = {k: jnp.asarray(v) for k, v in p.items()}
    long = ModelOptions(layout="long", generator_mean=True)
    per_row = np.asarray(log_likelihood(params, model_arrays(data, long), long, per_rating=True))
    np.testing.assert_allclose(per_row, naive, rtol=1e-10)
    for opts in (ModelOptions(generator_mean=True), long):
        total = float(log_likelihood(params, model_arrays(data, opts), opts))
        np.testing.assert_allclose(total, naive.sum(), rtol=1e-10)
    # Without the option μ_g is not part of θ (the paper's model).
    off = {k: v for k, v in params.items() if k != "mu_gen"}
    np.testing.assert_allclose(
        float(log_likelihood(off, model_arrays(data, ModelOptions()), ModelOptions())),
        _naive_loglik(table, p, generator_mean=False).sum(), rtol=1e-10,
    )
    # The marginal (quadrature) path reads the same latent mean.
    from context_effects.measurement.model import global_sites, latent_mean

    marg = ModelOptions(generator_mean=True, marginal=True)
    arrays = model_arrays(data, marg)
    compiled_latent_mean = jax.jit(latent_mean)
    m = np.asarray(compiled_latent_mean(params, arrays))
    m0 = np.asarray(compiled_latent_mean(off, model_arrays(data, ModelOptions(marginal=True))))
    np.testing.assert_allclose(m - m0, p["mu_gen"][data.answer_generator], atol=1e-12)
    assert np.isfinite(float(log_likelihood({k: v for k, v in params.items() if k != "eps"}, arrays, marg)))
    # μ_g joins the dense global block only when the option is on; the increment prior too.
    assert "mu_gen" in global_sites(ModelOptions(generator_mean=True, shift_prior="increment"))
    assert "mu_gen" not in global_sites(ModelOptions())
    if design == "decomposition":
        from numpyro.infer.util import log_density

        opts = ModelOptions(shift_prior="increment", generator_mean=True)
        q = dict(p, eta_increment=p["eta"])
        del q["eta"]

        @jax.jit
        def density(values):
            ld, tr = log_density(make_model(data, opts), (model_arrays(data, opts),), {}, values)
            return ld, tr["mu_gen"]["value"]

        ld, mu_gen = density(q)
        assert np.isfinite(float(ld)) and mu_gen.shape == (2,)


def test_simulated_truth_has_the_same_theta_in_both_parametrisations():
    table, truth = _simulate_generator_means(seed=3, n_items=4)
    data = prepare_data(table)
    on, off = ModelOptions(generator_mean=True), ModelOptions()
    p_on = {k: jnp.asarray(v) for k, v in truth.as_params(data, generator_mean=True).items()}
    p_off = {k: jnp.asarray(v) for k, v in truth.as_params(data).items()}
    np.testing.assert_allclose(
        float(log_likelihood(p_on, model_arrays(data, on), on)),
        float(log_likelihood(p_off, model_arrays(data, off), off)), rtol=1e-12,
    )
    theta = np.array([truth.theta[a] for a in data.answers])
    from context_effects.measurement.model import latent_quality

    got = np.asarray(jax.jit(latent_quality)(p_on, model_arrays(data, on)))[: data.n_answers]
    np.testing.assert_allclose(got, theta, atol=1e-12)
    # the trial baselines really are centred on each generator's planted mean
    b = pd.Series(truth.b)  # trial id "item|generator|seed" -> b_t
    gen_of = b.index.str.split("|").str[1]
    assert b.groupby(gen_of).mean()["g_hi"] > b.groupby(gen_of).mean()["g_lo"] + 0.5


@pytest.fixture(scope="module")
def generator_mean_recovery(jax_cache):
    """The paper's model and the variant fitted to the same three simulated data sets."""
    rows = []
    for seed in GM_SEEDS:
        table, truth = _simulate_generator_means(seed)
        data = prepare_data(table)
        for variant in (False, True):
            # Tree depth capped at 7 (127 steps): after adaptation a draw takes ~31 steps here,
            # and the cap only trims the long early-warm-up trajectories (~4x cheaper warm-up).
            fit = fit_nuts(data, chains=1, warmup=300, samples=300, max_tree_depth=7, seed=seed,
                           generator_mean=variant, compilation_cache=jax_cache)
            cmp = compare_to_truth(fit, truth.as_params(data, generator_mean=variant), ["eta", "mu_gen"])
            cmp["seed"], cmp["variant"] = seed, variant
            cmp["max_rhat"] = diagnostics(fit)["max_rhat"]
            rows.append(cmp)
    return pd.concat(rows, ignore_index=True)


def test_generator_mean_variant_covers_planted_shifts_and_means(generator_mean_recovery):
    """Unit of replication: one planted η cell (or μ_g) of one simulated data set.

    3 data sets × 2 generators × 4 cells = 24 η intervals at 95%. Were they independent, the
    misses would be Binomial(24, 0.05): mean 1.2, P(≥ 4 misses) ≈ 0.03 — so ≤ 3 misses is
    what chance allows, and a fit that is off by a couple of SDs in one generator (4 cells)
    fails. (Cells of one generator share its μ_g error, so misses cluster; a seeded run is
    deterministic, and this one covered 24 of 24 when written.) μ_g: 6 intervals,
    Binomial(6, 0.05) gives P(≥ 2) ≈ 0.03, so ≤ 1 miss.
    """
    v = generator_mean_recovery.loc[generator_mean_recovery["variant"]]
    eta, mu = v.loc[v["block"] == "eta"], v.loc[v["block"] == "mu_gen"]
    assert len(eta) == 24 and len(mu) == 6
    misses = eta.loc[~eta["covered"], ["seed", "parameter", "mean", "truth"]]
    assert len(misses) <= 3, misses
    assert (~mu["covered"]).sum() <= 1, mu[["seed", "parameter", "mean", "q2.5", "q97.5", "truth"]]
    assert v["max_rhat"].max() < 1.1


def test_paper_model_misses_planted_shifts_when_generator_means_differ(generator_mean_recovery):
    """The documented blind spot of seed 002's model, kept by a test: on the same 24 planted
    η cells its 95% intervals cover at most half (2 of 24 when written), because the better
    generator's shifts come out too high and the weaker one's too low."""
    p = generator_mean_recovery.loc[~generator_mean_recovery["variant"] & (generator_mean_recovery["block"] == "eta")]
    assert len(p) == 24
    assert p["covered"].sum() <= 12, p[["seed", "parameter", "mean", "truth", "covered"]]
    err = (p["mean"] - p["truth"]).groupby(p["generator"]).mean()
    assert err["g_hi"] > 0.1 and err["g_lo"] < -0.1, err
    v = generator_mean_recovery.loc[generator_mean_recovery["variant"] & (generator_mean_recovery["block"] == "eta")]
    assert v["covered"].sum() >= p["covered"].sum() + 8


def test_rank_rhat_matches_arviz():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 100, 2))
    x[0] += 0.5
    np.testing.assert_allclose(
        rank_normalized_rhat(x), az.rhat(az.convert_to_dataset({"x": x}), method="rank")["x"].values, rtol=1e-10
    )


# ----------------------------------------------------------------------------- derived estimands


@pytest.mark.parametrize("shift_prior", ["cell", "increment"])
def test_decomposition_identity_holds_draw_by_draw(shift_prior):
    table, _ = simulate_ratings(n_items=2, generators=("g1", "g2"), judges=("j1", "j2"), design="decomposition", seed=2)
    data = prepare_data(table)
    rng = np.random.default_rng(3)
    shape = (2, 50)
    s = {
        "sigma_b": rng.random(shape),
        "sigma_theta": rng.random(shape),
        "log_alpha": rng.normal(size=shape + (2,)),
        "beta": rng.normal(size=shape + (2,)),
        "gamma": rng.normal(size=shape + (2,)),
        "kappa_raw": rng.normal(size=shape + (4,)),
    }
    if shift_prior == "cell":
        s["eta"] = rng.normal(size=shape + (data.n_cells,))
    else:
        s["eta_increment"] = rng.normal(size=shape + (data.n_cells,))
    blocks = derived_blocks(s, data)
    lab = lambda b: {tuple(x.values()): i for i, x in enumerate(blocks[b].labels)}  # noqa: E731
    sp, ct, pp, tot = lab("delta_sp"), lab("delta_content"), lab("delta_pp"), lab("total_shift")
    kof = {"peer_correct": "content_correct", "peer_wrong": "content_wrong", "peer_mixed": "content_mixed"}
    assert len(tot) == 6
    for (g, c), i in tot.items():
        lhs = (
            blocks["delta_sp"].draws[..., sp[(g,)]]
            + blocks["delta_content"].draws[..., ct[(g, kof[c])]]
            + blocks["delta_pp"].draws[..., pp[(g, c)]]
        )
        np.testing.assert_allclose(lhs, blocks["total_shift"].draws[..., i], rtol=0, atol=1e-12)
    asym = blocks["asym_total"].draws[..., 0]
    np.testing.assert_allclose(
        asym,
        -blocks["total_shift"].draws[..., tot[("g1", "peer_wrong")]]
        - blocks["total_shift"].draws[..., tot[("g1", "peer_correct")]],
    )
    if shift_prior == "increment":
        # The increments are the decomposition components themselves.
        inc = s["eta_increment"]
        for (g, c), i in pp.items():
            np.testing.assert_allclose(blocks["delta_pp"].draws[..., i], inc[..., data.cell_index(g, c)], atol=1e-12)
        assert increment_matrix(data).sum() == 2 * (1 + 3 * 2 + 3 * 3)
        # ...and the model under that prior exposes the increment site and a deterministic η.
        from numpyro.infer.util import log_density

        opts = ModelOptions(shift_prior="increment")
        params = _random_params(data, rng)
        params["eta_increment"] = params.pop("eta")
        ld, tr = log_density(make_model(data, opts), (model_arrays(data, opts),), {}, params)
        assert np.isfinite(float(ld)) and "eta" in tr


# ----------------------------------------------------------------------------- data contract


def test_self_exclusion_drops_exactly_self_rated_rows():
    table, _ = simulate_ratings(
        n_items=3,
        generators=("Qwen/Qwen2.5-7B-Instruct", "mistralai/Mistral-7B-Instruct-v0.3"),
        judges=("qwen2.5-7b", "mistral-7b", "gpt-4o"),
        seed=4,
    )
    kept = exclude_self_ratings(table)
    fam = {
        "Qwen/Qwen2.5-7B-Instruct": "q",
        "mistralai/Mistral-7B-Instruct-v0.3": "m",
        "qwen2.5-7b": "q",
        "mistral-7b": "m",
    }
    self_rated = table["generator"].map(fam).eq(table["judge"].map(fam)) & table["generator"].ne("")
    assert len(kept) == len(table) - int(self_rated.sum())
    assert self_rated.sum() > 0
    assert not kept["generator"].map(fam).eq(kept["judge"].map(fam)).any()
    anchors = table["condition"].str.startswith("anchor")
    assert kept["condition"].str.startswith("anchor").sum() == anchors.sum()  # anchors stay, for every judge
    data = prepare_data(table, exclude_self=True)
    assert data.n_ratings == len(kept)
    assert data.info["n_self_rated_dropped"] == int(self_rated.sum())


def test_contract_checks_and_missing_rows():
    table, _ = simulate_ratings(n_items=2, generators=("g1",), judges=("j1", "j2"), seed=6)
    assert set(table["condition"]) <= set(CONDITIONS)
    with_nan = table.copy()
    with_nan.loc[0, "rating"] = np.nan
    assert prepare_data(with_nan).n_ratings == len(table) - 1
    bad_d = table.copy()
    bad_d.loc[(bad_d["pass"] == "informed") & (bad_d["condition"] == "peer_wrong"), "d"] = 1
    with pytest.raises(RatingsError, match="d disagrees"):
        prepare_data(bad_d)
    with pytest.raises(RatingsError, match="repeat"):
        prepare_data(pd.concat([table, table.iloc[:1]]))
    out_of_range = table.copy()
    out_of_range.loc[0, "rating"] = 6
    with pytest.raises(RatingsError, match="rating"):
        prepare_data(out_of_range)
    # A judge subset (five-judge refits name their panel) keeps only that judge's rows.
    assert prepare_data(table, judges=["j2"]).n_ratings == int((table["judge"] == "j2").sum())


# ----------------------------------------------------------------------------- marginal ε


def _brute_force_marginal(data, params):
    """Per answer ∫ N(ε; 0, 1) Π_ratings p(y | θ = m + σ_θ ε) dε and the posterior moments of θ,
    by a fine grid over ε (Riemann sum: spectrally accurate for a smooth, decaying integrand)
    through the sampled-ε model's own per-rating terms — no quadrature code involved."""
    opts = ModelOptions()
    arrays = model_arrays(data, opts)
    n = data.n_answers
    grid = np.linspace(-10.0, 10.0, 4001)

    def per_answer(e):
        q = dict(params, eps=jnp.full(n, e))
        lb, li = log_likelihood(q, arrays, opts, per_rating=True)
        return lb.sum(1)[:n].at[arrays["inf_answer"]].add(li.sum(1)), lb.sum(1)[n:].sum()

    node, anchor = jax.jit(jax.vmap(per_answer))(jnp.asarray(grid))
    lw = np.asarray(node) - 0.5 * grid[:, None] ** 2 - 0.5 * np.log(2 * np.pi) + np.log(grid[1] - grid[0])
    total = float(np.sum(jax.scipy.special.logsumexp(lw, axis=0)) + anchor[0])
    post = np.exp(lw - lw.max(0))
    post /= post.sum(0)
    m = np.asarray(params["sigma_b"] * params["z_b"][data.answer_trial]) + np.concatenate(
        [[0.0], np.asarray(params["eta"])]
    )[data.answer_cell + 1]
    theta = m[None] + float(params["sigma_theta"]) * grid[:, None]
    return total, (post * theta).sum(0), (post * theta**2).sum(0)


@pytest.mark.parametrize("sigma_theta", [0.3, 1.2])
def test_marginal_likelihood_and_theta_moments_equal_brute_force_integral(sigma_theta):
    from context_effects.measurement.model import theta_moments

    table, _ = simulate_ratings(
        n_items=3, generators=("g1", "g2"), judges=("j1", "j2", "j3"), design="decomposition", missing_rate=0.15,
        sigma_theta=sigma_theta, seed=5,
    )
    data = prepare_data(table)
    p = _random_params(data, np.random.default_rng(2))
    p["sigma_theta"] = sigma_theta
    params = {k: jnp.asarray(v) for k, v in p.items()}
    ref_total, ref_m1, ref_m2 = _brute_force_marginal(data, params)
    opts = ModelOptions(marginal=True)
    arrays = model_arrays(data, opts)
    glob = {k: v for k, v in params.items() if k != "eps"}
    total = float(log_likelihood(glob, arrays, opts))
    # ~0.1 log-units would already move a posterior; the quadrature is far closer
    assert abs(total - ref_total) < 1e-5 * data.n_answers, (total, ref_total)
    m1, m2 = (np.asarray(v) for v in jax.jit(theta_moments, static_argnames="options")(glob, arrays, opts))
    np.testing.assert_allclose(m1, ref_m1, atol=1e-4)
    np.testing.assert_allclose(np.sqrt(m2 - m1**2), np.sqrt(ref_m2 - ref_m1**2), atol=1e-3)
    # the sampled-ε model's joint log-density does not depend on the option
    with pytest.raises(ValueError, match="layout='grid'"):
        ModelOptions(marginal=True, layout="long")


def test_marginal_map_recovers_planted_values_and_theta():
    """Recovery through the quadrature likelihood alone: the posterior mode of the ε-marginal
    model (L-BFGS on NumPyro's potential) lands on the planted η, γ, α, β, and θ from the node
    weights (answer_quality) tracks the planted θ. A wrong marginal likelihood (a dropped
    pass, judges or anchors mis-indexed) moves these by more than the tolerance (here the
    largest error is ~0.17). σ_b is not checked: with z_b non-centred its joint mode runs off
    to large σ_b and small z_b whatever the likelihood."""
    from jax.flatten_util import ravel_pytree
    from numpyro.infer.util import initialize_model
    from scipy.optimize import minimize

    from context_effects.measurement.fit import Fit

    table, truth = simulate_ratings(
        n_items=60, generators=("g1", "g2"), judges=("j1", "j2", "j3"), gamma=GAMMA_TRUE, eta=ETA_TRUE, seed=11
    )
    data = prepare_data(table)
    opts = ModelOptions(marginal=True)
    arrays = model_arrays(data, opts)
    init = initialize_model(jax.random.PRNGKey(0), make_model(data, opts), model_args=(arrays,))
    z0, unravel = ravel_pytree(init.param_info.z)
    fn = jax.jit(jax.value_and_grad(lambda z: init.potential_fn(unravel(z))))
    res = minimize(
        lambda z: tuple(np.asarray(v, np.float64) for v in fn(z)), np.asarray(z0), jac=True, method="L-BFGS-B"
    )
    assert res.success, res.message
    mode = {k: np.asarray(v)[None, None] for k, v in init.postprocess_fn(unravel(jnp.asarray(res.x))).items()}
    fit = Fit(method="map", data=data, options=opts, samples=mode, settings={})
    cmp = compare_to_truth(fit, truth.as_params(data), ["eta", "gamma", "alpha", "beta"])
    err = (cmp["mean"] - cmp["truth"]).abs()
    assert err.max() < 0.3, cmp.loc[err >= 0.3]
    gam = cmp.loc[cmp["block"] == "gamma"]
    assert (np.sign(gam["mean"]) == np.sign(gam["truth"])).all()
    aq = answer_quality(fit)
    exp = aq.loc[~aq["anchor"]]
    assert np.corrcoef(exp["theta_mean"], exp["answer_id"].map(truth.theta))[0, 1] > 0.8
    assert (exp["theta_sd"] > 0).all() and (aq.loc[aq["anchor"], "theta_sd"] == 0).all()


# ----------------------------------------------------------------------------- reference-free refit, Table 4


def _two_dataset_config(**fit):
    from context_effects.config import validate_config

    return validate_config({
        "run": {"kind": "synthetic"},
        "datasets": {d: {"source": "local", "local_path": "items.jsonl"} for d in ("truthfulqa", "mmlu_pro")},
        "models": {m: {"backend": "synthetic", "model_id": m, "family": f}
                   for m, f in (("g", "x"), ("j1", "y"), ("j2", "z"), ("h", "w"))},
        "conformity": {"datasets": ["mmlu_pro", "truthfulqa"], "generators": ["g"], "judges": ["j1", "j2"],
                       "hosted_judges": ["h"], "hosted_judge_datasets": ["truthfulqa"],
                       "decomposition": {"enabled": False},
                       "fit": {"theta_anchor_sensitivity": [1.5], "generator_mean_sensitivity": False, **fit}},
        "amel": {"enabled": False}, "anchoring": {"enabled": False},
    })


def _summary(shifts: dict[str, float], gammas: dict[str, float]) -> pd.DataFrame:
    """summary.csv rows of generator "g" (shift ± 0.1) and judges' γ (± 0.05)."""
    rows = [{"block": "total_shift" if c != "asym" else "asym_total", "generator": "g",
             "condition": None if c == "asym" else c, "judge": None, "mean": m, "q2.5": m - 0.1, "q97.5": m + 0.1,
             "pr_gt0": float(m > 0)} for c, m in shifts.items()]
    rows += [{"block": "gamma", "generator": None, "condition": None, "judge": j, "mean": m, "q2.5": m - 0.05,
              "q97.5": m + 0.05, "pr_gt0": float(m > 0)} for j, m in gammas.items()]
    return pd.DataFrame(rows)


_DIAG = {"method": "nuts", "max_rhat": 1.001, "min_ess_bulk": 900.0, "min_ess_tail": 900.0, "divergences": 0,
         "chains": 4, "draws_per_chain": 1500, "data": {}}


def _results(cfg, summaries):
    from context_effects.measurement.pipeline import fit_plan
    from context_effects.measurement.report import FitResult

    return {(s.dataset, s.variant): FitResult(s, summaries[(s.dataset, s.variant)], _DIAG, [])
            for s in fit_plan(cfg) if (s.dataset, s.variant) in summaries}


def test_reference_free_refit_is_planned_switchable_and_selects_free_anchors():
    from context_effects.measurement.pipeline import fit_plan, omitted_fits, select_ratings

    cfg = _two_dataset_config()
    plan = {(s.dataset, s.variant): s for s in fit_plan(cfg)}
    for ds in ("truthfulqa", "mmlu_pro"):
        free, main = plan[(ds, "reference-free")], plan[(ds, "main")]
        assert free.anchor_reference == "free" and main.anchor_reference == "augmented"
        assert (free.corpus, free.seed, free.judges, free.theta_anchor) == (main.corpus, main.seed, main.judges,
                                                                             main.theta_anchor)
        assert free.as_dict()["anchor_reference"] == "free"
    # The primary fits' rule params are what they were before the option existed.
    assert "anchor_reference" not in plan[("truthfulqa", "main")].as_dict()
    off = _two_dataset_config(reference_free_sensitivity=False)
    assert "reference-free" not in {s.kind for s in fit_plan(off)}
    assert "switched off" in omitted_fits(off)["reference-free"]

    base = {"trial_id": "t", "generator": "g", "item_id": "q1", "authority": None, "hosted": False, "d": 0,
            "rating": 4.0, "status": "ok", "pass": "blind", "judge": "j1"}
    table = pd.DataFrame([
        {**base, "answer_id": "a1", "corpus": "main", "seed": 42, "condition": "no_peer", "reference": None},
        {**base, "answer_id": "anc", "corpus": "anchor", "seed": None, "condition": "anchor_correct",
         "reference": "augmented", "rating": 5.0},
        {**base, "answer_id": "anc", "corpus": "anchor", "seed": None, "condition": "anchor_correct",
         "reference": "free", "rating": 3.0},
    ])
    spec = plan[("truthfulqa", "reference-free")]
    rows = select_ratings(table, type(spec)(**{**spec.as_dict(), "judges": ("j1",)}))
    assert rows.loc[rows["corpus"] == "anchor", "rating"].tolist() == [3.0]
    rows = select_ratings(table, type(spec)(**{**plan[("truthfulqa", "main")].as_dict(), "judges": ("j1",)}))
    assert rows.loc[rows["corpus"] == "anchor", "rating"].tolist() == [5.0]


def test_reference_free_table_pairs_the_fits_and_flags_sign_changes():
    from context_effects.measurement.report import Builder, table_settings

    cfg = _two_dataset_config()
    s = table_settings(cfg, "3_reference_free")
    assert [(f["dataset"], f["variant"]) for f in s["fits"]] == [
        ("mmlu_pro", "main"), ("truthfulqa", "main"), ("mmlu_pro", "reference-free"),
        ("truthfulqa", "reference-free")]
    aug = {"peer_correct": -0.1, "peer_wrong": -0.5, "peer_mixed": -0.2, "asym": 0.6}
    free = {"peer_correct": 0.3, "peer_wrong": -0.2, "peer_mixed": -0.2, "asym": -0.1}
    summaries = {(ds, "main"): _summary(aug, {}) for ds in ("truthfulqa", "mmlu_pro")}
    summaries |= {(ds, "reference-free"): _summary(free, {}) for ds in ("truthfulqa", "mmlu_pro")}
    t = Builder(s, _results(cfg, summaries)).build("3_reference_free")
    df = t.df.loc[t.df["Dataset"] == "TruthfulQA"].set_index("Quantity")
    assert df.loc["Asym_total", "Reference-augmented anchors"] == "+0.600 [+0.500, +0.700]"
    assert df.loc["Asym_total", "Reference-free anchors"] == "-0.100 [-0.200, +0.000]"
    assert df["Difference"].round(3).tolist() == [0.4, 0.3, 0.0, -0.7]
    assert df["Sign changes"].tolist() == ["yes", "no", "no", "yes"]
    # All-Wrong keeps its sign and both intervals exclude 0; Mixed is the same number in both fits.
    assert df["Sign or interval changes"].tolist() == ["yes", "no", "no", "yes"]
    assert any("4 of 8 cells; Asym_total: 2 of 2" in n for n in t.notes)
    from context_effects.measurement.pipeline import fit_plan

    every = {(f.dataset, f.variant): _summary(aug, {}) for f in fit_plan(cfg)}
    t9 = Builder(table_settings(cfg, "9"), _results(cfg, every)).table9()
    assert "Reference-free anchor scoring (table3_reference_free)" in t9.df["Fit"].tolist()
    off = _two_dataset_config(reference_free_sensitivity=False)
    t_off = Builder(table_settings(off, "3_reference_free"), {}).table3_reference_free()
    assert t_off.df.iloc[0, 0].startswith("not estimated: the reference-free anchor refits are switched off")


def test_table4_prints_one_row_per_judge_of_the_primary_dataset():
    from context_effects.measurement.report import Builder, table_settings

    cfg = _two_dataset_config()
    s = table_settings(cfg, "4")
    # TruthfulQA: the first hosted-judge dataset, though mmlu_pro is listed first.
    assert s["table4_dataset"] == "truthfulqa"
    assert [(f["dataset"], f["variant"]) for f in s["fits"]] == [("truthfulqa", "main"), ("truthfulqa", "hosted-h")]
    summaries = {("truthfulqa", "main"): _summary({}, {"j1": 0.6, "j2": -0.3}),
                 ("mmlu_pro", "main"): _summary({}, {"j1": 0.1, "j2": 0.2}),
                 ("truthfulqa", "hosted-h"): _summary({}, {"j1": 0.5, "j2": -0.2, "h": -0.1})}
    t = Builder(s, _results(cfg, summaries)).build("4")
    assert list(t.df.columns) == ["Panel", "Judge", "gamma_j", "95% CrI", "Pr(gamma_j > 0)", "Fit", "Diagnostics"]
    assert t.df["Judge"].tolist() == ["j2", "j1", "h"]  # open panel sorted by gamma_j, then the API judge
    assert t.df["Panel"].tolist() == ["open-weight panel"] * 2 + ["frontier API judge"]
    assert t.df["gamma_j"].tolist() == [-0.3, 0.6, -0.1]
    assert t.df.loc[2, "95% CrI"] == "[-0.150, -0.050]" and t.df["Fit"].tolist()[-1] == "hosted-h"
    assert any("TruthfulQA fits" in n for n in t.notes) and any("own five-judge refit" in n for n in t.notes)
    by = Builder(table_settings(cfg, "4_by_dataset"), _results(cfg, summaries)).build("4_by_dataset")
    assert list(zip(by.df["Dataset"], by.df["Judge"])) == [
        ("MMLU-Pro", "j1"), ("MMLU-Pro", "j2"), ("TruthfulQA", "j2"), ("TruthfulQA", "j1"), ("TruthfulQA", "h")]
    # Without hosted-judge datasets in the run, Table 4 is the first dataset's main fit.
    cfg["conformity"]["hosted_judge_datasets"] = []
    assert table_settings(cfg, "4")["table4_dataset"] == "mmlu_pro"


_BACKEND_PROBE = """
import json, os, sys
from context_effects.measurement.cpu import start_cpu_backend
cores = os.sched_getaffinity(0)
if sys.argv[1] == "held":  # the whole process on one core: what a pool of one thread looks like
    os.sched_setaffinity(0, {min(cores)})
    import jax
    jax.devices()
    n = 1
else:
    n = start_cpu_backend(int(sys.argv[1]))
import jax.numpy as jnp
(jnp.ones(8) * 2).block_until_ready()
tasks = os.listdir("/proc/self/task")
print(json.dumps({"n": n, "threads": len(tasks), "cores": sorted({len(os.sched_getaffinity(int(t))) for t in tasks})}))
"""


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and at least two cores")
def test_cpu_backend_pool_has_the_jobs_threads_and_every_thread_may_use_every_core():
    """A fit job of one thread on a machine of several cores: XLA's pool is the one-core
    process's, and afterwards no thread is held to one core."""
    cores = len(os.sched_getaffinity(0))

    def probe(mode):
        out = subprocess.run([sys.executable, "-c", _BACKEND_PROBE, mode], capture_output=True, text=True,
                             check=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
        return json.loads(out.stdout.splitlines()[-1])

    one, held, every = probe("1"), probe("held"), probe(str(cores))
    assert one["n"] == 1 and every["n"] == cores
    assert one["threads"] == held["threads"] < every["threads"]
    assert one["cores"] == [cores] and every["cores"] == [cores]
