"""Fitting the measurement model (NUTS, SVI), derived estimands, summaries and diagnostics.

Paper set-up (seed 002 App. A.7/C.1): 4 chains × (1,500 warmup + 1,500 draws),
target_accept 0.95, max_tree_depth 10, seed 42, float64. Diagnostics follow App. C.2
and Table 9: max split rank-normalised R-hat, min bulk and tail ESS over the reported
blocks (shifts, decomposition components, γ, Asym_total), and the divergence count.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import arviz as az
import jax
import numpy as np
import pandas as pd

from context_effects.measurement.data import CONTENT_CONDITIONS, CONTENT_OF_PEER, PEER_CONDITIONS, MeasurementData
from context_effects.measurement.model import (
    GENERATOR_MEAN_SITE,
    LOCAL_SITES,
    SPLIT_CONTRAST_SITES,
    ModelOptions,
    global_sites,
    increment_matrix,
    make_model,
    model_arrays,
    split_sites,
    standard_local_sites,
)

#: How NUTS starts: "median" (init_to_median of 15 prior draws, identity mass matrix) or
#: "svi" (draws of a short variational fit and its covariance as the first mass matrix).
INITS = ("median", "svi")
#: Chains of the SVI start begin at guide draws with the guide's scale times this: SVI
#: intervals are too narrow, and R-hat needs starts more dispersed than the posterior.
START_DISPERSION = 2.0

#: numpyro's warm-up windows (Stan's): a 75-iteration start buffer (step size only), slow
#: windows of 25, 50, 100, ... iterations, each ending in a new mass matrix estimated from its
#: draws alone, and a 50-iteration end buffer.
STAN_WINDOWS = (75, 25, 50)

#: XLA options for programs that run once: compiled for compile speed, not run speed (no
#: LLVM optimisation, XLA's older loop emitters). A chain's initialisation (a few gradients)
#: compiles in ~0.7 instead of ~3 CPU seconds at 1/10 scale on one core.
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}
#: XLA options for the SVI programs (2,000+ steps). The SVI start at 1/10 scale on one core,
#: compile + steps in CPU seconds (two runs each): XLA's defaults 8.0 + 0.8 and 6.2 + 0.7;
#: these options without ``xla_llvm_disable_expensive_passes`` 4.9 + 1.1 and 4.3 + 1.1; with
#: it 4.1 + 1.0 and 3.6 + 0.9. At full scale the last two were alike (steps 9.4–11.9 s).
#: (FAST_COMPILE: 2.6–3.2 s of compile but 3.4–4.5 s of steps, and the steps grow with the data.)
SVI_COMPILE = {"xla_backend_optimization_level": 1, "xla_cpu_use_fusion_emitters": False,
               "xla_llvm_disable_expensive_passes": True}
#: XLA options for numpyro's sampler loop in a small fit: XLA's older loop emitters compile
#: the loop in ~4–6.5 instead of ~8.5–9 CPU seconds on one core (1/10 and full scale), but
#: each leapfrog step then takes ~10% longer at full scale (``bench/measurement_loop_compile.py``:
#: 5.29 against 4.83 ms), 3.7–4 ns more per rating and step.
FAST_LOOP_COMPILE = {"xla_cpu_use_fusion_emitters": False}
#: The sampler loop is compiled with FAST_LOOP_COMPILE when chains × (warm-up + draws) ×
#: ratings is at most this: at ~60 leapfrog steps per draw, ~3 s of compile saved (the
#: smallest save measured) pays for the slower steps up to ~1.25–1.35e7 (rounded down, so
#: that a fit near the line keeps the faster steps). The paper's fit (4 × 3,000 draws of 116,000 ratings, 1.4e9) is far above
#: it; the demo's fits, the tests' and a 1/10-scale fit of 400 + 400 draws are below.
FAST_LOOP_MAX_WORK = 1e7


@functools.cache
def _compiler_options(name: str) -> dict[str, Any] | None:
    """FAST_COMPILE, SVI_COMPILE or FAST_LOOP_COMPILE where they were measured (XLA:CPU) and
    this XLA knows their options; None (XLA's defaults) otherwise."""
    options = {"fast": FAST_COMPILE, "svi": SVI_COMPILE, "loop": FAST_LOOP_COMPILE}[name]
    if jax.default_backend() != "cpu":
        return None
    try:
        jax.jit(lambda x: x + 1, compiler_options=options).lower(np.float32(0)).compile()
    except Exception:  # an XLA without these options: compile with its defaults
        return None
    return options


PRECISIONS = ("float64", "float32")
#: Blocks whose weakest coordinate Table 9 reports (those absent from a fit are skipped:
#: ``mu_gen`` exists only in the generator-mean variant, whose table prints it).
REPORTED_BLOCKS = ("total_shift", "delta_sp", "delta_content", "delta_pp", "gamma", "asym_total", GENERATOR_MEAN_SITE)
#: Blocks whose sign is a claim, so Pr(> 0) is reported.
SIGNED_BLOCKS = ("eta", "total_shift", "delta_sp", "delta_content", "delta_pp", "gamma", "asym_total",
                 GENERATOR_MEAN_SITE)
_REPO = Path(__file__).resolve().parents[3]


# ----------------------------------------------------------------------------- runtime


def set_precision(precision: str) -> Any:
    """Switch JAX to float64 or float32 (a process-wide JAX setting) and return the dtype."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    jax.config.update("jax_enable_x64", precision == "float64")
    return jax.numpy.float64 if precision == "float64" else jax.numpy.float32


def default_cache_dir() -> Path:
    env = os.environ.get("CONTEXT_EFFECTS_JAX_CACHE")
    if env:
        return Path(env)
    root = _REPO if (_REPO / "pyproject.toml").exists() else Path.cwd()
    return root / ".cache" / "jax"


def enable_compilation_cache(path: str | os.PathLike | None = None) -> Path:
    """Turn on JAX's persistent compilation cache.

    Directory: ``path``, else ``$CONTEXT_EFFECTS_JAX_CACHE``, else ``<repo>/.cache/jax``.
    Every program is kept, however quick to compile: numpyro still runs a few dozen
    one-operation programs eagerly around its sampler loop (~30 ms each to compile, a few
    ms to load). Programs are keyed by the shapes of the data, not its values (the model's
    arrays are arguments, never constants), so fits of one shape share them; and the
    sampling phase, and each further chain of a sequential fit, reload the warm-up's
    compiled loop from here instead of compiling it again.
    """
    cache = Path(path) if path is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(cache))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return cache


# ----------------------------------------------------------------------------- results


@dataclass
class Block:
    """One reported parameter block: draws (chain, draw, n) and a label dict per coordinate."""

    name: str
    labels: list[dict[str, Any]]
    draws: np.ndarray

    @property
    def names(self) -> list[str]:
        return [self.name + ("[" + ",".join(str(v) for v in lab.values()) + "]" if lab else "") for lab in self.labels]


@dataclass
class Fit:
    """A fitted model. ``samples`` holds raw sites as (chain, draw, ...) arrays."""

    method: str
    data: MeasurementData
    options: ModelOptions
    samples: dict[str, np.ndarray]
    settings: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)
    sampler_stats: dict[str, np.ndarray] = field(default_factory=dict)
    mcmc: Any = None
    svi_losses: np.ndarray | None = None

    @property
    def n_chains(self) -> int:
        return int(next(iter(self.samples.values())).shape[0])

    @property
    def n_draws(self) -> int:
        return int(next(iter(self.samples.values())).shape[1])


def _np_tree(tree: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return {k: np.asarray(v) for k, v in tree.items()}


# ----------------------------------------------------------------------------- NUTS


#: jax.monitoring events whose durations are compile work (tracing, lowering, XLA).
_COMPILE_EVENTS = (
    "/jax/core/compile/jaxpr_trace_duration",
    "/jax/core/compile/jaxpr_to_mlir_module_duration",
    "/jax/core/compile/backend_compile_duration",
)


class _CompileClock:
    """Seconds of compile work in a block, and the moment the first sampler loop was ready.

    numpyro compiles its warm-up loop inside ``MCMC.warmup`` and starts it at once, so the
    end of set-up (the first warm-up iteration) is only visible as the end of that loop's
    XLA compile (or persistent-cache load): the program numpyro names ``_fori_collect_loop``.
    """

    LOOP = "fori_collect"

    def __init__(self):
        self.compile_s = 0.0
        self.programs = 0
        self.loop_ready: tuple[float, float] | None = None  # (perf_counter, process_time)

    def __call__(self, event, duration, **kwargs):
        if event not in _COMPILE_EVENTS:
            return
        self.compile_s += duration
        if event == _COMPILE_EVENTS[-1]:
            self.programs += 1
            if self.loop_ready is None and self.LOOP in str(kwargs.get("fun_name", "")):
                self.loop_ready = (time.perf_counter(), time.process_time())

    def __enter__(self):
        jax.monitoring.register_event_duration_secs_listener(self)
        return self

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self)


def _compiled_init_nuts(**kwargs):
    """numpyro's NUTS whose chain initialisation runs as one compiled program.

    numpyro initialises a chain eagerly (``init_to_median``'s prior draws, the search for a
    valid start, the potential energy and gradient there), and run eagerly every operation
    of the model and of its gradient is compiled as a program of its own: ~370 programs,
    most of the ~19 CPU seconds a 1/10-scale fit spent before its first warm-up step from
    an empty compile cache, and ~4 s even when all came from the cache. Under ``jax.jit``
    they are one program with the same operations and the same random draws, so the same
    start up to floating-point detail.

    The model arguments and the first mass matrix are arguments of that program, not
    constants closed over (closed over, XLA gets them as literals: a program per dataset,
    not per shape, and the persistent cache misses). That is safe because the only closure
    numpyro keeps from initialisation that would hold the arguments, the step-size search
    of ``find_heuristic_step_size``, is off here. Under another transformation (numpyro's
    ``pmap`` for parallel chains) the init runs as numpyro's, traced with the rest.
    """
    from numpyro.infer import NUTS

    if kwargs.get("find_heuristic_step_size"):
        raise ValueError("the compiled init cannot keep find_heuristic_step_size's closure over the model arguments")

    class CompiledInitNUTS(NUTS):
        def init(self, rng_key, num_warmup, init_params=None, model_args=(), model_kwargs={}):
            base = super().init
            if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves((rng_key, init_params, model_args))):
                return base(rng_key, num_warmup, init_params, model_args, model_kwargs)
            # one compiled init per warm-up length: the chains of a sequential fit reuse it
            compiled = getattr(self, "_compiled_init", {})
            if num_warmup not in compiled:

                def program(key, params, args, kwargs, inverse_mass):
                    # the first mass matrix (the SVI start's) is an argument too, not a constant
                    # of the program: numpyro reads it from the kernel, so it is swapped in there
                    # while the program is traced
                    kept, self._inverse_mass_matrix = self._inverse_mass_matrix, inverse_mass
                    try:
                        return base(key, num_warmup, params, args, kwargs)
                    finally:
                        self._inverse_mass_matrix = kept

                compiled[num_warmup] = jax.jit(program, compiler_options=_compiler_options("fast"))
                self._compiled_init = compiled
            t0 = time.perf_counter()
            state = compiled[num_warmup](rng_key, init_params, tuple(model_args), dict(model_kwargs),
                                         self._inverse_mass_matrix)
            if not np.all(np.isfinite(np.asarray(state.potential_energy))):
                # numpyro raises this when run eagerly; under jit its check cannot see the value
                raise RuntimeError("Cannot find valid initial parameters. Please check your model again.")
            self.init_seconds = getattr(self, "init_seconds", 0.0) + time.perf_counter() - t0
            return state

    return CompiledInitNUTS(**kwargs)


def _prepare(data, precision, compilation_cache, **option_kwargs):
    """Precision, compile cache, model and its arrays: the set-up NUTS and SVI share."""
    dtype = set_precision(precision)
    if compilation_cache:
        enable_compilation_cache(None if compilation_cache is True else compilation_cache)
    options = ModelOptions(**option_kwargs)
    model = make_model(data, options)
    return dtype, options, model, model_arrays(data, options, dtype)


def fit_nuts(
    data: MeasurementData,
    *,
    chains: int = 4,
    warmup: int = 1500,
    samples: int = 1500,
    target_accept: float = 0.95,
    max_tree_depth: int = 10,
    seed: int = 42,
    precision: str = "float64",
    dense_globals: bool = True,
    chain_method: str = "sequential",
    theta_anchor: float = 1.5,
    layout: str = "grid",
    ordinal: str = "stable",
    shift_prior: str = "cell",
    marginal: bool = False,
    quadrature_nodes: int = 9,
    generator_mean: bool = False,
    split_means: tuple[str, ...] | bool = (),
    init: str = "median",
    svi_steps: int = 2000,
    warmup_windows: tuple[int, int, int] | None = None,
    keep_locals: bool = True,
    compilation_cache: bool | str | os.PathLike = True,
    fast_loop: bool | None = None,
    init_strategy=None,
    progress_bar: bool = False,
) -> Fit:
    """NUTS fit; defaults are the paper's set-up plus the measured speed-ups.

    dense_globals: dense mass-matrix block over the ~34 global sites (diagonal for the
        trial and answer deviations) — ~8x fewer leapfrog steps per draw at full scale.
    chain_method: "sequential" (default: on 2 cores one chain already uses ~1.7 cores, so
        parallel chains gave no gain) or "parallel", which needs as many JAX devices as
        chains (XLA_FLAGS=--xla_force_host_platform_device_count=N before JAX starts) and
        falls back to sequential otherwise.
    marginal: integrate the answer deviations ε out by adaptive Gauss–Hermite quadrature with
        ``quadrature_nodes`` nodes (ModelOptions.marginal); per-answer θ then comes from
        the node weights in ``answer_quality``.
    generator_mean: the sensitivity variant with per-generator baseline means μ_g
        (ModelOptions.generator_mean; the paper's model when False).
    split_means: the locals ("z_b", "eps"; True = both) sampled as group means (in the dense
        block) + contrasts (ModelOptions.split_means; same posterior, z_b and ε still recorded).
    init: "median" (numpyro's init_to_median, identity mass matrix) or "svi": ``svi_steps``
        of SVI with a full-covariance normal over the dense block's sites and a mean-field
        normal over the locals; each chain starts at its own overdispersed draw of the
        fitted guide, with the guide's covariance as the first mass matrix (``_svi_start``;
        adaptation then proceeds as usual; the SVI time counts in the total).
    warmup_windows: (start buffer, first slow window, end buffer) of the warm-up schedule
        (``adaptation_windows``); None keeps numpyro's ``STAN_WINDOWS`` (75, 25, 50).
    keep_locals: keep draws of z_b and ε (needed for per-answer θ); False saves memory.
    fast_loop: compile numpyro's sampler loop for compile speed (FAST_LOOP_COMPILE): ~4 s
        less set-up, ~10% more per leapfrog step. None: when chains × (warm-up + draws) ×
        ratings ≤ FAST_LOOP_MAX_WORK, i.e. when the saved compile outweighs the slower steps.
        Never with parallel chains (numpyro's pmap takes no compiler options for the loop).
    Warm-up and sampling run as two calls so each is timed (the compile falls in the first;
    numpyro traces its loop again for the second, which then loads the same program from the
    persistent cache when warmup == samples). The warm-up draws are collected
    and then dropped (that is what lets the compiled loop be reused); with keep_locals they
    briefly cost chains × warmup × (trials + answers) floats (~0.9 GB f64 at paper scale).
    Timings: ``setup_s`` / ``setup_cpu_s`` (wall and process CPU seconds from the call to
    the first warm-up iteration: arrays, SVI start, chain init, every compile before the
    loop runs), ``start_s`` (up to the chain init), ``init_s`` (the compiled chain init),
    ``warmup_s``, ``sampling_s``, ``total_s``; ``compile_s`` and ``compiled_programs``
    count tracing, lowering and XLA compiles (or cache loads) over the whole fit.
    """
    from numpyro.infer import MCMC, init_to_median

    if init not in INITS:
        raise ValueError(f"init must be one of {INITS}, got {init!r}")
    t_start, cpu_start = time.perf_counter(), time.process_time()
    with _CompileClock() as clock:
        dtype, options, model, arrays = _prepare(
            data, precision, compilation_cache, theta_anchor=theta_anchor, layout=layout, ordinal=ordinal,
            shift_prior=shift_prior, marginal=marginal, quadrature_nodes=quadrature_nodes,
            generator_mean=generator_mean, split_means=split_means,
        )
        effective_method = chain_method
        if chains > 1 and chain_method == "parallel" and jax.local_device_count() < chains:
            effective_method = "sequential"
        dense_block = global_sites(options)
        inverse_mass = start_params = None
        if init == "svi":
            start_params, inverse_mass = _svi_start(
                model, options, arrays, dense_block if dense_globals else (), svi_steps, seed, chains
            )
        kernel = _compiled_init_nuts(
            model=model,
            target_accept_prob=target_accept,
            max_tree_depth=max_tree_depth,
            dense_mass=[dense_block] if dense_globals else False,
            inverse_mass_matrix=inverse_mass,
            init_strategy=init_strategy or init_to_median(num_samples=15),
        )
        mcmc = MCMC(
            kernel,
            num_warmup=warmup,
            num_samples=samples,
            num_chains=chains,
            chain_method=effective_method,
            progress_bar=progress_bar,
            jit_model_args=True,
        )
        # Under split_means the raw contrasts are never kept: z_b and ε are recorded as well.
        dropped = tuple(SPLIT_CONTRAST_SITES[s] for s in split_sites(options))
        if not keep_locals:
            dropped = dropped + standard_local_sites(options)
        # Both phases collect the same fields so that, when warmup == samples (the paper's
        # 1,500 + 1,500), the draws reuse the warm-up's compiled loop (``_sampler_loop``).
        fields = ("num_steps", "accept_prob", "adapt_state.step_size", "diverging") + tuple(
            f"~z.{s}" for s in dropped
        )
        if effective_method == "parallel":
            # numpyro runs parallel chains under pmap, inside which the loop is a nested jit,
            # and a nested jit takes no compiler options
            fast_loop = False
        elif fast_loop is None:
            fast_loop = chains * (warmup + samples) * data.n_ratings <= FAST_LOOP_MAX_WORK
        loop = _sampler_loop(_compiler_options("loop") if fast_loop else None)
        key = jax.random.PRNGKey(seed)
        t0 = time.perf_counter()
        with loop, _warmup_windows(tuple(warmup_windows) if warmup_windows else None):
            mcmc.warmup(key, arrays, extra_fields=fields, collect_warmup=True, init_params=start_params)
        warm_steps = np.asarray(mcmc.get_extra_fields(group_by_chain=True)["num_steps"])
        t1 = time.perf_counter()
        with loop:
            mcmc.run(mcmc.post_warmup_state.rng_key, arrays, extra_fields=fields)
        jax.block_until_ready(mcmc.get_samples())
        t2 = time.perf_counter()
    stats = _np_tree(mcmc.get_extra_fields(group_by_chain=True))
    stats["step_size"] = stats.pop("adapt_state.step_size")
    stats["warmup_num_steps"] = warm_steps
    # total: from set-up (and any SVI start) to the last draw, compiles included
    timings = {"start_s": t0 - t_start, "warmup_s": t1 - t0, "sampling_s": t2 - t1, "total_s": t2 - t_start,
               "init_s": getattr(kernel, "init_seconds", 0.0), "compile_s": clock.compile_s,
               "compiled_programs": clock.programs}
    if clock.loop_ready is not None:
        # set-up: everything before the first warm-up iteration (SVI start, chain init, compiles)
        timings["setup_s"] = clock.loop_ready[0] - t_start
        timings["setup_cpu_s"] = clock.loop_ready[1] - cpu_start
    return Fit(
        method="nuts",
        data=data,
        options=options,
        samples=_np_tree(mcmc.get_samples(group_by_chain=True)),
        settings={
            "chains": chains,
            "warmup": warmup,
            "samples": samples,
            "target_accept": target_accept,
            "max_tree_depth": max_tree_depth,
            "seed": seed,
            "precision": precision,
            "dense_globals": dense_globals,
            "chain_method": effective_method,
            "layout": layout,
            "ordinal": ordinal,
            "shift_prior": shift_prior,
            "marginal": marginal,
            "quadrature_nodes": quadrature_nodes if marginal else None,
            "generator_mean": generator_mean,
            "split_means": list(options.split_means),
            "init": init,
            "svi_steps": svi_steps if init == "svi" else None,
            "warmup_windows": list(warmup_windows) if warmup_windows else None,
            "fast_loop": loop.options is not None,  # what the loop was compiled with (CPU only)
            "theta_anchor": theta_anchor,
            "jax_version": jax.__version__,
        },
        timings=timings,
        sampler_stats=stats,
        mcmc=mcmc,
    )


def fit_nutpie(
    data: MeasurementData,
    *,
    chains: int = 4,
    warmup: int = 1500,
    samples: int = 1500,
    target_accept: float = 0.95,
    max_tree_depth: int = 10,
    seed: int = 42,
    precision: str = "float64",
    theta_anchor: float = 1.5,
    shift_prior: str = "cell",
    generator_mean: bool = False,
    split_means: tuple[str, ...] | bool = (),
    keep_locals: bool = True,
    cores: int = 1,
    low_rank_mass: bool = False,
    compilation_cache: bool | str | os.PathLike = True,
) -> Fit:
    """NUTS run by nutpie's Rust sampler over this model's log density: the same model and
    posterior as ``fit_nuts``, another sampler.

    nutpie adapts a diagonal mass matrix from the draws' and the gradients' variances (with
    ``low_rank_mass``, plus low-rank corrections for the strongest correlations) and starts
    each chain at a uniform(−2, 2) jitter of the unconstrained origin; the rest (warm-up and
    draws, target acceptance, maximum tree depth) as ``fit_nuts``. Only one program is
    compiled, the log density with its gradient (plus a small one mapping a draw to the
    model's sites), so the set-up is short; each gradient is then one call from the sampler
    into that program. ``cores`` chains run at once (threads of one process). Draws and
    sampler statistics come back in ``fit_nuts``'s layout (chain, draw, ...), the model's
    deterministic sites included; the split-means contrasts are never kept, and with
    ``keep_locals=False`` neither are z_b and ε. Timings: ``setup_s`` / ``setup_cpu_s``
    (the call to the sampler's start: arrays and compiles), ``sampling_s`` (warm-up and
    draws), ``total_s``, ``compile_s``, ``compiled_programs``."""
    import nutpie
    from jax.flatten_util import ravel_pytree
    from numpyro import handlers
    from numpyro.distributions.transforms import biject_to
    from numpyro.infer.util import constrain_fn, potential_energy

    t_start, cpu_start = time.perf_counter(), time.process_time()
    with _CompileClock() as clock:
        dtype, options, model, arrays = _prepare(
            data, precision, compilation_cache, theta_anchor=theta_anchor, shift_prior=shift_prior,
            generator_mean=generator_mean, split_means=split_means,
        )
        sites = handlers.trace(handlers.seed(model, seed)).get_trace(arrays)
        origin = {name: jax.numpy.zeros_like(biject_to(site["fn"].support).inv(site["value"]))
                  for name, site in sites.items() if site["type"] == "sample" and not site["is_observed"]}
        x0, unravel = ravel_pytree(origin)
        dropped = set(SPLIT_CONTRAST_SITES[s] for s in split_sites(options))
        if not keep_locals:
            dropped |= set(standard_local_sites(options))

        @jax.jit
        def log_density(x, arrays):
            return jax.value_and_grad(lambda x: -potential_energy(model, (arrays,), {}, unravel(x.astype(dtype))))(x)

        @jax.jit
        def expand(x, arrays):
            values = constrain_fn(model, (arrays,), {}, unravel(x.astype(dtype)), return_deterministic=True)
            return {k: v for k, v in values.items() if k not in dropped}

        x = np.zeros(x0.shape, np.float64)
        jax.block_until_ready(log_density(x, arrays))
        shapes = jax.eval_shape(expand, x, arrays)
        names = sorted(shapes)

        def make_logp():
            def logp(x):
                value, grad = log_density(x, arrays)
                return float(value), np.asarray(grad, np.float64)
            return logp

        def make_expand(seed1, seed2, chain):
            def draw(x):
                values = expand(x, arrays)
                return {k: np.asarray(values[k], np.float64) for k in names}
            return draw

        compiled = nutpie.compiled_pyfunc.from_pyfunc(
            ndim=int(x0.shape[0]), make_logp_fn=make_logp, make_expand_fn=make_expand,
            expanded_dtypes=[np.dtype(np.float64)] * len(names),
            expanded_shapes=[tuple(shapes[k].shape) for k in names], expanded_names=names,
        )
        t0, cpu0 = time.perf_counter(), time.process_time()
        trace = nutpie.sample(
            compiled, draws=samples, tune=warmup, chains=chains, cores=max(1, min(cores, chains)), seed=seed,
            target_accept=target_accept, maxdepth=max_tree_depth, progress_bar=False, save_warmup=False,
            low_rank_modified_mass_matrix=low_rank_mass,
        )
        t1 = time.perf_counter()
    post, st = trace.posterior, trace.sample_stats
    draws = {k: np.asarray(post[k].values, dtype) for k in names}
    stats = {"num_steps": np.asarray(st["n_steps"].values), "accept_prob": np.asarray(st["mean_tree_accept"].values),
             "step_size": np.asarray(st["step_size"].values), "diverging": np.asarray(st["diverging"].values)}
    timings = {"setup_s": t0 - t_start, "setup_cpu_s": cpu0 - cpu_start, "sampling_s": t1 - t0, "total_s": t1 - t_start,
               "compile_s": clock.compile_s, "compiled_programs": clock.programs}
    return Fit(
        method="nuts",
        data=data,
        options=options,
        samples=draws,
        settings={
            "sampler": "nutpie",
            "chains": chains,
            "warmup": warmup,
            "samples": samples,
            "target_accept": target_accept,
            "max_tree_depth": max_tree_depth,
            "seed": seed,
            "precision": precision,
            "low_rank_mass": low_rank_mass,
            "shift_prior": shift_prior,
            "generator_mean": generator_mean,
            "split_means": list(options.split_means),
            "theta_anchor": theta_anchor,
            "nutpie_version": nutpie.__version__,
            "jax_version": jax.__version__,
        },
        timings=timings,
        sampler_stats=stats,
    )


def adaptation_windows(num_steps: int, start_buffer: int, first_window: int, end_buffer: int) -> list[tuple[int, int]]:
    """Stan's warm-up schedule with other sizes: (first, last) iteration of the start buffer,
    of each slow window (doubling while three more fit, the last one taking the rest) and of
    the end buffer. ``adaptation_windows(n, *STAN_WINDOWS)`` is numpyro's schedule for n >= 150."""
    if start_buffer + first_window + end_buffer > num_steps:
        raise ValueError(
            f"warm-up of {num_steps} iterations is shorter than the windows {start_buffer} + {first_window} + "
            f"{end_buffer}; use more warm-up or smaller windows"
        )
    windows = [(0, start_buffer - 1)]
    end_start = num_steps - end_buffer
    start, size = start_buffer, first_window
    while start < end_start:
        if 3 * size <= end_start - start:
            this, size = size, 2 * size
        else:
            this = end_start - start
        windows.append((start, start + this - 1))
        start += this
    windows.append((end_start, num_steps - 1))
    return windows


class _sampler_loop:
    """Within the block, numpyro's sampler loop is compiled once per fit, and with XLA
    options ``options`` (None: XLA's defaults).

    numpyro compiles the loop itself: ``numpyro.util.fori_collect`` jits its
    ``_fori_collect_loop`` through the module's ``maybe_jit`` (looked up at each call), with
    the step function ``_body_fn`` as a static argument, and has no setting for XLA's
    options. ``_body_fn`` is cached by numpyro, but jitted afresh at every call, and a fresh
    jit wrapper is a new static argument: each phase of each chain (warm-up, then draws, per
    sequential chain) traced, lowered and compiled (or loaded from the persistent cache) the
    same loop again, four times for two chains. The block wraps that module's
    ``maybe_jit``: the same function with the same arguments gets the same jit wrapper, so
    the later phases and chains find the first one's program in JAX's own cache (the same
    program: the draws are unchanged); and the loop gets ``options``. It restores
    ``maybe_jit`` on leaving and can be entered more than once (warm-up, then sampling). On
    leaving, if options were given but no loop was compiled through the wrapper (a numpyro
    that names or compiles its loop otherwise), it warns: the fit is right, only its set-up
    slower."""

    LOOP = "_fori_collect_loop"

    def __init__(self, options: Mapping[str, Any] | None):
        self.options = dict(options) if options else None
        self.loops = 0
        self._original = None
        self._jitted: dict[tuple, Callable] = {}

    def __enter__(self):
        from numpyro import util

        self._original = original = util.maybe_jit

        def maybe_jit(fn, *args, **kwargs):
            try:
                key = (fn, args, tuple(sorted(kwargs.items())))
                hash(key)
            except TypeError:
                return original(fn, *args, **kwargs)
            if key not in self._jitted:
                if getattr(fn, "__name__", None) == self.LOOP:
                    self.loops += 1
                    if self.options is not None:
                        kwargs = {**kwargs, "compiler_options": self.options}
                self._jitted[key] = original(fn, *args, **kwargs)
            return self._jitted[key]

        util.maybe_jit = maybe_jit
        return self

    def __exit__(self, *exc):
        from numpyro import util

        util.maybe_jit, self._original = self._original, None
        if exc[0] is None and self.options is not None and self.loops == 0:
            warnings.warn(f"numpyro compiled no {self.LOOP} through numpyro.util.maybe_jit: the sampler loop was "
                          f"compiled with XLA's default options, not {self.options} (slower set-up, same fit)",
                          RuntimeWarning, stacklevel=2)
        return False


@contextlib.contextmanager
def _warmup_windows(sizes: tuple[int, int, int] | None):
    """Within the block, numpyro's warm-up adapter uses ``adaptation_windows(n, *sizes)``.

    numpyro builds the schedule inside ``hmc_util.warmup_adapter`` with fixed sizes and no
    setting for them, so the block swaps that module's schedule builder (looked up when the
    adapter is built, i.e. when the chain is initialised) and restores it afterwards. Why:
    after an SVI start the first mass matrix is already good, and the 25-draw first window
    replaces it with an estimate from 25 draws (rank-deficient for the dense block), which
    sends the next iterations to the maximum tree depth."""
    if sizes is None:
        yield
        return
    from numpyro.infer import hmc_util

    original = hmc_util.build_adaptation_schedule

    def schedule(num_steps):
        if num_steps < sum(sizes):  # numpyro's own rule for short warm-ups
            return original(num_steps)
        return [hmc_util.AdaptWindow(a, b) for a, b in adaptation_windows(num_steps, *sizes)]

    hmc_util.build_adaptation_schedule = schedule
    try:
        yield
    finally:
        hmc_util.build_adaptation_schedule = original


def _svi_start(model, options: ModelOptions, arrays, dense_block: tuple[str, ...], steps: int, seed: int,
               chains: int):
    """NUTS's start from a short SVI fit (full-covariance normal over the global sites,
    mean-field over the locals): per chain, a start drawn from the fitted approximation with
    its scale doubled, and an initial inverse mass matrix {dense block: its covariance, every
    other site: its variances}. The warm-up's first iterations then start near the
    posterior with a usable metric instead of at a prior draw with the identity, where trees
    run to the maximum depth. Chains start from different, overdispersed points, as R-hat
    needs. SVI's intervals are too narrow (``fit_svi``), so the metric is only a start: the
    windowed adaptation replaces it. Returns unconstrained ``init_params`` (leading chain
    axis when ``chains`` > 1) and the inverse mass matrix.

    The start, the SVI steps and the draws are one compiled program (``_svi_start_program``)."""
    program = jax.jit(_svi_start_program(model, options, dense_block, steps, chains),
                      compiler_options=_compiler_options("svi"))
    # waited for here, so that the fit's start_s holds the SVI steps
    starts, dense, diagonal = jax.block_until_ready(program(jax.random.PRNGKey(seed + 7919), arrays))
    inverse_mass = {tuple(dense_block): dense} if dense_block else {}
    inverse_mass.update(diagonal)
    return starts, inverse_mass


def _unpack(shapes: Mapping[str, tuple[int, ...]], names: Sequence[str], flat) -> dict[str, Any]:
    """{site: value} from vectors laid out as ``names`` along the trailing axis of ``flat``."""
    out, i = {}, 0
    for k in names:
        size = int(np.prod(shapes[k], dtype=np.int64))
        out[k] = flat[..., i:i + size].reshape(*flat.shape[:-1], *shapes[k])
        i += size
    return out


@functools.partial(jax.tree_util.register_dataclass,
                   data_fields=["dense_loc", "scale_tril", "diagonal_loc", "diagonal_scale"],
                   meta_fields=["dense", "diagonal", "shapes"])
@dataclass
class GaussianApproximation:
    """A fitted normal q(z) over a model's unconstrained latent sites: a full covariance
    L Lᵀ over ``dense`` (sites in that order, each raveled) and independent scales over
    ``diagonal``. A pytree, so a jitted function can return it; ``shapes``: (site, shape)
    pairs."""

    dense: tuple[str, ...]
    diagonal: tuple[str, ...]
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    dense_loc: Any
    scale_tril: Any
    diagonal_loc: Any
    diagonal_scale: Any

    def unpack(self, names: Sequence[str], flat) -> dict[str, Any]:
        return _unpack(dict(self.shapes), names, flat)

    def draw(self, key, n: int, dispersion: float = 1.0) -> dict[str, Any]:
        """n draws of every site, with the scales times ``dispersion``: (n, *shape) each."""
        kd, kl = jax.random.split(key)
        dtype = self.diagonal_loc.dtype
        zd = self.dense_loc + dispersion * jax.random.normal(kd, (n, self.dense_loc.shape[0]), dtype) @ self.scale_tril.T
        zl = self.diagonal_loc + dispersion * self.diagonal_scale * jax.random.normal(
            kl, (n, self.diagonal_loc.shape[0]), dtype)
        return {**self.unpack(self.dense, zd), **self.unpack(self.diagonal, zl)}

    def variances(self) -> dict[str, Any]:
        """Each site's marginal variances, raveled."""
        dense = self.unpack(self.dense, jax.numpy.sum(self.scale_tril**2, axis=1))
        return {k: jax.numpy.ravel(v) for k, v in
                {**dense, **self.unpack(self.diagonal, self.diagonal_scale**2)}.items()}


#: numpyro's autoguides start their scales here (``init_scale``); so does this fit.
SVI_INIT_SCALE = 0.1


def gaussian_vi(model, args: tuple, dense_sites: Sequence[str], steps: int, learning_rate: float,
                key) -> GaussianApproximation:
    """Fit q(z) = N over the model's unconstrained latent sites by SVI: a full covariance over
    the sites ``dense_sites`` names (those the model has), mean-field over the rest. Traceable;
    call it inside ``jax.jit``.

    What numpyro's ``AutoGuideList(AutoMultivariateNormal, AutoNormal)`` with ``Trace_ELBO``
    fits, written against the model's potential energy (numpyro's ``potential_energy``:
    −log joint on the unconstrained scale, Jacobians included) so that the compiled program
    holds the model's gradient once: the autoguides' set-up also traces, and compiles, the
    model's gradient once per guide to check their start, which made the program ~2.4× slower
    to compile (12.7 against 5.2 CPU seconds at 1/10 scale on one core). Start: the prior
    medians of 15 draws per site (numpyro's ``init_to_median``), scales ``SVI_INIT_SCALE``;
    loss: one reparametrised draw's potential energy less q's entropy (the ELBO with the
    entropy in closed form); clipped Adam, as the autoguides' fits used."""
    import numpyro
    from numpyro.distributions.transforms import biject_to
    from numpyro.handlers import seed, substitute, trace
    from numpyro.infer import init_to_median
    from numpyro.infer.util import potential_energy
    from numpyro.optim import ClippedAdam

    jnp = jax.numpy
    init_key, fit_key = jax.random.split(key)
    # the prior medians as the model sees them; the likelihood traced with them is unused
    # and XLA drops it
    prior = trace(substitute(seed(model, init_key), substitute_fn=init_to_median(num_samples=15))).get_trace(*args)
    latent = {k: s for k, s in prior.items() if s["type"] == "sample" and not s["is_observed"]}
    start = {k: biject_to(s["fn"].support).inv(s["value"]) for k, s in latent.items()}
    dense = tuple(k for k in dense_sites if k in start)
    diagonal = tuple(k for k in start if k not in dense)
    shapes = {k: tuple(v.shape) for k, v in start.items()}

    def ravel(names):
        dtype = jnp.result_type(float)
        return jnp.concatenate([jnp.ravel(start[k]) for k in names]) if names else jnp.zeros((0,), dtype)

    dense_loc, diagonal_loc = ravel(dense), ravel(diagonal)
    d = dense_loc.shape[0]
    raw_scale = float(np.log(np.expm1(SVI_INIT_SCALE)))  # softplus⁻¹
    params = {"dense_loc": dense_loc, "dense_tril": jnp.diag(jnp.full((d,), raw_scale, dense_loc.dtype)),
              "diagonal_loc": diagonal_loc, "diagonal_scale": jnp.full(diagonal_loc.shape, raw_scale, diagonal_loc.dtype)}
    strictly_lower = jnp.tril(jnp.ones((d, d), dense_loc.dtype), -1)

    def scales(p):
        # L = diag(s) · U with U unit lower triangular, as numpyro's AutoMultivariateNormal
        # parameterises it: an Adam step on U's entries then moves L by s times as much, not
        # by the full step (raw entries of L random-walk to variances 10-100× too wide)
        unit = p["dense_tril"] * strictly_lower + jnp.eye(d, dtype=dense_loc.dtype)
        tril = jax.nn.softplus(jnp.diagonal(p["dense_tril"]))[:, None] * unit
        return tril, jax.nn.softplus(p["diagonal_scale"])

    def loss(p, k):
        tril, scale = scales(p)
        kd, kl = jax.random.split(k)
        zd = p["dense_loc"] + tril @ jax.random.normal(kd, (d,), dense_loc.dtype)
        zl = p["diagonal_loc"] + scale * jax.random.normal(kl, scale.shape, scale.dtype)
        z = {**_unpack(shapes, dense, zd), **_unpack(shapes, diagonal, zl)}
        entropy = jnp.sum(jnp.log(jnp.diagonal(tril))) + jnp.sum(jnp.log(scale))
        return potential_energy(model, args, {}, z) - entropy

    optimiser = ClippedAdam(step_size=learning_rate)

    def step(state, k):
        value, grads = jax.value_and_grad(loss)(optimiser.get_params(state), k)
        return optimiser.update(grads, state, value=value), None

    with numpyro.validation_enabled(False):  # the arguments are traced: nothing to check
        state, _ = jax.lax.scan(step, optimiser.init(params), jax.random.split(fit_key, steps))
    fitted = optimiser.get_params(state)
    tril, scale = scales(fitted)
    return GaussianApproximation(dense, diagonal, tuple(shapes.items()), fitted["dense_loc"], tril,
                                 fitted["diagonal_loc"], scale)


def _svi_start_program(model, options: ModelOptions, dense_block: tuple[str, ...], steps: int, chains: int):
    """The SVI start as a function of (key, arrays) for ``jax.jit``: ``gaussian_vi`` with the
    global sites in the full-covariance block, then one overdispersed draw per chain.
    Returns (starts per site, with a leading chain axis when ``chains`` > 1, the dense
    block's covariance or None, {names of the other sites: their variances} or {})."""
    n = max(chains, 1)

    def start(key, arrays):
        fit_key, draw_key = jax.random.split(key)
        approx = gaussian_vi(model, (arrays,), global_sites(options), steps, 0.01, fit_key)
        starts = approx.draw(draw_key, n, START_DISPERSION)
        variances = approx.variances()
        dense = None
        if dense_block:
            if tuple(dense_block) != approx.dense:
                raise ValueError(f"the dense block {dense_block} must be the model's global sites {approx.dense}")
            dense = approx.scale_tril @ approx.scale_tril.T
        diagonal = tuple(sorted(set(starts) - set(dense_block)))
        inverse = {diagonal: jax.numpy.concatenate([variances[k] for k in diagonal])} if diagonal else {}
        if chains <= 1:
            starts = {k: v[0] for k, v in starts.items()}
        return starts, dense, inverse

    return start


# ----------------------------------------------------------------------------- SVI


def _elbo():
    """numpyro's ``Trace_ELBO`` (one particle) with its terms summed in a fixed order.

    ``Trace_ELBO`` forms log p − log q per site over a Python ``set`` of site names, whose
    order changes with each process's string hashing: the compiled SVI program then
    differs from process to process, never hits the persistent compilation cache (~6 s
    of XLA compile at 1/10 scale every time) and rounds differently. Here: the same
    single-sample estimator, −(log p(y, z) − log q(z)) with z drawn from the guide and
    the same keys, each density summed in trace order."""
    from numpyro.handlers import replay, seed
    from numpyro.infer.elbo import ELBO
    from numpyro.infer.util import log_density

    class OrderedTraceELBO(ELBO):
        def loss_with_mutable_state(self, rng_key, param_map, model, guide, *args, **kwargs):
            model_seed, guide_seed = jax.random.split(rng_key)
            guide_lp, guide_trace = log_density(seed(guide, guide_seed), args, kwargs, param_map)
            model_lp, _ = log_density(replay(seed(model, model_seed), guide_trace), args, kwargs, param_map)
            return {"loss": guide_lp - model_lp, "mutable_state": None}

    return OrderedTraceELBO()


def _run_svi(model, guide, arrays, steps: int, learning_rate: float, key):
    """``steps`` of SVI (ELBO, clipped Adam): (params, losses). Traceable: both callers run
    it under ``jax.jit``, so that the guide's set-up compiles with the steps as one program."""
    from numpyro.infer import SVI
    from numpyro.optim import ClippedAdam

    svi = SVI(model, guide, ClippedAdam(step_size=learning_rate), _elbo())
    res = svi.run(key, steps, arrays, progress_bar=False)
    return res.params, res.losses


def _svi_guide(model, options: ModelOptions, guide: str, rank: int):
    from numpyro.handlers import block, seed
    from numpyro.infer import init_to_median
    from numpyro.infer.autoguide import (
        AutoGuideList,
        AutoLowRankMultivariateNormal,
        AutoMultivariateNormal,
        AutoNormal,
    )

    init = init_to_median(num_samples=15)
    if guide == "normal":
        return AutoNormal(model, init_loc_fn=init)
    if guide == "lowrank":
        return AutoLowRankMultivariateNormal(model, rank=rank, init_loc_fn=init)
    if guide == "mvn_globals":
        glob = list(global_sites(options))
        g = AutoGuideList(model)
        g.append(AutoMultivariateNormal(block(seed(model, 0), expose=glob), init_loc_fn=init))
        # deterministic sites (η under the increment prior, z_b and ε under split_means)
        # must be hidden from sub-guides
        deterministic = ["eta", *split_sites(options)]
        g.append(AutoNormal(block(seed(model, 1), hide=glob + deterministic), init_loc_fn=init))
        return g
    raise ValueError("guide must be 'normal', 'lowrank' or 'mvn_globals'")


def fit_svi(
    data: MeasurementData,
    *,
    steps: int = 5000,
    seed: int = 42,
    guide: str = "normal",
    rank: int = 40,
    learning_rate: float = 0.01,
    num_draws: int = 1000,
    precision: str = "float64",
    theta_anchor: float = 1.5,
    layout: str = "grid",
    ordinal: str = "stable",
    shift_prior: str = "cell",
    generator_mean: bool = False,
    compilation_cache: bool | str | os.PathLike = True,
) -> Fit:
    """Variational fit for fast iteration; draws come from the fitted guide.

    guide: "normal" (AutoNormal, mean-field), "lowrank" (AutoLowRankMultivariateNormal of
        ``rank``: captures the η ↔ ε trade-off that mean-field ignores), or "mvn_globals"
        (full-covariance normal over the global sites, mean-field over the locals).
    Intervals are too narrow with every guide here. Against NUTS on the same simulated
    1/10-scale data (bench/measurement_speed.py --svi-check), median 95%-interval width
    ratios SVI/NUTS were η 0.50 / γ 0.85 / β 0.09 / κ 0.05 (normal), about the same for
    lowrank, and η 0.66 / γ 0.98 / β 0.18 / κ 0.12 (mvn_globals); point errors matched NUTS.
    At full scale the intervals are worse still (a development run on simulated paper-scale
    data covered the true η in only 69% of its 95% intervals). Use SVI for point estimates and
    iteration; report intervals from NUTS.
    """
    dtype, options, model, arrays = _prepare(
        data, precision, compilation_cache, theta_anchor=theta_anchor, layout=layout, ordinal=ordinal,
        shift_prior=shift_prior, generator_mean=generator_mean,
    )

    def run(key, arrays):
        # the guide is set up inside the compiled program, so it is used only there
        g = _svi_guide(model, options, guide, rank)
        key, draw_key = jax.random.split(key)
        params, losses = _run_svi(model, g, arrays, steps, learning_rate, key)
        return losses, g.sample_posterior(draw_key, params, arrays, sample_shape=(num_draws,))

    t0 = time.perf_counter()
    program = jax.jit(run, compiler_options=_compiler_options("svi"))
    losses, draws = jax.block_until_ready(program(jax.random.PRNGKey(seed), arrays))
    t1 = time.perf_counter()
    draws = {k: np.asarray(v)[None] for k, v in draws.items() if k != "ratings"}
    return Fit(
        method="svi",
        data=data,
        options=options,
        samples=draws,
        settings={
            "steps": steps,
            "seed": seed,
            "guide": guide,
            "rank": rank if guide == "lowrank" else None,
            "learning_rate": learning_rate,
            "num_draws": num_draws,
            "precision": precision,
            "layout": layout,
            "ordinal": ordinal,
            "shift_prior": shift_prior,
            "generator_mean": generator_mean,
            "theta_anchor": theta_anchor,
            "jax_version": jax.__version__,
        },
        timings={"fit_s": t1 - t0, "total_s": time.perf_counter() - t0},
        svi_losses=np.asarray(losses),
    )


# ----------------------------------------------------------------------------- derived


def _eta_draws(samples: Mapping[str, np.ndarray], data: MeasurementData) -> np.ndarray:
    if "eta" in samples:
        return np.asarray(samples["eta"])
    return np.asarray(samples["eta_increment"]) @ increment_matrix(data).T


def derived_blocks(samples: Mapping[str, np.ndarray], data: MeasurementData) -> dict[str, Block]:
    """Every reported block from raw draws (chain, draw, ...), draw by draw.

    eta: cell shifts vs Round 1; total_shift: Δ_total,c = η(g, peer_c) (Eq. 4);
    asym_total: −Δ_total,AW − Δ_total,AC (Eq. 5); delta_sp = η(g, no_peer) (Eq. 1);
    delta_content: η(g, content_k) − η(g, no_peer) (Eq. 2); delta_pp: η(g, peer_c) −
    η(g, content_k(c)) (Eq. 3). Eq. 4 then holds by telescoping, up to rounding.
    mu_gen: the per-generator baseline means μ_g, when the draws have them (generator-mean
    variant).
    """
    out: dict[str, Block] = {}
    for name in ("sigma_b", "sigma_theta"):
        out[name] = Block(name, [{}], np.asarray(samples[name])[..., None])
    judges = [{"judge": j} for j in data.judges]
    out["alpha"] = Block("alpha", judges, np.exp(np.asarray(samples["log_alpha"])))
    out["beta"] = Block("beta", judges, np.asarray(samples["beta"]))
    out["gamma"] = Block("gamma", judges, np.asarray(samples["gamma"]))
    kappa = np.sort(np.asarray(samples["kappa_raw"]), axis=-1)
    out["kappa"] = Block("kappa", [{"index": k + 1} for k in range(kappa.shape[-1])], kappa)
    if GENERATOR_MEAN_SITE in samples:
        out[GENERATOR_MEAN_SITE] = Block(
            GENERATOR_MEAN_SITE, [{"generator": g} for g in data.generators], np.asarray(samples[GENERATOR_MEAN_SITE])
        )
    eta = _eta_draws(samples, data)
    out["eta"] = Block("eta", [{"generator": g, "condition": c} for g, c in data.cells], eta)

    def cell(g, c):
        i = data.cell_index(g, c)
        return None if i is None else eta[..., i]

    def add(name, items):
        items = [(lab, v) for lab, v in items if v is not None]
        if items:
            out[name] = Block(name, [lab for lab, _ in items], np.stack([v for _, v in items], axis=-1))

    gens = data.generators
    add("total_shift", [({"generator": g, "condition": c}, cell(g, c)) for g in gens for c in PEER_CONDITIONS])
    add(
        "asym_total",
        [
            (
                ({"generator": g}, -cell(g, "peer_wrong") - cell(g, "peer_correct"))
                if cell(g, "peer_wrong") is not None and cell(g, "peer_correct") is not None
                else ({}, None)
            )
            for g in gens
        ],
    )
    add("delta_sp", [({"generator": g}, cell(g, "no_peer")) for g in gens])
    add(
        "delta_content",
        [
            (
                ({"generator": g, "condition": k}, cell(g, k) - cell(g, "no_peer"))
                if cell(g, k) is not None and cell(g, "no_peer") is not None
                else ({}, None)
            )
            for g in gens
            for k in CONTENT_CONDITIONS
        ],
    )
    add(
        "delta_pp",
        [
            (
                ({"generator": g, "condition": c}, cell(g, c) - cell(g, CONTENT_OF_PEER[c]))
                if cell(g, c) is not None and cell(g, CONTENT_OF_PEER[c]) is not None
                else ({}, None)
            )
            for g in gens
            for c in PEER_CONDITIONS
        ],
    )
    return out


def fit_blocks(fit: Fit) -> dict[str, Block]:
    return derived_blocks(fit.samples, fit.data)


def _marginal_theta_moments(fit: Fit, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """Means over draws of E[θ | y, draw] and E[θ² | y, draw] (quadrature node weights)."""
    from context_effects.measurement.model import theta_moments

    s, data = fit.samples, fit.data
    keys = [k for k in (*global_sites(fit.options), "z_b") if k in s]
    flat = {k: np.asarray(s[k]).reshape((-1,) + np.shape(s[k])[2:]) for k in keys}
    dtype = jax.numpy.float64 if jax.config.jax_enable_x64 else jax.numpy.float32
    arrays = model_arrays(data, fit.options, dtype)
    # one draw at a time inside the compiled loop: a draw's node grid is answers × K × judges
    fn = jax.jit(lambda ps: jax.lax.map(lambda p: theta_moments(p, arrays, fit.options), ps))
    n = next(iter(flat.values())).shape[0]
    total = np.zeros(data.n_answers)
    total2 = np.zeros(data.n_answers)
    for lo in range(0, n, chunk):
        m1, m2 = fn({k: jax.numpy.asarray(v[lo : lo + chunk], dtype) for k, v in flat.items()})
        total += np.asarray(m1, np.float64).sum(0)
        total2 += np.asarray(m2, np.float64).sum(0)
    return total / n, total2 / n


def answer_quality(fit: Fit, chunk: int = 250) -> pd.DataFrame:
    """Posterior mean and SD of θ per answer (anchors: their pinned value, SD 0).

    With ε integrated out (``options.marginal``) the moments are Rao–Blackwellised: per draw,
    E[θ_i | y, draw] and E[θ_i² | y, draw] from the quadrature node weights, averaged over
    draws (law of total variance for the SD)."""
    s, data = fit.samples, fit.data
    if fit.options.marginal:
        if "z_b" not in s:
            raise ValueError("the fit was run with keep_locals=False: no trial-baseline draws for θ")
        mean, second = _marginal_theta_moments(fit, chunk=chunk)
        sd = np.sqrt(np.maximum(second - mean**2, 0.0))
        return _quality_frame(fit, mean, sd)
    if "eps" not in s:
        raise ValueError("the fit was run with keep_locals=False: no per-answer draws")
    flat = {k: np.asarray(v).reshape((-1,) + np.shape(v)[2:]) for k, v in s.items()}
    eta = _eta_draws(s, data).reshape(-1, data.n_cells)
    eta1 = np.concatenate([np.zeros((eta.shape[0], 1)), eta], axis=1)
    n = eta.shape[0]
    total = np.zeros(data.n_answers)
    total2 = np.zeros(data.n_answers)
    for lo in range(0, n, chunk):
        sl = slice(lo, lo + chunk)
        th = (
            flat["sigma_b"][sl, None] * flat["z_b"][sl][:, data.answer_trial]
            + eta1[sl][:, data.answer_cell + 1]
            + flat["sigma_theta"][sl, None] * flat["eps"][sl]
        )
        if GENERATOR_MEAN_SITE in flat:
            th = th + flat[GENERATOR_MEAN_SITE][sl][:, data.answer_generator]
        total += th.sum(0)
        total2 += (th**2).sum(0)
    mean = total / n
    sd = np.sqrt(np.maximum(total2 / n - mean**2, 0.0))
    return _quality_frame(fit, mean, sd)


def _quality_frame(fit: Fit, mean: np.ndarray, sd: np.ndarray) -> pd.DataFrame:
    data = fit.data
    theta_a = fit.options.theta_anchor
    return pd.DataFrame(
        {
            "answer_id": list(data.answers) + list(data.anchors),
            "theta_mean": np.concatenate([mean, data.anchor_sign * theta_a]),
            "theta_sd": np.concatenate([sd, np.zeros(data.n_anchors)]),
            "anchor": [False] * data.n_answers + [True] * data.n_anchors,
        }
    )


# ----------------------------------------------------------------------------- summaries


def rank_normalized_rhat(draws: np.ndarray) -> np.ndarray:
    """Split rank-normalised R-hat (Vehtari et al. 2021) per coordinate of (chain, draw, n).

    numpyro's ``split_gelman_rubin`` on rank-normalised draws, max of the bulk and the
    folded (tail) version — the same statistic as ``arviz.rhat(method="rank")``, but
    defined for a single chain too (it splits each chain in halves).
    """
    from numpyro.diagnostics import split_gelman_rubin
    from scipy.stats import norm, rankdata

    x = np.asarray(draws, dtype=np.float64)
    size = x.shape[0] * x.shape[1]

    def z(v):
        r = rankdata(v.reshape(size, -1), axis=0, method="average").reshape(v.shape)
        return norm.ppf((r - 0.375) / (size + 0.25))

    bulk = split_gelman_rubin(z(x))
    tail = split_gelman_rubin(z(np.abs(x - np.median(x, axis=(0, 1)))))
    return np.maximum(np.asarray(bulk), np.asarray(tail))


def _block_diagnostics(block: Block) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ds = az.convert_to_dataset({"x": block.draws})
    rhat = np.atleast_1d(rank_normalized_rhat(block.draws))
    bulk = np.atleast_1d(az.ess(ds, method="bulk")["x"].values)
    tail = np.atleast_1d(az.ess(ds, method="tail")["x"].values)
    return rhat, bulk, tail


def summarize(fit: Fit, blocks: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per coordinate: mean, sd, 2.5%/97.5% quantiles, Pr(>0) (signed blocks),
    and for NUTS the rank R-hat and bulk/tail ESS."""
    all_blocks = fit_blocks(fit)
    names = list(all_blocks) if blocks is None else [b for b in blocks if b in all_blocks]
    rows = []
    for name in names:
        b = all_blocks[name]
        flat = b.draws.reshape(-1, b.draws.shape[-1])
        q = np.quantile(flat, [0.025, 0.975], axis=0)
        diag = _block_diagnostics(b) if fit.method == "nuts" else (None, None, None)
        for i, lab in enumerate(b.labels):
            rows.append(
                {
                    "block": name,
                    "parameter": b.names[i],
                    "generator": lab.get("generator"),
                    "condition": lab.get("condition"),
                    "judge": lab.get("judge"),
                    "mean": flat[:, i].mean(),
                    "sd": flat[:, i].std(ddof=1),
                    "q2.5": q[0, i],
                    "q97.5": q[1, i],
                    "pr_gt0": float((flat[:, i] > 0).mean()) if name in SIGNED_BLOCKS else np.nan,
                    "rhat": diag[0][i] if diag[0] is not None else np.nan,
                    "ess_bulk": diag[1][i] if diag[1] is not None else np.nan,
                    "ess_tail": diag[2][i] if diag[2] is not None else np.nan,
                }
            )
    return pd.DataFrame(rows)


def diagnostics(fit: Fit, blocks: Sequence[str] = REPORTED_BLOCKS) -> dict[str, Any]:
    """Table 9 figures: max rank R-hat, min bulk/tail ESS over the reported blocks (weakest
    coordinate named), divergences after warm-up, chains × draws, and step statistics."""
    if fit.method != "nuts":
        raise ValueError("diagnostics need MCMC draws (fit_nuts)")
    all_blocks = fit_blocks(fit)
    used = [b for b in blocks if b in all_blocks]
    worst = {"rhat": (-np.inf, None), "ess_bulk": (np.inf, None), "ess_tail": (np.inf, None)}
    per_block = {}
    for name in used:
        b = all_blocks[name]
        rhat, bulk, tail = _block_diagnostics(b)
        per_block[name] = {
            "max_rhat": float(np.max(rhat)),
            "min_ess_bulk": float(np.min(bulk)),
            "min_ess_tail": float(np.min(tail)),
        }
        for key, vals, pick in (
            ("rhat", rhat, np.argmax),
            ("ess_bulk", bulk, np.argmin),
            ("ess_tail", tail, np.argmin),
        ):
            i = int(pick(vals))
            better = vals[i] > worst[key][0] if key == "rhat" else vals[i] < worst[key][0]
            if better:
                worst[key] = (float(vals[i]), b.names[i])
    st = fit.sampler_stats
    return {
        "blocks": used,
        "max_rhat": worst["rhat"][0],
        "max_rhat_at": worst["rhat"][1],
        "min_ess_bulk": worst["ess_bulk"][0],
        "min_ess_bulk_at": worst["ess_bulk"][1],
        "min_ess_tail": worst["ess_tail"][0],
        "min_ess_tail_at": worst["ess_tail"][1],
        "divergences": int(np.sum(st["diverging"])) if "diverging" in st else None,
        "chains": fit.n_chains,
        "draws_per_chain": fit.n_draws,
        "mean_steps_per_draw": float(np.mean(st["num_steps"])) if "num_steps" in st else None,
        "step_size": [float(np.mean(s)) for s in st["step_size"]] if "step_size" in st else None,
        "per_block": per_block,
        "timings": dict(fit.timings),
    }


def diagnostics_ok(
    diag: Mapping[str, Any],
    max_rhat: float = 1.01,
    min_ess_bulk: float = 400,
    min_ess_tail: float = 400,
    max_divergences: int = 0,
) -> bool:
    """True when every reported-block coordinate passes (Vehtari et al. 2021 thresholds)."""
    div = diag.get("divergences") or 0
    return bool(
        diag["max_rhat"] <= max_rhat
        and diag["min_ess_bulk"] >= min_ess_bulk
        and diag["min_ess_tail"] >= min_ess_tail
        and div <= max_divergences
    )


# ----------------------------------------------------------------------------- export


def to_inference_data(fit: Fit, include_locals: bool = False) -> az.InferenceData:
    """ArviZ InferenceData of the raw global sites plus every derived block, with labelled
    coordinates. Trial/answer deviations are left out unless asked for (at full scale they
    are ~0.8 GB of float64 per 6,000 draws)."""
    data = fit.data
    coords = {
        "cell": [f"{g}|{c}" for g, c in data.cells],
        "judge": list(data.judges),
        "cutpoint": list(range(1, data.n_categories)),
        "trial": list(data.trials),
        "answer": list(data.answers),
    }
    if GENERATOR_MEAN_SITE in fit.samples:
        coords["generator"] = list(data.generators)
    dims = {
        "eta": ["cell"],
        "eta_increment": ["cell"],
        "log_alpha": ["judge"],
        "beta": ["judge"],
        "gamma": ["judge"],
        "kappa_raw": ["cutpoint"],
        "z_b": ["trial"],
        "eps": ["answer"],
        GENERATOR_MEAN_SITE: ["generator"],
    }
    if fit.mcmc is not None:
        idata = az.from_numpyro(fit.mcmc, log_likelihood=False, coords=coords, dims=dims)
        for group in ("observed_data", "log_likelihood"):
            if group in idata.groups():
                del idata[group]
    else:
        idata = az.from_dict(posterior=dict(fit.samples), coords=coords, dims=dims)
    post = idata.posterior
    if not include_locals:
        post = post.drop_vars([v for v in LOCAL_SITES if v in post.data_vars]).drop_vars(
            ["trial", "answer"], errors="ignore"
        )
    for name, b in fit_blocks(fit).items():
        if name in post.data_vars:
            continue
        dim = f"{name}_dim"
        post[name] = (("chain", "draw", dim), b.draws)
        post = post.assign_coords({dim: b.names})
    post.attrs.update({f"setting_{k}": str(v) for k, v in fit.settings.items()})
    post.attrs["method"] = fit.method
    idata.posterior = post
    return idata


def save_fit(
    fit: Fit,
    netcdf_path: str | os.PathLike,
    summary_path: str | os.PathLike,
    diagnostics_path: str | os.PathLike | None = None,
    include_locals: bool = False,
    *,
    attrs: Mapping[str, str] | None = None,
    summary_columns: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Posterior draws → NetCDF (ArviZ), summary → CSV, diagnostics → JSON.

    ``attrs`` go into the posterior group's attributes, ``summary_columns`` into every row
    of the summary as constant columns, ``extra`` into the diagnostics (the workflow writes
    what the fit was made with into each file this way: ``measurement.pipeline.run_fit``)."""
    for p in (netcdf_path, summary_path, diagnostics_path):
        if p is not None:
            Path(p).parent.mkdir(parents=True, exist_ok=True)
    idata = to_inference_data(fit, include_locals=include_locals)
    idata.posterior.attrs.update(dict(attrs or {}))
    idata.to_netcdf(str(netcdf_path))
    summarize(fit).assign(**dict(summary_columns or {})).to_csv(summary_path, index=False)
    if diagnostics_path is not None:
        diag = diagnostics(fit) if fit.method == "nuts" else {"method": fit.method, "timings": fit.timings}
        diag.update(dict(extra or {}))
        diag["settings"] = fit.settings
        diag["data"] = {
            "n_ratings": fit.data.n_ratings,
            "n_answers": fit.data.n_answers,
            "n_anchors": fit.data.n_anchors,
            "n_trials": fit.data.n_trials,
            "judges": list(fit.data.judges),
            **fit.data.info,
        }
        Path(diagnostics_path).write_text(json.dumps(diag, indent=2, default=float) + "\n", encoding="utf-8")


def compare_to_truth(
    fit: Fit, truth_samples: Mapping[str, np.ndarray], blocks: Iterable[str] | None = None
) -> pd.DataFrame:
    """Summary rows joined with true values (``truth_samples``: raw sites of one draw, e.g.
    ``SimulationTruth.as_params(data)``) and whether the 95% interval covers them."""
    truth = derived_blocks({k: np.asarray(v)[None, None] for k, v in truth_samples.items()}, fit.data)
    summ = summarize(fit, blocks)
    tv = {n: v for b in truth.values() for n, v in zip(b.names, b.draws[0, 0])}
    summ["truth"] = summ["parameter"].map(tv)
    summ["covered"] = (summ["q2.5"] <= summ["truth"]) & (summ["truth"] <= summ["q97.5"])
    return summ
