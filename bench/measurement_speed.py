"""Benchmark: NUTS speed of the seed 002 measurement model (§2.3, App. C). Prints figures; not a test.

(1) Same simulated data at 1/10 paper scale (50 items × 4 generators × 4 judges, blind +
    informed, anchors: 11,600 ratings), same machine, one chain each:
    (a) the straightforward non-centred model: per-rating gathers, NumPyro's OrderedLogistic,
        plain diagonal mass matrix, float64;
    (b) the fastest implementation: dense answer × judge layout, stable ordinal log-prob with
        a hand-written derivative, dense mass block over the global sites, float32
        (and (b64), the same in float64, the paper's precision).
    (m) = (b) with the answer deviations ε integrated out by adaptive Gauss–Hermite
        quadrature (ModelOptions.marginal; m64 in float64).
    (s64) = (b64) with ``split_means``: the trial baselines' per-generator means and the
        answer deviations' per-cell means, the directions that trade off against η, as
        coordinates of the dense block (an orthonormal rotation: same posterior);
    (i64) = (b64) started from a short SVI fit (``init="svi"``: an overdispersed draw of the
        fitted guide, its covariance as the first mass matrix); (si64) both.
    (w64) = (i64) whose first slow warm-up window is 100 draws instead of Stan's 25
        (``warmup_windows=(75, 100, 50)``): the SVI metric is not replaced by a 25-draw estimate.
    (z64) = (i64) with ``split_means=("z_b",)``: only the trial baselines' per-generator
        means join the dense block (the paper config's sampler).
    Reported: min and median bulk ESS over γ and η, wall time (compile + warm-up + sampling),
    ESS per second, leapfrog steps per draw, peak RSS; the ratios to (a); and, for the pairs
    b/m, b64/m64, a/m, a/m64, whether the posterior means and SDs of η, γ, α, β, κ, σ agree
    within Monte Carlo error (z = difference / combined MCSE).
(2) Full scale (500 items: 116,000 ratings, 18,034 sampled dimensions): the gradient's cost
    timed directly, and a short NUTS run (few warm-up iterations) for per-step cost and
    steps per draw; extrapolated to the paper's 4 × (1,500 + 1,500). The short run's steps
    per draw come from an unadapted sampler, so the extrapolation also uses the steps per draw
    measured after full adaptation on simulated paper-scale data while the model was
    developed (~63 with the dense global mass block, ~511 with a diagonal one).

Each configuration runs in its own process (fresh JAX, own peak memory, own precision).
Usage::

    .venv/bin/python bench/measurement_speed.py [--warmup 400 --samples 400] [--full-warmup 20]
        [--threads 1] [--skip-full] [--variants a,b,m,b64,m64,b_diag,s64,i64,si64,w64,z64] [--cache DIR]
        [--repeats 3] [--json runs.json [--resume]] [--items 125]

``--repeats R`` runs every variant R times (sampler seeds 42, 43, ...), interleaved, and
reports medians over the repeats of ESS per wall-second and per CPU-second (XLA keeps
helper threads busy even when told to use one) with the ratios to (a).
    .venv/bin/python bench/measurement_speed.py --svi-check [--warmup 500 --samples 500]

Short runs understate the dense block: its covariance is estimated from the last warm-up
windows, which are only ~25-200 draws long when warm-up is a few hundred iterations.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

VARIANTS = {
    "a": {"layout": "long", "ordinal": "numpyro", "dense_globals": False, "precision": "float64"},
    "b": {"layout": "grid", "ordinal": "stable", "dense_globals": True, "precision": "float32"},
    "b64": {"layout": "grid", "ordinal": "stable", "dense_globals": True, "precision": "float64"},
    "b_diag": {"layout": "grid", "ordinal": "stable", "dense_globals": False, "precision": "float32"},
    "m": {"layout": "grid", "ordinal": "stable", "dense_globals": True, "precision": "float32", "marginal": True},
    "m64": {"layout": "grid", "ordinal": "stable", "dense_globals": True, "precision": "float64", "marginal": True},
    "s64": {"layout": "grid", "ordinal": "stable", "dense_globals": True, "precision": "float64", "split_means": True},
    "i64": {"layout": "grid", "ordinal": "stable", "dense_globals": True, "precision": "float64", "init": "svi"},
    "si64": {"layout": "grid", "ordinal": "stable", "dense_globals": True, "precision": "float64",
             "split_means": True, "init": "svi"},
    "w64": {"layout": "grid", "ordinal": "stable", "dense_globals": True, "precision": "float64", "init": "svi",
            "warmup_windows": (75, 100, 50)},
    "z64": {"layout": "grid", "ordinal": "stable", "dense_globals": True, "precision": "float64", "init": "svi",
            "split_means": ("z_b",)},
}
LABELS = {
    "a": "(a) straightforward: long gathers, builtin OrderedLogistic, diag mass, f64",
    "b": "(b) fastest: grid, stable log-prob, dense global block, f32",
    "b64": "(b64) = (b) in float64",
    "b_diag": "(b_diag) = (b) with a plain diagonal mass matrix (isolates the dense block)",
    "m": "(m) = (b) with the answer deviations eps integrated out by adaptive Gauss-Hermite quadrature (9 nodes), f32",
    "m64": "(m64) = (m) in float64",
    "s64": "(s64) = (b64) with the locals' group means in the dense block (split_means)",
    "i64": "(i64) = (b64) started from SVI (a draw of the guide + its covariance as the first mass matrix)",
    "si64": "(si64) = (b64) with split_means and the SVI start",
    "w64": "(w64) = (i64) with a first slow warm-up window of 100 draws instead of 25 (warmup_windows)",
    "z64": "(z64) = (i64) with the trial baselines' per-generator means in the dense block (split_means=('z_b',))",
}


def _thread_env(threads: int) -> dict[str, str]:
    flags = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" if threads == 1 else ""
    return {
        "XLA_FLAGS": flags,
        "OMP_NUM_THREADS": str(threads),
        "OPENBLAS_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
    }


def worker(spec: dict) -> dict:
    import jax
    import numpy as np

    from context_effects.measurement import diagnostics, fit_nuts, prepare_data, set_precision, simulate_ratings
    from context_effects.measurement.fit import fit_blocks
    from context_effects.measurement.model import ModelOptions, log_likelihood, model_arrays

    table, truth = simulate_ratings(n_items=spec["items"], seed=spec["data_seed"])
    data = prepare_data(table)
    v = VARIANTS[spec["variant"]]
    out = {
        "variant": spec["variant"],
        "items": spec["items"],
        "ratings": data.n_ratings,
        "dims": 2 + 3 * data.n_judges + data.n_cells + data.n_categories - 1 + data.n_trials
        + (0 if VARIANTS[spec["variant"]].get("marginal") else data.n_answers),
    }

    # Cost of one log-density gradient, timed directly (the per-leapfrog floor).
    dtype = set_precision(v["precision"])
    quad = {"marginal": True, "quadrature_nodes": spec.get("nodes", 24)} if v.get("marginal") else {}
    opts = ModelOptions(layout=v["layout"], ordinal=v["ordinal"], **quad)
    arrays = model_arrays(data, opts, dtype)
    params = {k: jax.numpy.asarray(x, dtype) for k, x in truth.as_params(data).items()}
    if opts.marginal:
        del params["eps"]
    grad = jax.jit(jax.value_and_grad(lambda p, a: log_likelihood(p, a, opts)))
    jax.block_until_ready(grad(params, arrays))
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(10):
            r = grad(params, arrays)
        jax.block_until_ready(r)
        best = min(best, (time.perf_counter() - t0) / 10)
    out["grad_ms"] = best * 1e3
    if spec.get("grad_only"):
        out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return out

    if spec.get("svi_guide"):
        from context_effects.measurement import fit_svi

        fit = fit_svi(
            data,
            steps=spec["svi_steps"],
            guide=spec["svi_guide"],
            num_draws=2000,
            precision="float64",
            compilation_cache=spec["cache"],
        )
        out.update(
            wall_s=fit.timings["total_s"],
            intervals=_intervals(fit, truth, data),
            peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        )
        return out

    cpu0 = _cpu_seconds()
    fit = fit_nuts(
        data,
        chains=1,
        warmup=spec["warmup"],
        samples=spec["samples"],
        seed=spec.get("seed", 42),
        layout=v["layout"],
        ordinal=v["ordinal"],
        dense_globals=v["dense_globals"],
        precision=v["precision"],
        compilation_cache=spec["cache"],
        keep_locals=False,
        split_means=v.get("split_means", ()),
        init=v.get("init", "median"),
        warmup_windows=v.get("warmup_windows"),
        **quad,
    )
    cpu_s = _cpu_seconds() - cpu0
    diag = diagnostics(fit, blocks=("eta", "gamma"))
    blocks = fit_blocks(fit)
    ess = weakest_ess(blocks)
    st = fit.sampler_stats
    out.update(
        warmup=spec["warmup"],
        samples=spec["samples"],
        wall_s=fit.timings["total_s"],
        cpu_s=cpu_s,
        start_s=fit.timings.get("start_s", 0.0),
        warmup_s=fit.timings["warmup_s"],
        sampling_s=fit.timings["sampling_s"],
        warmup_steps=int(st["warmup_num_steps"].sum()),
        sample_steps=int(st["num_steps"].sum()),
        steps_per_draw=float(np.mean(st["num_steps"])),
        step_size=float(np.mean(st["step_size"])),
        divergences=int(st["diverging"].sum()),
        max_rhat=diag["max_rhat"],
        ess_eta_min=ess["eta_min"],
        ess_eta_med=ess["eta_med"],
        ess_gamma_min=ess["gamma_min"],
        ess_gamma_med=ess["gamma_med"],
        peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    )
    if spec.get("intervals"):
        out["intervals"] = _intervals(fit, truth, data)
    out["posterior"] = _posterior(blocks)
    return out


def weakest_ess(blocks) -> dict[str, float]:
    """Weakest and median bulk ESS of η's and γ's coordinates (``fit_blocks`` of a fit):
    eta_min, eta_med, gamma_min, gamma_med."""
    import arviz as az
    import numpy as np

    out = {}
    for name in ("eta", "gamma"):
        e = az.ess(az.convert_to_dataset({"x": blocks[name].draws}), method="bulk")["x"].values
        out[f"{name}_min"], out[f"{name}_med"] = float(np.min(e)), float(np.median(e))
    return out


def _cpu_seconds() -> float:
    """User + system CPU time of this process and its threads (XLA runs helper threads even
    when told to use one, so CPU time can exceed wall time)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


