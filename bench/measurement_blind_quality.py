"""Benchmark: the cost of Table 15's blind-quality fit beside the main fit it adds to.

Seed 002's Table 15 correlates a blind latent quality θ̂ with text metrics over the 48,000
answers of the three executions; this project estimates it with one fit per dataset of
the blind ratings alone of every execution (fit variant ``blind-quality``,
``measurement.pipeline``). This script simulates both designs at ``--items`` items (50 =
1/10 of the paper's 500) with 4 generators and 4 judges, as ``measurement_paper_scale.py``
does:

* main: one execution, 8 answers per trial rated blind, the 6 peer answers also informed,
  2 anchors per item (116,000 ratings at full scale);
* blind-quality: ``--executions`` executions (3: seeds 42/43/44), every answer rated blind
  only, the same anchors (196,000 ratings at full scale);

and fits each with the paper config's sampler (NUTS, SVI start, float64, target_accept
0.95, max tree depth 10), one chain of ``--warmup`` + ``--samples`` iterations, one after
the other in this process. It prints ratings, answers, wall and CPU seconds, the
sampler's share (wall time less the set-up before the first warm-up iteration, which is
mostly compile and does not grow with the data), leapfrog steps per draw and per warm-up
iteration, and the blind-quality fit's ratios to the main fit, from which the paper-scale
cost is extrapolated (the main fit's measured 20.5 min per chain times the sampler
ratio; docs/benchmarks.md).

Usage::

    OMP_NUM_THREADS=1 XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" \\
        .venv/bin/python bench/measurement_blind_quality.py [--items 50] [--warmup 300 --samples 300]
        [--json bench/results/blind_quality_tenth.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

GENERATORS = ("gen_a", "gen_b", "gen_c", "gen_d")
JUDGES = ("judge_a", "judge_b", "judge_c", "judge_d")


def designs(items: int, executions: int, data_seed: int):
    """The two ratings tables: (main, blind-quality)."""
    import pandas as pd

    from context_effects.measurement.simulate import simulate_ratings

    main, _ = simulate_ratings(n_items=items, generators=GENERATORS, judges=JUDGES, seed=data_seed, seed_label=42)
    parts = []
    for i in range(executions):
        t, _ = simulate_ratings(n_items=items, generators=GENERATORS, judges=JUDGES, seed=data_seed + i,
                                seed_label=42 + i, informed=False)
        anchor = t["condition"].str.startswith("anchor")
        parts.append(t if i == 0 else t[~anchor])
    return main, pd.concat(parts, ignore_index=True)


def run(table, warmup: int, samples: int, seed: int) -> dict:
    import numpy as np

    from context_effects.measurement import fit_nuts, prepare_data

    data = prepare_data(table)
    t0, c0 = time.perf_counter(), time.process_time()
    fit = fit_nuts(data, chains=1, warmup=warmup, samples=samples, seed=seed, init="svi", precision="float64")
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    st = fit.sampler_stats
    return {"ratings": data.n_ratings, "answers": data.n_answers, "trials": data.n_trials, "wall_s": wall,
            "cpu_s": cpu, "steps_per_draw": float(np.mean(st["num_steps"])),
            "steps_per_warmup_iteration": float(np.mean(st["warmup_num_steps"])),
            "setup_s": fit.timings.get("setup_s")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=50)
    ap.add_argument("--executions", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--data-seed", type=int, default=7)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    main_table, blind_table = designs(args.items, args.executions, args.data_seed)
    out = {"settings": {k: v for k, v in vars(args).items() if k != "json"}, "runs": {}}
    for name, table in (("main", main_table), ("blind-quality", blind_table)):
        out["runs"][name] = r = run(table, args.warmup, args.samples, args.seed)
        print(f"{name:14s} {r['ratings']:7,d} ratings {r['answers']:6,d} answers  wall {r['wall_s']:7.1f} s  "
              f"CPU {r['cpu_s']:7.1f} s  steps/draw {r['steps_per_draw']:5.1f}  "
              f"steps/warm-up iteration {r['steps_per_warmup_iteration']:5.1f}", flush=True)
    m, b = out["runs"]["main"], out["runs"]["blind-quality"]
    out["ratio"] = {"ratings": b["ratings"] / m["ratings"], "wall": b["wall_s"] / m["wall_s"],
                    "cpu": b["cpu_s"] / m["cpu_s"],
                    "sampler": (b["wall_s"] - b["setup_s"]) / (m["wall_s"] - m["setup_s"])}
    print("blind-quality / main: ratings ×{ratings:.2f}, wall ×{wall:.2f}, CPU ×{cpu:.2f}, "
          "sampler (wall less set-up) ×{sampler:.2f}".format(**out["ratio"]))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
