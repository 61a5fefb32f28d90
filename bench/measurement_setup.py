"""Benchmark: set-up of a measurement-model fit, the seconds before its first warm-up step. Prints figures; not a test.

Set-up runs from the call of ``fit_nuts`` to the first warm-up iteration: the model's
arrays, the SVI start (``init="svi"``), each chain's initialisation, and the compile (or
persistent-cache load) of every program that runs before the warm-up loop, the loop
included. It ends when XLA has the sampler loop numpyro names ``_fori_collect_loop``,
which then starts at once; the worker reads that moment from ``jax.monitoring``, so any
version of the package is measured the same way (``--baseline``).

Every fit runs in a fresh process with XLA on one thread (as ``bench/measurement_speed.py``)
on simulated data, 1/10 paper scale by default (50 items × 4 generators × 4 judges, 11,600
ratings). Per repeat and start (``--inits``), each version of the code gets
- a cold run: an empty persistent compilation cache;
- a warm run: the cache that cold run left, fitting other data of the same shape (data
  seed + 1), so hits show programs keyed by shape, not by the data's values.
With ``--baseline SRC`` (the ``src/`` of another checkout, e.g. from ``git archive <commit>
src | tar -x -C DIR``), the baseline and this tree alternate run by run, and the ratios
baseline / this tree of the medians are printed. Reported: set-up CPU seconds (user +
system, all threads) and wall seconds; importing the package (once per process, not part
of set-up); programs compiled before the loop starts; persistent-cache hits and misses;
seconds of tracing, lowering and XLA compile over the whole fit; warm-up and sampling.

Usage::

    .venv/bin/python bench/measurement_setup.py [--inits median,svi] [--repeats 3] [--items 50]
        [--warmup 50 --samples 50] [--chains 1] [--precision float64] [--baseline DIR/src]
        [--json FILE]
    .venv/bin/python bench/measurement_setup.py --print FILE   # the summary of a saved run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

COMPILE_EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "xla",
}
#: numpyro's name for its sampler loop (numpyro.util.fori_collect)
LOOP = "fori_collect"


def _cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def worker(spec: dict) -> dict:
    t0, c0 = time.perf_counter(), _cpu()
    sys.path.insert(0, spec["src"])
    import jax
    from jax import monitoring

    from context_effects.measurement import fit_nuts, prepare_data, simulate_ratings

    t_import, c_import = time.perf_counter() - t0, _cpu() - c0
    if Path(spec["src"]).resolve() not in Path(sys.modules["context_effects"].__file__).resolve().parents:
        raise SystemExit(f"context_effects came from {sys.modules['context_effects'].__file__}, not {spec['src']}")
    seconds = {kind: 0.0 for kind in COMPILE_EVENTS.values()}
    state = {"programs": 0, "ready": None, "hits": 0, "misses": 0}

    def on_duration(event, duration, **kwargs):
        kind = COMPILE_EVENTS.get(event)
        if kind is None:
            return
        seconds[kind] += duration
        if kind == "xla" and state["ready"] is None:
            state["programs"] += 1
            if LOOP in str(kwargs.get("fun_name", "")):
                state["ready"] = (time.perf_counter(), _cpu(), dict(seconds), state["hits"], state["misses"])

    def on_event(event, **kwargs):
        if event == "/jax/compilation_cache/cache_hits":
            state["hits"] += 1
        elif event == "/jax/compilation_cache/cache_misses":
            state["misses"] += 1

    monitoring.register_event_duration_secs_listener(on_duration)
    monitoring.register_event_listener(on_event)
    table, _ = simulate_ratings(n_items=spec["items"], seed=spec["data_seed"])
    data = prepare_data(table)
    t1, c1 = time.perf_counter(), _cpu()
    fit = fit_nuts(data, chains=spec["chains"], warmup=spec["warmup"], samples=spec["samples"], seed=42,
                   precision=spec["precision"], init=spec["init"], keep_locals=False,
                   compilation_cache=spec["cache"])
    t2, c2 = time.perf_counter(), _cpu()
    if state["ready"] is None:
        raise SystemExit("no sampler loop was compiled: the set-up's end was not seen")
    ready_t, ready_c, ready_seconds, ready_hits, ready_misses = state["ready"]
    return {
        "ratings": data.n_ratings,
        "import_s": t_import,
        "import_cpu_s": c_import,
        "setup_s": ready_t - t1,
        "setup_cpu_s": ready_c - c1,
        "setup_programs": state["programs"],
        "setup_compile_s": ready_seconds,
        "setup_cache_hits": ready_hits,
        "setup_cache_misses": ready_misses,
        "fit_s": t2 - t1,
        "fit_cpu_s": c2 - c1,
        "compile_s": seconds,
        "cache_hits": state["hits"],
        "cache_misses": state["misses"],
        "warmup_s": fit.timings["warmup_s"],
        "sampling_s": fit.timings["sampling_s"],
        "jax_version": jax.__version__,
    }


def run_worker(spec: dict) -> dict:
    # one thread for XLA and BLAS, as bench/measurement_speed.py (the flags are part of the
    # persistent cache's key, so cold and warm runs use the same ones)
    env = {**os.environ, "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], env=env, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        raise SystemExit(f"worker {spec} failed:\n{proc.stderr[-3000:]}")
    return {**spec, **json.loads(proc.stdout.strip().splitlines()[-1])}


def _median(values):
    import statistics

    return statistics.median(values) if values else float("nan")


def summarise(runs: list[dict], codes: list[str]) -> None:
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault((r["init"], r["cache_state"], r["code"]), []).append(r)
    print("\n# medians over repeats; set-up = call of fit_nuts to the first warm-up iteration")
    print(f"{'init':7s} {'cache':5s} {'code':9s} {'n':>2s} {'set-up CPU s':>12s} {'set-up wall s':>13s} "
          f"{'programs':>8s} {'hits/misses':>11s} {'import CPU s':>12s} {'compile s (fit)':>15s} "
          f"{'warm-up s':>9s} {'sampling s':>10s} {'fit CPU s':>9s} {'fit wall s':>10s}")
    for (init, cache, code), rs in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], codes.index(kv[0][2]))):
        print(f"{init:7s} {cache:5s} {code:9s} {len(rs):2d} {_median([r['setup_cpu_s'] for r in rs]):12.1f} "
              f"{_median([r['setup_s'] for r in rs]):13.1f} {_median([r['setup_programs'] for r in rs]):8.0f} "
              f"{_median([r['setup_cache_hits'] for r in rs]):5.0f}/{_median([r['setup_cache_misses'] for r in rs]):<5.0f} "
              f"{_median([r['import_cpu_s'] for r in rs]):12.1f} "
              f"{_median([sum(r['compile_s'].values()) for r in rs]):15.1f} {_median([r['warmup_s'] for r in rs]):9.1f} "
              f"{_median([r['sampling_s'] for r in rs]):10.1f} {_median([r['fit_cpu_s'] for r in rs]):9.1f} "
              f"{_median([r['fit_s'] for r in rs]):10.1f}")
    if len(codes) < 2:
        return
    base, this = codes
    print(f"\n# ratios {base} / {this} of the medians (interleaved runs)")
    for init in sorted({k[0] for k in groups}):
        for cache in ("cold", "warm"):
            b, t = groups.get((init, cache, base)), groups.get((init, cache, this))
            if not b or not t:
                continue
            def ratio(key):
                return _median([r[key] for r in b]) / _median([r[key] for r in t])

            print(f"{init:7s} {cache:5s} set-up CPU x{ratio('setup_cpu_s'):.1f}, wall x{ratio('setup_s'):.1f}; "
                  f"whole fit CPU x{ratio('fit_cpu_s'):.1f}, wall x{ratio('fit_s'):.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--inits", default="median,svi")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--items", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--chains", type=int, default=1, help="run one after the other (chain_method sequential)")
    ap.add_argument("--precision", default="float64")
    ap.add_argument("--data-seed", type=int, default=7)
    ap.add_argument("--baseline", help="src/ directory of another checkout, run interleaved with this tree")
    ap.add_argument("--json", help="write every run here (rewritten after each run)")
    ap.add_argument("--print", metavar="FILE", help="only print the summary of a file --json wrote")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if args.print:
        saved = json.loads(Path(args.print).read_text())
        codes = list(dict.fromkeys(r["code"] for r in saved["runs"]))
        print(f"# {args.print}: " + ", ".join(f"{k} {v}" for k, v in saved["settings"].items()
                                               if k not in ("worker", "json", "print")))
        summarise(saved["runs"], codes)
        return

    codes = {"this tree": str(REPO / "src")}
    if args.baseline:
        codes = {"baseline": str(Path(args.baseline).resolve()), **codes}
    print(f"# measurement-model set-up benchmark - {time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, "
          f"load avg {os.getloadavg()[0]:.2f}; XLA on one thread, one process per fit")
    print(f"# {args.items} items x 4 generators x 4 judges; {args.chains} chain(s) of {args.warmup} + {args.samples}, "
          f"{args.precision}; inits {args.inits}; code: " + ", ".join(f"{k} = {v}" for k, v in codes.items()))
    runs: list[dict] = []
    for rep in range(args.repeats):
        for init in args.inits.split(","):
            for code, src in codes.items():
                cache = tempfile.mkdtemp(prefix="jax-cache-")
                try:
                    for state, seed in (("cold", args.data_seed), ("warm", args.data_seed + 1)):
                        spec = {"src": src, "init": init, "cache": cache, "items": args.items, "warmup": args.warmup,
                                "samples": args.samples, "chains": args.chains, "precision": args.precision,
                                "data_seed": seed}
                        r = run_worker(spec)
                        # directories are this machine's: the file keeps the code's label only
                        r = {k: v for k, v in r.items() if k not in ("src", "cache")}
                        r.update(code=code, cache_state=state, repeat=rep, load=os.getloadavg()[0])
                        runs.append(r)
                        print(f"{code:9s} {init:6s} {state}: set-up {r['setup_cpu_s']:.1f} CPU s / {r['setup_s']:.1f} s "
                              f"({r['setup_programs']} programs, cache {r['setup_cache_hits']} hits / "
                              f"{r['setup_cache_misses']} misses); import {r['import_cpu_s']:.1f} CPU s; fit "
                              f"{r['fit_cpu_s']:.1f} CPU s / {r['fit_s']:.1f} s; load {r['load']:.1f}", flush=True)
                        if args.json:
                            settings = {**vars(args), "baseline": bool(args.baseline), "date": time.strftime("%Y-%m-%d")}
                            Path(args.json).write_text(json.dumps({"settings": settings, "runs": runs}, indent=1) + "\n")
                finally:
                    shutil.rmtree(cache, ignore_errors=True)
    summarise(runs, list(codes))


if __name__ == "__main__":
    main()
