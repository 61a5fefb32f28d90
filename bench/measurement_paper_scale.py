"""Benchmark: wall time and peak memory of one paper-scale measurement fit, extrapolated from a short run.

Paper scale (seed 002 §2.2, App. A.2, C.1): one pooled fit per dataset covers 500 items ×
4 generators (primary seed) × 8 answers per trial (Round 1, no-peer, 3 peer conditions ×
2 variants), rated blind by 4 judges, the 6 peer answers per trial also rated informed,
plus 2 anchors per item rated blind: 116,000 ratings, 16,000 answers, 2,000 trials
(simulated here with ``simulate_ratings(n_items=500)``). Paper settings: NUTS,
target_accept 0.95, max_tree_depth 10, float64, 4 chains × (1,500 warm-up + 1,500 draws).

The short run is one chain of ``--warmup`` + ``--samples`` iterations with exactly those
settings (and the implementation's defaults: grid likelihood, dense global mass block,
keep_locals). It yields the cost of one leapfrog step (sampling time / sampling steps),
the compile time (warm-up time minus its steps at that cost), leapfrog steps per
iteration, mean tree depth, and peak RSS. The extrapolation multiplies steps by the
per-step cost; it is only as good as the steps-per-iteration assumption, so it is shown
for the short run's own figures and for the steps per draw of an adapted sampler
(``--adapted-steps``, ~63 with the dense global mass block, measured at full adaptation
on simulated paper-scale data while the model was developed). Warm-up
iterations usually cost more steps than draws (small step sizes and an unadapted metric
early on); the short run's warm-up/sampling step ratio is used for that, which overstates
warm-up for a 1,500-iteration warm-up whose unadapted phase is relatively shorter.

A measured run (``--chains 2 --warmup 1500 --samples 1500``, optionally ``--init svi``)
needs no extrapolation: it reports wall and CPU time, peak RSS, leapfrog steps per draw,
the weakest bulk ESS of η and γ (and their ESS per second of the whole fit), max R-hat
and divergences, and the extrapolation to 4 chains is then the measured chain time × 4 / C.

Chains in parallel: every chain runs on one core (one XLA thread, as measured here), so
with C cores and 4 chains the wall time is ceil(4 / C) × one chain's time, assuming no
memory-bandwidth contention (optimistic on a loaded machine).

Usage::

    OMP_NUM_THREADS=1 XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
        .venv/bin/python bench/measurement_paper_scale.py [--warmup 30 --samples 30] [--marginal]
        [--chains 2] [--init svi] [--items 250] [--json fit.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

PAPER_CHAINS, PAPER_WARMUP, PAPER_SAMPLES = 4, 1500, 1500


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _weakest_ess(fit) -> dict:
    """Weakest and median bulk ESS over η and γ; max R-hat and min tail ESS over the reported blocks."""
    from measurement_speed import weakest_ess

    from context_effects.measurement import diagnostics
    from context_effects.measurement.fit import fit_blocks

    out = weakest_ess(fit_blocks(fit))
    diag = diagnostics(fit)  # the Table 9 figures over the reported blocks (split R-hat: fine for one chain)
    out.update(max_rhat=diag["max_rhat"], max_rhat_at=diag["max_rhat_at"], min_ess_tail=diag["min_ess_tail"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=500)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--precision", default="float64")
    ap.add_argument("--marginal", action="store_true", help="integrate ε out by quadrature (ModelOptions.marginal)")
    ap.add_argument("--adapted-steps", type=float, default=63.0, help="steps/draw of an adapted sampler (dense block)")
    ap.add_argument("--data-seed", type=int, default=7)
    ap.add_argument("--chains", type=int, default=1, help="chains, run one after another in this process")
    ap.add_argument("--init", default="median", choices=["median", "svi"], help="fit_nuts(init=...)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()

    import jax
    import numpy as np

    from measurement_speed import _cpu_seconds  # this script's directory is on sys.path

    from context_effects.measurement import fit_nuts, prepare_data, simulate_ratings

    t_start = time.perf_counter()
    table, _ = simulate_ratings(n_items=args.items, seed=args.data_seed)
    data = prepare_data(table)
    rss_data = rss_mb()
    kw = {"marginal": True} if args.marginal else {}
    cpu0 = _cpu_seconds()
    fit = fit_nuts(
        data,
        chains=args.chains,
        init=args.init,
        warmup=args.warmup,
        samples=args.samples,
        target_accept=0.95,
        max_tree_depth=10,
        seed=42,
        precision=args.precision,
        keep_locals=True,
        **kw,
    )
    cpu_s = _cpu_seconds() - cpu0
    rss_fit = rss_mb()
    st = fit.sampler_stats
    warm_steps = np.asarray(st["warmup_num_steps"]).ravel()
    samp_steps = np.asarray(st["num_steps"]).ravel()
    step_s = fit.timings["sampling_s"] / samp_steps.sum()
    ess = _weakest_ess(fit)
    compile_s = max(fit.timings["warmup_s"] - warm_steps.sum() * step_s, 0.0)
    depth = lambda n: np.log2(n + 1)  # noqa: E731  (a full tree of depth d has 2^d − 1 steps)
    n_dims = sum(int(np.prod(v.shape[2:])) for v in fit.samples.values() if v.dtype.kind == "f")
    print(
        f"# paper-scale measurement fit — {time.strftime('%Y-%m-%d %H:%M')}, jax {jax.__version__}, "
        f"{os.cpu_count()} CPUs, load avg {os.getloadavg()[0]:.2f}, "
        f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}"
    )
    print(
        f"data: {args.items} items x {len(data.generators)} generators x {data.n_judges} judges: "
        f"{data.n_ratings} ratings, "
        f"{data.n_answers} answers, {data.n_anchors} anchors, {data.n_trials} trials; sampled sites hold "
        f"{n_dims} floats per draw; marginal ε: {bool(args.marginal)}; {args.precision}"
    )
    print(
        f"run: {args.chains} chain(s) one after another x ({args.warmup} warm-up + {args.samples} draws), "
        f"target_accept 0.95, max_tree_depth 10, init {args.init}"
    )
    wall = fit.timings["total_s"]
    print(
        f"  wall {wall:.1f} s = start {fit.timings.get('start_s', 0.0):.1f} s + warm-up "
        f"{fit.timings['warmup_s']:.1f} s (incl. compile ~{compile_s:.1f} s) "
        f"+ sampling {fit.timings['sampling_s']:.1f} s; CPU {cpu_s:.1f} s; process total "
        f"{time.perf_counter() - t_start:.1f} s"
    )
    print(
        f"  weakest bulk ESS: eta {ess['eta_min']:.0f} (median {ess['eta_med']:.0f}), gamma {ess['gamma_min']:.0f} "
        f"(median {ess['gamma_med']:.0f}); per second of the whole fit: eta {ess['eta_min'] / wall:.3f}, gamma "
        f"{ess['gamma_min'] / wall:.3f}; per CPU-second: eta {ess['eta_min'] / cpu_s:.3f}, gamma "
        f"{ess['gamma_min'] / cpu_s:.3f}"
    )
    print(f"  max R-hat {ess['max_rhat']:.3f} ({ess['max_rhat_at']}), min tail ESS {ess['min_ess_tail']:.0f} "
          "(the reported blocks)")
    print(
        f"  leapfrog steps/iteration: warm-up mean {warm_steps.mean():.1f} (max {warm_steps.max()}), sampling mean "
        f"{samp_steps.mean():.1f} (max {samp_steps.max()}); mean tree depth warm-up {depth(warm_steps).mean():.2f}, "
        f"sampling {depth(samp_steps).mean():.2f}; step size {float(np.mean(st['step_size'])):.4f}; "
        f"divergences {int(np.sum(st['diverging']))}"
    )
    print(f"  time per leapfrog step (sampling phase) {1e3 * step_s:.2f} ms")
    print(f"  peak RSS {rss_fit:.0f} MB (after simulating + indexing the data: {rss_data:.0f} MB)")

    if args.json:
        Path(args.json).write_text(json.dumps({
            "settings": vars(args), "ratings": data.n_ratings, "dims": n_dims, "wall_s": wall, "cpu_s": cpu_s,
            "timings": fit.timings, "peak_rss_mb": rss_fit, "steps_per_draw": float(samp_steps.mean()),
            "steps_per_warmup_iteration": float(warm_steps.mean()), "ms_per_step": 1e3 * step_s,
            "divergences": int(np.sum(st["diverging"])), **ess,
        }, indent=1) + "\n")
    if args.warmup >= PAPER_WARMUP and args.samples >= PAPER_SAMPLES:
        chain_s = (wall - compile_s) / args.chains
        print(
            f"\nmeasured at the paper's length: {chain_s / 60:.1f} min per chain; 4 chains on C cores ~ "
            + ", ".join(f"{math.ceil(PAPER_CHAINS / c) * chain_s / 3600 + compile_s / 3600:.2f} h (C={c})"
                        for c in (1, 2, 4))
        )
        return

    # ---- extrapolation
    itemsize = 8 if args.precision == "float64" else 4
    draws_mb = PAPER_CHAINS * PAPER_SAMPLES * n_dims * itemsize / 2**20
    short_draws_mb = (args.warmup + args.samples) * n_dims * itemsize / 2**20
    # warm-up draws are collected too (fit_nuts: compiled-loop reuse), then dropped
    peak_mb = rss_fit - short_draws_mb + 2 * draws_mb
    warm_ratio = warm_steps.mean() / samp_steps.mean()
    print(
        f"\nextrapolation to {PAPER_CHAINS} chains x ({PAPER_WARMUP:,} + {PAPER_SAMPLES:,}), compile counted once per "
        f"process, {1e3 * step_s:.2f} ms/step (1 thread per chain)"
    )
    print(f"  warm-up/sampling steps-per-iteration ratio in the short run: {warm_ratio:.2f}")
    scenarios = [
        (f"short run's own steps/iteration (warm-up {warm_steps.mean():.0f}, draws {samp_steps.mean():.0f})",
         warm_steps.mean(), samp_steps.mean()),
        (f"adapted {args.adapted_steps:.0f} steps/draw, warm-up x{warm_ratio:.2f}",
         args.adapted_steps * warm_ratio, args.adapted_steps),
        (f"adapted {args.adapted_steps:.0f} steps/draw, warm-up = draws", args.adapted_steps, args.adapted_steps),
    ]
    print(f"  {'scenario':60s} {'1 chain h':>9s} {'4ch/1 core h':>12s} {'4ch/2 cores h':>13s} {'4ch/4+ cores h':>14s}")
    for label, ws, ss in scenarios:
        chain_s = (PAPER_WARMUP * ws + PAPER_SAMPLES * ss) * step_s
        row = [chain_s / 3600] + [(math.ceil(PAPER_CHAINS / c) * chain_s + compile_s) / 3600 for c in (1, 2, 4)]
        print(f"  {label:60s} {row[0]:9.2f} {row[1]:12.2f} {row[2]:13.2f} {row[3]:14.2f}")
    print(
        f"  memory: the kept draws of {PAPER_CHAINS} x {PAPER_SAMPLES} x {n_dims} floats are {draws_mb:.0f} MB, "
        "and the "
        f"collected warm-up draws as much again while they live; peak RSS ~ {peak_mb:.0f} MB "
        f"(= short-run peak - its draws + 2 x that), plus ArviZ export copies of the global sites (small)"
    )


if __name__ == "__main__":
    main()
