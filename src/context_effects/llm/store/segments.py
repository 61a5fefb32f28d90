"""Segment files of the response store and their integrity.

A segment is one immutable Parquet file of store rows, written whole (temp name,
fsync, rename) and sealed with the sha256 of its own bytes in the footer (see the
package docstring, ``context_effects.llm.store``, "Integrity"). This module writes and
checks such files, salvages the trustworthy keys of a damaged one, and names the
damage (``Damage``, ``Quarantined``, ``VerifyReport``, ``StoreDamaged``); exports are
sealed the same way. Which segments a store holds, and moving damaged ones aside, is
``context_effects.llm.store.responses``.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from context_effects.llm.store.rows import COLUMNS, SCHEMA, STORE_FORMAT, conform, request_from_json

SEGMENT_DIR = "segments"
QUARANTINE_DIR = "quarantine"
# Resolved quarantined segments of unknown content, set aside by `store clear`.
CLEARED_DIR = "cleared"
# A store-level marker: every segment of this store carries a checksum. Written when a
# store is created (or first found with checksummed segments only, or compacted); from
# then on a segment without a checksum is damage (its checksum was stripped, e.g. by a
# tool that rewrote the file), not a segment written before checksums existed. It is one
# deletable file, so it is not the only evidence: the files themselves say which writer
# wrote them (LEGACY_FORMAT), and a segment's name says when (see COMPACTED_SUFFIX).
SEALED_MARKER = "sealed.json"
SEGMENT_NAME_RE = re.compile(r"^seg-.+\.parquet$")
# Segment names begin with the time they were written, so an unchecked segment that sorts
# after a checksummed one was written after the store had checksums: damage. A compaction's
# output is the exception: it takes the time of the oldest segment it merges (so its rows
# keep winning over later duplicates), so its name says so, and it dates nothing.
COMPACTED_SUFFIX = "-compacted.parquet"
STAMP_RE = re.compile(r"^\d{8}T\d{12}Z$")
TMP_PREFIX = ".tmp-"
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
# What the writers before checksums put under FORMAT_KEY, in the footer and in the Arrow
# schema pyarrow embeds there (they wrote rows.SCHEMA with its metadata; later writers leave
# the schema bare). A file without checksum passes as one of theirs only if it says so in
# both places: rows.STORE_FORMAT has said "2" since, and a rewrite by another tool keeps at
# most the footer entry.
LEGACY_FORMAT = "1"
# The likely causes of a segment without checksum that cannot be from before checksums.
STRIPPED = "the checksum was stripped, or the file was rewritten by a tool other than the store"
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
            root = Path(self.path).parent.parent
            return (
                "rows unknown (its keys could not be read back intact): a rerun answers every miss again, but the "
                "store cannot tell whether these rows were among them; once the workflow has been rerun, "
                f"`python -m context_effects.llm.store clear {root} {self.segment}` sets it aside"
            )
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


class Damaged(Exception):
    """The bytes of a store file are not what was written (message: why); the store's own
    modules catch it and report a ``Damage`` or raise ``StoreDamaged``."""


def utc_stamp() -> str:
    # Fixed width, so segment names sort chronologically.
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "_", text)[:40] or "host"


def new_writer_id() -> str:
    return f"{_safe(socket.gethostname())}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


# --------------------------------------------------------------------------- files


def fsync_dir(path: Path) -> None:
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
    """(offset of the footer, the footer, the 8 trailing bytes) of a Parquet file, or Damaged."""
    if size < 12:
        raise Damaged(f"truncated: {size} bytes is too short for a Parquet file")
    if bytes(read_at(0, 4)) != b"PAR1":
        raise Damaged("not a Parquet file: bad leading magic bytes")
    tail = bytes(read_at(size - 8, 8))
    if tail[4:] != b"PAR1":
        raise Damaged("truncated or overwritten at the end: no Parquet end marker")
    length = int.from_bytes(tail[:4], "little")
    if not 0 < length <= size - 12:
        raise Damaged(f"footer length {length} does not fit a {size}-byte file (truncated?)")
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
    file has none and was written before checksums (with ``foreign_ok`` also a Parquet file
    written by another tool, without the store's metadata); raise Damaged saying why otherwise."""
    start, footer, tail = _locate_footer(read_at, size)
    try:
        # The footer alone, framed as a file, parses without reading the rest.
        meta = pq.read_metadata(pa.BufferReader(b"PAR1" + footer + tail))
    except Exception as exc:  # noqa: BLE001 - any parse failure is damage
        raise Damaged(f"unreadable footer: {exc}") from None
    kv = meta.metadata or {}
    recorded = kv.get(CHECKSUM_KEY.encode())
    if recorded is None:
        if CHECKSUM_KIND_KEY.encode() in kv:
            raise Damaged(f"footer damaged: {CHECKSUM_KEY} missing although {CHECKSUM_KIND_KEY} is present")
        written = kv.get(FORMAT_KEY.encode())
        if written is not None:
            _require_legacy_writer(meta, written)
            return False, meta
        if foreign_ok:
            return False, meta
        raise Damaged("no response-store metadata in the footer: not a store file, or its footer is damaged")
    if not _HEX64.fullmatch(recorded) or footer.count(recorded) != 1:
        raise Damaged(f"footer damaged: {CHECKSUM_KEY} is not a single 64-digit hex digest")
    actual = _digest(read_at, size, start + footer.index(recorded))
    if actual != recorded.decode():
        raise Damaged(
            f"sha256 mismatch: the file changed after it was written "
            f"(recorded {recorded.decode()[:16]}..., content {actual[:16]}...)"
        )
    return True, meta


