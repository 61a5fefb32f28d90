"""Content-addressed response store (docs/architecture.md, "The response store").

Layout::

    <root>/segments/seg-<UTC time>-<host>-<pid>-<uuid>-<n>.parquet
    <root>/quarantine/<segment>            damaged segments, moved aside
    <root>/quarantine/<segment>.json       why, when, by whom, and which keys it held

Every writer (one Snakemake job) writes its own immutable segment per completed
batch: first under a hidden temp name, fsynced, then ``os.replace``d into place.
Nothing is ever appended to or rewritten in place, so many jobs on a shared
filesystem (NFS included) never need a lock, and a reader sees either a whole
segment or none. A temp file left behind by ``kill -9`` is never matched by the
reader's pattern.

Integrity: every segment (and every export) carries the sha256 of its own bytes
in the Parquet footer's key-value metadata (``context_effects.sha256``; the
digest is taken with those 64 characters read as ``0``), so a change to any byte
of the file - header, compressed column pages, footer, the digest itself - is
detected. A process checks the whole file the first time it reads a segment,
and again whenever the file's size or times change. A segment that fails (digest
mismatch, truncated, unreadable) is moved to ``quarantine/`` with a note and
named in a warning: its rows become store misses, so a normal rerun answers them
again and replay mode reports them as misses. Segments written before checksums
existed are read unchecked (one warning per process); ``compact`` rewrites them
with checksums.

Duplicate keys (two jobs racing on the same request) are harmless: the row from
the segment whose name sorts first wins, so every reader and ``compact`` agree.

Only successful results are stored: a failure must be retried next run, not
served from cache.

CLI (for reviewers replaying a finished run with zero model calls)::

    python -m context_effects.llm.store export ROOT OUT.parquet [--skip-damaged]
    python -m context_effects.llm.store import ROOT IN.parquet
    python -m context_effects.llm.store verify ROOT [--quarantine]
    python -m context_effects.llm.store stats ROOT
    python -m context_effects.llm.store compact ROOT
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import socket
import sys
import time
import uuid
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from context_effects.llm.types import LLMRequest, LLMResult, ModelRef, Sampling
from context_effects.utc import utc_now_iso

STORE_FORMAT = "1"

SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("request_json", pa.string(), nullable=False),
        pa.field("text", pa.string()),
        pa.field("finish_reason", pa.string()),
        pa.field("tokens_in", pa.int64()),
        pa.field("tokens_out", pa.int64()),
        pa.field("first_token_logprobs", pa.string()),
        pa.field("probe_probs", pa.string()),
        pa.field("latency_s", pa.float64()),
        pa.field("attempt", pa.int64()),
        pa.field("backend", pa.string()),
        pa.field("engine_version", pa.string()),
        pa.field("timestamp", pa.string()),
        pa.field("cost_usd", pa.float64()),
        pa.field("notes", pa.string()),
    ],
    metadata={"context_effects.store_format": STORE_FORMAT},  # FORMAT_KEY
)
COLUMNS = tuple(SCHEMA.names)

SEGMENT_DIR = "segments"
QUARANTINE_DIR = "quarantine"
_SEG_RE = re.compile(r"^seg-.+\.parquet$")
_STAMP_RE = re.compile(r"^\d{8}T\d{12}Z$")
_TMP_PREFIX = ".tmp-"
# Small enough that fetching a handful of keys from a compacted store reads
# little, large enough that row-group overhead stays negligible.
ROW_GROUP_ROWS = 4096
# Imports and compaction write segments of at most this many rows so no single
# file becomes unwieldy to copy or read.
MAX_SEGMENT_ROWS = 200_000
# A writer finishes a segment in seconds; a temp file this old is debris from a killed job.
STALE_TMP_S = 3600.0

# File-level Parquet key-value metadata (not schema metadata, so a table read
# with pyarrow and written again does not carry a stale digest along).
# CHECKSUM_KEY holds the sha256 of the file's bytes taken with its own 64
# characters read as "0"; CHECKSUM_KIND says that the file has one. No single
# damaged byte may make a checksummed file look like one written before
# checksums (which carry FORMAT_KEY only): the entries are written in the order
# kind, digest, format, so a damaged entry count or list header that drops
# entries from the end either leaves the digest (checked: mismatch), or the kind
# without the digest, or no format key - each of which is damage.
FORMAT_KEY = "context_effects.store_format"
CHECKSUM_KEY = "context_effects.sha256"
CHECKSUM_KIND_KEY = "context_effects.checksum"
CHECKSUM_KIND = "sha256 of the whole file, this digest read as 64 zeros"
_PLACEHOLDER = b"0" * 64
_HEX64 = re.compile(rb"[0-9a-f]{64}")
_HASH_CHUNK = 1 << 22


class StoreDamaged(RuntimeError):
    """Damaged store files (each named, with why) stopped an export, import or compaction."""

    def __init__(self, what: str, damage: Sequence[Damage]) -> None:
        self.damage = list(damage)
        lines = "".join(f"\n  {d}" for d in self.damage)
        super().__init__(f"{what}:{lines}")


@dataclass(frozen=True)
class Damage:
    """A store file whose rows cannot be served, where it is now, and why."""

    segment: str
    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True)
class Quarantined:
    """A segment in ``<root>/quarantine/`` with its note; ``missing`` is None when its keys are unknown."""

    segment: str
    path: str
    reason: str
    keys: tuple[str, ...] | None
    missing: int | None

    @property
    def resolved(self) -> bool:
        """Every row it held has been answered again (its loss no longer matters)."""
        return self.missing == 0

    def status(self) -> str:
        if self.keys is None:
            return "rows unknown (its keys could not be read back intact): cannot tell whether they were answered again"
        if self.missing:
            return f"{self.missing} of its {len(self.keys)} rows are not in the store"
        return f"resolved: all {len(self.keys)} of its rows were answered again"


@dataclass
class VerifyReport:
    ok: list[str] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)
    damaged: list[Damage] = field(default_factory=list)
    quarantined: list[Quarantined] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """No damaged segment in place and no quarantined rows still missing (so an export would succeed)."""
        return not self.damaged and all(q.resolved for q in self.quarantined)


class _Damaged(Exception):
    """Internal: the bytes of a store file are not what was written (message: why)."""


class _Moved(Exception):
    """Internal: a segment was found damaged while reading and moved aside; rescan and retry."""


def _utc_stamp() -> str:
    # Fixed width, so segment names sort chronologically.
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", text)[:40] or "host"


def new_writer_id() -> str:
    return f"{_safe(socket.gethostname())}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


# --------------------------------------------------------------------------- rows


def request_json(req: LLMRequest) -> str:
    return json.dumps(
        {"request": req.canonical(), "meta": req.meta},
        sort_keys=True,
        ensure_ascii=False,
        default=str,
    )


def request_from_json(blob: str) -> LLMRequest:
    """Rebuild the request a row answered (its ``key`` is recomputed, not trusted)."""
    obj = json.loads(blob)
    c = obj["request"]
    sampling = dict(c["sampling"])
    sampling["probe_tokens"] = tuple(sampling.get("probe_tokens") or ())
    return LLMRequest(
        model=ModelRef(**c["model"]),
        messages=tuple((m[0], m[1]) for m in c["messages"]),
        sampling=Sampling(**sampling),
        output_schema=c.get("output_schema"),
        sample_index=c.get("sample_index", 0),
        attempt=c.get("attempt", 0),
        mode=c.get("mode", "chat"),
        namespace=c.get("namespace"),
        meta=obj.get("meta") or {},
    )


def _dump(obj: Any) -> str | None:
    return None if obj is None else json.dumps(obj, sort_keys=True, ensure_ascii=False)


def _load(blob: str | None) -> Any:
    return None if blob is None else json.loads(blob)


def result_to_row(res: LLMResult, req: LLMRequest, *, timestamp: str | None = None) -> dict[str, Any]:
    return {
        "key": res.key,
        "request_json": request_json(req),
        "text": res.text,
        "finish_reason": res.finish_reason,
        "tokens_in": res.tokens_in,
        "tokens_out": res.tokens_out,
        "first_token_logprobs": _dump(res.first_token_logprobs),
        "probe_probs": _dump(res.probe_probs),
        "latency_s": res.latency_s,
        "attempt": res.attempt,
        "backend": res.backend,
        "engine_version": res.engine_version,
        "timestamp": res.timestamp or timestamp or utc_now_iso(),
        "cost_usd": res.cost_usd,
        "notes": res.notes,
    }


def row_to_result(row: dict[str, Any]) -> LLMResult:
    return LLMResult(
        key=row["key"],
        text=row["text"],
        finish_reason=row["finish_reason"],
        tokens_in=row["tokens_in"],
        tokens_out=row["tokens_out"],
        first_token_logprobs=_load(row["first_token_logprobs"]),
        probe_probs=_load(row["probe_probs"]),
        latency_s=row["latency_s"],
        attempt=row["attempt"] or 0,
        backend=row["backend"] or "",
        engine_version=row["engine_version"] or "",
        timestamp=row["timestamp"] or "",
        cost_usd=row["cost_usd"],
        notes=row["notes"] or "",
    )


def _conform(table: pa.Table) -> pa.Table:
    """Cast a foreign table (e.g. an import) to the store schema, or fail loudly."""
    missing = [c for c in COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(f"not a response-store table: missing columns {missing}")
    return table.select(list(COLUMNS)).cast(SCHEMA)


# --------------------------------------------------------------------------- files


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse directory fsync; the rename is still atomic
    finally:
        os.close(fd)


def _cleanup(tmp: Path) -> None:
    try:
        tmp.unlink()
    except OSError:
        pass


def _locate_footer(read_at: Callable[[int, int], bytes], size: int) -> tuple[int, bytes, bytes]:
    """(offset of the footer, the footer, the 8 trailing bytes) of a Parquet file, or _Damaged."""
    if size < 12:
        raise _Damaged(f"truncated: {size} bytes is too short for a Parquet file")
    if bytes(read_at(0, 4)) != b"PAR1":
        raise _Damaged("not a Parquet file: bad leading magic bytes")
    tail = bytes(read_at(size - 8, 8))
    if tail[4:] != b"PAR1":
        raise _Damaged("truncated or overwritten at the end: no Parquet end marker")
    length = int.from_bytes(tail[:4], "little")
    if not 0 < length <= size - 12:
        raise _Damaged(f"footer length {length} does not fit a {size}-byte file (truncated?)")
    start = size - 8 - length
    return start, bytes(read_at(start, length)), tail


def _digest(read_at: Callable[[int, int], bytes], size: int, at: int) -> str:
    """sha256 of the file with the 64 bytes at ``at`` read as the placeholder."""
    h = hashlib.sha256()
    for lo, hi in ((0, at), (at + len(_PLACEHOLDER), size)):
        pos = lo
        while pos < hi:
            n = min(_HASH_CHUNK, hi - pos)
            h.update(read_at(pos, n))
            pos += n
        if lo == 0:
            h.update(_PLACEHOLDER)
    return h.hexdigest()


def _check(
    read_at: Callable[[int, int], bytes], size: int, *, foreign_ok: bool = False
) -> tuple[bool, pq.FileMetaData]:
    """Check a store file's embedded digest: (True, footer) if it holds, (False, footer) if the
    file has none (written before checksums; with ``foreign_ok`` also a Parquet file written by
    another tool); raise _Damaged saying why otherwise."""
    start, footer, tail = _locate_footer(read_at, size)
    try:
        # The footer alone, framed as a file, parses without reading the rest.
        meta = pq.read_metadata(pa.BufferReader(b"PAR1" + footer + tail))
    except Exception as exc:  # noqa: BLE001 - any parse failure is damage
        raise _Damaged(f"unreadable footer: {exc}") from None
    kv = meta.metadata or {}
    recorded = kv.get(CHECKSUM_KEY.encode())
    if recorded is None:
        if CHECKSUM_KIND_KEY.encode() in kv:
            raise _Damaged(f"footer damaged: {CHECKSUM_KEY} missing although {CHECKSUM_KIND_KEY} is present")
        if FORMAT_KEY.encode() in kv or foreign_ok:
            return False, meta
        raise _Damaged("no response-store metadata in the footer: not a store file, or its footer is damaged")
    if not _HEX64.fullmatch(recorded) or footer.count(recorded) != 1:
        raise _Damaged(f"footer damaged: {CHECKSUM_KEY} is not a single 64-digit hex digest")
    actual = _digest(read_at, size, start + footer.index(recorded))
    if actual != recorded.decode():
        raise _Damaged(
            f"sha256 mismatch: the file changed after it was written "
            f"(recorded {recorded.decode()[:16]}..., content {actual[:16]}...)"
        )
    return True, meta


def _bytes_reader(data: bytes) -> Callable[[int, int], memoryview]:
    view = memoryview(data)
    return lambda pos, n: view[pos : pos + n]


def _file_reader(fh: Any) -> Callable[[int, int], bytes]:
    def read_at(pos: int, n: int) -> bytes:
        fh.seek(pos)
        chunk = fh.read(n)
        if len(chunk) != n:
            raise _Damaged("the file shrank while it was being read")
        return chunk

    return read_at


def _check_file(path: Path, *, foreign_ok: bool = False) -> bool:
    """Check a (possibly large) store file in place, streaming; see :func:`_check`."""
    with open(path, "rb") as fh:
        return _check(_file_reader(fh), os.fstat(fh.fileno()).st_size, foreign_ok=foreign_ok)[0]


def _parse_segment(data: bytes) -> tuple[bool, list[int], list[str]]:
    """Check a segment's bytes; return (checked, row-group starts, keys) or raise _Damaged."""
    checked, meta = _check(_bytes_reader(data), len(data))
    try:
        # The footer parsed by _check has the file's own offsets: no second parse.
        pf = pq.ParquetFile(pa.BufferReader(data), metadata=meta, page_checksum_verification=True)
        names = set(pf.schema_arrow.names)
        absent = [c for c in COLUMNS if c not in names]
        if absent:
            raise _Damaged(f"not a response-store segment: missing columns {absent}")
        starts = [0]
        for i in range(pf.metadata.num_row_groups):
            starts.append(starts[-1] + pf.metadata.row_group(i).num_rows)
        keys = pf.read(columns=["key"]).column("key").to_pylist()
    except _Damaged:
        raise
    except Exception as exc:  # noqa: BLE001 - any parse failure is damage
        raise _Damaged(f"unreadable: {exc}") from None
    return checked, starts, keys


