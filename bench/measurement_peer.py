"""Benchmark: our measurement-model fit against the same model in PyMC, sampled with nutpie. Prints figures; not a test.

Variants, one chain each, float64, the same warm-up and draw counts:
- ``ours-<init>``: ``fit_nuts`` with the paper config's sampler settings (config/config.yaml,
  conformity.fit: init, split_means, warmup_windows, target_accept, max_tree_depth, precision,
  theta_anchor) and its defaults (grid layout, stable ordinal log-prob, dense mass block over
  the globals);
  ``--inits median,svi`` runs both starts.
- ``ours-nutpie`` (``ours-nutpie-lowrank``): ``fit_nutpie``, nutpie's sampler over our JAX log
  density (the config's ``split_means``; with nutpie's low-rank mass-matrix corrections);
  ``ours-nutpie-nosplit``: the same without ``split_means`` (the rotation made for NumPyro's
  dense block).
- ``nutpie-jax``, ``nutpie-numba``: the paper's model written in PyMC as a statistician
  would (index vectors, ``pm.OrderedLogistic``), compiled by ``nutpie.compile_pymc_model``
  with that backend (gradients by pytensor, nutpie's default) and sampled by nutpie (its
  diagonal, gradient-based mass matrix; its own start, jittered around the prior's support
  point), target_accept and maximum tree depth as ours.

Same model, shown equal: before any fit, at the simulated truth, the ratings'
log-likelihood and the log joint (constrained scale, no Jacobians) and the unconstrained
log density (with the log-Jacobians of σ_b, σ_θ) are computed by both sides and must agree
to 1e-6 relative, else the bench stops with exit status 1. The transforms agree because the
PyMC model keeps our parameterisation: κ = sort(κ_raw) with κ_raw ~ N(0, 1) unconstrained,
log α ~ N(0, 0.4), non-centred b_t = σ_b z_t and θ_i = b_t + r_i η_c + σ_θ ε_i.
The data reach the peer as an .npz the parent writes (``prepare_data``'s arrays + the truth).

Per fit: set-up seconds (ours: the call of fit_nuts to the first warm-up iteration, as
``fit.timings["setup_s"]``; nutpie: model build + ``compile_pymc_model`` + the sampler's
start up to its first finished warm-up draw, which holds nutpie-jax's XLA compile), compile
seconds (ours: JAX tracing, lowering and XLA compile over the whole fit; nutpie:
``compile_pymc_model``, numba's compile included, JAX's not), warm-up
and sampling seconds, wall seconds of the whole fit, CPU seconds (getrusage user + system of
the process and its finished children, e.g. C compiles), and min bulk ESS over η (the
condition shifts) and γ (the judges' peer-context loadings), computed in the parent with
this environment's ArviZ for every variant. Reported: medians over ``--repeats`` of min bulk
ESS per wall-second and per CPU-second of the whole fit, the ratios ours / best peer, and
the largest |z| between variants' posterior means of η (z = difference / combined MCSE).

Every fit runs in a fresh process held to one core (``--core``, by ``taskset``: XLA's pool,
nutpie's sampler thread and the Python thread share it; BLAS, numba and nutpie get one
thread each, nutpie cores=1), from
empty compile caches (``--cache cold``: JAX persistent cache, pytensor's base_compiledir with
its numba cache, and numba's own cache in fresh temporary directories) or from the usual ones
(``--cache warm``). Variants are interleaved run by run. The peer runs under its own interpreter (``--peer-python``,
default ``.venv-peer/bin/python``); without it the bench prints how to create it.

Usage::

    .venv/bin/python bench/measurement_peer.py [--items 50 | --scales 50,125,500] [--warmup 400 --samples 400]
        [--chains 1] [--repeats 3] [--inits svi] [--variants ours,nutpie-jax,nutpie-numba]
        [--cache cold] [--core N] [--peer-python .venv-peer/bin/python] [--json FILE [--resume [--rerun ours]]]
    .venv/bin/python bench/measurement_peer.py --print FILE   # the summary of a saved run

``--resume`` keeps the runs already in ``--json`` and runs only the missing (variant, scale,
repeat); ``--rerun ours`` drops our kept runs at the scales of this run first, so after a
change to our fit only ours runs again beside the peers' kept runs (then not interleaved
with them: compare per CPU second). Each of our runs records its sampler (``init``, ``split_means``).

Scales: 50 items = 1/10 paper scale (11,600 ratings), 125 = 1/4, 500 = full.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PEER_PYTHON = ".venv-peer/bin/python"
PEER_SETUP = (
    "python3 -m venv .venv-peer",
    ".venv-peer/bin/pip install --upgrade pip",
    # the versions of bench/results/peer_tenth.json; jax as this project pins it
    ".venv-peer/bin/pip install pymc==5.28.5 pytensor==2.38.3 nutpie==0.16.8 jax==0.10.2 jaxlib==0.10.2 numba==0.65.1",
)
PEERS = {"nutpie-jax": "jax", "nutpie-numba": "numba"}
#: relative tolerance of the log-density check
RTOL = 1e-6
#: nutpie reports progress this often (ms): the resolution of its phase boundaries
PROGRESS_MS = 20


def _thread_env() -> dict[str, str]:
    return {
        "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "NUMBA_NUM_THREADS": "1",
    }


def _cpu() -> float:
    """User + system seconds of this process (all threads) and its waited-for children
    (pytensor's C compiles run as gcc processes)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


# ----------------------------------------------------------------------------- data (our side)


def sampler_config() -> dict:
    """The paper config's sampler settings (conformity.fit), fit_nuts's defaults where unset."""
    from context_effects.config import load_config

    fit = load_config(REPO / "config" / "config.yaml")["conformity"]["fit"]
    return {
        "init": fit.get("init", "median"),
        "split_means": list(fit.get("split_means", [])),
        "warmup_windows": fit.get("warmup_windows"),
        "target_accept": float(fit.get("target_accept", 0.95)),
        "max_tree_depth": int(fit.get("max_tree_depth", 10)),
        "precision": fit.get("precision", "float64"),
        "theta_anchor": float(fit.get("theta_anchor", 1.5)),
    }


def simulated(items: int, data_seed: int):
    from context_effects.measurement import prepare_data, simulate_ratings

    table, truth = simulate_ratings(n_items=items, seed=data_seed)
    data = prepare_data(table)
    return data, truth.as_params(data)


def write_data(path: Path, data, truth: dict, theta_anchor: float) -> None:
    """What the peer needs: the index vectors of ``prepare_data`` and the truth point."""
    import numpy as np

    np.savez(
        path,
        answer_trial=data.answer_trial, answer_cell=data.answer_cell, anchor_sign=data.anchor_sign,
        row_answer=data.row_answer, row_judge=data.row_judge, row_informed=data.row_informed,
        row_d=data.row_d, row_y=data.row_y,
        sizes=np.array([data.n_trials, data.n_answers, data.n_cells, data.n_judges, data.n_categories]),
        theta_anchor=np.float64(theta_anchor),
        **{f"truth_{k}": np.asarray(v, np.float64) for k, v in truth.items()},
    )


def ours_log_densities(data, truth: dict, theta_anchor: float) -> dict[str, float]:
    """Our model's log densities at ``truth``: the ratings' log-likelihood, the log joint on
    the constrained scale (numpyro's log_density: no Jacobians) and the unconstrained one
    (minus numpyro's potential energy: with the Jacobians of the σ's exp transforms)."""
    import jax.numpy as jnp
    from numpyro.infer.util import log_density, potential_energy, unconstrain_fn

    from context_effects.measurement import ModelOptions, log_likelihood, make_model, model_arrays, set_precision

    dtype = set_precision("float64")
    options = ModelOptions(theta_anchor=theta_anchor)
    arrays = model_arrays(data, options, dtype)
    params = {k: jnp.asarray(v, dtype) for k, v in truth.items()}
    model = make_model(data, options)
    joint, _ = log_density(model, (arrays,), {}, params)
    unconstrained = unconstrain_fn(model, (arrays,), {}, params)
    return {
        "loglik": float(log_likelihood(params, arrays, options)),
        "joint": float(joint),
        "unconstrained": -float(potential_energy(model, (arrays,), {}, unconstrained)),
    }


# ----------------------------------------------------------------------------- the peer (PyMC)


def peer_model(npz):
    """The paper's model in PyMC (model.py's docstring, ModelOptions() defaults)."""
    import numpy as np
    import pymc as pm
    import pytensor.tensor as pt

    n_trials, n_answers, n_cells, n_judges, n_categories = (int(x) for x in npz["sizes"])
    coords = {"trial": range(n_trials), "answer": range(n_answers), "cell": range(n_cells),
              "judge": range(n_judges), "cut": range(n_categories - 1)}
    answer_trial, answer_cell = npz["answer_trial"], npz["answer_cell"]
    round2 = answer_cell >= 0
    anchor_theta = npz["anchor_sign"] * float(npz["theta_anchor"])
    judge, answer = npz["row_judge"], npz["row_answer"]
    informed_d = (npz["row_informed"] * npz["row_d"]).astype(np.float64)
    with pm.Model(coords=coords) as model:
        sigma_b = pm.HalfNormal("sigma_b", 1.0)
        sigma_theta = pm.HalfNormal("sigma_theta", 1.0)
        eta = pm.Normal("eta", 0.0, 1.0, dims="cell")
        log_alpha = pm.Normal("log_alpha", 0.0, 0.4, dims="judge")
        beta = pm.Normal("beta", 0.0, 1.0, dims="judge")
        gamma = pm.Normal("gamma", 0.0, 0.5, dims="judge")
        # as ours: unconstrained κ_raw, sorted (not PyMC's ordered transform), so that the
        # unconstrained densities, and with them the geometry NUTS sees, are the same
        kappa_raw = pm.Normal("kappa_raw", 0.0, 1.0, dims="cut")
        z_b = pm.Normal("z_b", 0.0, 1.0, dims="trial")
        eps = pm.Normal("eps", 0.0, 1.0, dims="answer")
        shift = pt.where(round2, eta[np.maximum(answer_cell, 0)], 0.0)  # r_i = 0 in Round 1
        theta = pt.concatenate([sigma_b * z_b[answer_trial] + shift + sigma_theta * eps, anchor_theta])
        alpha = pt.exp(log_alpha)
        mu = alpha[judge] * (theta[answer] - beta[judge]) + informed_d * gamma[judge]
        # compute_p=False: no per-rating probability array recorded with every draw
        pm.OrderedLogistic("y", eta=mu, cutpoints=pt.sort(kappa_raw), observed=npz["row_y"], compute_p=False)
    return model


def peer_point(model, npz) -> dict:
    """The truth as the model's value variables (σ's on their log scale)."""
    point = {}
    for rv in model.free_RVs:
        value = npz[f"truth_{rv.name}"]
        transform = model.rvs_to_transforms.get(rv)
        if transform is not None:
            value = transform.forward(value, *rv.owner.inputs).eval()
        point[model.rvs_to_values[rv].name] = value
    return point


def peer_versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("pymc", "pytensor", "nutpie", "jax", "jaxlib", "numba", "numpy")}


