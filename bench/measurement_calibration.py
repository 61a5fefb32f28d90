"""Calibration of the seed 002 measurement model: recovery over many simulated data sets.

Simulation-based calibration in spirit (Talts et al. 2018): for each replicate, every
parameter is drawn from the model's own prior (App. C.1: η ~ N(0, 1), σ_b, σ_θ ~
HalfNormal(1), log α ~ N(0, 0.4), β ~ N(0, 1), γ ~ N(0, 0.5), κ = sort(N(0, 1)^4)),
ratings are drawn from the model with those values (``simulate_ratings``, written
independently of the model code), and the model is fitted with NUTS. If likelihood,
priors and sampler agree, a central q-interval covers the truth in exactly q of the
replicates on average over the prior, and the rank of the truth among the posterior
draws is uniform. Reported for γ_j and η (the cells): coverage of the 50/90/95%
intervals with its binomial standard error, a chi-square test of rank uniformity,
the mean posterior SD, and sampler health (max R-hat, divergences).

``--generator-mean`` calibrates this project's sensitivity variant instead
(``ModelOptions.generator_mean``): each replicate also draws one baseline mean per
generator from its prior, μ_g ~ N(0, 1), simulates b_t ~ N(μ_g, σ_b), fits the variant,
and reports μ_g as a third block. ``--scale s`` sets the design to a fraction of the
paper's: round(500·s) items, 4 generators × 8 answers per trial (Round 1, no-peer, three
peer conditions × two authority variants), 4 judges (``--items``/``--generators``/``--judges``
still override it).

Usage (one core, ~7-10 min for the defaults on the loaded 2-core machine)::

    .venv/bin/python bench/measurement_calibration.py [--replicates 50] [--items 8]
        [--generators 2] [--judges 3] [--warmup 300] [--samples 300] [--chains 2] [--json out.json]
        [--generator-mean] [--scale 0.25] [--resume] [--init svi]

``--init svi`` calibrates the fast path (NUTS started from an SVI fit, ``fit.init: svi``);
``--init svi --split-means z_b --warmup-windows 10,150,30`` the paper config's sampler
(``fit.split_means: [z_b]``, ``fit.warmup_windows: [10, 150, 30]``).

``--planted FILE`` fixes every replicate's values instead of drawing them from the prior
(:func:`planted_values`): the coverage is then frequentist, at that one point, e.g. the
rehearsal's TruthfulQA values (``bench/planted/rehearsal_truthfulqa_main.json``, written
from config/rehearsal.yaml), where most ratings sit at the ceiling. ``--first-seed`` lets
two processes split the replicates (``--first-seed 100`` in the second)::

    .venv/bin/python bench/measurement_calibration.py --planted bench/planted/rehearsal_truthfulqa_main.json \
        --items 60 --generators 4 --judges 4 --init svi --precision float32 --chains 2 \
        --warmup 400 --samples 400 --replicates 20 [--first-seed 100] --json out.json

``--design decomposition`` simulates the decomposition corpus's trials (one answer per arm,
content-only arms) and ``--blocks`` reports other blocks than γ and η, e.g. the derived
rows the tables print: ``--blocks gamma,eta,asym_total,delta_sp,delta_content,delta_pp``.

``--resume`` keeps the replicates already in the ``--json`` file (written after each one)
and runs only the missing seeds, so a run of hours survives an interruption.

The variant at 1/4 paper scale (125 items × 4 generators × 8 answers = 4,000 answers and
4 judges per replicate; a fit took 2.5-19 min here, median ~5-6 min, on a shared core; the
results of 18 replicates of each model are in bench/results/)::

    .venv/bin/python bench/measurement_calibration.py --generator-mean --scale 0.25 \
        --replicates 20 --json bench/results/calibration_quarter_generator_mean.json --resume
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from context_effects.measurement import (  # noqa: E402
    derived_blocks,
    diagnostics,
    fit_nuts,
    prepare_data,
    simulate_ratings,
)

LEVELS = (0.5, 0.9, 0.95)
RANK_BINS = 10
BLOCKS = ("gamma", "eta")
#: The paper's design (seed 002 §2.2): items per dataset, generators, judges.
PAPER_ITEMS, PAPER_GENERATORS, PAPER_JUDGES = 500, 4, 4


def blocks_of(args) -> tuple[str, ...]:
    blocks = tuple(args.blocks.split(",")) if getattr(args, "blocks", None) else BLOCKS
    return (*blocks, "mu_gen") if args.generator_mean else blocks


def prior_draw(rng: np.random.Generator, generators, judges, generator_mean: bool = False) -> dict:
    """One parameter set from the App. C.1 priors, in ``simulate_ratings``'s arguments (with
    ``generator_mean``, also μ_g ~ N(0, 1) per generator, drawn last so the other values
    match the paper-model draw of the same seed)."""
    from context_effects.conformity.conditions import PEER_CONDITIONS

    cells = ("no_peer", *PEER_CONDITIONS)
    draw = {
        "sigma_b": float(abs(rng.normal())),
        "sigma_theta": float(abs(rng.normal())),
        "eta": {(g, c): float(rng.normal()) for g in generators for c in cells},
        "alpha": np.exp(rng.normal(0.0, 0.4, len(judges))).tolist(),
        "beta": rng.normal(0.0, 1.0, len(judges)).tolist(),
        "gamma": rng.normal(0.0, 0.5, len(judges)).tolist(),
        "kappa": np.sort(rng.normal(0.0, 1.0, 4)).tolist(),
    }
    if generator_mean:
        draw["generator_mean"] = rng.normal(0.0, 1.0, len(generators)).tolist()
    return draw


def planted_values(path: str, generators, judges) -> dict:
    """Fixed values instead of prior draws (``--planted FILE``): frequentist coverage at one
    point of the parameter space, e.g. the rehearsal's (config/rehearsal.yaml), where SBC's
    average over the prior says nothing about a corner such as ratings at the ceiling. The
    JSON holds ``simulate_ratings``'s arguments, with ``eta`` as a list of one {condition:
    shift} per generator and ``alpha``/``beta``/``gamma`` as a number or one per judge."""
    raw = json.loads(Path(path).read_text())
    out = {k: v for k, v in raw.items() if k != "eta"}
    if len(raw["eta"]) != len(generators):
        raise SystemExit(f"{path}: eta has {len(raw['eta'])} generators, the design {len(generators)} (--generators)")
    out["eta"] = {(g, c): float(v) for g, shifts in zip(generators, raw["eta"]) for c, v in shifts.items()}
    for key in ("alpha", "beta", "gamma"):
        if isinstance(out.get(key), list) and len(out[key]) != len(judges):
            raise SystemExit(f"{path}: {key} has {len(out[key])} values, the design {len(judges)} judges (--judges)")
    return out


def replicate(seed: int, args) -> dict:
    rng = np.random.default_rng(10_000 + seed)
    generators = tuple(f"gen{i}" for i in range(args.generators))
    judges = tuple(f"judge{i}" for i in range(args.judges))
    params = prior_draw(rng, generators, judges, args.generator_mean)
    if args.planted:
        params = planted_values(args.planted, generators, judges)
    table, truth = simulate_ratings(
        n_items=args.items, generators=generators, judges=judges, seed=seed, theta_anchor=1.5,
        design=args.design, **params
    )
    data = prepare_data(table)
    fit = fit_nuts(data, chains=args.chains, warmup=args.warmup, samples=args.samples, seed=seed,
                   precision=args.precision, theta_anchor=1.5, generator_mean=args.generator_mean, init=args.init,
                   split_means=tuple(filter(None, args.split_means.split(","))),
                   warmup_windows=tuple(int(w) for w in args.warmup_windows.split(",")) if args.warmup_windows else None)
    blocks = derived_blocks(fit.samples, data)
    truth_params = truth.as_params(data, generator_mean=args.generator_mean)
    true = derived_blocks({k: np.asarray(v)[None, None] for k, v in truth_params.items()}, data)
    diag = diagnostics(fit, blocks=blocks_of(args))
    out = {"seed": seed, "max_rhat": diag["max_rhat"], "divergences": diag["divergences"],
           "min_ess_bulk": diag["min_ess_bulk"], "seconds": fit.timings["total_s"]}
    for name in blocks_of(args):
        draws = blocks[name].draws.reshape(-1, blocks[name].draws.shape[-1])
        t = true[name].draws[0, 0]
        out[name] = {
            "covered": {str(q): ((np.quantile(draws, (1 - q) / 2, axis=0) <= t)
                                 & (t <= np.quantile(draws, (1 + q) / 2, axis=0))).tolist() for q in LEVELS},
            # rank of the truth among (thinned) draws, scaled to [0, 1)
            "rank": ((draws[:: max(1, len(draws) // 200)] < t).mean(axis=0)).tolist(),
            "sd": draws.std(axis=0).tolist(),
            "error": (draws.mean(axis=0) - t).tolist(),
        }
    return out


def summarise(results: list[dict], blocks=BLOCKS) -> dict:
    summary = {"replicates": len(results)}
    for name in blocks:
        s = {}
        for q in LEVELS:
            cov = np.concatenate([r[name]["covered"][str(q)] for r in results]).astype(float)
            s[f"coverage_{int(q * 100)}"] = float(cov.mean())
            s[f"coverage_{int(q * 100)}_se"] = float(np.sqrt(q * (1 - q) / cov.size))
        ranks = np.concatenate([r[name]["rank"] for r in results])
        counts = np.histogram(ranks, bins=RANK_BINS, range=(0, 1))[0]
        s["n_coordinates"] = int(ranks.size)
        s["rank_counts"] = counts.tolist()
        s["rank_chi2_p"] = float(stats.chisquare(counts).pvalue)
        s["mean_posterior_sd"] = float(np.mean(np.concatenate([r[name]["sd"] for r in results])))
        s["rmse"] = float(np.sqrt(np.mean(np.concatenate([r[name]["error"] for r in results]) ** 2)))
        # Bias of the posterior mean: its SE is over data draws (the replicate's mean error is
        # the independent unit; the cells of one draw share its data).
        per_draw = np.array([np.mean(r[name]["error"]) for r in results])
        s["mean_error"] = float(per_draw.mean())
        s["mean_error_se"] = float(per_draw.std(ddof=1) / np.sqrt(per_draw.size)) if per_draw.size > 1 else None
        summary[name] = s
    summary["max_rhat"] = float(max(r["max_rhat"] for r in results))
    summary["replicates_with_divergences"] = int(sum((r["divergences"] or 0) > 0 for r in results))
    summary["median_fit_seconds"] = float(np.median([r["seconds"] for r in results]))
    return summary


def _settings_key(args) -> dict:
    """The settings a replicate's result depends on (not how many replicates, not where they go;
    files written before ``--init``, ``--split-means`` and ``--warmup-windows`` existed ran the
    default start, basis and schedule)."""
    return {"init": "median", "planted": None, "precision": "float64", "design": "main", "blocks": None,
            "split_means": "", "warmup_windows": "",
            **{k: v for k, v in vars(args).items() if k not in ("replicates", "json", "resume", "first_seed")}}


def _resumed(args) -> list[dict]:
    """Replicates already written to ``args.json`` by a run with the same settings. A replicate
    is a pure function of its seed and the settings, so an interrupted multi-hour run can go on
    where it stopped instead of starting over."""
    path = Path(args.json)
    if not path.exists():
        return []
    stored = json.loads(path.read_text())
    saved = stored.get("settings") or stored.get("summary", {}).get("settings")
    if saved is not None and _settings_key(argparse.Namespace(**saved)) != _settings_key(args):
        raise SystemExit(f"{path} was written with other settings ({_settings_key(argparse.Namespace(**saved))}); "
                         "use another --json file or the same settings")
    return [r for r in stored["replicates"] if args.first_seed <= r["seed"] < args.first_seed + args.replicates]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicates", type=int, default=50)
    ap.add_argument("--items", type=int, default=None, help="items (default 8, or round(500 * scale))")
    ap.add_argument("--generators", type=int, default=None, help="generators (default 2, or 4 with --scale)")
    ap.add_argument("--judges", type=int, default=None, help="judges (default 3, or 4 with --scale)")
    ap.add_argument("--scale", type=float, default=None,
                    help="fraction of the paper's design: round(500 * scale) items, 4 generators, 4 judges "
                         "(8 answers per trial either way)")
    ap.add_argument("--generator-mean", action="store_true",
                    help="calibrate the generator-mean variant (mu_g ~ N(0, 1) drawn and fitted)")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--chains", type=int, default=2)
    ap.add_argument("--init", default="median", choices=["median", "svi"],
                    help="how NUTS starts (fit_nuts(init=...)); svi = the fast path, an SVI fit's draw and covariance")
    ap.add_argument("--planted", help="JSON of fixed values for every replicate instead of prior draws "
                    "(planted_values); coverage is then frequentist, at that point")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="first replicate seed (two processes can split one set of replicates)")
    ap.add_argument("--precision", default="float64", choices=["float32", "float64"])
    ap.add_argument("--split-means", default="", help="fit_nuts(split_means=...): comma list of z_b, eps; "
                    "z_b = the paper config's sampler (conformity.fit.split_means)")
    ap.add_argument("--warmup-windows", default="",
                    help="fit_nuts(warmup_windows=...): start buffer, first slow window, end buffer, e.g. 10,150,30 "
                         "(the paper config's conformity.fit.warmup_windows); empty = numpyro's schedule")
    ap.add_argument("--design", default="main", choices=["main", "decomposition"],
                    help="simulate_ratings's design: the main corpus's or the decomposition corpus's trials")
    ap.add_argument("--blocks", default=None,
                    help="reported blocks, comma-separated (default gamma,eta), e.g. "
                         "gamma,eta,asym_total,delta_sp,delta_content,delta_pp: the derived rows the tables print")
    ap.add_argument("--json", help="also write per-replicate results and the summary here")
    ap.add_argument("--resume", action="store_true",
                    help="keep the replicates already in --json (same settings) and run only the missing seeds")
    args = ap.parse_args()
    if args.resume and not args.json:
        ap.error("--resume needs --json (the file whose replicates are kept)")
    if args.scale is not None and not args.scale > 0:
        ap.error("--scale must be positive")
    paper = args.scale is not None
    if args.items is None:
        args.items = max(1, round(PAPER_ITEMS * args.scale)) if paper else 8
    if args.generators is None:
        args.generators = PAPER_GENERATORS if paper else 2
    if args.judges is None:
        args.judges = PAPER_JUDGES if paper else 3
    blocks = blocks_of(args)
    t0 = time.perf_counter()
    results = _resumed(args) if args.resume else []
    done = {r["seed"] for r in results}
    if done:
        print(f"resuming: {len(done)} replicate(s) already in {args.json}", flush=True)
    for seed in range(args.first_seed, args.first_seed + args.replicates):
        if seed in done:
            continue
        results.append(replicate(seed, args))
        # Every fit_nuts call builds new jitted functions that JAX keeps alive (~0.3 GB per
        # fit here); without a clear-out the process runs out of memory after ~15 fits (LLVM
        # "Cannot allocate memory"). Clearing costs a re-trace, so only every few replicates.
        if (len(results) + 1) % 5 == 0:
            jax.clear_caches()
            gc.collect()
        r = results[-1]
        covered = ", ".join(f"{name} covered {sum(r[name]['covered']['0.95'])}/{len(r[name]['covered']['0.95'])}"
                            for name in blocks)
        print(f"replicate {seed:3d}: {covered}, R-hat {r['max_rhat']:.3f}, divergences {r['divergences']}, "
              f"{r['seconds']:.1f} s", flush=True)
        if args.json:  # after every replicate, so an interrupted run keeps what it computed
            Path(args.json).write_text(json.dumps({"settings": vars(args), "replicates": results}) + "\n")
    s = summarise(results, blocks)
    s["settings"] = vars(args)
    s["wall_seconds"] = time.perf_counter() - t0
    print()
    model = "generator-mean variant (b_t ~ N(mu_g, sigma_b))" if args.generator_mean else "paper model"
    source = f"data draws at the values of {args.planted}" if args.planted else "prior draws"
    print(f"Calibration of the {model} over {s['replicates']} {source} ({args.items} items × {args.generators} "
          f"generators × 8 answers per trial × {args.judges} judges; NUTS {args.chains} × ({args.warmup} + "
          f"{args.samples}), {args.precision}, init {args.init}, split_means {args.split_means or None}, warm-up windows "
          f"{args.warmup_windows or None}):")
    for name in blocks:
        b = s[name]
        cov = ", ".join(f"{int(q * 100)}%: {b[f'coverage_{int(q * 100)}']:.3f} ± {b[f'coverage_{int(q * 100)}_se']:.3f}"
                        for q in LEVELS)
        print(f"  {name:6s} ({b['n_coordinates']} coordinates) coverage {cov}; rank uniformity χ² p = "
              f"{b['rank_chi2_p']:.2f} (counts {b['rank_counts']}); mean posterior SD {b['mean_posterior_sd']:.3f}, "
              f"RMSE {b['rmse']:.3f}, mean error {b['mean_error']:+.3f} (SE {b['mean_error_se'] or float('nan'):.3f})")
    print(f"  max R-hat {s['max_rhat']:.3f}; replicates with divergences: {s['replicates_with_divergences']}; "
          f"median fit {s['median_fit_seconds']:.1f} s; total {s['wall_seconds'] / 60:.1f} min")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": s, "replicates": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
