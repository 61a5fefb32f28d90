"""How fast this machine is right now, on the two kinds of work the test suite is made of.

The suite's wall time moves with the host as much as with the code: on the 2-core test machine
the same tests' pytest took 894 s one day and 1,257 s the next, every file about 1.4x
slower, and a fixed Python loop took between 1.95 and 3.2 s within ten minutes
(docs/benchmarks.md, "The test suite"). A suite time is therefore only comparable with
the figures taken beside it, before and after the run:

    .venv/bin/python bench/machine_speed.py            # one JSON line
    .venv/bin/python bench/machine_speed.py --repeat 5

Figures (CPU seconds of this process, lower is faster; the median of ``--repeat``):

- ``python_s``: a pure-Python loop of 30 million additions (the interpreter: what every
  job process's start-up, Snakemake's scheduler and the in-process tests run);
- ``xla_compile_s``: XLA compiling a fixed sampler-like program (a ``while_loop`` whose
  body takes the gradient of a small network's logistic log density) with no compilation
  cache (what the suite's fits spend most of their CPU on).

Run it on a quiet machine: it measures one core, and anything else running slows it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false")


def python_seconds(n: int = 30_000_000) -> float:
    start = time.process_time()
    total = 0
    for i in range(n):
        total += i
    assert total == n * (n - 1) // 2
    return time.process_time() - start


def xla_compile_seconds(trial: int) -> float:
    """CPU seconds to lower and compile a program of the shape of a sampler's loop: a
    ``while_loop`` whose body takes the gradient of a logistic log density. ``trial`` goes
    into the program as a constant, so every call compiles afresh (JAX keeps compiled
    programs in memory by what they compute)."""
    import jax
    import jax.numpy as jnp

    def log_density(params, x, y):
        # 12 layers of a small network: enough distinct operations for a compile of about a
        # second on this machine, the size of a small fit's programs.
        total = 0.0
        h = x
        for layer in range(12):
            w = params[layer * 9:(layer + 1) * 9].reshape(3, 3)
            h = jnp.tanh(h @ w + jnp.sin(layer + h))
            eta = jnp.sum(h, axis=1)
            total = total + jnp.sum(y * jax.nn.log_sigmoid(eta) + (1 - y) * jax.nn.log_sigmoid(-eta))
        return total - jnp.sum(params**2) / 2

    grad = jax.grad(log_density)

    def run(params, x, y):
        def body(state):
            i, p, m = state
            g = grad(p, x, y)
            m = 0.9 * m + g
            return i + 1, p + 1e-3 * m + trial * 1e-9, m

        return jax.lax.while_loop(lambda s: s[0] < 50, body, (0, params, jnp.zeros_like(params)))[1]

    x = jnp.ones((256, 3))
    y = jnp.ones(256)
    params = jnp.zeros(12 * 9)
    start = time.process_time()
    jax.jit(run).lower(params, x, y).compile()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each workload (the median is printed)")
    args = parser.parse_args()
    import jax

    jax.config.update("jax_enable_compilation_cache", False)
    xla_compile_seconds(-1)  # JAX's own first-use set-up, not the compiler's speed
    python = [python_seconds() for _ in range(args.repeat)]
    xla = [xla_compile_seconds(i) for i in range(args.repeat)]
    print(json.dumps({
        "python_s": round(statistics.median(python), 2),
        "xla_compile_s": round(statistics.median(xla), 3),
        "python_runs": [round(v, 2) for v in python],
        "xla_compile_runs": [round(v, 3) for v in xla],
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }))


if __name__ == "__main__":
    main()
