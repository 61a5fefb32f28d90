"""Replay backend: answers only from the response store, never calls a model.

Reviewers reproduce the analysis from released raw responses with this backend
(import the export, then run the DAG with ``backend: replay``). Behind the
runner, every request reaching it is already a store miss, so a miss is an
error that names the request rather than a silent gap in the results.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from context_effects.llm.backends.base import Backend
from context_effects.llm.store.responses import ResponseStore
from context_effects.llm.types import LLMRequest, LLMResult


class ReplayMiss(LookupError):
    """A request that the store cannot answer."""

    def __init__(self, request: LLMRequest, n_missing: int = 1, hint: str = "") -> None:
        self.request = request
        self.key = request.key
        self.n_missing = n_missing
        last = request.messages[-1][1] if request.messages else ""
        snippet = " ".join(last.split())[:80]
        model = f"{request.model.provider}:{request.model.model_id}"
        if request.model.revision:
            model += f"@{request.model.revision}"
        more = f" (and {n_missing - 1} more misses in this batch)" if n_missing > 1 else ""
        # ``hint``: e.g. that the answer was in a damaged segment the store moved aside.
        why = f"; {hint}" if hint else ""
        super().__init__(
            f"replay miss: no stored response for model={model} attempt={request.attempt} "
            f"sample_index={request.sample_index} last message={snippet!r} key={request.key}{more}{why}"
        )

    def __str__(self) -> str:  # LookupError would repr() the message
        return self.args[0]


class ReplayBackend(Backend):
    name = "replay"
    asks_models = False

    def __init__(self, store: ResponseStore, *, state_dir: Path | None = None) -> None:
        super().__init__(state_dir=state_dir)
        self.store = store

    def engine_version(self) -> str:
        return "replay"

    def run(self, requests: Sequence[LLMRequest]) -> Iterator[LLMResult]:
        # Check the whole batch before yielding anything: a partial replay is
        # never what the caller wants.
        found = self.store.get_many(r.key for r in requests)
        missing = [r for r in requests if r.key not in found]
        if missing:
            self.store.refresh()
            found.update(self.store.get_many(r.key for r in missing))
            missing = [r for r in requests if r.key not in found]
        if missing:
            raise ReplayMiss(missing[0], len(missing), self.store.lost_answer_hint(missing[0].key))
        for r in requests:
            # Results keep their original backend/engine: provenance of the answer, not of the replay.
            yield found[r.key]