def _read_table(data: bytes) -> tuple[bool, pa.Table]:
    """A whole segment's table from its bytes, checked first; raise _Damaged."""
    checked, meta = _check(_bytes_reader(data), len(data))
    try:
        pf = pq.ParquetFile(pa.BufferReader(data), metadata=meta, page_checksum_verification=True)
        return checked, _conform(pf.read())
    except Exception as exc:  # noqa: BLE001 - any parse failure is damage
        raise _Damaged(f"unreadable: {exc}") from None


def _salvage_keys(data: bytes | None) -> list[str] | None:
    """The keys a damaged segment held, if they can be trusted; else None.

    A key counts only if it still matches the request stored beside it, so a
    damaged key never becomes a "lost" key that no rerun could ever answer.
    """
    if data is None:
        return None
    try:
        pf = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
        table = pf.read(columns=["key", "request_json"])
        keys = table.column("key").to_pylist()
        blobs = table.column("request_json").to_pylist()
        if all(k is not None and b is not None and request_from_json(b).key == k for k, b in zip(keys, blobs)):
            return keys
    except Exception:  # noqa: BLE001 - a damaged file may fail in any way
        pass
    return None


def _write_sealed(tables: Iterable[pa.Table], final: Path) -> int:
    """Write ``tables`` as one Parquet file carrying its own sha256; atomic (temp, fsync, rename).

    Returns the number of rows written. Nothing is left at ``final`` or the temp
    name if writing fails or ``tables`` raises.
    """
    tmp = final.with_name(f"{_TMP_PREFIX}{final.name}")
    rows = 0
    try:
        with open(tmp, "wb") as fh:
            # No column statistics: the footer then holds no stored text, so the
            # digest field is the only place its 64 characters can occur.
            writer = pq.ParquetWriter(
                fh, SCHEMA.remove_metadata(), compression="zstd", write_statistics=False, write_page_checksum=True
            )
            try:
                for table in tables:
                    writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
                    rows += table.num_rows
                # In this order (see CHECKSUM_KIND above); pyarrow appends its own schema entry after them.
                writer.add_key_value_metadata(
                    {CHECKSUM_KIND_KEY: CHECKSUM_KIND, CHECKSUM_KEY: _PLACEHOLDER.decode(), FORMAT_KEY: STORE_FORMAT}
                )
            finally:
                writer.close()
        with open(tmp, "r+b") as fh:
            read_at = _file_reader(fh)
            size = os.fstat(fh.fileno()).st_size
            start, footer, _ = _locate_footer(read_at, size)
            if footer.count(_PLACEHOLDER) != 1:
                raise RuntimeError(
                    f"{tmp}: cannot place the checksum (placeholder found {footer.count(_PLACEHOLDER)} times)"
                )
            at = start + footer.index(_PLACEHOLDER)
            digest = _digest(read_at, size, at)
            fh.seek(at)
            fh.write(digest.encode())
            fh.flush()
            # Durable before visible: a reader that sees the name must see all bytes.
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        _cleanup(tmp)
        raise
    _fsync_dir(final.parent)
    return rows