POSTERIOR_BLOCKS = ("eta", "gamma", "alpha", "beta", "kappa", "sigma_b", "sigma_theta")


def _posterior(blocks) -> dict:
    """Per block: posterior means and SDs with their Monte Carlo standard errors."""
    import arviz as az

    out = {}
    for name in POSTERIOR_BLOCKS:
        ds = az.convert_to_dataset({"x": blocks[name].draws})
        out[name] = {
            "mean": ds["x"].mean(("chain", "draw")).values.tolist(),
            "sd": ds["x"].std(("chain", "draw")).values.tolist(),
            "mcse_mean": az.mcse(ds, method="mean")["x"].values.tolist(),
            "mcse_sd": az.mcse(ds, method="sd")["x"].values.tolist(),
        }
    return out


def posterior_agreement(r1: dict, r2: dict) -> None:
    """z = (difference of posterior means or SDs) / sqrt(MCSE1² + MCSE2²), per block: two
    samplers of the same posterior give |z| mostly < 2 (a normal spread); a wrong
    likelihood shows as |z| in the tens on the shifted coordinates."""
    import numpy as np

    print(
        f"{'block':12s} {'n':>3s} {'max|z| mean':>12s} {'max|z| sd':>10s} {'max|Δmean|/sd':>14s} "
        f"{'SD ratio range':>16s}"
    )
    for name in POSTERIOR_BLOCKS:
        a, b = r1["posterior"][name], r2["posterior"][name]
        zm = (np.subtract(a["mean"], b["mean"])) / np.hypot(a["mcse_mean"], b["mcse_mean"])
        zs = (np.subtract(a["sd"], b["sd"])) / np.hypot(a["mcse_sd"], b["mcse_sd"])
        rel = np.abs(np.subtract(a["mean"], b["mean"])) / np.asarray(a["sd"])
        ratio = np.asarray(b["sd"]) / np.asarray(a["sd"])
        print(
            f"{name:12s} {len(zm):3d} {np.max(np.abs(zm)):12.2f} {np.max(np.abs(zs)):10.2f} {np.max(rel):14.3f} "
            f"{ratio.min():7.3f}-{ratio.max():.3f}"
        )


