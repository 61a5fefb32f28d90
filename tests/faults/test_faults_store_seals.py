"""Response-store segments stripped of their checksum, and zero-byte segments.

A segment rewritten as valid Parquet with one answer changed and no checksum looks like a
segment written before checksums existed. A store marked sealed (``sealed.json``: every
segment carries a checksum) treats it as damage at every reader; only a store that has
never been sealed reads such segments, with a warning. A zero-byte segment is re-answered;
``verify`` then names it as of unknown content with the command that clears it, and is
clean after ``clear``.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from context_effects.llm.store import cli as store_cli
from context_effects.llm.store import segments, transfer
from context_effects.llm.store.responses import ResponseStore
from context_effects.llm.store.rows import STORE_FORMAT
from test_llm_store import req, res

RATING = '{"rating": 2}'


def _store(root: Path, n: int = 6) -> tuple[ResponseStore, list]:
    store = ResponseStore(root)
    rs = [req(i) for i in range(n)]
    store.put_batch([res(r, text=RATING) for r in rs], rs)
    return store, rs


def _strip_and_change(seg: Path, row: int, text: str) -> None:
    """Rewrite a segment as another tool would: valid Parquet, the store's format key kept,
    one answer changed, no checksum."""
    table = pq.read_table(seg)
    texts = table.column("text").to_pylist()
    texts[row] = text
    table = table.set_column(table.column_names.index("text"), "text", pa.array(texts, pa.string()))
    with pq.ParquetWriter(seg, table.schema.remove_metadata()) as writer:
        writer.write_table(table)
        writer.add_key_value_metadata({segments.FORMAT_KEY: STORE_FORMAT})
    meta = pq.read_metadata(seg).metadata
    assert segments.CHECKSUM_KEY.encode() not in meta and segments.FORMAT_KEY.encode() in meta


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


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_stripped_segment_is_damage_for_every_reader(tmp_path, reader):
    store, rs = _store(tmp_path / "s")
    seg = _only_segment(store)
    _strip_and_change(seg, 3, '{"rating": 5}')
    fresh = ResponseStore(store.root)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        READERS[reader](fresh, [r.key for r in rs])
    moved = [str(w.message) for w in caught if "damaged segment" in str(w.message)]
    assert moved and "no checksum, although every segment of this store carries one" in moved[0]
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


def test_an_unsealed_store_reads_a_stripped_segment_unchecked_with_a_warning(tmp_path):
    """The price of reading stores from before checksums: named, once, and `compact` seals it."""
    store, rs = _store(tmp_path / "s")
    (store.root / segments.SEALED_MARKER).unlink()
    _strip_and_change(_only_segment(store), 1, '{"rating": 5}')
    with pytest.warns(UserWarning, match="carries no checksum"):
        assert ResponseStore(store.root).get(rs[1].key).text == '{"rating": 5}'
    assert not (store.root / segments.SEALED_MARKER).exists()
    with pytest.warns(UserWarning, match="carries no checksum"):
        ResponseStore(store.root).compact()
    assert (store.root / segments.SEALED_MARKER).is_file()
    assert ResponseStore(store.root).verify().ok


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