def _atomic_write_text(text: str, final: Path) -> None:
    tmp = final.with_name(f"{_TMP_PREFIX}{final.name}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        _cleanup(tmp)
        raise


def _sig(st: os.stat_result) -> tuple[int, int, int, int]:
    # ctime too: unlike mtime it cannot be set back, so any write to the file shows.
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


@dataclass
class _Segment:
    name: str
    row_group_starts: list[int]  # row offset of each row group, plus the total at the end
    sig: tuple[int, int, int, int]  # the file as it was when checked (see _sig)
    checked: bool  # False: written before checksums, read unchecked


class ResponseStore:
    """Read and write the store at ``root``. One instance per process; not thread-safe."""

    def __init__(self, root: str | os.PathLike[str], *, create: bool = True) -> None:
        self.root = Path(root)
        self.seg_dir = self.root / SEGMENT_DIR
        self.quarantine_dir = self.root / QUARANTINE_DIR
        if create:
            self.seg_dir.mkdir(parents=True, exist_ok=True)
        self._index: dict[str, tuple[str, int]] = {}
        self._segments: dict[str, _Segment] = {}
        # Damaged or unreadable segments that could not be moved aside (e.g. a
        # read-only store): skipped until the file changes.
        self._bad: dict[str, tuple[tuple[int, int, int, int] | None, Damage]] = {}
        self._unchecked_warned = False
        self._moved: set[str] = set()  # segments this instance moved aside (already warned about)
        self._loaded = False
        self._writer_id = ""
        self._writer_pid = -1
        self._counter = 0
        #: What the last ``export(skip_damaged=True)`` left out.
        self.skipped: list[Damage] = []

    # ----------------------------------------------------------------- index

    def _list_segment_names(self) -> set[str]:
        try:
            return {n for n in os.listdir(self.seg_dir) if _SEG_RE.match(n)}
        except FileNotFoundError:
            return set()

    def _scan(self, name: str) -> list[str] | None:
        path = self.seg_dir / name
        sig = None
        try:
            with open(path, "rb") as fh:
                sig = _sig(os.fstat(fh.fileno()))
                data = fh.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            # The bytes may be fine (permissions, a flaky mount): skip, name it, move nothing.
            self._skip_in_place(name, sig, f"cannot be read: {exc}")
            return None
        try:
            checked, starts, keys = _parse_segment(data)
        except _Damaged as exc:
            self._quarantine(name, str(exc), sig, data)
            return None
        self._bad.pop(name, None)
        self._segments[name] = _Segment(name, starts, sig, checked)
        if not checked:
            self._warn_unchecked(name)
        return keys

    def _warn_unchecked(self, name: str) -> None:
        if self._unchecked_warned:
            return
        self._unchecked_warned = True
        warnings.warn(
            f"response store: {self.seg_dir / name} (and maybe other segments) carries no checksum: "
            f"it was written before segments had one and is read unchecked. "
            f"`python -m context_effects.llm.store verify {self.root}` lists them; "
            f"`python -m context_effects.llm.store compact {self.root}` rewrites them with checksums",
            stacklevel=4,
        )

    def _skip_in_place(self, name: str, sig: tuple[int, int, int, int] | None, reason: str) -> Damage:
        damage = Damage(name, str(self.seg_dir / name), reason)
        prev = self._bad.get(name)
        if prev is None or prev[0] != sig or sig is None:
            warnings.warn(f"response store: skipping segment {damage}", stacklevel=4)
        self._bad[name] = (sig, damage)
        return damage

    def _quarantine(self, name: str, reason: str, sig: tuple[int, int, int, int] | None, data: bytes | None) -> Damage:
        """Move a damaged segment to ``quarantine/`` with a note; safe when several processes race.

        The rename is atomic: exactly one process moves the file and writes the
        note; the others find it gone and just drop it. Where the store cannot
        be changed (read-only), the segment stays and is skipped in this process.
        """
        self._drop(name)
        src = self.seg_dir / name
        dest = self.quarantine_dir / name
        try:
            self.quarantine_dir.mkdir(parents=True, exist_ok=True)
            if dest.exists():  # the same name quarantined before: keep both
                dest = self.quarantine_dir / f"{name}.{uuid.uuid4().hex[:8]}"
            os.rename(src, dest)
            self._moved.add(name)
        except FileNotFoundError:
            if src.exists():
                return self._skip_in_place(name, sig, f"{reason}; could not be moved aside")
            self._moved.add(name)
            damage = Damage(
                name, str(self.quarantine_dir), f"{reason}; already moved aside (or compacted away) by another process"
            )
            warnings.warn(f"response store: damaged segment {src}: {damage.reason}", stacklevel=4)
            return damage
        except OSError as exc:
            return self._skip_in_place(name, sig, f"{reason}; could not be moved aside ({exc})")
        self._bad.pop(name, None)
        keys = _salvage_keys(data)
        note = {
            "segment": name,
            "reason": reason,
            "quarantined_at": utc_now_iso(),
            "by": f"{socket.gethostname()} pid {os.getpid()}",
            "size": sig[0] if sig else None,
            "keys": keys,
        }
        try:
            _atomic_write_text(json.dumps(note, indent=1) + "\n", dest.with_name(dest.name + ".json"))
        except OSError as exc:  # the move is what matters; a missing note means "rows unknown"
            warnings.warn(f"response store: could not write the note for {dest}: {exc}", stacklevel=4)
        _fsync_dir(self.quarantine_dir)
        _fsync_dir(self.seg_dir)
        rows = f"its {len(keys)} rows are" if keys is not None else "its rows are"
        warnings.warn(
            f"response store: damaged segment {src}: {reason}. Moved to {dest}; {rows} store misses now "
            f"(a normal run answers them again; replay mode reports them)",
            stacklevel=4,
        )
        return Damage(name, str(dest), reason)

    def _drop(self, name: str) -> None:
        """Forget a segment; its keys are dropped (a full refresh restores any duplicates held elsewhere)."""
        if self._segments.pop(name, None) is not None:
            for key in [k for k, (n, _) in self._index.items() if n == name]:
                del self._index[key]

    def _add_keys(self, name: str, keys: Sequence[str | None]) -> None:
        index = self._index
        for row, key in enumerate(keys):
            if key is None:
                continue
            cur = index.get(key)
            # The lowest segment name wins, so readers that saw segments in a
            # different order still agree on which duplicate is served.
            if cur is None or name < cur[0]:
                index[key] = (name, row)

    def refresh(self, *, full: bool = False) -> int:
        """Pick up segments written since the last scan; return how many were added."""
        names = self._list_segment_names()
        if full or any(n not in names for n in self._segments):
            # Segments vanished (a compaction, a quarantine): rows moved, so the index is stale.
            self._index.clear()
            self._segments.clear()
        for name in [n for n in self._bad if n not in names]:
            del self._bad[name]
        new = []
        for name in sorted(names):
            if name in self._segments:
                continue
            if name in self._bad:
                try:
                    sig = _sig((self.seg_dir / name).stat())
                except OSError:
                    continue
                if sig == self._bad[name][0]:
                    continue
            new.append(name)
        added = 0
        for name in new:
            keys = self._scan(name)
            if keys is not None:
                self._add_keys(name, keys)
                added += 1
        if not self._loaded:
            self._warn_quarantined()
        self._loaded = True
        return added

    def _warn_quarantined(self) -> None:
        """Once per instance: name segments moved aside earlier (by any process) whose rows are still missing."""
        lost = [q for q in self._quarantined(self._index.keys()) if not q.resolved and q.segment not in self._moved]
        if lost:
            listed = "; ".join(f"{q.path}: {q.reason}; {q.status()}" for q in lost[:5])
            more = f"; and {len(lost) - 5} more" if len(lost) > 5 else ""
            warnings.warn(
                f"response store: {len(lost)} damaged segment(s) were moved aside and not all their rows have been "
                f"answered again (they are misses; `python -m context_effects.llm.store verify {self.root}` "
                f"lists them): {listed}{more}",
                stacklevel=3,
            )

    def _ensure(self) -> None:
        if not self._loaded:
            self.refresh()

    def __contains__(self, key: object) -> bool:
        self._ensure()
        return key in self._index

    def __len__(self) -> int:
        self._ensure()
        return len(self._index)

    def keys(self) -> list[str]:
        self._ensure()
        return list(self._index)

    @property
    def segment_names(self) -> list[str]:
        self._ensure()
        return sorted(self._segments)

    # ----------------------------------------------------------------- reads

    def _read_rows(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        by_seg: dict[str, list[tuple[str, int]]] = defaultdict(list)
        for key in keys:
            loc = self._index.get(key)
            if loc is not None:
                by_seg[loc[0]].append((key, loc[1]))
        out: dict[str, dict[str, Any]] = {}
        for name, wanted in by_seg.items():
            seg = self._segments[name]
            starts = seg.row_group_starts
            groups = sorted({_row_group_of(starts, row) for _, row in wanted})
            # Row offsets inside the concatenation of just the groups we read.
            base, offset = {}, 0
            for g in groups:
                base[g] = offset
                offset += starts[g + 1] - starts[g]
            table = self._read_groups(seg, groups)
            positions = []
            for _, row in wanted:
                g = _row_group_of(starts, row)
                positions.append(base[g] + row - starts[g])
            for (key, _), rec in zip(wanted, table.take(positions).to_pylist()):
                if rec["key"] != key:  # an index out of step with the file must not serve a wrong answer
                    raise RuntimeError(f"response store index mismatch in {name}")
                out[key] = rec
        return out

    def _read_groups(self, seg: _Segment, groups: list[int]) -> pa.Table:
        """Row groups of a segment, never from bytes other than those checked at first read."""
        path = self.seg_dir / seg.name
        with open(path, "rb") as fh:  # FileNotFoundError: moved or compacted away; the caller rescans
            sig = _sig(os.fstat(fh.fileno()))
            source: Any = fh
            if sig != seg.sig:
                # Segments are immutable: a changed file is checked again before it serves anything.
                data = fh.read()
                try:
                    _parse_segment(data)
                except _Damaged as exc:
                    self._quarantine(seg.name, str(exc), sig, data)
                    raise _Moved(seg.name) from None
                seg.sig = sig
                source = pa.BufferReader(data)
            try:
                # Page CRCs catch damage to the pages read even where the file's times did not change.
                return pq.ParquetFile(source, page_checksum_verification=True).read_row_groups(
                    groups, columns=list(COLUMNS)
                )
            except Exception as exc:  # noqa: BLE001 - find out whether the file is damaged
                fh.seek(0)
                data = fh.read()
                try:
                    _parse_segment(data)
                except _Damaged as why:
                    self._quarantine(seg.name, str(why), sig, data)
                    raise _Moved(seg.name) from None
                raise RuntimeError(f"response store: cannot read segment {path}: {exc}") from exc

    def get_rows(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Raw stored rows (including ``request_json``) for the keys present.

        Rows of a segment found damaged are not returned (misses): the segment
        is moved aside and named in a warning.
        """
        self._ensure()
        keys = list(keys)
        rescanned = False
        while True:
            try:
                return self._read_rows(keys)
            except _Moved:
                # Another copy of a lost key may sit in a later segment: rebuild the index.
                self.refresh(full=True)
            except (FileNotFoundError, RuntimeError):
                # A concurrent compaction replaced the segments under us: rescan once.
                if rescanned:
                    raise
                rescanned = True
                self.refresh(full=True)

    def get_many(self, keys: Iterable[str]) -> dict[str, LLMResult]:
        return {k: row_to_result(r) for k, r in self.get_rows(keys).items()}

    def get(self, key: str) -> LLMResult | None:
        return self.get_many([key]).get(key)

    def get_row(self, key: str) -> dict[str, Any] | None:
        return self.get_rows([key]).get(key)

    # ----------------------------------------------------------------- writes

    def _segment_path(self, stamp: str | None = None) -> Path:
        if self._writer_pid != os.getpid():
            # A forked child must not reuse its parent's writer id.
            self._writer_id, self._writer_pid, self._counter = new_writer_id(), os.getpid(), 0
        self._counter += 1
        return self.seg_dir / f"seg-{stamp or _utc_stamp()}-{self._writer_id}-{self._counter:06d}.parquet"

    def _write_segment(self, table: pa.Table, stamp: str | None = None) -> str:
        self.seg_dir.mkdir(parents=True, exist_ok=True)
        path = self._segment_path(stamp)
        _write_sealed([table], path)
        return path.name

    def _register(self, name: str, table: pa.Table) -> None:
        # Row-group boundaries come from the file itself: the writer may split
        # differently from what row_group_size alone suggests.
        path = self.seg_dir / name
        sig = _sig(path.stat())
        meta = pq.read_metadata(path)
        starts = [0]
        for i in range(meta.num_row_groups):
            starts.append(starts[-1] + meta.row_group(i).num_rows)
        self._segments[name] = _Segment(name, starts, sig, True)
        self._add_keys(name, table.column("key").to_pylist())

    def put_batch(self, results: Iterable[LLMResult], requests: Iterable[LLMRequest]) -> int:
        """Store the successful ``results`` as one new segment; return rows written.

        ``requests`` supplies the canonical request for each result (matched by
        key). Failures and keys already present are skipped.
        """
        self._ensure()
        by_key = {r.key: r for r in requests}
        stamp = utc_now_iso()
        rows, seen = [], set()
        for res in results:
            if not res.ok or res.key in seen or res.key in self._index:
                continue
            req = by_key.get(res.key)
            if req is None:
                raise ValueError(f"result {res.key} has no matching request")
            seen.add(res.key)
            rows.append(result_to_row(res, req, timestamp=stamp))
        if not rows:
            return 0
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        name = self._write_segment(table)
        self._register(name, table)
        return len(rows)

    # ----------------------------------------------------------------- damage

    def quarantined(self) -> list[Quarantined]:
        """Segments moved to ``quarantine/``, with whether their rows have been answered again."""
        self._ensure()
        return self._quarantined(self._index.keys())

    def _quarantined(self, present: Any) -> list[Quarantined]:
        try:
            names = sorted(
                n for n in os.listdir(self.quarantine_dir) if not n.endswith(".json") and not n.startswith(_TMP_PREFIX)
            )
        except FileNotFoundError:
            return []
        out = []
        for n in names:
            path = self.quarantine_dir / n
            try:
                note = json.loads(path.with_name(n + ".json").read_text(encoding="utf-8"))
            except (OSError, ValueError):
                note = {}
            keys = note.get("keys")
            keys = tuple(keys) if isinstance(keys, list) else None
            missing = None if keys is None else sum(k not in present for k in keys)
            out.append(Quarantined(note.get("segment") or n, str(path), note.get("reason") or "no note", keys, missing))
        return out

    def damage(self) -> list[Damage]:
        """Why this store cannot serve every row it was given: damaged segments that could
        not be moved aside, and quarantined segments whose rows are not all answered again."""
        self._ensure()
        out = [d for _, d in (self._bad[n] for n in sorted(self._bad))]
        for q in self._quarantined(self._index.keys()):
            if not q.resolved:
                out.append(Damage(q.segment, q.path, f"{q.reason}; {q.status()}"))
        return out

    def lost_answer_hint(self, key: str) -> str:
        """Where a miss's answer went if a damaged segment held it (for the replay miss message)."""
        entries = self._quarantined(())
        for q in entries:
            if q.keys is not None and key in q.keys:
                return f"its stored answer was in damaged segment {q.path} ({q.reason})"
        unknown = [q.path for q in entries if q.keys is None]
        if unknown:
            return f"{len(unknown)} damaged segment(s) of unknown content were moved aside, e.g. {unknown[0]}"
        return ""

    def verify(self, *, quarantine: bool = False) -> VerifyReport:
        """Check every segment's bytes now (independent of what this instance has read).

        With ``quarantine`` damaged segments are moved aside; without it nothing
        is changed.
        """
        report = VerifyReport()
        present: set[str] = set()
        for name in sorted(self._list_segment_names()):
            path = self.seg_dir / name
            try:
                with open(path, "rb") as fh:
                    sig = _sig(os.fstat(fh.fileno()))
                    data = fh.read()
            except FileNotFoundError:
                continue
            except OSError as exc:
                report.damaged.append(Damage(name, str(path), f"cannot be read: {exc}"))
                continue
            try:
                checked, _, keys = _parse_segment(data)
            except _Damaged as exc:
                if quarantine:
                    report.damaged.append(self._quarantine(name, str(exc), sig, data))
                else:
                    report.damaged.append(Damage(name, str(path), str(exc)))
                continue
            (report.ok if checked else report.unchecked).append(name)
            present.update(k for k in keys if k is not None)
        report.quarantined = self._quarantined(present)
        return report

    # ----------------------------------------------------------------- whole-store ops

    def iter_tables(self, *, dedup: bool = True, skipped: list[Damage] | None = None) -> Iterator[pa.Table]:
        """Every stored row, one table per segment, in winning order (first copy of a key only).

        Each segment's bytes are checked as they are read. A damaged one is
        moved aside and raises :class:`StoreDamaged`, or, given a ``skipped``
        list, is recorded there and left out.
        """
        self._ensure()
        seen: set[str] = set()
        for name in sorted(self._segments):
            path = self.seg_dir / name
            try:
                with open(path, "rb") as fh:
                    sig = _sig(os.fstat(fh.fileno()))
                    data = fh.read()
            except FileNotFoundError:
                raise RuntimeError(f"segment {name} vanished while reading (concurrent compaction?); retry") from None
            try:
                _, table = _read_table(data)
            except _Damaged as exc:
                damage = self._quarantine(name, str(exc), sig, data)
                if skipped is None:
                    raise StoreDamaged("response store: damaged segment", [damage]) from None
                skipped.append(damage)
                continue
            if dedup:
                keys = table.column("key").to_pylist()
                mask = []
                for k in keys:
                    mask.append(k not in seen)
                    seen.add(k)
                if not all(mask):
                    table = table.filter(pa.array(mask, pa.bool_()))
            if table.num_rows:
                yield table

    def compact(self, *, stale_tmp_s: float = STALE_TMP_S) -> dict[str, int]:
        """Merge all segments into as few as possible, dropping duplicate keys.

        Safe while jobs run: new segments are written first, then only the
        segments that were merged are deleted, so a concurrent writer's
        segment is never lost (at worst a racing compaction leaves duplicates,
        which readers already tolerate). Segments without a checksum are
        rewritten with one. Damaged segments are moved aside by the scan and
        never merged; one found damaged while merging stops the compaction
        (StoreDamaged) before anything is deleted.
        """
        self.refresh(full=True)
        old = sorted(self._segments)
        unchecked = sum(not self._segments[n].checked for n in old)
        removed_tmp = self._remove_stale_tmp(stale_tmp_s)
        dup_rows = sum(self._segments[n].row_group_starts[-1] for n in old) - len(self._index)
        if len(old) <= 1 and dup_rows == 0 and not unchecked:
            return {
                "segments_before": len(old),
                "segments_after": len(old),
                "rows": len(self._index),
                "duplicates_dropped": 0,
                "stale_tmp_removed": removed_tmp,
                "unchecked_rewritten": 0,
            }
        # Keep the oldest stamp so merged rows still win over segments written later.
        first = old[0].split("-")
        stamp = first[1] if len(first) > 2 and _STAMP_RE.match(first[1]) else None
        written = []
        rows = 0
        for chunk in _rechunk(self.iter_tables(), MAX_SEGMENT_ROWS):
            written.append(self._write_segment(chunk, stamp))
            rows += chunk.num_rows
        for name in old:
            try:
                (self.seg_dir / name).unlink()
            except FileNotFoundError:
                pass
        _fsync_dir(self.seg_dir)
        self.refresh(full=True)
        return {
            "segments_before": len(old),
            "segments_after": len(written),
            "rows": rows,
            "duplicates_dropped": dup_rows,
            "stale_tmp_removed": removed_tmp,
            "unchecked_rewritten": unchecked,
        }

    def _remove_stale_tmp(self, stale_tmp_s: float) -> int:
        now, n = time.time(), 0
        for p in self.seg_dir.glob(f"{_TMP_PREFIX}*"):
            try:
                if now - p.stat().st_mtime > stale_tmp_s:
                    p.unlink()
                    n += 1
            except OSError:
                pass
        return n

    def export(self, path: str | os.PathLike[str], *, skip_damaged: bool = False) -> int:
        """Write every stored row to one Parquet file (carrying its own sha256); return the row count.

        Every segment is checked first. If any is damaged - found now, or
        quarantined earlier with rows not answered again since - nothing is
        written and :class:`StoreDamaged` names them, unless ``skip_damaged``:
        then the rest is exported and ``self.skipped`` lists what was left out.
        """
        path = Path(path)
        self.refresh(full=True)
        self.skipped = []
        damage = self.damage()
        if damage and not skip_damaged:
            raise StoreDamaged(
                f"response store {self.root} is damaged; nothing exported (answer the lost requests again by "
                f"rerunning the jobs that asked them - every answer still stored is a free hit - "
                f"or pass --skip-damaged to export the rest)",
                damage,
            )
        skipped = list(damage)
        path.parent.mkdir(parents=True, exist_ok=True)
        rows = _write_sealed(self.iter_tables(skipped=skipped if skip_damaged else None), path)
        self.skipped = skipped
        return rows

    def import_(self, path: str | os.PathLike[str], *, verify_keys: bool = True) -> int:
        """Add the rows of an exported file (keys already present are skipped); return rows added.

        The file's checksum is checked first (a damaged file is refused whole,
        :class:`StoreDamaged`; one exported before checksums is accepted with a
        warning). With ``verify_keys`` every row's key is recomputed from its
        stored request, so an edited or mislabelled file cannot plant answers
        under the wrong request.
        """
        self._ensure()
        path = Path(path)
        try:
            checked = _check_file(path, foreign_ok=True)
        except _Damaged as exc:
            raise StoreDamaged(f"cannot import {path}", [Damage(path.name, str(path), str(exc))]) from None
        if not checked:
            warnings.warn(
                f"{path} carries no checksum (exported before checksums, or rewritten): damage to its answers "
                f"cannot be detected" + ("; keys are still checked against their requests" if verify_keys else ""),
                stacklevel=2,
            )
        staged: set[str] = set()

        def fresh_tables() -> Iterator[pa.Table]:
            with open(path, "rb") as fh:
                for batch in pq.ParquetFile(fh, page_checksum_verification=True).iter_batches(
                    batch_size=ROW_GROUP_ROWS
                ):
                    table = _conform(pa.Table.from_batches([batch]))
                    keys = table.column("key").to_pylist()
                    if verify_keys:
                        for key, blob in zip(keys, table.column("request_json").to_pylist()):
                            actual = request_from_json(blob).key
                            if actual != key:
                                raise ValueError(f"{path}: stored key {key} does not match its request ({actual})")
                    mask = []
                    for k in keys:
                        mask.append(k not in self._index and k not in staged)
                        staged.add(k)
                    table = table.filter(pa.array(mask, pa.bool_()))
                    if table.num_rows:
                        yield table

        added = 0
        for chunk in _rechunk(fresh_tables(), MAX_SEGMENT_ROWS):
            self._register(self._write_segment(chunk), chunk)
            added += chunk.num_rows
        return added

    def stats(self) -> dict[str, Any]:
        self._ensure()
        tmp = list(self.seg_dir.glob(f"{_TMP_PREFIX}*"))
        by_backend: Counter[str] = Counter()
        by_model: Counter[str] = Counter()
        tokens_in = tokens_out = 0
        cost = 0.0
        skipped: list[Damage] = []
        for table in self.iter_tables(skipped=skipped):
            by_backend.update(table.column("backend").to_pylist())
            for blob in table.column("request_json").to_pylist():
                m = json.loads(blob)["request"]["model"]
                by_model[f"{m['provider']}:{m['model_id']}"] += 1
            tokens_in += sum(v or 0 for v in table.column("tokens_in").to_pylist())
            tokens_out += sum(v or 0 for v in table.column("tokens_out").to_pylist())
            cost += sum(v or 0.0 for v in table.column("cost_usd").to_pylist())
        if skipped:
            self.refresh(full=True)
        return {
            "root": str(self.root),
            "rows": len(self._index),
            "segments": len(self._segments),
            "unchecked_segments": sum(not s.checked for s in self._segments.values()),
            "damaged_segments": sorted(str(d) for d in self.damage()),
            "quarantined_segments": len(self._quarantined(())),
            "temp_files": len(tmp),
            "bytes": sum((self.seg_dir / n).stat().st_size for n in self._segments),
            "by_backend": dict(by_backend),
            "by_model": dict(by_model),
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "cost_usd_recorded": round(cost, 6),
        }


def _row_group_of(starts: list[int], row: int) -> int:
    # Few row groups per segment: a linear scan beats bisect's overhead in practice.
    for g in range(len(starts) - 1):
        if row < starts[g + 1]:
            return g
    raise IndexError(row)


def _rechunk(tables: Iterator[pa.Table], max_rows: int) -> Iterator[pa.Table]:
    buf: list[pa.Table] = []
    n = 0
    for t in tables:
        buf.append(t)
        n += t.num_rows
        if n >= max_rows:
            merged = pa.concat_tables(buf)
            while merged.num_rows >= max_rows:
                yield merged.slice(0, max_rows)
                merged = merged.slice(max_rows)
            buf, n = ([merged], merged.num_rows) if merged.num_rows else ([], 0)
    if n:
        yield pa.concat_tables(buf)


# --------------------------------------------------------------------------- CLI


def _print_verify(report: VerifyReport, root: str) -> None:
    for d in report.damaged:
        print(
            f"DAMAGED      {d.segment}: {d.reason}"
            + (f" -> moved to {d.path}" if QUARANTINE_DIR in Path(d.path).parts else "")
        )
    for name in report.unchecked:
        print(f"UNCHECKED    {name}: no checksum (written before checksums); `compact` rewrites it with one")
    for q in report.quarantined:
        print(f"QUARANTINED  {q.path}: {q.reason}; {q.status()}")
    lost = [q for q in report.quarantined if not q.resolved]
    print(
        f"{root}: {len(report.ok)} segments ok, {len(report.unchecked)} unchecked, {len(report.damaged)} damaged; "
        f"{len(report.quarantined)} quarantined ({len(lost)} with rows not answered again)"
        + ("" if report.clean else " - NOT CLEAN")
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m context_effects.llm.store", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("export", help="write the whole store to one Parquet file")
    p.add_argument("root")
    p.add_argument("out")
    p.add_argument(
        "--skip-damaged",
        action="store_true",
        help="export the rows of the undamaged segments and list what was left out",
    )
    p = sub.add_parser("import", help="add rows from an exported Parquet file")
    p.add_argument("root")
    p.add_argument("src")
    p.add_argument("--no-verify", action="store_true", help="skip recomputing each row's key")
    p = sub.add_parser(
        "verify", help="check every segment's checksum; exit 1 if any is damaged or quarantined rows are missing"
    )
    p.add_argument("root")
    p.add_argument("--quarantine", action="store_true", help="move damaged segments to ROOT/quarantine/")
    p = sub.add_parser("stats", help="print a JSON summary")
    p.add_argument("root")
    p = sub.add_parser("compact", help="merge segments, drop duplicates and stale temp files, add missing checksums")
    p.add_argument("root")
    args = ap.parse_args(argv)

    if args.cmd != "import" and not Path(args.root, SEGMENT_DIR).is_dir():
        print(f"no response store at {args.root}", file=sys.stderr)
        return 2
    store = ResponseStore(args.root)
    try:
        if args.cmd == "export":
            n = store.export(args.out, skip_damaged=args.skip_damaged)
            print(f"exported {n} rows to {args.out}")
            if store.skipped:
                print(
                    f"skipped {len(store.skipped)} damaged segment(s) (--skip-damaged); their rows are not in {args.out}:"
                )
                for d in store.skipped:
                    print(f"  {d}")
        elif args.cmd == "import":
            n = store.import_(args.src, verify_keys=not args.no_verify)
            print(f"imported {n} new rows into {args.root} ({len(store)} total)")
        elif args.cmd == "verify":
            report = store.verify(quarantine=args.quarantine)
            _print_verify(report, args.root)
            return 0 if report.clean else 1
        elif args.cmd == "stats":
            print(json.dumps(store.stats(), indent=2, sort_keys=True))
        elif args.cmd == "compact":
            print(json.dumps(store.compact(), indent=2, sort_keys=True))
    except StoreDamaged as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
