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


_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: The vLLM logging config this process wrote (see ``_route_vllm_logging``).
_vllm_config_path: str | None = None


class JobLogHandler(logging.FileHandler):
    """The job's log file, which keeps logging after something closed it.

    ``logging.config.dictConfig`` (vLLM runs one when its engine is built) closes
    every existing handler, the root's included, while leaving them attached; a
    plain ``FileHandler`` opened with mode "w" then drops every later record
    silently (CPython issue 42378), so a job's last lines and its traceback never
    reached the file. The file is truncated once here and written in append mode,
    so a closed handler reopens on its next record instead.
    """

    def __init__(self, path: str) -> None:
        with open(path, "w", encoding="utf-8"):
            pass
        super().__init__(path, mode="a", encoding="utf-8")


def _route_vllm_logging(log_path: str, level: int) -> None:
    """Have vLLM log to the job's log file too, in this process and in its engine processes.

    By default vLLM gives its ``vllm`` logger a stream handler of its own with
    ``propagate=False``, so none of its records reached the job's file. A config
    file named by ``VLLM_LOGGING_CONFIG_PATH`` is applied by vLLM in every process
    it starts, where nothing of this job's setup exists. A person who configured
    vLLM's logging (either variable set) keeps their configuration.
    """
    global _vllm_config_path
    import atexit
    import json
    import tempfile

    own = _vllm_config_path is not None and os.environ.get("VLLM_LOGGING_CONFIG_PATH") == _vllm_config_path
    if not own and ("VLLM_LOGGING_CONFIG_PATH" in os.environ or "VLLM_CONFIGURE_LOGGING" in os.environ):
        return
    vllm_level = os.environ.get("VLLM_LOGGING_LEVEL") or logging.getLevelName(level)
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"job": {"format": "%(asctime)s %(levelname)s %(name)s [%(processName)s]: %(message)s"}},
        "handlers": {
            "job_file": {
                "class": "logging.FileHandler",
                "filename": os.path.abspath(log_path),
                "mode": "a",
                "encoding": "utf-8",
                "formatter": "job",
            },
            "stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "formatter": "job"},
        },
        "loggers": {"vllm": {"handlers": ["job_file", "stderr"], "level": vllm_level, "propagate": False}},
    }
    fd, path = tempfile.mkstemp(prefix="vllm-logging-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(config, fh)
    if own:
        _remove_file(_vllm_config_path)
    else:
        atexit.register(lambda: _remove_file(_vllm_config_path))
    _vllm_config_path = path
    os.environ["VLLM_LOGGING_CONFIG_PATH"] = path


def _remove_file(path: str | None) -> None:
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


def setup_job_logging(log_path: str | None, level: int = logging.INFO) -> logging.Logger:
    """Send this job's log records, vLLM's and uncaught tracebacks to its Snakemake log file."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if log_path:
        os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
        handlers.append(JobLogHandler(log_path))
        _route_vllm_logging(log_path, level)
    logging.basicConfig(level=level, format=_FORMAT, handlers=handlers, force=True)
    log = logging.getLogger("context_effects")

    def _excepthook(exc_type, exc, tb):
        log.error("job failed", exc_info=(exc_type, exc, tb))

    sys.excepthook = _excepthook
    return log
