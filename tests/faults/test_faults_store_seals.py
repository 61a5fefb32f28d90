"""Response-store segments stripped of their checksum, and zero-byte segments.

A segment rewritten as valid Parquet with one answer changed and no checksum looks like a
segment written before checksums existed. It is damage at every reader wherever the store
shows that it was not: the store is marked sealed (``sealed.json``: every segment carries a
checksum), the file's own footer names a writer that adds checksums, a checksummed segment
was written before it, or this process read it with one. That holds with ``sealed.json``
deleted. Only a segment really written before checksums (``faults/store/``), in a store
without the marker and with no checksummed segment before it, is read unchecked, with a warning. A zero-byte segment is re-answered;
``verify`` then names it as of unknown content with the command that clears it, and is
clean after ``clear``.
"""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from context_effects.llm.store import cli as store_cli
from context_effects.llm.store import segments, transfer
from context_effects.llm.store.responses import ResponseStore
from context_effects.llm.store.rows import SCHEMA, STORE_FORMAT
from test_llm_store import req, res

RATING = '{"rating": 2}'
#: A segment written by the store before segments carried checksums (rows: req(100..102), res()).
LEGACY_SEGMENT = Path(__file__).parent / "store" / "legacy-unchecked-segment.parquet"


def _store(root: Path, n: int = 6) -> tuple[ResponseStore, list]:
    store = ResponseStore(root)
    rs = [req(i) for i in range(n)]
    store.put_batch([res(r, text=RATING) for r in rs], rs)
    return store, rs


def _changed(seg: Path, row: int, text: str) -> pa.Table:
    table = pq.read_table(seg)
    texts = table.column("text").to_pylist()
    texts[row] = text
    return table.set_column(table.column_names.index("text"), "text", pa.array(texts, pa.string()))


def _strip_and_change(seg: Path, row: int, text: str) -> None:
    """Rewrite a segment as another tool would: valid Parquet, the store's format key kept,
    one answer changed, no checksum."""
    table = _changed(seg, row, text)
    with pq.ParquetWriter(seg, table.schema.remove_metadata()) as writer:
        writer.write_table(table)
        writer.add_key_value_metadata({segments.FORMAT_KEY: STORE_FORMAT})
    meta = pq.read_metadata(seg).metadata
    assert segments.CHECKSUM_KEY.encode() not in meta and segments.FORMAT_KEY.encode() in meta


def _rewrite_as_before_checksums(seg: Path, row: int, text: str) -> None:
    """Rewrite a segment as the store's own writer did before checksums (an old checkout of it):
    the rows' schema with its format-1 metadata, one answer changed, no checksum."""
    table = _changed(seg, row, text)
    pq.write_table(table.cast(SCHEMA.with_metadata({segments.FORMAT_KEY: "1"})), seg)
    assert segments.check_file(seg) is False  # the file alone passes for one written before checksums


def _only_segment(store: ResponseStore) -> Path:
    (seg,) = sorted(store.seg_dir.glob("seg-*.parquet"))
    return seg


def test_a_new_store_is_sealed_at_creation(tmp_path):
    store = ResponseStore(tmp_path / "s")
    assert len(store) == 0
    note = json.loads((store.root / segments.SEALED_MARKER).read_text())
    assert "one without is damaged" in note["segments"] and note["since"]


READERS = {
    "lookup": lambda store, keys: store.get_many(keys),
    "verify": lambda store, keys: store.verify(quarantine=True),
    "export": lambda store, keys: transfer.export(store, store.root.parent / "out.parquet", skipped=[]),
    "compact": lambda store, keys: store.compact(),
    "stats": lambda store, keys: store.stats(),
}


# How a segment lost its checksum, and what the reader says first. A rewrite that keeps the
# store's format key is told by the file itself; one made the way the store wrote before
# checksums passes for such a file, and only the store (here its marker) tells it.
REWRITES = {
    "format key kept": (_strip_and_change, "no checksum, although its footer says store format"),
    "pre-checksum writer": (_rewrite_as_before_checksums, "no checksum, although every segment of this store"),
}


