"""JAX's CPU backend started with a compute pool of a given size (a fit job's threads).

Its own module, importing nothing but JAX when called: a process that only starts the
backend (a fit job's first step, or a test of it) need not load NumPyro and ArviZ."""

from __future__ import annotations

import contextlib
import os


def start_cpu_backend(threads: int) -> int:
    """Start JAX's CPU backend with a compute pool of ``threads`` threads; returns the size used.

    XLA sizes that pool by the cores the process may run on when the backend starts, and
    reads no setting for it (not OMP_NUM_THREADS). A fit job given one core beside another
    job on a 2-core machine then ran two pool threads against the other job, and its
    leapfrog steps took 0.30 ms where one pool thread took 0.26
    (docs/benchmarks.md, "The documented rehearsal"). So the process is held to
    ``threads`` cores while the backend starts, and every thread is then let run on all of
    them again: the pool keeps ``threads`` threads, and the system places them. Where the
    process may use no more cores than that (a Slurm allocation), nothing changes; where
    the platform has no CPU affinity (macOS), JAX starts as usual. Call it before anything
    else starts JAX."""
    import jax

    if not hasattr(os, "sched_getaffinity"):
        return int(threads)
    cores = os.sched_getaffinity(0)
    n = max(1, min(int(threads), len(cores)))
    if n == len(cores):
        return n
    os.sched_setaffinity(0, set(sorted(cores)[:n]))
    try:
        # the backend, and the pools its first compile and run start, sized while held
        jax.jit(lambda x: x + 1)(jax.numpy.zeros(1)).block_until_ready()
    finally:
        for task in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):  # a thread that ended meanwhile
                os.sched_setaffinity(int(task), cores)
    return n
