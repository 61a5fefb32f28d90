"""Benchmark: what one answering job pays on the CPU engine, engine in the job's process
versus vLLM's default layout (engine core and worker as processes of their own).

Each measurement is a fresh interpreter that does what `answer_requests_vllm` does for
a small shard: import vLLM, load the model, answer a few greedy chats, shut down. The
two layouts alternate (in-process, separate, in-process, ...), and the greedy answers
of both are compared. Prints seconds per phase, the median of each layout and their
ratio.

    OMP_NUM_THREADS=2 .venv/bin/python bench/vllm_engine_startup.py resources/models/smollm2-135m --repeats 3

The model directory is one `make demo` converted (resources/models/<model>).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

_CHILD = r"""
import json, sys, time
started = time.monotonic()
def main():
    from context_effects.llm.backends.vllm_engine import VLLMBackend
    from context_effects.llm.types import LLMRequest, ModelRef, Sampling
    imported = time.monotonic()
    backend = VLLMBackend(sys.argv[1], dtype="float32", max_model_len=2048, enforce_eager=True,
                          kv_cache_memory_bytes=1 << 30, seed=0)
    requests = [LLMRequest(ModelRef("vllm", backend.model_id), (("user", f"What is {i} plus {i}?"),),
                           Sampling(max_tokens=16)) for i in range(int(sys.argv[2]))]
    _ = backend.llm
    loaded = time.monotonic()
    results = list(backend.run(requests))
    answered = time.monotonic()
    in_process = backend.in_process
    backend.close()
    closed = time.monotonic()
    print("RESULT " + json.dumps({
        "in_process": in_process, "import_s": imported - started, "load_s": loaded - imported,
        "answer_s": answered - loaded, "close_s": closed - answered, "texts": [r.text for r in results]}))
if __name__ == "__main__":
    main()
"""


def one(model: Path, n: int, separate: bool) -> dict:
    env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
    if separate:
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1"  # the user's choice: vLLM's own layout
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(model), str(n)], env=env, capture_output=True, text=True)
    total = time.monotonic() - started
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        sys.exit(f"the engine run failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return {**json.loads(lines[-1][len("RESULT ") :]), "process_s": total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="a converted model directory (resources/models/<model>)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    runs: dict[str, list[dict]] = {"in_process": [], "separate": []}
    for i in range(args.repeats):
        for layout in ("in_process", "separate"):
            run = one(args.model, args.requests, separate=layout == "separate")
            assert run["in_process"] == (layout == "in_process"), run
            runs[layout].append(run)
            print(
                f"{layout:10s} #{i + 1}: process {run['process_s']:5.1f} s = import {run['import_s']:4.1f} "
                f"+ load {run['load_s']:4.1f} + answer {run['answer_s']:4.1f} + close {run['close_s']:4.1f} (+ interpreter)"
            )
    texts = {tuple(r["texts"]) for rs in runs.values() for r in rs}
    print(f"greedy answers identical across layouts and repeats: {len(texts) == 1}")
    med = {k: statistics.median(r["process_s"] for r in v) for k, v in runs.items()}
    print(
        f"median per job: in-process {med['in_process']:.1f} s, separate processes {med['separate']:.1f} s, "
        f"×{med['separate'] / med['in_process']:.2f}"
    )
    if args.json:
        args.json.write_text(json.dumps({"model": str(args.model), "requests": args.requests, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