def _read_with(reader: str, root: Path, keys: list[str]) -> list[str]:
    """Run one reader on a fresh store; the damaged-segment warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        READERS[reader](ResponseStore(root), keys)
    return [str(w.message) for w in caught if "damaged segment" in str(w.message)]


@pytest.mark.parametrize("rewrite", sorted(REWRITES))
@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_stripped_segment_is_damage_for_every_reader(tmp_path, reader, rewrite):
    store, rs = _store(tmp_path / "s")
    seg = _only_segment(store)
    change, why = REWRITES[rewrite]
    change(seg, 3, '{"rating": 5}')
    moved = _read_with(reader, store.root, [r.key for r in rs])
    assert moved and why in moved[0]
    assert not seg.exists() and (store.quarantine_dir / seg.name).exists()
    # The changed answer is never served; every row is a miss, with its key known.
    after = ResponseStore(store.root)
    assert after.get_many([r.key for r in rs]) == {}
    (q,) = after.quarantined()
    assert q.keys is not None and sorted(q.keys) == sorted(r.key for r in rs) and q.missing == len(rs)


def test_a_rerun_answers_the_stripped_rows_again_and_verify_is_clean(tmp_path, capsys):
    store, rs = _store(tmp_path / "s")
    _strip_and_change(_only_segment(store), 0, '{"rating": 5}')
    assert store_cli.main(["verify", str(store.root)]) == 1
    assert "no checksum, although" in capsys.readouterr().out
    rerun = ResponseStore(store.root)
    with pytest.warns(UserWarning):
        assert rerun.get_many([r.key for r in rs]) == {}
    assert rerun.put_batch([res(r, text=RATING) for r in rs], rs) == len(rs)
    assert {k: v.text for k, v in ResponseStore(store.root).get_many([r.key for r in rs]).items()} == {
        r.key: RATING for r in rs}
    assert store_cli.main(["verify", str(store.root)]) == 0
    assert "resolved: all 6 of its rows were answered again" in capsys.readouterr().out


def test_a_store_sealed_before_the_marker_existed_is_sealed_at_first_open(tmp_path):
    """A store written by checksumming code only, before stores carried the marker."""
    store, rs = _store(tmp_path / "s")
    (store.root / segments.SEALED_MARKER).unlink()
    assert len(ResponseStore(store.root)) == len(rs)  # first open: all segments checked -> sealed
    assert (store.root / segments.SEALED_MARKER).is_file()
    _strip_and_change(_only_segment(store), 1, '{"rating": 5}')
    with pytest.warns(UserWarning, match="no checksum, although"):
        assert ResponseStore(store.root).get_many([r.key for r in rs]) == {}


def test_a_store_that_never_held_a_checksummed_segment_reads_its_segments_unchecked(tmp_path, monkeypatch):
    """The price of reading stores from before checksums: named, once, and `compact` seals it.
    New answers written beside such segments do not make them damage: they were written before."""
    root = tmp_path / "s"
    (root / segments.SEGMENT_DIR).mkdir(parents=True)
    # The same rows twice: a duplicate, as racing jobs leave them.
    legacy = [root / segments.SEGMENT_DIR / f"seg-202501{day}T000000000000Z-legacy-1-000000000000-000001.parquet"
              for day in ("01", "02")]
    for path in legacy:
        shutil.copy(LEGACY_SEGMENT, path)
    names = [p.name for p in legacy]
    old = [req(i) for i in range(100, 103)]
    with pytest.warns(UserWarning, match="carries no checksum"):
        assert ResponseStore(root).get(old[1].key) == res(old[1])
    assert not (root / segments.SEALED_MARKER).exists()
    report = ResponseStore(root).verify()
    assert report.unchecked == names and report.clean

    store = ResponseStore(root)
    new = [req(i) for i in range(3)]
    with pytest.warns(UserWarning, match="carries no checksum"):
        assert store.put_batch([res(r, text=RATING) for r in new], new) == 3
    with pytest.warns(UserWarning, match="carries no checksum"):
        assert len(ResponseStore(root).get_many(r.key for r in old + new)) == 6
    report = ResponseStore(root).verify()
    assert report.unchecked == names and len(report.ok) == 1 and report.clean

    # While compact runs, its output (named with the oldest merged segment's time) and the
    # segments it replaces are both in place: a reader then must not take the unchecked ones for damage.
    during = []
    write = ResponseStore._write_segment

    def write_and_look(self, *args, **kwargs):
        name = write(self, *args, **kwargs)
        during.append(ResponseStore(root, create=False).verify())
        return name

    monkeypatch.setattr(ResponseStore, "_write_segment", write_and_look)
    with pytest.warns(UserWarning, match="carries no checksum"):
        assert ResponseStore(root).compact()["unchecked_rewritten"] == 2
    (report,) = during
    assert report.damaged == [] and report.unchecked == names and len(report.ok) == 2
    assert (root / segments.SEALED_MARKER).is_file()
    report = ResponseStore(root).verify()
    assert report.unchecked == [] and len(report.ok) == 1


# --------------------------------------------------------------------------- sealed.json deleted
# The marker is one deletable file: the store's own segments must say as much.


@pytest.mark.parametrize("reader", sorted(READERS))
def test_without_the_marker_a_stripped_segment_is_still_damage_for_every_reader(tmp_path, reader):
    """sealed.json deleted, the only segment rewritten with one rating changed: its footer says
    a writer that adds checksums wrote it."""
    store, rs = _store(tmp_path / "s")
    seg = _only_segment(store)
    (store.root / segments.SEALED_MARKER).unlink()
    _strip_and_change(seg, 3, '{"rating": 5}')
    moved = _read_with(reader, store.root, [r.key for r in rs])
    assert moved and seg.name in moved[0] and "no checksum, although its footer says store format" in moved[0]
    assert not seg.exists() and (store.quarantine_dir / seg.name).exists()
    after = ResponseStore(store.root)
    with pytest.warns(UserWarning, match="were moved aside"):  # and a fresh reader is told so
        assert after.get_many([r.key for r in rs]) == {}  # the changed answer is never served
    (q,) = after.quarantined()
    assert q.keys is not None and sorted(q.keys) == sorted(r.key for r in rs) and q.missing == len(rs)


def test_without_the_marker_verify_names_a_stripped_segment_and_a_rerun_answers_it(tmp_path, capsys):
    store, rs = _store(tmp_path / "s")
    seg = _only_segment(store)
    (store.root / segments.SEALED_MARKER).unlink()
    _strip_and_change(seg, 0, '{"rating": 5}')
    assert store_cli.main(["verify", str(store.root)]) == 1
    out = capsys.readouterr().out
    assert f"DAMAGED      {seg.name}: no checksum, although" in out and "UNCHECKED" not in out
    rerun = ResponseStore(store.root)
    with pytest.warns(UserWarning, match="damaged segment"):
        assert rerun.get_many([r.key for r in rs]) == {}
    assert (store.root / segments.SEALED_MARKER).is_file()  # every segment left carries a checksum
    assert rerun.put_batch([res(r, text=RATING) for r in rs], rs) == len(rs)
    assert {k: v.text for k, v in ResponseStore(store.root).get_many([r.key for r in rs]).items()} == {
        r.key: RATING for r in rs}
    assert store_cli.main(["verify", str(store.root)]) == 0
    assert "resolved: all 6 of its rows were answered again" in capsys.readouterr().out


@pytest.mark.parametrize("reader", sorted(READERS))
def test_without_the_marker_a_segment_rewritten_after_a_checksummed_one_is_damage_for_every_reader(
    tmp_path, reader
):
    """Rewritten as the store wrote before checksums, the file alone passes for such a one; the
    store does not: a segment written before it carries a checksum."""
    store, first = _store(tmp_path / "s", 3)
    later = [req(i) for i in range(3, 6)]
    store.put_batch([res(r, text=RATING) for r in later], later)
    kept, seg = sorted(store.seg_dir.glob("seg-*.parquet"))
    (store.root / segments.SEALED_MARKER).unlink()
    _rewrite_as_before_checksums(seg, 1, '{"rating": 5}')
    keys = [r.key for r in first + later]
    moved = _read_with(reader, store.root, keys)
    assert moved and seg.name in moved[0] and f"written after {kept.name}, which carries one" in moved[0]
    assert not seg.exists() and (store.quarantine_dir / seg.name).exists()
    after = ResponseStore(store.root)
    with pytest.warns(UserWarning, match="were moved aside"):
        assert {k: v.text for k, v in after.get_many(keys).items()} == {r.key: RATING for r in first}
    (q,) = after.quarantined()
    assert sorted(q.keys) == sorted(r.key for r in later) and q.missing == len(later)


def test_without_the_marker_a_segment_rewritten_under_a_reader_that_checked_it_is_damage(tmp_path):
    """A long-lived reader (e.g. a replay, which never writes the marker back) read the segment
    with its checksum; rewritten since as the store wrote before checksums, it is damage."""
    store, rs = _store(tmp_path / "s")
    seg = _only_segment(store)
    (store.root / segments.SEALED_MARKER).unlink()
    keys = [r.key for r in rs]
    reader = ResponseStore(store.root, create=False)
    assert {k: v.text for k, v in reader.get_many(keys).items()} == {k: RATING for k in keys}
    _rewrite_as_before_checksums(seg, 2, '{"rating": 5}')
    with pytest.warns(UserWarning, match="no checksum, although it carried one when this process first read it"):
        assert reader.get_many(keys) == {}
    assert not seg.exists() and (store.quarantine_dir / seg.name).exists()


def test_without_the_marker_a_pre_checksum_segment_named_after_a_checksummed_one_is_damage(tmp_path, capsys):
    """A segment keeps its name (its time) when copied in from another store: one without
    checksum from after this store's first checksummed segment cannot be from before checksums."""
    store, rs = _store(tmp_path / "s")
    first = _only_segment(store)
    (store.root / segments.SEALED_MARKER).unlink()
    late = store.seg_dir / f"seg-{segments.utc_stamp()}-legacy-1-000000000000-000001.parquet"
    shutil.copy(LEGACY_SEGMENT, late)
    assert store_cli.main(["verify", str(store.root)]) == 1
    out = capsys.readouterr().out
    assert f"DAMAGED      {late.name}: no checksum, although it was written after {first.name}" in out
    with pytest.warns(UserWarning, match="damaged segment"):
        reader = ResponseStore(store.root)
        assert reader.get_many([req(i).key for i in range(100, 103)]) == {}
    assert len(reader.get_many([r.key for r in rs])) == len(rs)
    assert (store.quarantine_dir / late.name).exists()


