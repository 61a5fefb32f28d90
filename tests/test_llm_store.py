"""Response store: round trips, segments, damage tolerance, concurrency, compaction, export/import, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from context_effects.llm.store import cli as store_cli  # noqa: E402
from context_effects.llm.store import segments, transfer  # noqa: E402
from context_effects.llm.store.responses import ResponseStore  # noqa: E402
from context_effects.llm.store.rows import COLUMNS, request_from_json  # noqa: E402
from context_effects.llm.types import LLMRequest, LLMResult, ModelRef, Sampling  # noqa: E402

MODEL = ModelRef(provider="vllm", model_id="org/tiny", revision="abc123")


def req(i: int, **kw) -> LLMRequest:
    return LLMRequest(
        model=MODEL,
        messages=(("system", "sys"), ("user", f"item {i}: ünïcode ✓")),
        sampling=Sampling(temperature=0.0, max_tokens=8, logprobs=2, probe_tokens=("Yes", "No")),
        meta={"item": i, "condition": "blind"},
        **kw,
    )


def res(r: LLMRequest, text: str | None = None, **kw) -> LLMResult:
    base = dict(
        key=r.key,
        text=text if text is not None else f"reply {r.meta['item']}",
        finish_reason="stop",
        tokens_in=12,
        tokens_out=3,
        first_token_logprobs={"Yes": -0.1, "No": -2.4},
        probe_probs={"Yes": 0.9, "No": 0.09},
        latency_s=0.5,
        attempt=r.attempt,
        backend="vllm",
        engine_version="vllm 0.33.0",
        timestamp="2026-11-29T12:00:00.000000Z",
        cost_usd=None,
        notes="system merged into first user turn",
    )
    base.update(kw)
    return LLMResult(**base)


def put(store: ResponseStore, idx: range | list[int], **kw) -> list[LLMRequest]:
    rs = [req(i) for i in idx]
    store.put_batch([res(r, **kw) for r in rs], rs)
    return rs


def segs(store: ResponseStore) -> list[Path]:
    return sorted(store.seg_dir.glob("seg-*.parquet"))


def test_a_key_is_the_hash_of_its_canonical_form_computed_once() -> None:
    """The key is kept on the request after its first use (the runner asks for it several
    times per request); it stays the SHA-256 of the canonical JSON, a changed copy gets
    its own, and equality and pickling still see only the fields."""
    import dataclasses
    import hashlib
    import pickle

    r = req(1)
    blob = json.dumps(r.canonical(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    assert r.key == hashlib.sha256(blob.encode("utf-8")).hexdigest()
    assert r.key is r.key  # kept, not recomputed
    again = dataclasses.replace(r, attempt=1)
    assert again.key != r.key and again.key == req(1, attempt=1).key
    assert req(1) == r and hash(req(1)) == hash(r) and "key" not in dataclasses.asdict(r)
    assert pickle.loads(pickle.dumps(r)).key == r.key == req(1).key


def test_round_trip_every_field(tmp_path: Path) -> None:
    s = ResponseStore(tmp_path / "s")
    r = req(1)
    original = res(r, cost_usd=0.0012)
    assert s.put_batch([original], [r]) == 1
    got = ResponseStore(tmp_path / "s").get(r.key)
    assert got == original
    row = s.get_row(r.key)
    assert list(row) == list(COLUMNS)
    assert request_from_json(row["request_json"]).key == r.key  # the stored request re-hashes to its key
    assert json.loads(row["request_json"])["meta"] == {"item": 1, "condition": "blind"}
    # None-valued optional fields survive too.
    r2 = req(2)
    bare = LLMResult(key=r2.key, text="", finish_reason=None)
    s.put_batch([bare], [r2])
    got2 = s.get(r2.key)
    assert got2.text == "" and got2.first_token_logprobs is None and got2.tokens_in is None
    assert got2.timestamp  # filled at write time


def test_get_many_contains_len_and_missing_keys(tmp_path: Path) -> None:
    s = ResponseStore(tmp_path / "s")
    rs = put(s, range(5))
    assert len(s) == 5 and rs[3].key in s and "nope" not in s
    got = s.get_many([rs[4].key, "nope", rs[0].key])
    assert set(got) == {rs[4].key, rs[0].key} and got[rs[4].key].text == "reply 4"
    assert s.get("nope") is None


def test_failures_are_never_stored(tmp_path: Path) -> None:
    s = ResponseStore(tmp_path / "s")
    rs = [req(i) for i in range(3)]
    results = [res(rs[0]), res(rs[1], error="Timeout"), LLMResult(key=rs[2].key, text=None, finish_reason=None)]
    assert s.put_batch(results, rs) == 1
    assert rs[0].key in s and rs[1].key not in s and rs[2].key not in s
    assert s.put_batch([results[1]], rs) == 0
    assert len(segs(s)) == 1  # nothing to write, no empty segment


def test_each_batch_is_its_own_immutable_segment_with_writer_id(tmp_path: Path) -> None:
    s = ResponseStore(tmp_path / "s")
    put(s, range(3))
    put(s, range(3, 5))
    put(s, range(0, 5))  # all present already: nothing written
    files = segs(s)
    assert len(files) == 2
    name = files[0].name
    assert f"-{os.getpid()}-" in name and name.startswith("seg-")
    assert not list(s.seg_dir.glob(".tmp-*"))
    assert s.put_batch([res(req(9))], [req(9)]) == 1 and len(segs(s)) == 3


def test_result_without_request_is_an_error(tmp_path: Path) -> None:
    s = ResponseStore(tmp_path / "s")
    with pytest.raises(ValueError, match="no matching request"):
        s.put_batch([res(req(1))], [req(2)])


def test_refresh_sees_other_writers(tmp_path: Path) -> None:
    reader = ResponseStore(tmp_path / "s")
    assert len(reader) == 0
    writer = ResponseStore(tmp_path / "s")
    rs = put(writer, range(4))
    assert rs[0].key not in reader  # not yet scanned
    assert reader.refresh() == 1
    assert reader.get(rs[0].key).text == "reply 0"


def test_damaged_segments_are_quarantined_and_temp_files_ignored(tmp_path: Path) -> None:
    s = ResponseStore(tmp_path / "s")
    rs = put(s, range(3))
    good = segs(s)[0]
    data = good.read_bytes()
    # kill -9 debris: a half-written temp file, plus damaged files under real segment names.
    (s.seg_dir / ".tmp-seg-20260101T000000000000Z-h-1-x-000001.parquet").write_bytes(data[: len(data) // 2])
    (s.seg_dir / "seg-00-truncated.parquet").write_bytes(data[: len(data) // 2])
    (s.seg_dir / "seg-01-garbage.parquet").write_bytes(b"not parquet at all")
    (s.seg_dir / "seg-02-empty.parquet").write_bytes(b"")
    pq.write_table(pa.table({"x": [1]}), s.seg_dir / "seg-03-wrongschema.parquet")
    bad = ["seg-00-truncated.parquet", "seg-01-garbage.parquet", "seg-02-empty.parquet", "seg-03-wrongschema.parquet"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reader = ResponseStore(tmp_path / "s")
        assert len(reader) == 3
        assert reader.get(rs[2].key).text == "reply 2"
        reader.refresh()  # already moved aside: no new warnings
    damaged = [str(w.message) for w in caught if "damaged segment" in str(w.message)]
    assert len(damaged) == 4 and all(any(n in m for m in damaged) for n in bad)  # each named once
    # Moved aside with a note each; the temp file is left alone.
    assert sorted(p.name for p in segs(reader)) == [good.name]
    assert sorted(p.name for p in reader.quarantine_dir.glob("seg-*.parquet")) == bad
    assert all((reader.quarantine_dir / f"{n}.json").exists() for n in bad)
    assert (s.seg_dir / ".tmp-seg-20260101T000000000000Z-h-1-x-000001.parquet").exists()
    # Their rows are unknown, so the store reports them until someone deals with them.
    assert [Path(d.split(": ", 1)[0]).name for d in reader.stats()["damaged_segments"]] == bad
    # Writing still works around the debris; a fresh reader is reminded of what is missing.
    put(reader, [7])
    with pytest.warns(UserWarning, match="4 damaged segment.s. were moved aside") as rec:
        assert len(ResponseStore(tmp_path / "s")) == 4
    assert all(n in str(rec[0].message) for n in bad)


def test_duplicate_keys_resolve_to_first_segment_everywhere(tmp_path: Path) -> None:
    s = ResponseStore(tmp_path / "s")
    r = req(1)
    s.put_batch([res(r, text="first")], [r])
    time.sleep(0.002)
    other = ResponseStore(tmp_path / "s")
    other._loaded = True  # simulate a writer that raced and never saw the first copy
    other.put_batch([res(r, text="second")], [r])
    assert len(segs(s)) == 2
    assert ResponseStore(tmp_path / "s").get(r.key).text == "first"
    # A reader that happened to scan the later segment first still converges on the same copy.
    late = ResponseStore(tmp_path / "s")
    late._loaded = True
    second = segs(s)[1].name
    late._add_keys(second, late._scan(second))
    assert late.get(r.key).text == "second"
    late.refresh()
    assert late.get(r.key).text == "first"


def test_compact_merges_dedups_and_keeps_everything(tmp_path: Path) -> None:
    s = ResponseStore(tmp_path / "s")
    for start in range(0, 20, 4):
        put(s, range(start, start + 4))
    r = req(0)
    racer = ResponseStore(tmp_path / "s")
    racer._loaded = True
    racer.put_batch([res(r, text="duplicate")], [r])
    stale = ResponseStore(tmp_path / "s")
    assert len(stale) == 20  # index built on the old segments
    old_tmp = s.seg_dir / ".tmp-seg-old.parquet"
    old_tmp.write_bytes(b"x")
    os.utime(old_tmp, (time.time() - 7200, time.time() - 7200))
    fresh_tmp = s.seg_dir / ".tmp-seg-live.parquet"
    fresh_tmp.write_bytes(b"x")

    report = s.compact()
    assert report["segments_before"] == 6 and report["segments_after"] == 1
    assert report["rows"] == 20 and report["duplicates_dropped"] == 1 and report["stale_tmp_removed"] == 1
    assert len(segs(s)) == 1 and not old_tmp.exists() and fresh_tmp.exists()
    assert s.get(r.key).text == "reply 0"
    # A reader holding an index into deleted segments recovers transparently.
    assert stale.get(req(13).key).text == "reply 13"
    # Segments written after compaction still land and are found.
    put(s, [99])
    assert len(ResponseStore(tmp_path / "s")) == 21
    assert s.compact()["segments_after"] == 1


def test_reads_across_many_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(segments, "ROW_GROUP_ROWS", 10)
    s = ResponseStore(tmp_path / "s")
    rs = put(s, range(35))
    assert s._segments[segs(s)[0].name].row_group_starts == [0, 10, 20, 30, 35]
    got = ResponseStore(tmp_path / "s").get_many([rs[34].key, rs[0].key, rs[21].key])
    assert {k: v.text for k, v in got.items()} == {rs[34].key: "reply 34", rs[0].key: "reply 0", rs[21].key: "reply 21"}


def test_export_import_round_trip_and_key_verification(tmp_path: Path) -> None:
    s = ResponseStore(tmp_path / "a")
    put(s, range(6))
    put(s, range(6, 9))
    out = tmp_path / "export.parquet"
    assert transfer.export(s, out) == 9
    table = pq.read_table(out)
    assert table.num_rows == 9 and table.column_names == list(COLUMNS)

    b = ResponseStore(tmp_path / "b")
    put(b, [0])  # already present rows are skipped
    assert transfer.import_file(b, out) == 8
    assert len(b) == 9 and transfer.import_file(b, out) == 0
    assert {k: b.get(k) for k in s.keys()} == {k: s.get(k) for k in s.keys()}

    # A file whose answers are filed under the wrong request is refused.
    keys = table.column("key").to_pylist()
    tampered = table.set_column(0, "key", pa.array([keys[1], keys[0]] + keys[2:]))
    bad = tmp_path / "tampered.parquet"
    pq.write_table(tampered, bad)  # rewritten by another tool: no checksum, so only the keys can tell
    with pytest.raises(ValueError, match="does not match"), pytest.warns(UserWarning, match="no checksum"):
        transfer.import_file(ResponseStore(tmp_path / "c"), bad, allow_unchecked=True)
    with pytest.raises(ValueError, match="missing columns"), pytest.warns(UserWarning, match="no checksum"):
        pq.write_table(pa.table({"key": ["x"]}), tmp_path / "alien.parquet")
        transfer.import_file(ResponseStore(tmp_path / "d"), tmp_path / "alien.parquet", allow_unchecked=True)


def test_cli_export_import_stats(tmp_path: Path) -> None:
    s = ResponseStore(tmp_path / "a")
    put(s, range(4), cost_usd=0.25)
    out = tmp_path / "e.parquet"
    assert store_cli.main(["export", str(tmp_path / "a"), str(out)]) == 0
    assert store_cli.main(["import", str(tmp_path / "b"), str(out)]) == 0
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-m", "context_effects.llm.store", "stats", str(tmp_path / "b")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    stats = json.loads(proc.stdout)
    assert stats["rows"] == 4 and stats["by_model"] == {"vllm:org/tiny": 4} and stats["tokens_out"] == 12
    assert stats["cost_usd_recorded"] == 1.0
    assert store_cli.main(["stats", str(tmp_path / "missing")]) == 2


CONCURRENT_WRITER = textwrap.dedent("""
    import sys, time
    sys.path[:0] = [{src!r}, {tests!r}]
    from pathlib import Path
    from test_llm_store import req, res
    from context_effects.llm.store.responses import ResponseStore

    root, go, lo, hi = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    store = ResponseStore(root)
    while not go.exists():
        time.sleep(0.005)
    for start in range(lo, hi, 3):
        rs = [req(i) for i in range(start, min(start + 3, hi))]
        store.refresh()
        store.put_batch([res(r) for r in rs], rs)
    """)


def test_two_processes_writing_concurrently_lose_nothing(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(CONCURRENT_WRITER.format(src=str(SRC), tests=str(Path(__file__).parent)))
    root, go = tmp_path / "s", tmp_path / "go"
    # Overlapping ranges: both may write the same keys; neither may lose any.
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(root), str(go), str(lo), str(hi)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for lo, hi in [(0, 90), (45, 150)]
    ]
    time.sleep(0.3)
    go.touch()
    reader = ResponseStore(root)
    while any(p.poll() is None for p in procs):  # read while they write: never crashes
        reader.refresh()
        time.sleep(0.01)
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    s = ResponseStore(root)
    assert len(s) == 150
    got = s.get_many(req(i).key for i in range(150))
    assert all(got[req(i).key].text == f"reply {i}" for i in range(150))
    names = [p.name for p in segs(s)]
    assert len(names) == len(set(names)) and len({n.split("-")[3] for n in names}) == 2  # two writer pids
    assert not list(s.seg_dir.glob(".tmp-*"))
    s.compact()
    assert len(ResponseStore(root)) == 150
