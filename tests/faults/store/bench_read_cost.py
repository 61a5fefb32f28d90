"""Read cost of the response store's integrity checks (tests/test_llm_store_integrity.py).

Builds a store of ROWS rows in segments of BATCH rows with the store module given
(default: the package's ``context_effects.llm.store.responses``), then times, in this
process and median of REPEATS:

* ``index``  - a fresh ``ResponseStore`` scanning every segment (first read per process,
  where checksums are verified);
* ``get``    - ``get_many`` of every key in batches of 64 on that indexed store
  (what the runner and the replay backend do).

Times are process CPU seconds (the best of REPEATS), so that other work on a
shared machine disturbs them little. ``--compact`` measures a compacted store
(one segment) instead of one segment per batch.

Compare with another version, given as one module file that defines ``ResponseStore``
(a version of the store from before it became a package was one such file,
``src/context_effects/llm/store.py``; a later version's ``responses.py`` imports its
siblings from the installed package, so compare those from two checkouts instead)::

    OMP_NUM_THREADS=1 .venv/bin/python tests/faults/store/bench_read_cost.py
    git show <commit>:src/context_effects/llm/store.py > /tmp/store_old.py
    OMP_NUM_THREADS=1 .venv/bin/python tests/faults/store/bench_read_cost.py --module /tmp/store_old.py
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path[:0] = [str(HERE.parents[3] / "src")]

from context_effects.llm.types import LLMRequest, LLMResult, ModelRef, Sampling  # noqa: E402

MODEL = ModelRef(provider="vllm", model_id="org/tiny", revision="abc123")


def load(module: str | None):
    if module is None:
        from context_effects.llm.store import responses

        return responses
    spec = importlib.util.spec_from_file_location("store_under_test", module)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def build(mod, root: Path, rows: int, batch: int) -> list[str]:
    store = mod.ResponseStore(root)
    keys = []
    for start in range(0, rows, batch):
        reqs = [
            LLMRequest(
                model=MODEL,
                # A realistic prompt: a persona, a vignette, a question (about 1.5 kB).
                messages=(("system", "You are a careful rater. " * 20), ("user", f"item {i}: " + "context " * 150)),
                sampling=Sampling(temperature=0.0, max_tokens=8, logprobs=2, probe_tokens=("Yes", "No")),
                meta={"item": i},
            )
            for i in range(start, min(start + batch, rows))
        ]
        results = [
            LLMResult(
                key=r.key,
                text=f"Rating: {i % 7 + 1}",
                finish_reason="stop",
                tokens_in=300,
                tokens_out=3,
                first_token_logprobs={"Yes": -0.1, "No": -2.4},
                probe_probs={"Yes": 0.9, "No": 0.09},
                latency_s=0.5,
                backend="vllm",
                engine_version="vllm 0.33.0",
            )
            for i, r in enumerate(reqs)
        ]
        store.put_batch(results, reqs)
        keys += [r.key for r in reqs]
    return keys


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--module", help="path of a module file defining ResponseStore to measure instead of the package's")
    ap.add_argument("--rows", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--compact", action="store_true", help="compact the store before measuring")
    args = ap.parse_args()
    mod = load(args.module)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        keys = build(mod, root, args.rows, args.batch)
        if args.compact:
            mod.ResponseStore(root).compact()
        size = sum(p.stat().st_size for p in (root / "segments").iterdir())
        t_index, t_get = [], []
        for _ in range(args.repeats):
            t0 = time.process_time()
            store = mod.ResponseStore(root)
            store.refresh()
            t1 = time.process_time()
            n = 0
            for i in range(0, len(keys), 64):
                n += len(store.get_many(keys[i : i + 64]))
            t2 = time.process_time()
            assert n == len(keys), n
            t_index.append(t1 - t0)
            t_get.append(t2 - t1)
        nseg = len(list((root / "segments").iterdir()))
        best_index, best_get = min(t_index), min(t_get)
        print(
            f"{args.module or 'package'}: {len(keys)} rows, {nseg} segments, {size / 1e6:.2f} MB; CPU ms (best of "
            f"{args.repeats}): index {best_index * 1e3:.1f}, get_many(all, by 64) {best_get * 1e3:.1f}, "
            f"total {(best_index + best_get) * 1e3:.1f}"
        )


if __name__ == "__main__":
    main()
