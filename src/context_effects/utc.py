"""The one timestamp format of every record the pipeline writes (response store rows,
ledgers, batch state, manifests): UTC, ISO 8601, microseconds, a ``Z`` suffix. One
fixed format sorts as text and reads back with ``datetime.fromisoformat``."""

from __future__ import annotations

from datetime import datetime, timezone


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