def _require_legacy_writer(meta: pq.FileMetaData, written: bytes) -> None:
    """Damaged unless a store file without checksum was written the way files were before
    checksums (LEGACY_FORMAT): its own writer's version says whether it ever had one."""
    if written != LEGACY_FORMAT.encode():
        raise Damaged(
            f"no checksum, although its footer says store format {written.decode(errors='replace')!r}, "
            f"whose writer always adds one ({LEGACY_FORMAT!r} is the format from before checksums): {STRIPPED}"
        )
    try:
        in_schema = (meta.schema.to_arrow_schema().metadata or {}).get(FORMAT_KEY.encode())
    except Exception:  # noqa: BLE001 - any parse failure is damage
        raise Damaged("unreadable Arrow schema in the footer") from None
    if in_schema != written:
        raise Damaged(
            f"no checksum, although it was not written as store files were before checksums (their Arrow "
            f"schema says store format {LEGACY_FORMAT!r} too): {STRIPPED}"
        )


def _bytes_reader(data: bytes) -> Callable[[int, int], memoryview]:
    view = memoryview(data)
    return lambda pos, n: view[pos : pos + n]


def _file_reader(fh: Any) -> Callable[[int, int], bytes]:
    def read_at(pos: int, n: int) -> bytes:
        fh.seek(pos)
        chunk = fh.read(n)
        if len(chunk) != n:
            raise Damaged("the file shrank while it was being read")
        return chunk

    return read_at


def check_file(path: Path, *, foreign_ok: bool = False) -> bool:
    """Check a (possibly large) store file in place, streaming; see :func:`_check`."""
    with open(path, "rb") as fh:
        return _check(_file_reader(fh), os.fstat(fh.fileno()).st_size, foreign_ok=foreign_ok)[0]


def parse_segment(data: bytes) -> tuple[bool, list[int], list[str]]:
    """Check a segment's bytes; return (checked, row-group starts, keys) or raise Damaged."""
    checked, meta = _check(_bytes_reader(data), len(data))
    try:
        # The footer parsed by _check has the file's own offsets: no second parse.
        pf = pq.ParquetFile(pa.BufferReader(data), metadata=meta, page_checksum_verification=True)
        names = set(pf.schema_arrow.names)
        absent = [c for c in COLUMNS if c not in names]
        if absent:
            raise Damaged(f"not a response-store segment: missing columns {absent}")
        starts = [0]
        for i in range(pf.metadata.num_row_groups):
            starts.append(starts[-1] + pf.metadata.row_group(i).num_rows)
        keys = pf.read(columns=["key"]).column("key").to_pylist()
    except Damaged:
        raise
    except Exception as exc:  # noqa: BLE001 - any parse failure is damage
        raise Damaged(f"unreadable: {exc}") from None
    return checked, starts, keys


def read_table(data: bytes) -> tuple[bool, pa.Table]:
    """A whole segment's table from its bytes, checked first; raise Damaged."""
    checked, meta = _check(_bytes_reader(data), len(data))
    try:
        pf = pq.ParquetFile(pa.BufferReader(data), metadata=meta, page_checksum_verification=True)
        return checked, conform(pf.read())
    except Exception as exc:  # noqa: BLE001 - any parse failure is damage
        raise Damaged(f"unreadable: {exc}") from None


def salvage_keys(data: bytes | None) -> list[str] | None:
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


def write_sealed(tables: Iterable[pa.Table], final: Path) -> int:
    """Write ``tables`` as one Parquet file carrying its own sha256; atomic (temp, fsync, rename).

    Returns the number of rows written. Nothing is left at ``final`` or the temp
    name if writing fails or ``tables`` raises.
    """
    tmp = final.with_name(f"{TMP_PREFIX}{final.name}")
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
    fsync_dir(final.parent)
    return rows


def atomic_write_text(text: str, final: Path) -> None:
    tmp = final.with_name(f"{TMP_PREFIX}{final.name}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        _cleanup(tmp)
        raise


def signature(st: os.stat_result) -> tuple[int, int, int, int]:
    # ctime too: unlike mtime it cannot be set back, so any write to the file shows.
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def read_signed(path: Path) -> tuple[tuple[int, int, int, int], bytes]:
    """A file's bytes and the signature of the file they came from (one open: the two agree)."""
    with open(path, "rb") as fh:
        return signature(os.fstat(fh.fileno())), fh.read()


@dataclass
class Segment:
    name: str
    row_group_starts: list[int]  # row offset of each row group, plus the total at the end
    sig: tuple[int, int, int, int]  # the file as it was when checked (see signature)
    checked: bool  # False: written before checksums, read unchecked


def row_group_of(starts: list[int], row: int) -> int:
    # Few row groups per segment: a linear scan beats bisect's overhead in practice.
    for g in range(len(starts) - 1):
        if row < starts[g + 1]:
            return g
    raise IndexError(row)


def rechunk(tables: Iterator[pa.Table], max_rows: int) -> Iterator[pa.Table]:
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