INTERVAL_BLOCKS = ("eta", "gamma", "alpha", "beta", "kappa", "sigma_b", "sigma_theta")


def _intervals(fit, truth, data) -> dict:
    """Per block: 95% interval widths, truth covered, posterior means, truths."""
    from context_effects.measurement import compare_to_truth

    cmp = compare_to_truth(fit, truth.as_params(data), INTERVAL_BLOCKS)
    return {
        b: {
            "width": (g["q97.5"] - g["q2.5"]).tolist(),
            "covered": g["covered"].tolist(),
            "mean": g["mean"].tolist(),
            "truth": g["truth"].tolist(),
        }
        for b, g in cmp.groupby("block", sort=False)
    }


def svi_check(args, cache) -> None:
    """SVI guides against NUTS on the same simulated 1/10-scale data: interval width ratio
    (SVI / NUTS, median over the block's coordinates), coverage of the truth, point error."""
    import numpy as np

    print(
        f"\n# SVI vs NUTS on the same simulated data ({args.items} items); NUTS = variant b, 1 chain, "
        f"{args.warmup} + {args.samples}; SVI {args.svi_steps} steps, 2000 guide draws, float64"
    )
    nuts = run_worker(
        {
            "variant": "b",
            "items": args.items,
            "warmup": args.warmup,
            "samples": args.samples,
            "data_seed": args.data_seed,
            "cache": cache,
            "intervals": True,
        },
        args.threads,
    )
    fits = {"NUTS": nuts}
    for guide in ("normal", "lowrank", "mvn_globals"):
        fits[guide] = run_worker(
            {
                "variant": "b",
                "items": args.items,
                "svi_guide": guide,
                "svi_steps": args.svi_steps,
                "data_seed": args.data_seed,
                "cache": cache,
            },
            args.threads,
        )
    print(f"{'fit':12s} {'wall s':>7s} " + " ".join(f"{b:>22s}" for b in INTERVAL_BLOCKS))
    print(f"{'':12s} {'':7s} " + " ".join(f"{'width/NUTS cover |err|':>22s}" for _ in INTERVAL_BLOCKS))
    for name, r in fits.items():
        cells = []
        for b in INTERVAL_BLOCKS:
            iv, ref = r["intervals"][b], nuts["intervals"][b]
            ratio = float(np.median(np.asarray(iv["width"]) / np.asarray(ref["width"])))
            cover = float(np.mean(iv["covered"]))
            err = float(np.mean(np.abs(np.asarray(iv["mean"]) - np.asarray(iv["truth"]))))
            cells.append(f"{ratio:8.2f} {cover:5.0%} {err:6.3f}")
        print(f"{name:12s} {r['wall_s']:7.1f} " + " ".join(f"{c:>22s}" for c in cells))