def peer_check(spec: dict) -> dict:
    import numpy as np

    npz = np.load(spec["data"])
    model = peer_model(npz)
    point = peer_point(model, npz)
    return {
        "loglik": float(model.compile_logp(vars=[model["y"]], jacobian=False)(point)),
        "joint": float(model.compile_logp(jacobian=False)(point)),
        "unconstrained": float(model.compile_logp(jacobian=True)(point)),
        "versions": peer_versions(),
    }


def peer_fit(spec: dict) -> dict:
    import numpy as np

    t0, c0 = time.perf_counter(), _cpu()
    import nutpie
    from nutpie import _lib

    t_import, c_import = time.perf_counter() - t0, _cpu() - c0
    npz = np.load(spec["data"])
    t1, c1 = time.perf_counter(), _cpu()
    model = peer_model(npz)
    compiled = nutpie.compile_pymc_model(model, backend=spec["backend"], var_names=["eta", "gamma"])
    t2, c2 = time.perf_counter(), _cpu()

    # nutpie times neither phase; its progress callback (every PROGRESS_MS) tells when the
    # first draw and the last warm-up draw are done
    marks: dict[str, tuple[float, float]] = {}

    def on_progress(text: str) -> None:
        done = int(text.strip() or 0)
        if done >= 1 and "first" not in marks:
            marks["first"] = (time.perf_counter(), _cpu())
        if done >= spec["warmup"] * spec["chains"] and "tuned" not in marks:
            marks["tuned"] = (time.perf_counter(), _cpu())

    progress = _lib.ProgressType.template_callback(PROGRESS_MS, "{{ total_finished_draws }}", 1, on_progress)
    make_sampler = compiled._make_sampler
    object.__setattr__(compiled, "_make_sampler", lambda settings, init, cores, _, store: make_sampler(
        settings, init, cores, progress, store))
    trace = nutpie.sample(compiled, draws=spec["samples"], tune=spec["warmup"], chains=spec["chains"], cores=1,
                          seed=spec["seed"], target_accept=spec["target_accept"], maxdepth=spec["max_tree_depth"],
                          progress_bar=False, save_warmup=False)
    t3, c3 = time.perf_counter(), _cpu()
    first, tuned = marks.get("first", (t2, c2)), marks.get("tuned", (t3, c3))
    np.savez(spec["draws"], eta=trace.posterior["eta"].values, gamma=trace.posterior["gamma"].values)
    st = trace.sample_stats
    return {
        "import_s": t_import, "import_cpu_s": c_import,
        "compile_s": t2 - t1, "compile_cpu_s": c2 - c1,
        "setup_s": first[0] - t1, "setup_cpu_s": first[1] - c1,
        "warmup_s": tuned[0] - first[0], "sampling_s": t3 - tuned[0], "sampling_cpu_s": c3 - tuned[1],
        "wall_s": t3 - t1, "cpu_s": c3 - c1,
        "steps_per_draw": float(st["n_steps"].mean()), "step_size": float(st["step_size"].mean()),
        "divergences": int(st["diverging"].sum()), "progress_marks": sorted(marks),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# ----------------------------------------------------------------------------- ours


def ours_fit(spec: dict) -> dict:
    """``ours-<init>``: fit_nuts; ``ours-nutpie`` (``-lowrank``, ``-nosplit``): fit_nutpie, nutpie's
    sampler over our log density (``-nosplit``: the parent gives no ``split_means``)."""
    import numpy as np

    from context_effects.measurement import fit_nutpie, fit_nuts

    by_nutpie = spec["init"].startswith("nutpie")
    if by_nutpie:
        import nutpie  # noqa: F401 (imported before the clock starts, as the peer's is)
    data, _ = simulated(spec["items"], spec["data_seed"])
    # the same ratings as the peer's file (the simulation is seeded; this guards the claim)
    if not np.array_equal(np.load(spec["data"])["row_y"], data.row_y):
        raise SystemExit("our worker's data differ from the peer's .npz")
    common = dict(chains=spec["chains"], warmup=spec["warmup"], samples=spec["samples"], seed=spec["seed"],
                  target_accept=spec["target_accept"], max_tree_depth=spec["max_tree_depth"], precision="float64",
                  theta_anchor=spec["theta_anchor"], split_means=tuple(spec.get("split_means", ())),
                  keep_locals=False, compilation_cache=spec["cache"] if spec["cache"] else True)
    c0 = _cpu()
    if by_nutpie:
        fit = fit_nutpie(data, low_rank_mass=spec["init"].endswith("-lowrank"), **common)
    else:
        fit = fit_nuts(data, init=spec["init"], warmup_windows=spec.get("warmup_windows"), **common)
    cpu = _cpu() - c0
    t, st = fit.timings, fit.sampler_stats
    np.savez(spec["draws"], eta=fit.samples["eta"], gamma=fit.samples["gamma"])
    return {
        "compile_s": t["compile_s"], "compiled_programs": t["compiled_programs"],
        "setup_s": t["setup_s"], "setup_cpu_s": t["setup_cpu_s"],
        # nutpie runs warm-up and draws in one call (both under sampling); fit_nuts's warm-up
        # clock starts before the chain init and the loop's compile
        "warmup_s": float("nan") if by_nutpie else t["start_s"] + t["warmup_s"] - t["setup_s"],
        "sampling_s": t["sampling_s"],
        "wall_s": t["total_s"], "cpu_s": cpu,
        "steps_per_draw": float(np.mean(st["num_steps"])), "step_size": float(np.mean(st["step_size"])),
        "divergences": int(st["diverging"].sum()),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


# ----------------------------------------------------------------------------- parent


def run_worker(python: str, spec: dict, env_extra: dict | None = None, core: int | None = None) -> dict:
    """One fit in a fresh process; with ``core``, the process and every thread it starts are
    held to that core (XLA's pool, nutpie's sampler thread and the Python thread alike)."""
    env = {**os.environ, **_thread_env(), "PYTHONPATH": str(REPO / "src"), **(env_extra or {})}
    t0 = time.perf_counter()
    pin = [] if core is None else ["taskset", "--cpu-list", str(core)]
    proc = subprocess.run([*pin, python, __file__, "--worker", json.dumps(spec)], env=env, capture_output=True,
                          text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"worker {spec.get('variant', spec['kind'])} failed:\n{proc.stderr[-4000:]}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "process_s": time.perf_counter() - t0}


def posterior_figures(path: Path) -> dict:
    """Min bulk ESS of η and γ and η's posterior means with their MCSE, by this environment's
    ArviZ for every variant (one function, one version)."""
    import arviz as az
    import numpy as np

    draws = np.load(path)
    out = {}
    for name in ("eta", "gamma"):
        ds = az.convert_to_dataset({"x": draws[name]})
        out[f"ess_{name}_min"] = float(az.ess(ds, method="bulk")["x"].min())
        if name == "eta":
            out["eta_mean"] = ds["x"].mean(("chain", "draw")).values.tolist()
            out["eta_mcse"] = az.mcse(ds, method="mean")["x"].values.tolist()
    return out


def check_log_density(data, truth: dict, npz: Path, peer_python: str, theta_anchor: float) -> dict:
    ours = ours_log_densities(data, truth, theta_anchor)
    peer = run_worker(peer_python, {"kind": "check", "data": str(npz)},
                      {"PYTENSOR_FLAGS": f"floatX=float64,base_compiledir={npz.parent / 'pytensor-check'}"})
    rows = {}
    print(f"  {'log density at the truth':38s} {'ours (NumPyro)':>18s} {'PyMC':>18s} {'difference':>11s} "
          f"{'relative':>9s}")
    for key, label in (("loglik", "ratings' log-likelihood"), ("joint", "log joint, constrained, no Jacobian"),
                       ("unconstrained", "unconstrained, with Jacobians")):
        a, b = ours[key], peer[key]
        rel = abs(a - b) / max(abs(a), abs(b), 1e-300)
        rows[key] = {"ours": a, "peer": b, "difference": a - b, "relative": rel, "ok": rel <= RTOL}
        print(f"  {label:38s} {a:18.8f} {b:18.8f} {a - b:11.3e} {rel:9.1e}")
    return {"values": rows, "ok": all(r["ok"] for r in rows.values()), "peer_versions": peer["versions"]}


def _median(xs):
    import statistics

    return statistics.median(xs) if xs else float("nan")


def _ess_rate(run: dict, key: str) -> float:
    """A run's min bulk ESS of a block per second of a clock; ``key`` is "<block>/<clock>"."""
    block, clock = key.split("/")
    return run[f"ess_{block}_min"] / run[clock]


def summarise(saved: dict) -> None:
    import numpy as np

    runs = saved["runs"]
    ratios = []  # (items, our variant, {clock: ratio}) for the closing table
    for items in sorted({r["items"] for r in runs}):
        rs = [r for r in runs if r["items"] == items]
        variants = list(dict.fromkeys(r["variant"] for r in rs))
        print(f"\n# {items} items ({items / 500:g} of paper scale), {rs[0]['ratings']} ratings: medians over repeats; "
              "whole fit = set-up + warm-up + sampling; ESS = min bulk ESS over the block")
        print(f"{'variant':13s} {'n':>2s} {'compile s':>9s} {'set-up s':>8s} {'warm-up s':>9s} {'sampling s':>10s} "
              f"{'wall s':>7s} {'CPU s':>7s} {'ESS eta':>7s} {'ESS gam':>7s} {'eta/s':>7s} {'gam/s':>7s} {'eta/CPU-s':>9s} "
              f"{'gam/CPU-s':>9s} {'steps/draw':>10s} {'div':>4s}")
        med = {}
        for v in variants:
            vr = [r for r in rs if r["variant"] == v]
            keys = ("compile_s", "setup_s", "warmup_s", "sampling_s", "wall_s", "cpu_s", "ess_eta_min",
                    "ess_gamma_min", "steps_per_draw", "divergences")
            m = {k: _median([r[k] for r in vr]) for k in keys}
            for block in ("eta", "gamma"):
                for clock in ("wall_s", "cpu_s"):
                    m[f"{block}/{clock}"] = _median([_ess_rate(r, f"{block}/{clock}") for r in vr])
            med[v] = m
            print(f"{v:13s} {len(vr):2d} {m['compile_s']:9.1f} {m['setup_s']:8.1f} {m['warmup_s']:9.1f} "
                  f"{m['sampling_s']:10.1f} {m['wall_s']:7.1f} {m['cpu_s']:7.1f} {m['ess_eta_min']:7.0f} {m['ess_gamma_min']:7.0f} "
                  f"{m['eta/wall_s']:7.2f} {m['gamma/wall_s']:7.2f} {m['eta/cpu_s']:9.2f} {m['gamma/cpu_s']:9.2f} "
                  f"{m['steps_per_draw']:10.1f} {m['divergences']:4.0f}")
        peers = [v for v in variants if v in PEERS]
        for v in (v for v in variants if v.startswith("ours") and peers):
            parts = []
            for key, label in (("eta/wall_s", "eta per wall-s"), ("gamma/wall_s", "gamma per wall-s"),
                               ("eta/cpu_s", "eta per CPU-s"), ("gamma/cpu_s", "gamma per CPU-s")):
                best = max(peers, key=lambda p: med[p][key])
                parts.append(f"{label} x{med[v][key] / max(med[best][key], 1e-12):.2f} (vs {best})")
            print(f"ratio {v} / best peer: " + "; ".join(parts))
            # repeat by repeat (the same sampler seed on both sides): how often ours wins, and the
            # quartiles of the per-repeat ratios, so a median lead can be told from a margin
            parts = []
            for key, label in (("eta/cpu_s", "eta"), ("gamma/cpu_s", "gamma")):
                best = max(peers, key=lambda p: med[p][key])
                peer_runs = {r["repeat"]: r for r in rs if r["variant"] == best}
                each = [_ess_rate(r, key) / _ess_rate(peer_runs[r["repeat"]], key)
                        for r in rs if r["variant"] == v and r["repeat"] in peer_runs]
                if each:
                    q = np.quantile(each, [0.25, 0.5, 0.75])
                    parts.append(f"{label} won {sum(x > 1 for x in each)} of {len(each)} (quartiles "
                                 + ", ".join(f"{x:.2f}" for x in q) + ")")
            if parts:
                print(f"per repeat, {v} / best peer per CPU-s: " + "; ".join(parts))
            ratios.append((items, v, {key: med[v][key] / max(max(med[p][key] for p in peers), 1e-12)
                                      for key in ("eta/cpu_s", "gamma/cpu_s", "eta/wall_s", "gamma/wall_s")}))
        # posterior means of η, run against run within a repeat: the same posterior shows |z| ≲ 3
        worst = {}
        for rep in sorted({r["repeat"] for r in rs}):
            by = {r["variant"]: r for r in rs if r["repeat"] == rep}
            names = list(by)
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    z = np.subtract(by[a]["eta_mean"], by[b]["eta_mean"]) / np.hypot(by[a]["eta_mcse"],
                                                                                     by[b]["eta_mcse"])
                    worst[a, b] = max(worst.get((a, b), 0.0), float(np.max(np.abs(z))))
        if worst:
            print("largest |z| of eta's posterior means (difference / combined MCSE, over cells and repeats): "
                  + "; ".join(f"{a} vs {b} {z:.2f}" for (a, b), z in worst.items()))
    if len({items for items, _, _ in ratios}) > 1:
        print("\n# ours / the best peer at each scale (min bulk ESS per second of the whole fit; medians over repeats)")
        print(f"{'items':>5s} {'scale':>6s} {'variant':13s} {'eta/CPU-s':>9s} {'gam/CPU-s':>9s} {'eta/wall-s':>10s} "
              f"{'gam/wall-s':>10s}")
        for items, v, r in ratios:
            print(f"{items:5d} {items / 500:6.2f} {v:13s} {r['eta/cpu_s']:9.2f} {r['gamma/cpu_s']:9.2f} "
                  f"{r['eta/wall_s']:10.2f} {r['gamma/wall_s']:10.2f}")


#: settings a kept run must share with the resumed bench
RESUME_KEYS = ("warmup", "samples", "chains", "cache", "data_seed")


def kept_runs(saved: dict, settings: dict, rerun: str, scales: list[int]) -> list[dict]:
    """The runs of a saved file that a resumed bench keeps: all but those of ``rerun``'s
    variants (``ours`` = every start of ours) at the ``scales`` this run fits (so a rerun at
    one scale keeps the others'); the file must share ``RESUME_KEYS``."""
    differ = {k: (saved["settings"].get(k), settings[k]) for k in RESUME_KEYS if saved["settings"].get(k) != settings[k]}
    if differ:
        raise SystemExit(f"--resume: the file was run with other settings {differ}; use another --json")
    dropped = {v for v in rerun.split(",") if v}

    def is_dropped(variant):
        return variant in dropped or ("ours" in dropped and variant.startswith("ours-"))

    return [r for r in saved["runs"] if not (is_dropped(r["variant"]) and r["items"] in scales)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--items", type=int, default=50, help="items per dataset (50 = 1/10 paper scale)")
    ap.add_argument("--scales", help="comma list of --items values, e.g. 50,125,500")
    ap.add_argument("--warmup", type=int, default=400)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--chains", type=int, default=1, help="per fit, one after the other")
    ap.add_argument("--repeats", type=int, default=3, help="runs per variant (sampler seeds 42, 43, ...)")
    ap.add_argument("--variants", default="ours,nutpie-jax,nutpie-numba",
                    help="ours (= ours-<init> for each of --inits), ours-nutpie, ours-nutpie-lowrank, "
                    "ours-nutpie-nosplit, nutpie-jax, "
                    "nutpie-numba")
    ap.add_argument("--core", type=int, default=max(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                    else None, help="the core every fit's process is held to (default: the last one this "
                    "process may use; -1: not held)")
    ap.add_argument("--inits", help="our starts, e.g. median,svi (default: the config's init)")
    ap.add_argument("--warmup-windows", help="NumPyro's warm-up windows for ours, e.g. 25,175,50, or stan for "
                    "numpyro's own (default: the config's conformity.fit.warmup_windows)")
    ap.add_argument("--cache", choices=("cold", "warm"), default="cold",
                    help="cold: every fit compiles into empty caches; warm: the usual cache directories")
    ap.add_argument("--data-seed", type=int, default=7)
    ap.add_argument("--peer-python", default=PEER_PYTHON, help="interpreter of the PyMC/nutpie venv")
    ap.add_argument("--json", help="write every run here (rewritten after each run)")
    ap.add_argument("--print", metavar="FILE", help="only print the summary of a file --json wrote")
    ap.add_argument("--resume", action="store_true",
                    help="keep the runs already in --json (same warm-up, draws, chains, cache, data) and run the rest")
    ap.add_argument("--rerun", default="", help="with --resume: variants whose kept runs are dropped and run "
                    "again, e.g. ours after a change to our fit (the peers' runs stay)")
    args = ap.parse_args()
    if args.core is not None and args.core < 0:
        args.core = None
    if (args.resume or args.rerun) and not (args.json and args.resume):
        ap.error("--resume needs --json, and --rerun needs --resume")
    if args.worker:
        spec = json.loads(args.worker)
        out = {"check": peer_check, "peer": peer_fit, "ours": ours_fit}[spec["kind"]](spec)
        print(json.dumps(out))
        return
    if args.print:
        saved = json.loads(Path(args.print).read_text())
        print(f"# {args.print}: " + ", ".join(f"{k} {v}" for k, v in saved["settings"].items()))
        print("# versions: " + json.dumps(saved["versions"]))
        for items, check in saved["checks"].items():
            values = check["values"].items()
            print(f"# log-density check at {items} items: " + ", ".join(
                f"{k} {v['ours']:.6f} vs {v['peer']:.6f} (rel {v['relative']:.1e})" for k, v in values))
        summarise(saved)
        return

    peer_python = str((REPO / args.peer_python) if not Path(args.peer_python).is_absolute() else args.peer_python)
    if not Path(peer_python).exists():
        print(f"no peer interpreter at {args.peer_python}; create the venv (from the repository root):\n    "
              + "\n    ".join(PEER_SETUP), file=sys.stderr)
        raise SystemExit(2)
    # the parent computes our log densities (one float64 JAX call): on one thread like the workers
    os.environ.update(_thread_env())
    import arviz
    import jax
    import numpyro

    config = sampler_config()
    if args.warmup_windows:
        config["warmup_windows"] = (None if args.warmup_windows == "stan"
                                    else [int(w) for w in args.warmup_windows.split(",")])
    if config["precision"] != "float64":
        raise SystemExit(f"the config fits in {config['precision']}; this bench compares float64 fits only")
    inits = (args.inits or config["init"]).split(",")
    scales = [int(s) for s in args.scales.split(",")] if args.scales else [args.items]
    variants = []
    for v in args.variants.split(","):
        variants += [f"ours-{i}" for i in inits] if v == "ours" else [v]
    settings = {k: v for k, v in vars(args).items() if k not in ("worker", "print", "json", "peer_python")}
    settings.update(config=config, date=time.strftime("%Y-%m-%d %H:%M"), cpus=os.cpu_count())
    saved = {"settings": settings, "versions": {"ours": {"jax": jax.__version__, "numpyro": numpyro.__version__,
                                                         "arviz": arviz.__version__}},
             "checks": {}, "runs": []}
    if args.resume and Path(args.json).exists():
        saved["runs"] = kept_runs(json.loads(Path(args.json).read_text()), settings, args.rerun, scales)
    done = {(r["variant"], r["items"], r["repeat"]) for r in saved["runs"]}
    print(f"# measurement model: ours vs PyMC + nutpie - {settings['date']}, {os.cpu_count()} CPUs, "
          f"load avg {os.getloadavg()[0]:.2f}; one thread per fit, one process per fit, caches {args.cache}")
    print(f"# {args.chains} chain(s) of {args.warmup} warm-up + {args.samples} draws, float64, target_accept "
          f"{config['target_accept']}, max tree depth {config['max_tree_depth']}; variants {', '.join(variants)}")

    work = Path(tempfile.mkdtemp(prefix="peer-bench-"))
    try:
        for items in scales:
            data, truth = simulated(items, args.data_seed)
            npz = work / f"data_{items}.npz"
            write_data(npz, data, truth, config["theta_anchor"])
            print(f"\n# {items} items x 4 generators x 4 judges: {data.n_ratings} ratings; log densities at the "
                  f"simulated truth (tolerance {RTOL:g} relative)")
            check = check_log_density(data, truth, npz, peer_python, config["theta_anchor"])
            saved["checks"][str(items)] = check
            saved["versions"]["peer"] = check["peer_versions"]
            if args.json:
                Path(args.json).write_text(json.dumps(saved, indent=1) + "\n")
            if not check["ok"]:
                raise SystemExit("the PyMC model's log density differs from ours: the comparison would not be fair")
            print(f"  same model: all three agree within {RTOL:g}; peer versions {check['peer_versions']}")
            # interleaved: a change in machine load hits every variant alike
            for rep in range(args.repeats):
                for variant in variants:
                    if (variant, items, rep) in done:
                        continue
                    caches = Path(tempfile.mkdtemp(dir=work))
                    spec = {"items": items, "data": str(npz), "draws": str(caches / "draws.npz"),
                            "warmup": args.warmup, "samples": args.samples, "chains": args.chains,
                            "seed": 42 + rep, "target_accept": config["target_accept"],
                            "max_tree_depth": config["max_tree_depth"]}
                    env = {}
                    if variant in PEERS:
                        spec.update(kind="peer", backend=PEERS[variant])
                        # base_compiledir, not compiledir: pytensor keeps its numba cache beside the latter
                        env = {"PYTENSOR_FLAGS": "floatX=float64" + (f",base_compiledir={caches / 'pytensor'}"
                                                                    if args.cache == "cold" else ""),
                               "JAX_ENABLE_X64": "1"}
                        if args.cache == "cold":
                            env["NUMBA_CACHE_DIR"] = str(caches / "numba")
                        python = peer_python
                    else:
                        split_means = [] if variant.endswith("-nosplit") else config["split_means"]
                        # nutpie adapts its own mass matrix: NumPyro's warm-up windows are not its
                        windows = None if variant.startswith("ours-nutpie") else config["warmup_windows"]
                        spec.update(kind="ours", init=variant.removeprefix("ours-"), data_seed=args.data_seed,
                                    theta_anchor=config["theta_anchor"], split_means=split_means,
                                    warmup_windows=windows, cache=str(caches / "jax") if args.cache == "cold" else "")
                        # the sampler as this run had it: a resumed file may mix runs of several
                        sampler = {"init": spec["init"], "split_means": spec["split_means"], "warmup_windows": windows}
                        python = sys.executable
                    r = run_worker(python, spec, env, core=args.core)
                    r.update(posterior_figures(caches / "draws.npz"))
                    shutil.rmtree(caches, ignore_errors=True)
                    r.update(variant=variant, items=items, ratings=data.n_ratings, repeat=rep, seed=42 + rep,
                             load=os.getloadavg()[0], date=time.strftime("%Y-%m-%d %H:%M"))
                    if variant not in PEERS:
                        r["sampler"] = sampler
                    saved["runs"].append(r)
                    print(f"{variant:13s} {items} items, repeat {rep + 1}/{args.repeats}: set-up {r['setup_s']:.1f} s, "
                          f"warm-up {r['warmup_s']:.1f} s, sampling {r['sampling_s']:.1f} s; whole fit "
                          f"{r['wall_s']:.1f} s, {r['cpu_s']:.1f} CPU s; min bulk ESS eta {r['ess_eta_min']:.0f}, "
                          f"gamma {r['ess_gamma_min']:.0f}; {r['steps_per_draw']:.1f} steps/draw, "
                          f"{r['divergences']} divergences; load {r['load']:.1f}", flush=True)
                    if args.json:
                        Path(args.json).write_text(json.dumps(saved, indent=1) + "\n")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summarise(saved)


if __name__ == "__main__":
    main()
