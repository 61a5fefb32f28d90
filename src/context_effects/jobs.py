"""Small helpers every Snakemake script uses: logging to the rule's log, thread bounds."""

from __future__ import annotations

import logging
import os
import sys

_THREAD_VARS = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "TOKENIZERS_PARALLELISM",
)


def bound_threads(n: int) -> None:
    """Bound every native thread pool to ``n`` before numpy/torch are imported.

    Oversubscribed OpenMP pools (each library defaulting to all cores, several
    jobs per node) make torch and llama.cpp 10-30x slower on small machines.
    """
    n = max(1, int(n))
    for var in _THREAD_VARS:
        os.environ[var] = "false" if var == "TOKENIZERS_PARALLELISM" else str(n)
    # vLLM's CPU engine otherwise pins its OpenMP threads itself and keeps a core
    # for the scheduler; with the bound above we want exactly `n` unpinned threads.
    # (Ignored by the GPU build.)
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)


def setup_job_logging(log_path: str | None, level: int = logging.INFO) -> logging.Logger:
    """Send this job's log records and uncaught tracebacks to its Snakemake log file."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
        handlers.append(logging.FileHandler(log_path, mode="w", encoding="utf-8"))
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        handlers=handlers,
        force=True,
    )
    log = logging.getLogger("context_effects")

    def _excepthook(exc_type, exc, tb):
        log.error("job failed", exc_info=(exc_type, exc, tb))

    sys.excepthook = _excepthook
    return log
