"""Content-addressed response store (docs/architecture.md, "The response store").

Layout::

    <root>/segments/seg-<UTC time>-<host>-<pid>-<uuid>-<n>.parquet

Every writer (one Snakemake job) writes its own immutable segment per completed
batch: first under a hidden temp name, fsynced, then ``os.replace``d into place.
Nothing is ever appended to or rewritten in place, so many jobs on a shared
filesystem (NFS included) never need a lock, and a reader sees either a whole
segment or none. A temp file left behind by ``kill -9`` is never matched by the
reader's pattern; a damaged ``seg-*.parquet`` is skipped with a warning.

Duplicate keys (two jobs racing on the same request) are harmless: the row from
the segment whose name sorts first wins, so every reader and ``compact`` agree.

Only successful results are stored: a failure must be retried next run, not
served from cache.

CLI (for reviewers replaying a finished run with zero model calls)::

    python -m context_effects.llm.store export ROOT OUT.parquet
    python -m context_effects.llm.store import ROOT IN.parquet
    python -m context_effects.llm.store stats ROOT
    python -m context_effects.llm.store compact ROOT
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
import time
import uuid
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from context_effects.llm.types import LLMRequest, LLMResult, ModelRef, Sampling

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
    metadata={"context_effects.store_format": STORE_FORMAT},
)
COLUMNS = tuple(SCHEMA.names)

SEGMENT_DIR = "segments"
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


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")


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


def _atomic_write_table(table: pa.Table, final: Path) -> None:
    tmp = final.with_name(f"{_TMP_PREFIX}{final.name}")
    try:
        with open(tmp, "wb") as fh:
            pq.write_table(table, fh, row_group_size=ROW_GROUP_ROWS, compression="zstd")
            fh.flush()
            # Durable before visible: a reader that sees the name must see all bytes.
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    _fsync_dir(final.parent)


@dataclass
class _Segment:
    name: str
    row_group_starts: list[int]  # row offset of each row group, plus the total at the end


class ResponseStore:
    """Read and write the store at ``root``. One instance per process; not thread-safe."""

    def __init__(self, root: str | os.PathLike[str], *, create: bool = True) -> None:
        self.root = Path(root)
        self.seg_dir = self.root / SEGMENT_DIR
        if create:
            self.seg_dir.mkdir(parents=True, exist_ok=True)
        self._index: dict[str, tuple[str, int]] = {}
        self._segments: dict[str, _Segment] = {}
        self._bad: dict[str, tuple[int, float]] = {}
        self._loaded = False
        self._writer_id = ""
        self._writer_pid = -1
        self._counter = 0

    # ----------------------------------------------------------------- index

    def _list_segment_names(self) -> set[str]:
        try:
            return {n for n in os.listdir(self.seg_dir) if _SEG_RE.match(n)}
        except FileNotFoundError:
            return set()

    def _scan(self, name: str) -> list[str] | None:
        path = self.seg_dir / name
        try:
            with open(path, "rb") as fh:
                pf = pq.ParquetFile(fh)
                absent = [c for c in COLUMNS if c not in pf.schema_arrow.names]
                if absent:
                    raise ValueError(f"missing columns {absent}")
                starts = [0]
                for i in range(pf.metadata.num_row_groups):
                    starts.append(starts[-1] + pf.metadata.row_group(i).num_rows)
                keys = pf.read(columns=["key"]).column("key").to_pylist()
        except FileNotFoundError:
            return None
        except Exception as exc:  # noqa: BLE001 - any damage means "skip this file"
            try:
                st = path.stat()
                sig = (st.st_size, st.st_mtime)
            except OSError:
                return None
            if self._bad.get(name) != sig:
                warnings.warn(f"response store: skipping unreadable segment {path}: {exc}", stacklevel=3)
            self._bad[name] = sig
            return None
        self._bad.pop(name, None)
        self._segments[name] = _Segment(name, starts)
        return keys

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
            # Segments vanished (a compaction): rows moved, so the index is stale.
            self._index.clear()
            self._segments.clear()
        new = []
        for name in sorted(names):
            if name in self._segments:
                continue
            if name in self._bad:
                try:
                    st = (self.seg_dir / name).stat()
                except OSError:
                    continue
                if (st.st_size, st.st_mtime) == self._bad[name]:
                    continue
            new.append(name)
        added = 0
        for name in new:
            keys = self._scan(name)
            if keys is not None:
                self._add_keys(name, keys)
                added += 1
        self._loaded = True
        return added

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
            with open(self.seg_dir / name, "rb") as fh:
                table = pq.ParquetFile(fh).read_row_groups(groups, columns=list(COLUMNS))
            positions = []
            for _, row in wanted:
                g = _row_group_of(starts, row)
                positions.append(base[g] + row - starts[g])
            for (key, _), rec in zip(wanted, table.take(positions).to_pylist()):
                if rec["key"] != key:  # an index out of step with the file must not serve a wrong answer
                    raise RuntimeError(f"response store index mismatch in {name}")
                out[key] = rec
        return out

    def get_rows(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Raw stored rows (including ``request_json``) for the keys present."""
        self._ensure()
        keys = list(keys)
        try:
            return self._read_rows(keys)
        except (FileNotFoundError, RuntimeError):
            # A concurrent compaction replaced the segments under us: rescan once.
            self.refresh(full=True)
            return self._read_rows(keys)

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
        _atomic_write_table(table, path)
        return path.name

    def _register(self, name: str, table: pa.Table) -> None:
        # Row-group boundaries come from the file itself: the writer may split
        # differently from what row_group_size alone suggests.
        meta = pq.read_metadata(self.seg_dir / name)
        starts = [0]
        for i in range(meta.num_row_groups):
            starts.append(starts[-1] + meta.row_group(i).num_rows)
        self._segments[name] = _Segment(name, starts)
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

    # ----------------------------------------------------------------- whole-store ops

    def iter_tables(self, *, dedup: bool = True) -> Iterator[pa.Table]:
        """Every stored row, one table per segment, in winning order (first copy of a key only)."""
        self._ensure()
        seen: set[str] = set()
        for name in sorted(self._segments):
            try:
                with open(self.seg_dir / name, "rb") as fh:
                    table = _conform(pq.ParquetFile(fh).read())
            except FileNotFoundError:
                raise RuntimeError(f"segment {name} vanished while reading (concurrent compaction?); retry") from None
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
        which readers already tolerate).
        """
        self.refresh(full=True)
        old = sorted(self._segments)
        removed_tmp = self._remove_stale_tmp(stale_tmp_s)
        dup_rows = sum(self._segments[n].row_group_starts[-1] for n in old) - len(self._index)
        if len(old) <= 1 and dup_rows == 0:
            return {
                "segments_before": len(old),
                "segments_after": len(old),
                "rows": len(self._index),
                "duplicates_dropped": 0,
                "stale_tmp_removed": removed_tmp,
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

    def export(self, path: str | os.PathLike[str]) -> int:
        """Write every stored row to one plain Parquet file; return the row count."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{_TMP_PREFIX}{path.name}")
        rows = 0
        try:
            with open(tmp, "wb") as fh:
                with pq.ParquetWriter(fh, SCHEMA, compression="zstd") as writer:
                    for table in self.iter_tables():
                        writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
                        rows += table.num_rows
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return rows

    def import_(self, path: str | os.PathLike[str], *, verify_keys: bool = True) -> int:
        """Add the rows of an exported file (keys already present are skipped); return rows added.

        With ``verify_keys`` every row's key is recomputed from its stored
        request, so an edited or mislabelled file cannot plant answers under
        the wrong request.
        """
        self._ensure()
        staged: set[str] = set()

        def fresh_tables() -> Iterator[pa.Table]:
            with open(path, "rb") as fh:
                for batch in pq.ParquetFile(fh).iter_batches(batch_size=ROW_GROUP_ROWS):
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
        for table in self.iter_tables():
            by_backend.update(table.column("backend").to_pylist())
            for blob in table.column("request_json").to_pylist():
                m = json.loads(blob)["request"]["model"]
                by_model[f"{m['provider']}:{m['model_id']}"] += 1
            tokens_in += sum(v or 0 for v in table.column("tokens_in").to_pylist())
            tokens_out += sum(v or 0 for v in table.column("tokens_out").to_pylist())
            cost += sum(v or 0.0 for v in table.column("cost_usd").to_pylist())
        return {
            "root": str(self.root),
            "rows": len(self._index),
            "segments": len(self._segments),
            "unreadable_segments": sorted(self._bad),
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


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m context_effects.llm.store", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("export", help="write the whole store to one Parquet file")
    p.add_argument("root")
    p.add_argument("out")
    p = sub.add_parser("import", help="add rows from an exported Parquet file")
    p.add_argument("root")
    p.add_argument("src")
    p.add_argument("--no-verify", action="store_true", help="skip recomputing each row's key")
    p = sub.add_parser("stats", help="print a JSON summary")
    p.add_argument("root")
    p = sub.add_parser("compact", help="merge segments, drop duplicates and stale temp files")
    p.add_argument("root")
    args = ap.parse_args(argv)

    if args.cmd != "import" and not Path(args.root, SEGMENT_DIR).is_dir():
        print(f"no response store at {args.root}", file=sys.stderr)
        return 2
    store = ResponseStore(args.root)
    if args.cmd == "export":
        n = store.export(args.out)
        print(f"exported {n} rows to {args.out}")
    elif args.cmd == "import":
        n = store.import_(args.src, verify_keys=not args.no_verify)
        print(f"imported {n} new rows into {args.root} ({len(store)} total)")
    elif args.cmd == "stats":
        print(json.dumps(store.stats(), indent=2, sort_keys=True))
    elif args.cmd == "compact":
        print(json.dumps(store.compact(), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
