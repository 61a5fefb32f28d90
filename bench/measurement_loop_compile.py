"""Benchmark: numpyro's sampler loop compiled for compile speed (``fit_nuts(fast_loop=True)``)
against XLA's default options. Prints figures; not a test.

Both settings fit the same data with the same seed in one process, alternating, so their
leapfrog trajectories are the same up to floating-point detail and the comparison is per
step on the same work. Per fit: the loop's XLA compile seconds (``jax.monitoring``, the
program numpyro names ``_fori_collect_loop``), set-up seconds (``fit.timings["setup_s"]``)
and sampling milliseconds per leapfrog step (warm-up = draws, so sampling reuses the
warm-up's program and holds no compile). Every fit starts from an empty persistent
compile cache. XLA runs on one thread, as in ``bench/measurement_setup.py``; pin the
process to one core (``taskset -c 0``) to read seconds as CPU seconds.

The fit's rule (``FAST_LOOP_MAX_WORK``) trades the compile seconds saved against the
slower steps; this bench gives both figures at any scale.

Usage::

    taskset -c 0 .venv/bin/python bench/measurement_loop_compile.py [--items 50] [--draws 100]
        [--pairs 3] [--json FILE]
    .venv/bin/python bench/measurement_loop_compile.py --print FILE
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETTINGS = {"fast": True, "default": False}


def run(args) -> dict:
    # one XLA thread, set before JAX starts (as bench/measurement_setup.py's workers)
    os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.path.insert(0, str(REPO / "src"))
    from jax import monitoring

    from context_effects.measurement import fit_nuts, prepare_data, simulate_ratings

    loop_compile: list[float] = []

    def on_duration(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration" and "fori_collect" in str(kwargs.get("fun_name")):
            loop_compile.append(duration)

    monitoring.register_event_duration_secs_listener(on_duration)
    table, _ = simulate_ratings(n_items=args.items, seed=args.data_seed)
    data = prepare_data(table)
    runs = []
    caches = tempfile.TemporaryDirectory()  # a fresh cache per fit, all removed at the end
    for pair in range(args.pairs):
        for name, fast in SETTINGS.items():
            loop_compile.clear()
            fit = fit_nuts(data, chains=1, warmup=args.draws, samples=args.draws, seed=42, init="svi",
                           split_means=("z_b",), keep_locals=False, fast_loop=fast,
                           compilation_cache=tempfile.mkdtemp(dir=caches.name))
            steps = int(fit.sampler_stats["num_steps"].sum())
            runs.append({"setting": name, "pair": pair, "ratings": data.n_ratings, "steps": steps,
                         "ms_per_step": fit.timings["sampling_s"] / steps * 1000,
                         "loop_compile_s": loop_compile[0], "setup_s": fit.timings["setup_s"],
                         "fast_loop": fit.settings["fast_loop"]})
            print(f"pair {pair} {name:7s} steps {steps} ms/step {runs[-1]['ms_per_step']:.3f} "
                  f"loop compile {runs[-1]['loop_compile_s']:.2f} s set-up {runs[-1]['setup_s']:.2f} s", flush=True)
    caches.cleanup()
    settings = {k: getattr(args, k) for k in ("items", "draws", "pairs", "data_seed")}
    return {"settings": {**settings, "date": date.today().isoformat(), "load": os.getloadavg()[0]}, "runs": runs}


def summarise(result: dict) -> None:
    s, runs = result["settings"], result["runs"]
    print(f"\n# {s['items']} items ({runs[0]['ratings']} ratings), {s['draws']} + {s['draws']} draws, "
          f"{s['pairs']} interleaved pairs, medians")
    med = {}
    for name in SETTINGS:
        rs = [r for r in runs if r["setting"] == name]
        med[name] = {k: statistics.median(r[k] for r in rs) for k in ("ms_per_step", "loop_compile_s", "setup_s")}
        print(f"{name:7s} ms/step {med[name]['ms_per_step']:.3f}  loop compile {med[name]['loop_compile_s']:.2f} s  "
              f"set-up {med[name]['setup_s']:.2f} s")
    per_pair = [f["ms_per_step"] / d["ms_per_step"] for f, d in zip(
        [r for r in runs if r["setting"] == "fast"], [r for r in runs if r["setting"] == "default"])]
    saved = med["default"]["loop_compile_s"] - med["fast"]["loop_compile_s"]
    extra = (med["fast"]["ms_per_step"] - med["default"]["ms_per_step"]) / 1000
    print(f"fast / default per step: {', '.join(f'{x:.3f}' for x in per_pair)} (pairs); compile saved {saved:.2f} s; "
          f"extra per step {extra * 1e6:.1f} µs = {extra / runs[0]['ratings'] * 1e9:.2f} ns per rating"
          + (f"; break-even after {saved / extra:,.0f} leapfrog steps" if extra > 0 else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=50, help="50 = 1/10 paper scale, 500 = full")
    ap.add_argument("--draws", type=int, default=100, help="warm-up and draws each")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--data-seed", type=int, default=7)
    ap.add_argument("--json", help="write the runs here")
    ap.add_argument("--print", metavar="FILE", help="only print the summary of a file --json wrote")
    args = ap.parse_args()
    if args.print:
        summarise(json.loads(Path(args.print).read_text()))
        return
    result = run(args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    summarise(result)


if __name__ == "__main__":
    main()
