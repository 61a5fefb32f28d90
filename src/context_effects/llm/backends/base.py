"""The contract every backend fulfils.

The runner (``context_effects.llm.runner``) owns caching, batching, re-asking and
accounting; a backend only answers the requests it is handed. Keeping that split
means resume and never-pay-twice are implemented once, not per provider.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path

from context_effects.llm.types import LLMRequest, LLMResult


class Backend(ABC):
    #: Short name recorded with every result ("vllm", "openai", ...).
    name: str = ""

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

    def engine_version(self) -> str:
        """Engine or SDK version string recorded with every result."""
        return ""

    def close(self) -> None:  # pragma: no cover - default no-op
        """Release engines, sessions, event loops."""

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
