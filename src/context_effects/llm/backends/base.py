"""The contract every backend fulfils.

The runner (``context_effects.llm.runner``) owns caching, batching, re-asking and
accounting; a backend only answers the requests it is handed. Keeping that split
means resume and never-pay-twice are implemented once, not per provider.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from context_effects.llm.types import LLMRequest, LLMResult


class Backend(ABC):
    #: Short name recorded with every result ("vllm", "openai", ...).
    name: str = ""
    #: True when :meth:`stream` hands out each result as its call completes (the
    #: hosted APIs), so the runner writes answers to the store in small groups
    #: while a batch is still running. False when a batch is answered at once (one
    #: vLLM engine call, the synthetic model, the store): there is nothing to write
    #: before the batch ends, and grouping would only split its one segment.
    incremental: bool = False
    #: Set by the runner while it runs a batch: called as ``on_progress(n, tokens_out)``
    #: when ``n`` more requests of a call that answers many at once have finished
    #: inside the engine, ``tokens_out`` being the output tokens those requests produced
    #: (``None`` when unknown). Their results still come when the call ends; this only
    #: lets a progress display move while it runs.
    on_progress: Callable[[int, int | None], None] | None = None
    #: False for a backend that only serves stored answers (replay): it reproduces a run
    #: as it was, so the runner does not stop it for replies empty at the output budget,
    #: a stop that is only there to keep a model from being asked in vain.
    asks_models: bool = True

    def __init__(self, *, state_dir: Path | None = None) -> None:
        # Somewhere to persist provider-side state (e.g. Batch API ids) so that a
        # restarted job picks up work it already paid for instead of resubmitting.
        self.state_dir = Path(state_dir) if state_dir is not None else None

    @abstractmethod
    def run(self, requests: Sequence[LLMRequest]) -> Iterator[LLMResult]:
        """Answer ``requests``; yield exactly one result per request, in any order.

        A request that could not be answered yields a result with ``error`` set
        (never raises for a single bad request), so the caller can record the
        failure without caching it.
        """

    def stream(self, requests: Sequence[LLMRequest], *, heartbeat_s: float | None = None) -> Iterator[LLMResult | None]:
        """:meth:`run`, with ``None`` yielded between results while none is due.

        An incremental backend yields ``None`` at least every ``heartbeat_s``
        seconds while it waits for calls in flight, so the runner can write the
        answers it already holds after a while even when no further answer comes.
        The default is :meth:`run` as it is: a backend that answers a batch at once
        has nothing to report in between.
        """
        return iter(self.run(requests))

    def request_stop(self) -> None:
        """Send no further requests; results of the calls already sent still come.

        Called from the answering job's SIGTERM/SIGINT handler (so it only sets a
        flag). After it, :meth:`run` may end without a result for requests it never
        sent: they were not paid for, and the runner stores what did come back. The
        default does nothing (an engine call answering a whole batch cannot stop
        half-way; the job's grace period bounds how long it is waited for).
        """

    def engine_version(self) -> str:
        """Engine or SDK version string recorded with every result."""
        return ""

    def close(self) -> None:  # pragma: no cover - default no-op
        """Release engines, sessions, event loops."""

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