def test_a_reader_agrees_with_verify_when_an_earlier_checksummed_segment_is_copied_in(tmp_path):
    """The store cannot tell this from a segment rewritten after checksums, so it re-asks rather
    than serve unchecked; a reader that read the unchecked segment before judges it again."""
    other, _ = _store(tmp_path / "other", 2)
    checked = _only_segment(other)
    root = tmp_path / "s"
    (root / segments.SEGMENT_DIR).mkdir(parents=True)
    legacy = root / segments.SEGMENT_DIR / f"seg-{segments.utc_stamp()}-legacy-1-000000000000-000001.parquet"
    shutil.copy(LEGACY_SEGMENT, legacy)
    old = [req(i).key for i in range(100, 103)]
    reader = ResponseStore(root, create=False)
    with pytest.warns(UserWarning, match="carries no checksum"):
        assert len(reader.get_many(old)) == 3
    shutil.copy(checked, root / segments.SEGMENT_DIR / checked.name)
    assert [d.segment for d in ResponseStore(root, create=False).verify().damaged] == [legacy.name]
    with pytest.warns(UserWarning, match=f"damaged segment .*{legacy.name}.*written after {checked.name}"):
        reader.refresh()
    assert reader.get_many(old) == {} and len(reader) == 2


def test_import_refuses_a_stripped_export_even_with_allow_unchecked(tmp_path, capsys):
    """--allow-unchecked is for exports from before checksums; this one's footer says it is not."""
    store, rs = _store(tmp_path / "s")
    out = tmp_path / "e.parquet"
    assert transfer.export(store, out) == len(rs)
    _strip_and_change(out, 0, '{"rating": 5}')
    with pytest.raises(segments.StoreDamaged, match="no checksum, although its footer says store format"):
        transfer.import_file(ResponseStore(tmp_path / "t"), out, allow_unchecked=True)
    assert store_cli.main(["import", str(tmp_path / "t"), str(out), "--allow-unchecked"]) == 1
    assert str(out) in capsys.readouterr().err
    assert len(ResponseStore(tmp_path / "t")) == 0