def _per_second(r: dict, ess: str, clock: str) -> float:
    return r[ess] / max(r[clock], 1e-12)


def summarise_runs(runs: dict[str, list[dict]]) -> None:
    """Medians over repeats of ESS per second of the whole fit (weakest η and γ coordinate),
    per wall-second and per CPU-second, and their ratios to variant (a)."""
    import numpy as np

    med = {name: {(e, c): float(np.median([_per_second(r, e, c) for r in rs]))
                  for e in ("ess_eta_min", "ess_gamma_min", "ess_eta_med") for c in ("wall_s", "cpu_s", "sampling_s")}
           for name, rs in runs.items()}
    print("\n# side by side: medians over repeats; ESS per second of the whole fit (start + compile + warm-up +"
          " sampling); min = the block's weakest coordinate")
    print(f"{'variant':8s} {'n':>2s} {'wall s':>7s} {'CPU s':>7s} {'ESS/s eta':>10s} {'ESS/s gamma':>12s} "
          f"{'ESS/CPU-s eta':>14s} {'ESS/CPU-s gamma':>16s} {'steps/draw':>11s} {'warm-up steps/iter':>19s}")
    for name, rs in runs.items():
        m = med[name]
        print(f"{name:8s} {len(rs):2d} {np.median([r['wall_s'] for r in rs]):7.1f} "
              f"{np.median([r['cpu_s'] for r in rs]):7.1f} {m['ess_eta_min', 'wall_s']:10.2f} "
              f"{m['ess_gamma_min', 'wall_s']:12.2f} {m['ess_eta_min', 'cpu_s']:14.2f} {m['ess_gamma_min', 'cpu_s']:16.2f} "
              f"{np.median([r['steps_per_draw'] for r in rs]):11.1f} "
              f"{np.median([r['warmup_steps'] / r['warmup'] for r in rs]):19.1f}")
    if "a" not in runs:
        return
    base = med["a"]
    for name in runs:
        if name == "a":
            continue
        m = med[name]
        ratio = {k: m[k] / max(base[k], 1e-12) for k in m}
        print(f"ratio {name}/a (medians): whole fit per wall-second eta x{ratio['ess_eta_min', 'wall_s']:.1f}, "
              f"gamma x{ratio['ess_gamma_min', 'wall_s']:.1f}; per CPU-second eta x{ratio['ess_eta_min', 'cpu_s']:.1f}, "
              f"gamma x{ratio['ess_gamma_min', 'cpu_s']:.1f}; sampling phase eta x{ratio['ess_eta_min', 'sampling_s']:.1f}, "
              f"gamma x{ratio['ess_gamma_min', 'sampling_s']:.1f}")


