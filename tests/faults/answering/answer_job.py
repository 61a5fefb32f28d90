"""One answering job, as tests/test_llm_kill_resume.py and tests/faults/test_cost_ledger.py kill it.

``llm.shards.answer_shard`` with an OpenAI backend pointed at tests/provider_server.py,
the way workflow/scripts/answer_requests.py runs a shard under Snakemake, in its own
process so that it can be killed. Imports first, then prints ``ready`` and waits for
the server's base URL on stdin: the test starts the next job while it checks the
previous one, so the import time is not paid inside each kill-and-rerun.

``--signal-at STEP`` sends the job SIGTERM just after that step of the shard's end
(``llm.shards.END_STEPS``), where its default action kills it, as a time limit or a
stopping ``snakemake`` would. Log records (a wait for another process's shard lock)
go to stderr.

Exit status: 0 when the shard is answered, 3 when a write failed (``WriteFailed``: a full
disk), 128 + signal number when the job stopped
on SIGTERM/SIGINT after storing what it had received (the status a shell gives a
process killed by that signal), -15 when killed at ``--signal-at``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[3] / "src")]


def _warm_up() -> None:
    """The SDK's first use (imports, client, response model) costs seconds: pay it before "ready"."""
    import asyncio

    import openai
    from openai.types.chat import ChatCompletion

    async def client() -> None:
        await openai.AsyncOpenAI(api_key="warm-up", base_url="http://127.0.0.1:9/v1").close()

    asyncio.run(client())
    ChatCompletion.model_validate(
        {
            "id": "warm-up", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                         "message": {"role": "assistant", "content": "", "refusal": None}}],
        }
    ).model_dump(mode="json")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", required=True)
    ap.add_argument("--responses", required=True)
    ap.add_argument("--ledger", required=True)
    ap.add_argument("--attempts", required=True)
    ap.add_argument("--store", required=True)
    # The production defaults of a hosted model (factory.py): 8 calls at first,
    # growing towards 64; the worker pool is as large as the cap.
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-concurrency", type=int, default=64)
    ap.add_argument("--flush-every", type=int, default=16)
    ap.add_argument("--flush-interval", type=float, default=0.5)
    ap.add_argument("--signal-at", default=None)
    ap.add_argument("--min-free-bytes", type=int, default=None)
    ap.add_argument("--reserve-bytes", type=int, default=None)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")

    from context_effects.llm.backends.openai_api import OpenAIBackend
    from context_effects.llm.runner import WriteFailed
    from context_effects.llm.shards import END_STEPS, JobInterrupted, answer_shard
    from context_effects.llm.store.responses import ResponseStore

    _warm_up()
    print("ready", flush=True)
    base_url = sys.stdin.readline().strip()
    if not base_url:  # the test went away without starting this job
        return
    if args.signal_at is not None and args.signal_at not in END_STEPS:
        raise SystemExit(f"--signal-at: one of {END_STEPS}, not {args.signal_at!r}")

    def on_step(step: str) -> None:
        if step == args.signal_at:
            os.kill(os.getpid(), signal.SIGTERM)

    backend = OpenAIBackend(
        base_url=base_url,
        concurrency=args.concurrency,
        max_concurrency=args.max_concurrency,
        backoff_base_s=0.02,
        backoff_max_s=0.1,
        request_timeout_s=10.0,
    )
    try:
        with backend:
            answer_shard(
                args.requests,
                args.responses,
                args.ledger,
                backend,
                ResponseStore(args.store),
                progress=False,
                attempts_log=args.attempts,
                flush_every=args.flush_every,
                flush_interval_s=args.flush_interval,
                on_step=on_step,
                **{k: v for k, v in (("min_free_bytes", args.min_free_bytes), ("reserve_bytes", args.reserve_bytes))
                   if v is not None},
            )
    except WriteFailed as exc:
        print(f"write failed: {exc}", file=sys.stderr, flush=True)
        sys.exit(3)
    except JobInterrupted as exc:
        print(f"interrupted: {exc}", file=sys.stderr, flush=True)
        # The store, the ledger and the attempts log are fsynced by now; skipping the
        # interpreter's teardown saves the test half a second per round.
        os._exit(128 + exc.signum)


if __name__ == "__main__":
    main()
