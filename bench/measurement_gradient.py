"""Benchmark: one gradient of the fit's potential energy, and one NUTS leapfrog step, on the
fits of a finished run. Prints figures; not a test.

For each (dataset, variant) of a run directory (its ratings and each fit's spec, read from
``results/conformity/fits/<dataset>/<variant>/diagnostics.json``), the model is built as the
fit job builds it, with the data passed as arguments of the compiled program (as numpyro's
sampler passes them; closed over as constants, XLA would specialise the program to the data),
and timed two ways:

- ``select``: the ordered-logistic log-probability as the package computes it (each
  rating's cutpoints picked by selects, ``model.select_by_rating``);
- ``index``: the same formula with the cutpoints indexed by the ratings (the package before
  2026-12-05), swapped in for the run.

Per way: milliseconds per gradient (value and gradient of the potential energy, median of
``--repeats`` timings of ``--calls`` calls) and, with ``--nuts``, one chain of
``--warmup`` + ``--samples`` with the run's sampler settings (its SVI start, float32 as the
run's config), milliseconds per leapfrog step of the sampling phase. The process should be
pinned to one core (``taskset -c 0``), so that XLA's thread pool does not change the figures.

    taskset -c 0 .venv/bin/python bench/measurement_gradient.py --run rehearsal
        [--dataset arc_challenge] [--variants main,blind-quality] [--nuts] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
from numpyro.infer.util import initialize_model, potential_energy

from context_effects.measurement import model as model_module
from context_effects.measurement.data import prepare_data
from context_effects.measurement.fit import fit_nuts
from context_effects.measurement.model import ModelOptions, make_model, model_arrays
from context_effects.measurement.pipeline import FitSpec, select_ratings

SELECT = model_module.ordered_logistic_logprob


def indexed_logprob(y, mu, cutpoints):
    """The ordered-logistic log-probability with the cutpoints indexed by the ratings."""
    cutpoints = jnp.asarray(cutpoints)
    k1 = cutpoints.shape[-1]
    zero = jnp.zeros((1,), cutpoints.dtype)
    gap_term = jnp.concatenate([zero, model_module._log1mexp(-jnp.diff(cutpoints)), zero])
    lp = jnp.where(y < k1, model_module.log_sigmoid(cutpoints[jnp.minimum(y, k1 - 1)] - mu), 0.0)
    lp = lp + jnp.where(y > 0, model_module.log_sigmoid(mu - cutpoints[jnp.maximum(y - 1, 0)]), 0.0)
    return lp + gap_term[y]


WAYS = {"select": SELECT, "index": indexed_logprob}


def fit_inputs(run: Path, dataset: str, variant: str):
    diag = json.loads((run / "results/conformity/fits" / dataset / variant / "diagnostics.json").read_text())
    spec_d = diag["fit"]
    spec = FitSpec(**{**spec_d, "judges": tuple(spec_d["judges"])})
    families = diag["made_with"]["families"]
    rows = select_ratings(pd.read_parquet(run / "results/conformity/ratings" / f"{dataset}.parquet"), spec)
    data = prepare_data(rows, judges=spec.judges, exclude_self=spec.exclude_self, family=families)
    return spec, data, diag["settings"]


def gradient_ms(data, options: ModelOptions, calls: int, repeats: int) -> float:
    model = make_model(data, options)
    arrays = model_arrays(data, options, jnp.float32)
    start = initialize_model(jax.random.PRNGKey(0), model, model_args=(arrays,)).param_info.z
    grad = jax.jit(jax.value_and_grad(lambda p, a: potential_energy(model, (a,), {}, p)))
    jax.block_until_ready(grad(start, arrays))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            out = grad(start, arrays)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / calls * 1e3)
    return statistics.median(times)


def nuts_ms(data, spec: FitSpec, settings: dict, warmup: int, samples: int) -> dict:
    fit = fit_nuts(data, chains=1, warmup=warmup, samples=samples, precision="float32",
                   init=settings.get("init", "median"), split_means=tuple(settings.get("split_means", ())),
                   target_accept=float(settings["target_accept"]), max_tree_depth=int(settings["max_tree_depth"]),
                   theta_anchor=spec.theta_anchor, shift_prior=spec.shift_prior, generator_mean=spec.generator_mean,
                   compilation_cache=False)
    steps = float(np.sum(fit.sampler_stats["num_steps"]))
    return {"sampling_s": round(fit.timings["sampling_s"], 2), "leapfrog_steps": int(steps),
            "ms_per_step": round(fit.timings["sampling_s"] / steps * 1e3, 4),
            "steps_per_draw": round(steps / samples, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished run's directory (e.g. rehearsal)")
    ap.add_argument("--dataset", default="arc_challenge")
    ap.add_argument("--variants", default="main,blind-quality")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--nuts", action="store_true", help="also time one chain of NUTS per way")
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--samples", type=int, default=300)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    for variant in args.variants.split(","):
        spec, data, settings = fit_inputs(args.run, args.dataset, variant)
        options = ModelOptions(theta_anchor=spec.theta_anchor, shift_prior=spec.shift_prior,
                               generator_mean=spec.generator_mean)
        for way, logprob in WAYS.items():
            model_module.ordered_logistic_logprob = logprob
            try:
                row = {"dataset": args.dataset, "variant": variant, "way": way, "ratings": data.n_ratings,
                       "answers": data.n_answers,
                       "gradient_ms": round(gradient_ms(data, options, args.calls, args.repeats), 4)}
                if args.nuts:
                    row.update(nuts_ms(data, spec, settings, args.warmup, args.samples))
            finally:
                model_module.ordered_logistic_logprob = SELECT
            rows.append(row)
            print(json.dumps(row), flush=True)
    for variant in args.variants.split(","):
        by_way = {r["way"]: r for r in rows if r["variant"] == variant}
        line = f"{variant}: gradient index/select ×{by_way['index']['gradient_ms'] / by_way['select']['gradient_ms']:.2f}"
        if args.nuts:
            line += f", leapfrog step ×{by_way['index']['ms_per_step'] / by_way['select']['ms_per_step']:.2f}"
        print(line)
    if args.json:
        args.json.write_text(json.dumps({"run": str(args.run), "jax": jax.__version__, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
