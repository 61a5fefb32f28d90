"""The response store: its index of keys, reads, writes, damage and whole-store operations.

One ``ResponseStore`` per process reads and writes the store at a root folder (layout,
integrity and duplicate keys: the package docstring, ``context_effects.llm.store``). The
segment files themselves and their checks are ``context_effects.llm.store.segments``;
export and import of the whole store, ``context_effects.llm.store.transfer``.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from context_effects.llm.store.rows import COLUMNS, SCHEMA, result_to_row, row_to_result
from context_effects.llm.store.segments import (
    CLEARED_DIR,
    COMPACTED_SUFFIX,
    MAX_SEGMENT_ROWS,
    QUARANTINE_DIR,
    SEALED_MARKER,
    SEGMENT_DIR,
    SEGMENT_NAME_RE,
    STALE_TMP_S,
    STAMP_RE,
    STRIPPED,
    TMP_PREFIX,
    Damage,
    Damaged,
    Quarantined,
    Segment,
    StoreDamaged,
    VerifyReport,
    atomic_write_text,
    fsync_dir,
    new_writer_id,
    parse_segment,
    read_signed,
    read_table,
    rechunk,
    row_group_of,
    salvage_keys,
    signature,
    utc_stamp,
    write_sealed,
)
from context_effects.llm.types import LLMRequest, LLMResult
from context_effects.utc import utc_now_iso


class _Moved(Exception):
    """Internal: a segment was found damaged while reading and moved aside; rescan and retry."""


def _dates_checksums(name: str, checked: bool) -> bool:
    """A checksummed segment whose name gives the time it was written (see COMPACTED_SUFFIX)."""
    return checked and not name.endswith(COMPACTED_SUFFIX)


class ResponseStore:
    """Read and write the store at ``root``. One instance per process; not thread-safe."""

    def __init__(self, root: str | os.PathLike[str], *, create: bool = True) -> None:
        self.root = Path(root)
        self.seg_dir = self.root / SEGMENT_DIR
        self.quarantine_dir = self.root / QUARANTINE_DIR
        self._create = create
        if create:
            self.seg_dir.mkdir(parents=True, exist_ok=True)
        # Whether this store holds only checksummed segments (SEALED_MARKER): read at every
        # refresh and verify, so a marker another process wrote counts at once.
        self._sealed = False
        # The first indexed segment (by name) written with a checksum: every unchecked segment
        # sorting after it was written after the store had checksums, marker or not.
        self._first_checked: str | None = None
        self._index: dict[str, tuple[str, int]] = {}
        self._segments: dict[str, Segment] = {}
        # Damaged or unreadable segments that could not be moved aside (e.g. a
        # read-only store): skipped until the file changes.
        self._bad: dict[str, tuple[tuple[int, int, int, int] | None, Damage]] = {}
        self._unchecked_warned = False
        self._moved: set[str] = set()  # segments this instance moved aside (already warned about)
        self._loaded = False
        self._writer_id = ""
        self._writer_pid = -1
        self._counter = 0

    # ----------------------------------------------------------------- index

    def _list_segment_names(self) -> set[str]:
        try:
            return {n for n in os.listdir(self.seg_dir) if SEGMENT_NAME_RE.match(n)}
        except FileNotFoundError:
            return set()

    def _scan(self, name: str) -> list[str] | None:
        path = self.seg_dir / name
        sig = None
        try:
            with open(path, "rb") as fh:
                # The signature survives a read that fails after the open: it is what the skip records.
                sig = signature(os.fstat(fh.fileno()))
                data = fh.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            # The bytes may be fine (permissions, a flaky mount): skip, name it, move nothing.
            self._skip_in_place(name, sig, f"cannot be read: {exc}")
            return None
        try:
            checked, starts, keys = parse_segment(data)
            # Names are scanned in order, so every checksummed segment before this one is known.
            self._require_checksum(name, checked, self._first_checked)
        except Damaged as exc:
            self._quarantine(name, str(exc), sig, data)
            return None
        self._bad.pop(name, None)
        self._add_segment(Segment(name, starts, sig, checked))
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

    def _quarantine_if_damaged(self, seg: Segment, sig: tuple[int, int, int, int], data: bytes) -> None:
        """Quarantine ``seg`` and raise ``_Moved`` when ``data``, its file's bytes now, is not a whole segment."""
        try:
            self._require_checksum(seg.name, parse_segment(data)[0], self._first_checked)
        except Damaged as exc:
            self._quarantine(seg.name, str(exc), sig, data)
            raise _Moved(seg.name) from None

    # ----------------------------------------------------------------- sealing

    def _read_marker(self) -> None:
        self._sealed = (self.root / SEALED_MARKER).is_file()

    def _require_checksum(self, name: str, checked: bool, first_checked: str | None) -> None:
        """Damaged if segment ``name`` has no checksum although the store shows it was written after
        checksums: the store is sealed, or ``first_checked`` (the first segment by name written with
        a checksum) sorts before it. Whether the file itself is from before checksums is
        ``segments._check``'s to say."""
        if checked:
            return
        known = self._segments.get(name)
        if known is not None and known.checked:  # rewritten since this process read it
            raise Damaged(f"no checksum, although it carried one when this process first read it: {STRIPPED}")
        if self._sealed:
            raise Damaged(
                f"no checksum, although every segment of this store carries one ({SEALED_MARKER}): {STRIPPED}"
            )
        if first_checked is not None and first_checked < name:
            raise Damaged(
                f"no checksum, although it was written after {first_checked}, which carries one (a segment's "
                f"name begins with the time it was written): {STRIPPED}"
            )

    def _seal_if_all_checked(self) -> None:
        """Write the marker once every segment in place carries a checksum: at creation (no
        segments), in a store written by checksumming code only, or after a compaction."""
        if self._sealed or not self._create or self._bad or not all(s.checked for s in self._segments.values()):
            return
        note = {"segments": "every segment carries the sha256 of its own bytes; one without is damaged",
                "since": utc_now_iso(), "by": f"{socket.gethostname()} pid {os.getpid()}"}
        try:
            atomic_write_text(json.dumps(note, indent=1) + "\n", self.root / SEALED_MARKER)
        except OSError:
            return  # a read-only store stays as it is; its legacy segments keep being read unchecked
        self._sealed = True

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
        keys = salvage_keys(data)
        note = {
            "segment": name,
            "reason": reason,
            "quarantined_at": utc_now_iso(),
            "by": f"{socket.gethostname()} pid {os.getpid()}",
            "size": sig[0] if sig else None,
            "keys": keys,
        }
        try:
            atomic_write_text(json.dumps(note, indent=1) + "\n", dest.with_name(dest.name + ".json"))
        except OSError as exc:  # the move is what matters; a missing note means "rows unknown"
            warnings.warn(f"response store: could not write the note for {dest}: {exc}", stacklevel=4)
        fsync_dir(self.quarantine_dir)
        fsync_dir(self.seg_dir)
        rows = f"its {len(keys)} rows are" if keys is not None else "its rows are"
        warnings.warn(
            f"response store: damaged segment {src}: {reason}. Moved to {dest}; {rows} store misses now "
            f"(a normal run answers them again; replay mode reports them)",
            stacklevel=4,
        )
        return Damage(name, str(dest), reason)

    def _add_segment(self, seg: Segment) -> None:
        self._segments[seg.name] = seg
        if _dates_checksums(seg.name, seg.checked) and (self._first_checked is None or seg.name < self._first_checked):
            self._first_checked = seg.name

    def _drop(self, name: str) -> None:
        """Forget a segment; its keys are dropped (a full refresh restores any duplicates held elsewhere)."""
        if self._segments.pop(name, None) is not None:
            for key in [k for k, (n, _) in self._index.items() if n == name]:
                del self._index[key]
            if name == self._first_checked:
                dated = (n for n, s in self._segments.items() if _dates_checksums(n, s.checked))
                self._first_checked = min(dated, default=None)

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
        self._read_marker()
        names = self._list_segment_names()
        if full or any(n not in names for n in self._segments):
            # Segments vanished (a compaction, a quarantine): rows moved, so the index is stale.
            self._index.clear()
            self._segments.clear()
            self._first_checked = None
        for name in [n for n in self._bad if n not in names]:
            del self._bad[name]
        new = []
        for name in sorted(names):
            if name in self._segments:
                continue
            if name in self._bad:
                try:
                    sig = signature((self.seg_dir / name).stat())
                except OSError:
                    continue
                if sig == self._bad[name][0]:
                    continue
            new.append(name)
        added = 0
        first_before = self._first_checked
        for name in new:
            keys = self._scan(name)
            if keys is not None:
                self._add_keys(name, keys)
                added += 1
        first = self._first_checked
        if first != first_before and any(not s.checked and first < n for n, s in self._segments.items()):
            # A checksummed segment sorting before segments read unchecked earlier was put in place
            # since (copied in): scanning all in name order again judges them by it.
            return self.refresh(full=True)
        self._seal_if_all_checked()
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
            groups = sorted({row_group_of(starts, row) for _, row in wanted})
            # Row offsets inside the concatenation of just the groups we read.
            base, offset = {}, 0
            for g in groups:
                base[g] = offset
                offset += starts[g + 1] - starts[g]
            table = self._read_groups(seg, groups)
            positions = []
            for _, row in wanted:
                g = row_group_of(starts, row)
                positions.append(base[g] + row - starts[g])
            for (key, _), rec in zip(wanted, table.take(positions).to_pylist()):
                if rec["key"] != key:  # an index out of step with the file must not serve a wrong answer
                    raise RuntimeError(f"response store index mismatch in {name}")
                out[key] = rec
        return out

    def _read_groups(self, seg: Segment, groups: list[int]) -> pa.Table:
        """Row groups of a segment, never from bytes other than those checked at first read."""
        path = self.seg_dir / seg.name
        with open(path, "rb") as fh:  # FileNotFoundError: moved or compacted away; the caller rescans
            sig = signature(os.fstat(fh.fileno()))
            source: Any = fh
            if sig != seg.sig:
                # Segments are immutable: a changed file is checked again before it serves anything.
                data = fh.read()
                self._quarantine_if_damaged(seg, sig, data)
                seg.sig = sig
                source = pa.BufferReader(data)
            try:
                # Page CRCs catch damage to the pages read even where the file's times did not change.
                return pq.ParquetFile(source, page_checksum_verification=True).read_row_groups(
                    groups, columns=list(COLUMNS)
                )
            except Exception as exc:  # noqa: BLE001 - find out whether the file is damaged
                fh.seek(0)
                self._quarantine_if_damaged(seg, sig, fh.read())
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

    def _segment_path(self, stamp: str | None = None, *, compacted: bool = False) -> Path:
        if self._writer_pid != os.getpid():
            # A forked child must not reuse its parent's writer id.
            self._writer_id, self._writer_pid, self._counter = new_writer_id(), os.getpid(), 0
        self._counter += 1
        end = COMPACTED_SUFFIX if compacted else ".parquet"
        return self.seg_dir / f"seg-{stamp or utc_stamp()}-{self._writer_id}-{self._counter:06d}{end}"

    def _write_segment(self, table: pa.Table, stamp: str | None = None, *, compacted: bool = False) -> str:
        self.seg_dir.mkdir(parents=True, exist_ok=True)
        path = self._segment_path(stamp, compacted=compacted)
        write_sealed([table], path)
        return path.name

    def add_segment(self, table: pa.Table) -> str:
        """Write ``table`` (store rows whose keys are not yet present) as one new segment and
        index it; return the segment's name."""
        name = self._write_segment(table)
        self._register(name, table)
        return name

    def _register(self, name: str, table: pa.Table) -> None:
        # Row-group boundaries come from the file itself: the writer may split
        # differently from what row_group_size alone suggests.
        path = self.seg_dir / name
        sig = signature(path.stat())
        meta = pq.read_metadata(path)
        starts = [0]
        for i in range(meta.num_row_groups):
            starts.append(starts[-1] + meta.row_group(i).num_rows)
        self._add_segment(Segment(name, starts, sig, True))
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
        self.add_segment(pa.Table.from_pylist(rows, schema=SCHEMA))
        return len(rows)

    # ----------------------------------------------------------------- damage

    def quarantined(self) -> list[Quarantined]:
        """Segments moved to ``quarantine/``, with whether their rows have been answered again."""
        self._ensure()
        return self._quarantined(self._index.keys())

    def _quarantined(self, present: Any) -> list[Quarantined]:
        try:
            names = sorted(
                n
                for n in os.listdir(self.quarantine_dir)
                if not n.endswith(".json") and not n.startswith(TMP_PREFIX) and n != CLEARED_DIR
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

    def clear(self, segment: str) -> Quarantined:
        """Set aside a quarantined segment whose rows are unknown (a zero-byte or unreadable
        file), after the runs that use this store have been rerun: they answer every miss
        again, but no one can tell from the store whether the lost rows were among them.
        Its file and note move to ``quarantine/cleared/``; nothing is deleted. A segment
        whose rows are known is never cleared: its missing rows are named, and a rerun
        answers them (then it reads as resolved)."""
        self._ensure()
        entry = next((q for q in self._quarantined(self._index.keys()) if segment in (q.segment, Path(q.path).name)),
                     None)
        if entry is None:
            raise ValueError(f"no quarantined segment {segment!r} in {self.quarantine_dir}")
        if entry.keys is not None:
            raise ValueError(
                f"{entry.path}: its rows are known ({entry.status()}); it is not cleared by hand: "
                + ("it is already resolved" if entry.resolved else "rerun the workflow, which answers them again")
            )
        dest_dir = self.quarantine_dir / CLEARED_DIR
        dest_dir.mkdir(exist_ok=True)
        src = Path(entry.path)
        note_src = src.with_name(src.name + ".json")
        try:
            note = json.loads(note_src.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            note = {"segment": entry.segment, "reason": entry.reason}
        note.update(cleared_at=utc_now_iso(), cleared_by=f"{socket.gethostname()} pid {os.getpid()}")
        atomic_write_text(json.dumps(note, indent=1) + "\n", dest_dir / note_src.name)
        os.rename(src, dest_dir / src.name)
        note_src.unlink(missing_ok=True)
        fsync_dir(dest_dir)
        fsync_dir(self.quarantine_dir)
        return entry

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
        self._read_marker()
        first_checked = None  # as in refresh: names in order, so the first found is the first
        for name in sorted(self._list_segment_names()):
            path = self.seg_dir / name
            try:
                sig, data = read_signed(path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                report.damaged.append(Damage(name, str(path), f"cannot be read: {exc}"))
                continue
            try:
                checked, _, keys = parse_segment(data)
                self._require_checksum(name, checked, first_checked)
            except Damaged as exc:
                if quarantine:
                    report.damaged.append(self._quarantine(name, str(exc), sig, data))
                else:
                    report.damaged.append(Damage(name, str(path), str(exc)))
                continue
            (report.ok if checked else report.unchecked).append(name)
            if first_checked is None and _dates_checksums(name, checked):
                first_checked = name
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
                sig, data = read_signed(path)
            except FileNotFoundError:
                raise RuntimeError(f"segment {name} vanished while reading (concurrent compaction?); retry") from None
            try:
                checked, table = read_table(data)
                self._require_checksum(name, checked, self._first_checked)
            except Damaged as exc:
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
        stamp = first[1] if len(first) > 2 and STAMP_RE.match(first[1]) else None
        written = []
        rows = 0
        for chunk in rechunk(self.iter_tables(), MAX_SEGMENT_ROWS):
            written.append(self._write_segment(chunk, stamp, compacted=True))
            rows += chunk.num_rows
        for name in old:
            try:
                (self.seg_dir / name).unlink()
            except FileNotFoundError:
                pass
        fsync_dir(self.seg_dir)
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
        for p in self.seg_dir.glob(f"{TMP_PREFIX}*"):
            try:
                if now - p.stat().st_mtime > stale_tmp_s:
                    p.unlink()
                    n += 1
            except OSError:
                pass
        return n

    def stats(self) -> dict[str, Any]:
        self._ensure()
        tmp = list(self.seg_dir.glob(f"{TMP_PREFIX}*"))
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
