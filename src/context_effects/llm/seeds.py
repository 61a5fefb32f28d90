"""The sampling seed of one request, derived from what the request is.

vLLM seeds a generator per request from the request's seed alone, so two sampled
requests with one seed draw the same noise whatever their prompts (docs/llm-layer.md,
"Sampling seeds"). A study that sent one seed, or ``seed + sample``, with every cell,
item and condition would have its "independent" draws share their noise: the first
token of every cell would be ``argmax(p / q)`` with one ``q``, a threshold on P(Yes)
rather than a draw. The seed papers' calls were independent API calls; a request's
seed is therefore a hash of the run seed and the request's identity (model, item,
cell or condition, sample): reproducible, and different for every request of a run.

The seed has :data:`SEED_BITS` bits, a non-negative value every engine and API that
takes one accepts (torch generators and vLLM: signed 64-bit; OpenAI: signed 64-bit)
and that stays exact where a table column holds it as a float beside missing seeds
(Anthropic and Gemini take none). Two requests of a run share a seed with probability
2**-31 a pair: the pair's draws are then correlated as on vLLM, nothing else.
"""

from __future__ import annotations

import hashlib
import json
import numbers
from typing import Any

#: Bits of a derived seed: 0 <= seed < 2**SEED_BITS (a signed 32-bit integer's range).
SEED_BITS = 31


def _part(value: Any) -> str | int:
    """One part of an identity, in one JSON form (a numpy integer as the int it is)."""
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    raise TypeError(f"a request identity takes strings and integers, got {value!r} ({type(value).__name__})")


def request_seed(run_seed: int, *identity: str | int) -> int:
    """The sampling seed of the request named by ``identity`` in the run seeded ``run_seed``.

    sha256 of the run seed and the identity, as JSON (never Python's ``hash()``, which
    differs between processes), cut to :data:`SEED_BITS` bits. The same arguments give
    the same seed in any process; any other identity gives an unrelated one."""
    blob = json.dumps([_part(run_seed), *(_part(p) for p in identity)], ensure_ascii=False, separators=(",", ":"))
    digest = hashlib.sha256(blob.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") >> (64 - SEED_BITS)