def test_a_read_only_sealed_store_skips_a_stripped_segment_in_place(tmp_path, monkeypatch):
    store, rs = _store(tmp_path / "s")
    seg = _only_segment(store)
    _strip_and_change(seg, 2, '{"rating": 5}')

    def refuse(src, dst):  # a read-only mount (root ignores chmod, so simulate it)
        raise PermissionError(30, "Read-only file system", str(src))

    monkeypatch.setattr("context_effects.llm.store.responses.os.rename", refuse)
    reader = ResponseStore(store.root, create=False)
    with pytest.warns(UserWarning, match="no checksum, although.*could not be moved aside"):
        assert reader.get_many([r.key for r in rs]) == {}
    assert seg.exists()


def test_a_zero_byte_segment_is_re_answered_and_verify_says_how_to_clear_it(tmp_path, capsys):
    store, rs = _store(tmp_path / "s")
    seg = _only_segment(store)
    seg.write_bytes(b"")
    rerun = ResponseStore(store.root)
    with pytest.warns(UserWarning, match="damaged segment"):
        assert rerun.get_many([r.key for r in rs]) == {}
    assert rerun.put_batch([res(r, text=RATING) for r in rs], rs) == len(rs)

    assert store_cli.main(["verify", str(store.root)]) == 1
    out = capsys.readouterr().out
    assert "1 of unknown content" in out and "NOT CLEAN" in out
    assert f"python -m context_effects.llm.store clear {store.root} {seg.name}` sets it aside" in out

    assert store_cli.main(["clear", str(store.root), seg.name]) == 0
    assert store_cli.main(["verify", str(store.root)]) == 0
    assert "NOT CLEAN" not in capsys.readouterr().out
    cleared = store.quarantine_dir / segments.CLEARED_DIR
    assert (cleared / seg.name).read_bytes() == b""  # kept, not deleted
    note = json.loads((cleared / f"{seg.name}.json").read_text())
    assert note["keys"] is None and note["cleared_at"] and "truncated" in note["reason"]


def test_clear_refuses_a_segment_whose_rows_are_known(tmp_path, capsys):
    store, rs = _store(tmp_path / "s")
    seg = _only_segment(store)
    _strip_and_change(seg, 0, '{"rating": 5}')
    with pytest.warns(UserWarning):
        ResponseStore(store.root).verify(quarantine=True)
    assert store_cli.main(["clear", str(store.root), seg.name]) == 1
    err = capsys.readouterr().err
    assert "its rows are known (6 of its 6 rows are not in the store)" in err and "rerun the workflow" in err
    assert store_cli.main(["clear", str(store.root), "seg-nothing.parquet"]) == 1
    assert "no quarantined segment 'seg-nothing.parquet'" in capsys.readouterr().err
