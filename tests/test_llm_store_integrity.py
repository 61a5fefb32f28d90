"""Response store integrity: no damaged byte ever turns into a silently different answer.

Every segment and every export carries the sha256 of its own bytes
(src/context_effects/llm/store/__init__.py, "Integrity"). These tests damage real files on
purpose - one flipped byte in each part of the file (magic, page headers,
compressed page data, footer, the digest itself, footer length and end marker),
truncation, legacy files - and check that ``verify`` finds it, that a read never
returns a changed result, that export and import refuse damaged input, that
racing readers survive, and that a rerun answers exactly the lost keys again.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import textwrap
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))
TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from test_llm_store import req, res  # noqa: E402

from context_effects.llm.store import cli as store_cli  # noqa: E402
from context_effects.llm.store import segments, transfer  # noqa: E402
from context_effects.llm.backends.base import Backend  # noqa: E402
from context_effects.llm.backends.replay import ReplayBackend, ReplayMiss  # noqa: E402
from context_effects.llm.runner import run_requests  # noqa: E402
from context_effects.llm.store.responses import ResponseStore  # noqa: E402
from context_effects.llm.store.segments import StoreDamaged  # noqa: E402
from context_effects.llm.types import LLMRequest, LLMResult  # noqa: E402

FAULTS = TESTS / "faults" / "store"
#: A segment written by the store before segments carried checksums (rows: req(100..102), res()).
LEGACY_SEGMENT = FAULTS / "legacy-unchecked-segment.parquet"
SEED = 20261130


# --------------------------------------------------------------------------- helpers


def segs(store: ResponseStore) -> list[Path]:
    return sorted(store.seg_dir.glob("seg-*.parquet"))


def put(store: ResponseStore, idx: Sequence[int], **kw) -> list[LLMRequest]:
    rs = [req(i) for i in idx]
    assert store.put_batch([res(r, **kw) for r in rs], rs) == len(rs)
    return rs


def flip(path: Path, offset: int, mask: int = 0xFF) -> None:
    with open(path, "r+b") as fh:
        fh.seek(offset)
        byte = fh.read(1)[0]
        fh.seek(offset)
        fh.write(bytes([byte ^ mask]))


def byte_classes(path: Path) -> dict[str, list[tuple[int, int]]]:
    """Byte ranges [lo, hi) of each part of a Parquet segment, from its own footer."""
    data = path.read_bytes()
    size = len(data)
    footer_start = size - 8 - int.from_bytes(data[-8:-4], "little")
    meta = pq.read_metadata(path)
    headers, pages = [], []
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        for c in range(rg.num_columns):
            col = rg.column(c)
            lo = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
            hi = lo + col.total_compressed_size
            # The first bytes of a column chunk are a page header (thrift); the rest is
            # mostly compressed page data with the next pages' headers in between.
            headers.append((lo, lo + 8))
            pages.append((lo + 24, hi) if hi - lo > 32 else (lo + 8, hi))
    digest = meta.metadata[segments.CHECKSUM_KEY.encode()]
    at = data.index(digest)
    assert data.count(digest) == 1 and footer_start <= at
    return {
        "leading magic": [(0, 4)],
        "page headers": headers,
        "page data": pages,
        "footer": [(footer_start, at), (at + 64, size - 8)],
        "digest": [(at, at + 64)],
        "footer length and end magic": [(size - 8, size)],
    }


def column_page(path: Path, column: str, row_group: int = 0) -> int:
    """An offset inside the compressed page data of one column chunk (past its page header)."""
    rg = pq.read_metadata(path).row_group(row_group)
    col = next(rg.column(c) for c in range(rg.num_columns) if rg.column(c).path_in_schema == column)
    lo = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
    return lo + col.total_compressed_size - 3  # the last bytes of the chunk: page data, not a header


def pick(ranges: list[tuple[int, int]], rng: random.Random, n: int) -> list[int]:
    spots = [o for lo, hi in ranges for o in range(lo, hi)]
    return sorted(rng.sample(spots, min(n, len(spots))))


@pytest.fixture
def pristine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, list[str], dict[str, LLMResult]]:
    """A store with a multi-row-group target segment (first) and an untouched one (second)."""
    monkeypatch.setattr(segments, "ROW_GROUP_ROWS", 4)
    root = tmp_path / "pristine"
    s = ResponseStore(root)
    target = put(s, range(12))
    time.sleep(0.002)
    put(s, range(12, 17))
    monkeypatch.setattr(segments, "ROW_GROUP_ROWS", 4096)
    name = segs(s)[0].name
    assert s._segments[name].row_group_starts == [0, 4, 8, 12]
    keys = [req(i).key for i in range(17)]
    original = s.get_many(keys)
    assert len(original) == 17
    return root, name, [r.key for r in target], original


def copy_store(root: Path, dest: Path) -> Path:
    shutil.copytree(root, dest)
    return dest


# --------------------------------------------------------------------------- checksums


def test_every_segment_and_export_carries_a_checksum_of_its_bytes(tmp_path: Path) -> None:
    s = ResponseStore(tmp_path / "s")
    put(s, range(5))
    seg = segs(s)[0]
    kv = pq.read_metadata(seg).metadata
    assert kv[segments.CHECKSUM_KIND_KEY.encode()] == segments.CHECKSUM_KIND.encode()
    digest = kv[segments.CHECKSUM_KEY.encode()].decode()
    # Reproducible by hand: sha256 of the file with the digest's 64 characters read as "0".
    import hashlib

    assert hashlib.sha256(seg.read_bytes().replace(digest.encode(), b"0" * 64)).hexdigest() == digest
    report = s.verify()
    assert report.ok == [seg.name] and report.clean
    out = tmp_path / "e.parquet"
    assert transfer.export(s, out) == 5
    assert segments.check_file(out) is True
    # Reading a checksummed segment raises no warning at all.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(ResponseStore(tmp_path / "s")) == 5


def test_every_single_byte_change_anywhere_in_a_segment_is_detected(tmp_path: Path, monkeypatch) -> None:
    """Exhaustive: each byte of a real multi-row-group segment, flipped alone, fails the check."""
    monkeypatch.setattr(segments, "ROW_GROUP_ROWS", 2)
    s = ResponseStore(tmp_path / "s")
    put(s, range(3))
    data = segs(s)[0].read_bytes()
    assert segments.parse_segment(data)[0] is True
    rng = random.Random(SEED)
    missed = []
    for offset in range(len(data)):
        damaged = bytearray(data)
        damaged[offset] ^= rng.randrange(1, 256)
        try:
            segments.parse_segment(bytes(damaged))
        except segments.Damaged:
            continue
        missed.append(offset)
    assert missed == [], f"{len(missed)} of {len(data)} one-byte changes went unnoticed"


@pytest.mark.parametrize(
    "part",
    ["leading magic", "page headers", "page data", "footer", "digest", "footer length and end magic"],
)
def test_one_flipped_byte_is_found_by_verify_and_never_read_back(part: str, pristine, tmp_path: Path) -> None:
    root, name, lost, original = pristine
    rng = random.Random(f"{SEED}-{part}")
    offsets = pick(byte_classes(root / "segments" / name)[part], rng, 5)
    assert offsets
    for i, offset in enumerate(offsets):
        s = ResponseStore(copy_store(root, tmp_path / f"c{i}"), create=False)
        path = s.seg_dir / name
        flip(path, offset, rng.randrange(1, 256))

        report = s.verify()  # finds it, moves nothing
        assert [d.segment for d in report.damaged] == [name], (part, offset)
        assert report.damaged[0].reason and not report.clean and path.exists()
        assert store_cli.main(["verify", str(s.root)]) == 1

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = ResponseStore(s.root).get_many(original)
        # Never a changed answer: the damaged segment's rows are misses, the rest unchanged.
        assert got == {k: v for k, v in original.items() if k not in lost}, (part, offset)
        assert any(name in str(w.message) and "damaged segment" in str(w.message) for w in caught)
        assert not path.exists() and (s.quarantine_dir / name).exists()
        note = json.loads((s.quarantine_dir / f"{name}.json").read_text())
        assert note["segment"] == name and note["reason"]


def test_damage_after_a_segment_was_checked_is_still_caught(pristine, tmp_path: Path) -> None:
    root, name, lost, original = pristine
    good = {k: v for k, v in original.items() if k not in lost}

    # The file changes while a reader holds it verified (its times change): checked again.
    s = ResponseStore(copy_store(root, tmp_path / "a"))
    assert s.get_many(original) == original
    path = s.seg_dir / name
    st = path.stat()
    flip(path, column_page(path, "text", 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime put back; ctime cannot be
    with pytest.warns(UserWarning, match="damaged segment"):
        assert s.get_many(original) == good
    assert (s.quarantine_dir / name).exists()

    # Damage the file's times do not show at all (disk decay): the page checksums catch it.
    s = ResponseStore(copy_store(root, tmp_path / "b"))
    assert s.get_many(original) == original
    path = s.seg_dir / name
    flip(path, column_page(path, "text", 1))
    s._segments[name].sig = segments.signature(path.stat())  # as if nothing had changed
    with pytest.warns(UserWarning, match="damaged segment"):
        assert s.get_many(original) == good
    assert (s.quarantine_dir / name).exists()


# --------------------------------------------------------------------------- export / import


def test_truncated_segment_fails_export_unless_skipped(pristine, tmp_path: Path, capsys) -> None:
    root, name, lost, original = pristine
    s = ResponseStore(copy_store(root, tmp_path / "s"))
    path = s.seg_dir / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size * 2 // 3])
    out = tmp_path / "release" / "responses.parquet"

    with pytest.warns(UserWarning, match="damaged segment"):
        assert store_cli.main(["export", str(s.root), str(out)]) == 1
    err = capsys.readouterr().err
    assert name in err and "truncated" in err and "--skip-damaged" in err
    assert not out.exists() and not list(out.parent.glob(".tmp-*"))
    # Moved aside by the failed export, the loss still blocks the next one.
    assert (s.quarantine_dir / name).exists()
    with pytest.warns(UserWarning, match="were moved aside"):
        assert store_cli.main(["export", str(s.root), str(out)]) == 1
    assert name in capsys.readouterr().err and not out.exists()
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-m", "context_effects.llm.store", "export", str(s.root), str(out)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode != 0 and name in proc.stderr and not out.exists()

    with pytest.warns(UserWarning, match="were moved aside"):
        assert store_cli.main(["export", str(s.root), str(out), "--skip-damaged"]) == 0
    stdout = capsys.readouterr().out
    assert f"exported {17 - len(lost)} rows" in stdout and "skipped 1 damaged segment" in stdout and name in stdout
    back = ResponseStore(tmp_path / "back")
    assert transfer.import_file(back, out) == 17 - len(lost)
    assert back.get_many(original) == {k: v for k, v in original.items() if k not in lost}


def test_export_of_a_damaged_segment_found_while_writing(pristine, tmp_path: Path) -> None:
    """Damage that appears after the scan is caught as the rows are copied: no partial file."""
    root, name, lost, original = pristine
    s = ResponseStore(copy_store(root, tmp_path / "s"))
    s.refresh()
    real_refresh = s.refresh

    def refresh_then_damage(*, full: bool = False) -> int:
        n = real_refresh(full=full)
        flip(s.seg_dir / name, column_page(s.seg_dir / name, "text", 1))
        return n

    s.refresh = refresh_then_damage  # type: ignore[method-assign]
    out = tmp_path / "out.parquet"
    with pytest.warns(UserWarning, match="damaged segment"), pytest.raises(StoreDamaged, match=name):
        transfer.export(s, out)
    assert not out.exists() and not list(tmp_path.glob(".tmp-*"))


def test_damaged_export_file_is_refused_by_import(pristine, tmp_path: Path, capsys) -> None:
    root, name, lost, original = pristine
    out = tmp_path / "e.parquet"
    assert transfer.export(ResponseStore(root), out) == 17
    rng = random.Random(SEED)
    for i, offset in enumerate(rng.sample(range(out.stat().st_size), 8) + ["truncate"]):
        bad = tmp_path / f"bad{i}.parquet"
        shutil.copy(out, bad)
        if offset == "truncate":
            bad.write_bytes(out.read_bytes()[:-100])
        else:
            flip(bad, offset, rng.randrange(1, 256))
        target = ResponseStore(tmp_path / f"t{i}")
        with pytest.raises(StoreDamaged, match=str(bad)):
            transfer.import_file(target, bad)
        assert len(ResponseStore(tmp_path / f"t{i}")) == 0  # nothing half-imported
        assert store_cli.main(["import", str(tmp_path / f"t{i}"), str(bad)]) == 1
        assert str(bad) in capsys.readouterr().err


def test_import_of_an_export_without_checksum_is_refused_unless_allowed(tmp_path: Path, capsys) -> None:
    s = ResponseStore(tmp_path / "s")
    put(s, range(3))
    plain = tmp_path / "plain.parquet"
    pq.write_table(pq.read_table(segs(s)[0]), plain)  # rewritten by another tool: digest not carried
    target = ResponseStore(tmp_path / "t")
    with pytest.raises(StoreDamaged, match="no checksum.*--allow-unchecked"):
        transfer.import_file(target, plain)
    assert len(target) == 0
    assert store_cli.main(["import", str(target.root), str(plain)]) == 1
    assert "--allow-unchecked" in capsys.readouterr().err
    with pytest.warns(UserWarning, match="carries no checksum"):
        assert transfer.import_file(ResponseStore(tmp_path / "t"), plain, allow_unchecked=True) == 3


# --------------------------------------------------------------------------- verify CLI


def test_verify_cli_reports_quarantines_and_clears_after_rerun(pristine, tmp_path: Path, capsys) -> None:
    root, name, lost, original = pristine
    s = ResponseStore(copy_store(root, tmp_path / "s"))
    other = segs(s)[1].name
    flip(s.seg_dir / name, column_page(s.seg_dir / name, "probe_probs", 2))
    (s.seg_dir / "seg-zz-truncated.parquet").write_bytes((s.seg_dir / other).read_bytes()[:500])

    assert store_cli.main(["verify", str(s.root)]) == 1
    out = capsys.readouterr().out
    assert f"DAMAGED      {name}: sha256 mismatch" in out
    assert "DAMAGED      seg-zz-truncated.parquet: truncated" in out and "NOT CLEAN" in out
    assert len(segs(s)) == 3  # nothing moved without --quarantine

    with pytest.warns(UserWarning, match="damaged segment"):
        assert store_cli.main(["verify", str(s.root), "--quarantine"]) == 1
    out = capsys.readouterr().out
    assert f"-> moved to {s.quarantine_dir / name}" in out
    assert [p.name for p in segs(s)] == [other]

    # The rows of the flipped segment are known (keys still match their requests); the truncated one's are not.
    assert store_cli.main(["verify", str(s.root)]) == 1
    out = capsys.readouterr().out
    assert f"{len(lost)} of its {len(lost)} rows are not in the store" in out and "rows unknown" in out
    with pytest.warns(UserWarning, match="2 damaged segment.s. were moved aside"):
        put(ResponseStore(s.root), range(12))  # a rerun answers them again
    (s.quarantine_dir / "seg-zz-truncated.parquet").unlink()  # a person looked and removed it
    assert store_cli.main(["verify", str(s.root)]) == 0
    out = capsys.readouterr().out
    assert f"resolved: all {len(lost)} of its rows were answered again" in out and "NOT CLEAN" not in out


def test_verify_of_a_missing_store(tmp_path: Path) -> None:
    assert store_cli.main(["verify", str(tmp_path / "nowhere")]) == 2


# --------------------------------------------------------------------------- legacy


def install_legacy(store: ResponseStore, stamp: str) -> Path:
    dest = store.seg_dir / f"seg-{stamp}-legacy-1-000000000000-000001.parquet"
    shutil.copy(LEGACY_SEGMENT, dest)
    return dest


def test_segments_without_checksum_are_read_unchecked_and_compact_adds_one(tmp_path: Path, capsys) -> None:
    s = ResponseStore(tmp_path / "s")
    put(s, range(3))
    # A store made before the sealed marker existed: legacy segments are allowed in it.
    (s.root / segments.SEALED_MARKER).unlink()
    first = install_legacy(s, "20250101T000000000000Z")
    install_legacy(s, "20250102T000000000000Z")  # same rows: a duplicate
    legacy_keys = [req(i).key for i in range(100, 103)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reader = ResponseStore(s.root)
        got = reader.get_many(legacy_keys)
    assert got == {r.key: res(r) for r in (req(i) for i in range(100, 103))}
    unchecked = [str(w.message) for w in caught if "carries no checksum" in str(w.message)]
    assert len(unchecked) == 1 and first.name in unchecked[0]  # one warning per process, naming one

    report = reader.verify()
    assert len(report.unchecked) == 2 and len(report.ok) == 1 and report.clean
    assert store_cli.main(["verify", str(s.root)]) == 0
    assert "UNCHECKED" in capsys.readouterr().out

    with pytest.warns(UserWarning, match="carries no checksum"):
        summary = ResponseStore(s.root).compact()
    assert summary["unchecked_rewritten"] == 2 and summary["rows"] == 6
    report = ResponseStore(s.root).verify()
    assert report.unchecked == [] and len(report.ok) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert ResponseStore(s.root).get_many(legacy_keys) == got


def test_compact_of_a_single_unchecked_segment_rewrites_it(tmp_path: Path) -> None:
    s = ResponseStore(tmp_path / "s")
    install_legacy(s, "20250101T000000000000Z")
    with pytest.warns(UserWarning, match="carries no checksum"):
        assert s.compact()["unchecked_rewritten"] == 1
    report = ResponseStore(s.root).verify()
    assert report.ok == [p.name for p in segs(s)] and report.unchecked == [] and len(report.ok) == 1


# --------------------------------------------------------------------------- races and read-only stores


CONCURRENT_READER = textwrap.dedent("""
    import json, os, sys, time, warnings
    sys.path[:0] = [{src!r}, {tests!r}]
    from pathlib import Path
    from test_llm_store import req
    from context_effects.llm.store.responses import ResponseStore

    sync, roots = Path(sys.argv[1]), sys.argv[2:]
    keys = [req(i).key for i in range(17)]
    for n, root in enumerate(roots):
        (sync / f"ready-{{n}}-{{os.getpid()}}").touch()
        while not (sync / f"go-{{n}}").exists():
            time.sleep(0.001)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = ResponseStore(root).get_many(keys)
        print(json.dumps({{"texts": {{k: v.text for k, v in got.items()}},
                          "warnings": [str(w.message) for w in caught]}}), flush=True)
    """)


def test_concurrent_readers_finding_the_same_bad_segment_all_survive(pristine, tmp_path: Path) -> None:
    root, name, lost, original = pristine
    script = tmp_path / "reader.py"
    script.write_text(CONCURRENT_READER.format(src=str(SRC), tests=str(TESTS)))
    expected = {k: v.text for k, v in original.items() if k not in lost}
    offsets = pick(byte_classes(root / "segments" / name)["page data"], random.Random(SEED), 4)
    stores = []
    for round_, offset in enumerate(offsets):
        s = ResponseStore(copy_store(root, tmp_path / f"r{round_}"), create=False)
        flip(s.seg_dir / name, offset)
        stores.append(s)
    sync = tmp_path / "sync"
    sync.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(sync), *(str(s.root) for s in stores)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    try:
        for round_ in range(len(stores)):
            deadline = time.monotonic() + 120
            # Released together, once all three wait: they race for the same damaged segment.
            while len(list(sync.glob(f"ready-{round_}-*"))) < len(procs):
                assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
                time.sleep(0.005)
            (sync / f"go-{round_}").touch()
        outputs = [p.communicate(timeout=120) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, err
        reports = [json.loads(line) for line in out.splitlines()]
        assert len(reports) == len(stores)
        for report in reports:
            assert report["texts"] == expected  # never a changed answer, whoever won
            # Each names the segment: as the one that moved it, lost the race, or found it moved.
            assert any(name in w for w in report["warnings"])
    for s in stores:  # moved exactly once, with one note; nothing left behind
        assert sorted(p.name for p in s.quarantine_dir.iterdir()) == [name, f"{name}.json"]
        assert not (s.seg_dir / name).exists()


def test_a_reader_that_loses_the_race_to_quarantine_carries_on(pristine, tmp_path: Path) -> None:
    root, name, lost, original = pristine
    s = ResponseStore(copy_store(root, tmp_path / "s"), create=False)
    flip(s.seg_dir / name, byte_classes(s.seg_dir / name)["footer"][0][0] + 2)
    data = (s.seg_dir / name).read_bytes()
    first, second = ResponseStore(s.root), ResponseStore(s.root)
    with pytest.warns(UserWarning, match="damaged segment"):
        first.refresh()
    note = (s.quarantine_dir / f"{name}.json").read_text()
    with pytest.warns(UserWarning, match="already moved aside"):
        damage = second._quarantine(name, "sha256 mismatch (test)", None, data)
    assert damage.segment == name
    assert (s.quarantine_dir / f"{name}.json").read_text() == note  # the winner's note stands
    assert sorted(p.name for p in s.quarantine_dir.iterdir()) == [name, f"{name}.json"]


def test_read_only_store_skips_damaged_segment_in_place(pristine, tmp_path: Path, monkeypatch) -> None:
    root, name, lost, original = pristine
    s = ResponseStore(copy_store(root, tmp_path / "s"), create=False)
    flip(s.seg_dir / name, column_page(s.seg_dir / name, "text"))

    def refuse(src, dst):  # a read-only mount (root ignores chmod, so simulate it)
        raise PermissionError(30, "Read-only file system", str(src))

    monkeypatch.setattr(segments.os, "rename", refuse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reader = ResponseStore(s.root)
        assert reader.get_many(original) == {k: v for k, v in original.items() if k not in lost}
        reader.refresh(full=True)  # unchanged: not warned again
    msgs = [str(w.message) for w in caught if name in str(w.message)]
    assert len(msgs) == 1 and "could not be moved aside" in msgs[0]
    assert (s.seg_dir / name).exists()
    with pytest.raises(StoreDamaged, match=name):
        transfer.export(reader, tmp_path / "out.parquet")
    assert store_cli.main(["verify", str(s.root)]) == 1


# --------------------------------------------------------------------------- rerun and replay


class EchoBackend(Backend):
    name = "echo"

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def engine_version(self) -> str:
        return "echo-1"

    def run(self, requests: Sequence[LLMRequest]) -> Iterator[LLMResult]:
        for r in requests:
            self.calls.append(r.key)
            yield LLMResult(key=r.key, text=f"rating for {r.messages[-1][1]}", finish_reason="stop")


def test_rerun_after_quarantine_answers_exactly_the_lost_keys(tmp_path: Path, capsys) -> None:
    root = tmp_path / "s"
    reqs = [req(i) for i in range(24)]
    first = run_requests(reqs, EchoBackend(), ResponseStore(root), batch_size=8, progress=False)
    store = ResponseStore(root)
    assert len(segs(store)) == 3
    victim = segs(store)[1]
    lost = set(pq.read_table(victim, columns=["key"]).column("key").to_pylist())
    flip(victim, column_page(victim, "text"))

    # Replay mode: the lost answers are misses, named, with where they went.
    with pytest.warns(UserWarning, match="damaged segment"):
        replay_store = ResponseStore(root)
        with pytest.raises(ReplayMiss) as exc:
            run_requests(reqs, ReplayBackend(replay_store), replay_store, progress=False)
    assert exc.value.key in lost
    assert f"damaged segment {replay_store.quarantine_dir / victim.name}" in str(exc.value)
    assert "(and 7 more misses in this batch)" in str(exc.value)

    # A normal rerun asks the model again for exactly those keys, and gets the same answers.
    backend = EchoBackend()
    with pytest.warns(UserWarning, match="8 of its 8 rows are not in the store"):
        again = run_requests(reqs, backend, ResponseStore(root), batch_size=8, progress=False)
    assert set(backend.calls) == lost and len(backend.calls) == len(lost)
    assert [(r.key, r.text) for r in again] == [(r.key, r.text) for r in first]
    # The loss is made good: verify is clean and the export carries every row.
    assert store_cli.main(["verify", str(root)]) == 0
    assert transfer.export(ResponseStore(root), tmp_path / "out.parquet") == 24


def test_export_requires_lost_rows_answered_again(pristine, tmp_path: Path) -> None:
    """A segment quarantined by some earlier job still blocks export until its rows are back."""
    root, name, lost, original = pristine
    s = ResponseStore(copy_store(root, tmp_path / "s"))
    flip(s.seg_dir / name, column_page(s.seg_dir / name, "text"))
    with pytest.warns(UserWarning, match="damaged segment"):
        ResponseStore(s.root).refresh()  # e.g. a job's store scan moved it aside
    with pytest.raises(StoreDamaged, match=f"{len(lost)} of its {len(lost)} rows are not in the store"):
        with pytest.warns(UserWarning, match="were moved aside"):
            transfer.export(ResponseStore(s.root), tmp_path / "out.parquet")
    with pytest.warns(UserWarning, match="were moved aside"):
        put(ResponseStore(s.root), range(12))
    assert transfer.export(ResponseStore(s.root), tmp_path / "out.parquet") == 17
    stats = ResponseStore(s.root).stats()
    assert stats["damaged_segments"] == [] and stats["quarantined_segments"] == 1
