"""Per-job accounting: what a job asked for, what it paid for, what failed.

The runner saves the ledger after every completed batch (atomically), so a job
killed mid-shard still leaves an accurate record of the calls it paid for, and
``Ledger.merge`` over all job ledgers gives the run's totals for the report.
Only counts and short reason labels are recorded, never request or reply text,
so nothing secret or bulky can end up here.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

LEDGER_VERSION = 1

_COUNTERS = (
    "requests",
    "calls",
    "cache_hits",
    "failures",
    "invalid",
    "reasks",
    "tokens_in",
    "tokens_out",
    "cost_unknown_calls",
    "batches",
    "runs",
)


@dataclass
class Ledger:
    path: Path | None = None
    job: str = ""
    backend: str = ""
    engine_version: str = ""
    #: Unique requests handed to the runner (re-asks not included).
    requests: int = 0
    #: Requests actually sent to the backend (paid for), re-asks included.
    calls: int = 0
    cache_hits: int = 0
    #: Backend errors (not cached; a rerun tries again).
    failures: int = 0
    #: Items whose reply still failed validation after the last attempt.
    invalid: int = 0
    reasks: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    #: Sum over calls with a known price; see ``cost_unknown_calls``.
    cost_usd: float = 0.0
    #: Calls with no price: when > 0, ``cost_usd`` is a lower bound.
    cost_unknown_calls: int = 0
    wall_s: float = 0.0
    batches: int = 0
    #: How many runner invocations this ledger covers (reruns of one job add up).
    runs: int = 0
    failure_reasons: dict[str, int] = field(default_factory=dict)
    invalid_reasons: dict[str, int] = field(default_factory=dict)

    # ------------------------------------------------------------------ io

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("path")
        d["version"] = LEDGER_VERSION
        d["cost_usd"] = round(d["cost_usd"], 8)
        d["wall_s"] = round(d["wall_s"], 3)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: Path | None = None) -> "Ledger":
        names = {f.name for f in fields(cls)} - {"path"}
        return cls(path=path, **{k: v for k, v in d.items() if k in names})

    def save(self, path: str | os.PathLike[str] | None = None) -> None:
        target = Path(path) if path is not None else self.path
        if target is None:
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".tmp-{os.getpid()}-{target.name}")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> "Ledger":
        p = Path(path)
        return cls.from_dict(json.loads(p.read_text(encoding="utf-8")), path=p)

    @classmethod
    def open(cls, path: str | os.PathLike[str], **defaults: Any) -> "Ledger":
        """Continue the ledger at ``path`` if a previous (interrupted) run left one."""
        p = Path(path)
        if p.exists():
            led = cls.load(p)
            for k, v in defaults.items():
                if not getattr(led, k):
                    setattr(led, k, v)
            return led
        return cls(path=p, **defaults)

    # ------------------------------------------------------------------ counting

    def count_reason(self, kind: str, reason: str) -> None:
        bucket = self.failure_reasons if kind == "failure" else self.invalid_reasons
        bucket[reason] = bucket.get(reason, 0) + 1

    @classmethod
    def merge(cls, paths: Iterable[str | os.PathLike[str] | "Ledger"]) -> "Ledger":
        """Sum ledgers (paths or objects) into one for the report."""
        total = cls()
        backends: set[str] = set()
        engines: set[str] = set()
        fail: Counter[str] = Counter()
        inval: Counter[str] = Counter()
        for item in paths:
            led = item if isinstance(item, Ledger) else cls.load(item)
            for name in _COUNTERS:
                setattr(total, name, getattr(total, name) + getattr(led, name))
            total.cost_usd += led.cost_usd
            total.wall_s += led.wall_s
            fail.update(led.failure_reasons)
            inval.update(led.invalid_reasons)
            if led.backend:
                backends.update(led.backend.split(","))
            if led.engine_version:
                engines.update(led.engine_version.split("; "))
        total.backend = ",".join(sorted(backends))
        total.engine_version = "; ".join(sorted(engines))
        total.job = "merged"
        total.failure_reasons = dict(fail)
        total.invalid_reasons = dict(inval)
        return total
