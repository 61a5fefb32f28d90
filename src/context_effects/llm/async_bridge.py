"""The async-to-sync bridge of the hosted-API backends.

:func:`iterate_async` runs an async producer on its own event loop in a worker
thread and exposes its results as a plain iterator. That is how the synchronous
``Backend.run`` contract is met while results still stream out as they arrive
(the runner stores them in small groups as they come, so a killed job keeps what
it was answered; see ``context_effects.llm.runner``).
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class _Raised:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_DONE = object()


def iterate_async(
    produce: Callable[[Callable[[T], None]], Awaitable[None]], *, heartbeat_s: float | None = None
) -> Iterator[T | None]:
    """Run ``produce(emit)`` on a fresh event loop in a worker thread; yield what it emits.

    A dedicated thread keeps this usable from callers that already run an event
    loop (notebooks, async runners), and lets results stream out while later
    requests are still in flight. Closing the iterator early cancels the work.
    With ``heartbeat_s``, ``None`` is yielded whenever nothing was emitted for that
    long, so the consumer regains control while calls are in flight (the runner
    writes the answers it holds on time, not only when the next one arrives).
    """
    out: queue.Queue[Any] = queue.Queue()
    started = threading.Event()
    handle: dict[str, Any] = {}

    async def main() -> None:
        handle["loop"] = asyncio.get_running_loop()
        handle["task"] = asyncio.current_task()
        started.set()
        await produce(out.put)

    def worker() -> None:
        try:
            asyncio.run(main())
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # noqa: BLE001 - re-raised in the consumer thread
            out.put(_Raised(exc))
        finally:
            started.set()
            out.put(_DONE)

    thread = threading.Thread(target=worker, name="llm-api-loop", daemon=True)
    thread.start()
    try:
        while True:
            try:
                item = out.get(timeout=heartbeat_s)
            except queue.Empty:
                yield None
                continue
            if item is _DONE:
                break
            if isinstance(item, _Raised):
                raise item.exc
            yield item
    finally:
        if thread.is_alive():
            started.wait()
            loop, task = handle.get("loop"), handle.get("task")
            if loop is not None and task is not None and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(task.cancel)
                except RuntimeError:
                    pass  # loop finished between the check and the call
            thread.join()