def _resumed_runs(path: str | None, settings: dict, runs: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """The runs an earlier invocation wrote to ``path``, if it had the same settings (a
    mismatch is refused: figures of different sizes or sampler settings must not mix)."""
    if not path:
        raise SystemExit("--resume needs --json FILE (the file the earlier run wrote)")
    if not Path(path).exists():
        return runs
    old = json.loads(Path(path).read_text())
    if old["settings"] != settings:
        diff = {k: (old["settings"].get(k), v) for k, v in settings.items() if old["settings"].get(k) != v}
        raise SystemExit(f"--resume: {path} was written with other settings {diff} (old, new); use another file")
    return {name: list(old["runs"].get(name, [])) for name in runs}


def run_worker(spec: dict, threads: int) -> dict:
    env = {**os.environ, **_thread_env(threads), "PYTHONPATH": str(REPO / "src")}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)], env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"worker {spec} failed:\n{proc.stderr[-3000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["process_s"] = time.perf_counter() - t0
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--items", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=400)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--variants", default="a,b,b64")
    ap.add_argument("--repeats", type=int, default=1, help="one-chain runs per variant (sampler seeds 42, 43, ...)")
    ap.add_argument("--json", help="also write every run's figures here (rewritten after each run)")
    ap.add_argument("--resume", action="store_true", help="keep the runs already in --json (same settings) and run the rest")
    ap.add_argument("--full-items", type=int, default=500)
    ap.add_argument("--full-warmup", type=int, default=20)
    ap.add_argument("--full-samples", type=int, default=20)
    ap.add_argument("--full-variant", default="b")
    ap.add_argument("--skip-full", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument(
        "--cache",
        default="default",
        help="JAX persistent compilation cache dir; 'default' = $CONTEXT_EFFECTS_JAX_CACHE or <repo>/.cache/jax, "
        "'' = off. A cold cache shows the full compile time, a warm one ~8 s.",
    )
    ap.add_argument("--data-seed", type=int, default=7)
    ap.add_argument("--svi-check", action="store_true", help="only compare SVI guides with NUTS (intervals, coverage)")
    ap.add_argument("--svi-steps", type=int, default=4000)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return

    cache = True if args.cache == "default" else (args.cache or False)
    if args.svi_check:
        svi_check(args, cache)
        return
    print(
        f"# measurement-model NUTS benchmark — {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, "
        f"threads/process={args.threads}, load avg {os.getloadavg()[0]:.2f}, compile cache={'on' if cache else 'off'}"
    )
    print(
        f"# {args.items / 500:g} of paper scale: {args.items} items x 4 generators x 4 judges; 1 chain, {args.warmup} warm-up + "
        f"{args.samples} draws; ESS/s uses the whole wall time (compile + warm-up + sampling)"
    )
    runs: dict[str, list[dict]] = {name: [] for name in args.variants.split(",")}
    settings = {k: v for k, v in vars(args).items() if k not in ("json", "resume", "repeats")}
    if args.resume:
        runs = _resumed_runs(args.json, settings, runs)
    # Repeats are interleaved (a, b, a, b, ...) so that a change in machine load hits every
    # variant alike; each repeat is one chain with its own sampler seed, in a fresh process.
    for rep in range(args.repeats):
        for name in runs:
            if rep < len(runs[name]):  # kept from an earlier, interrupted run (--resume)
                continue
            spec = {
                "variant": name,
                "items": args.items,
                "warmup": args.warmup,
                "samples": args.samples,
                "data_seed": args.data_seed,
                "cache": cache,
                "seed": 42 + rep,
            }
            runs[name].append(r := run_worker(spec, args.threads))
            print(f"\n{LABELS[name]} — repeat {rep + 1}/{args.repeats} (sampler seed {42 + rep})")
            print(f"  ratings {r['ratings']}, sampled dims {r['dims']}; gradient {r['grad_ms']:.3f} ms")
            print(
                f"  wall {r['wall_s']:.1f} s (start {r['start_s']:.1f} s, warm-up {r['warmup_s']:.1f} s incl. compile, "
                f"sampling {r['sampling_s']:.1f} s), CPU {r['cpu_s']:.1f} s; steps/draw {r['steps_per_draw']:.1f} "
                f"(warm-up total {r['warmup_steps']}), step size {r['step_size']:.3f}, "
                f"per step {1e3 * r['sampling_s'] / max(r['sample_steps'], 1):.3f} ms"
            )
            print(
                f"  bulk ESS eta min/median {r['ess_eta_min']:.0f}/{r['ess_eta_med']:.0f}, gamma min/median "
                f"{r['ess_gamma_min']:.0f}/{r['ess_gamma_med']:.0f}; max R-hat {r['max_rhat']:.3f}; divergences "
                f"{r['divergences']}; peak RSS {r['peak_rss_mb']:.0f} MB",
                flush=True,
            )
            if args.json:  # after every run: a full-scale bench runs for hours and may be stopped
                Path(args.json).write_text(json.dumps({"settings": settings, "runs": runs}, indent=1) + "\n")
    rows = {name: rs[0] for name, rs in runs.items() if rs}
    if len(runs) > 1:
        summarise_runs(runs)
    pairs = [(x, y) for x, y in (("b", "m"), ("b64", "m64"), ("a", "m"), ("a", "m64"), ("b64", "s64"), ("b64", "si64"),
                                  ("b64", "i64"), ("a", "si64"), ("i64", "w64"),
                                  ("i64", "z64"), ("a", "z64")) if x in rows and y in rows]
    for x, y in pairs:
        if "posterior" in rows[x] and "posterior" in rows[y]:
            print(f"\n# posterior agreement {y} vs {x} (same data; z = difference / combined Monte Carlo SE)")
            posterior_agreement(rows[x], rows[y])
    if args.skip_full:
        return

    print(
        f"\n# full scale: {args.full_items} items x 4 x 4, variant {args.full_variant} "
        f"(+ gradients of b64 and a); short run {args.full_warmup} + {args.full_samples}"
    )
    spec = {
        "variant": args.full_variant,
        "items": args.full_items,
        "warmup": args.full_warmup,
        "samples": args.full_samples,
        "data_seed": args.data_seed,
        "cache": cache,
    }
    r = run_worker(spec, args.threads)
    step_ms = 1e3 * (r["sampling_s"]) / max(r["sample_steps"], 1)
    print(f"  ratings {r['ratings']}, sampled dims {r['dims']}; gradient {r['grad_ms']:.2f} ms (timed directly)")
    print(
        f"  short run: wall {r['wall_s']:.1f} s (warm-up {r['warmup_s']:.1f} s incl. compile, {r['warmup_steps']} steps); "
        f"sampling {r['sampling_s']:.1f} s for {r['sample_steps']} steps = {step_ms:.2f} ms/step; "
        f"steps/draw {r['steps_per_draw']:.0f} at step size {r['step_size']:.3f} (unadapted mass matrix)"
    )
    print(f"  peak RSS {r['peak_rss_mb']:.0f} MB")
    tenth = rows.get(args.full_variant)
    ratio = None
    if tenth:
        # warm-up iterations cost more steps than draws (unadapted metric, small step sizes early on)
        ratio = (tenth["warmup_steps"] / tenth["warmup"]) / tenth["steps_per_draw"]
    print(f"  extrapolation to 4 chains x (1,500 + 1,500), sequential, compile excluded, at {step_ms:.2f} ms/step:")
    if ratio:
        print(
            f"    warm-up iterations cost {ratio:.1f}x the steps of a draw at 1/10 scale ({tenth['warmup']} warm-up "
            f"iterations; with 1,500 the early unadapted phase weighs less, so this overstates warm-up)"
        )
    for label, spd in (
        ("steps/draw of this short run (unadapted)", r["steps_per_draw"]),
        ("63 steps/draw (dense block, adapted)", 63.0),
        ("511 steps/draw (diagonal, adapted)", 511.0),
    ):
        sampling_h = 4 * 1500 * spd * step_ms / 1e3 / 3600
        warm_h = sampling_h * (ratio or 1.0)
        print(f"    {label:45s}: sampling {sampling_h:6.2f} h + warm-up {warm_h:6.2f} h = {sampling_h + warm_h:6.2f} h")
    others = [v for v in ("b64", "a") if v != args.full_variant]
    for name in others:
        ro = run_worker({**spec, "variant": name, "grad_only": True}, args.threads)
        print(
            f"  variant {name} at full scale: gradient {ro['grad_ms']:.2f} ms (timed directly, no NUTS run) = "
            f"{ro['grad_ms'] / r['grad_ms']:.1f}x variant {args.full_variant}'s; peak RSS {ro['peak_rss_mb']:.0f} MB"
        )


if __name__ == "__main__":
    main()
