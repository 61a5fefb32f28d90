"""Pinned input files: a changed byte stops every read that builds an output, naming the
file and both hashes; nothing is built from the changed copy.

The pins (``context_effects.pinned``) cover the predecessor release's files and the demo's
shipped excerpts. The fault file ``tests/faults/items/pinned/`` holds the demo's release
excerpt with one speaker's letter changed; the tests here change further bytes of their own.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from conftest import REPO
from context_effects import pinned
from context_effects.config import ConfigError, load_config, validate_config
from context_effects.conformity import release
from context_effects.datasets import build_item_table, load_raw

DEMO_RELEASE = REPO / "data" / "demo" / "release"
RELEASE_EXCERPT = DEMO_RELEASE / "truthfulqa_sample500.rq1_rq3.demo.jsonl"
GENERATION_ROWS = DEMO_RELEASE / "truthfulqa_generation.demo.jsonl"
CHANGED = REPO / "tests" / "faults" / "items" / "pinned" / RELEASE_EXCERPT.name


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _changed_copy(src: Path, dest_dir: Path, old: bytes, new: bytes) -> Path:
    """``src`` under its own (pinned) name in ``dest_dir``, its first ``old`` replaced by ``new``."""
    data = src.read_bytes()
    assert old in data and len(old) == len(new)
    dest = dest_dir / src.name
    dest.write_bytes(data.replace(old, new, 1))
    return dest


def test_every_shipped_pinned_file_carries_its_pin():
    for name, want in pinned.DEMO_RELEASE_SHA256.items():
        assert _sha(DEMO_RELEASE / name) == want, name
        assert pinned.verify(DEMO_RELEASE / name) == want
    rehearsal_items = DEMO_RELEASE.parents[1] / "rehearsal"
    for name, want in pinned.REHEARSAL_SHA256.items():
        assert _sha(rehearsal_items / name) == want, name
        assert pinned.verify(rehearsal_items / name) == want
    # The fetch rule and the readers use one table of checksums.
    assert {n: s["sha256"] for n, s in release.RELEASE_FILES.items()} == pinned.RELEASE_SHA256
    assert set(pinned.PINNED_SHA256) == (set(pinned.RELEASE_SHA256) | set(pinned.DEMO_RELEASE_SHA256)
                                         | set(pinned.REHEARSAL_SHA256))


def test_the_shipped_fault_file_differs_from_its_pin_by_one_byte():
    a, b = RELEASE_EXCERPT.read_bytes(), CHANGED.read_bytes()
    assert len(a) == len(b) and sum(x != y for x, y in zip(a, b)) == 1


@pytest.mark.parametrize("where", ["shipped fault file", "phrase", "question", "last byte"])
def test_a_changed_release_file_is_refused_with_both_hashes(tmp_path, where):
    if where == "shipped fault file":
        path = CHANGED
    elif where == "phrase":
        path = _changed_copy(RELEASE_EXCERPT, tmp_path, b"I think", b"I thank")
    elif where == "question":
        path = _changed_copy(RELEASE_EXCERPT, tmp_path, b"What happens", b"What happen5")
    else:  # a trailing newline dropped: every row still parses
        path = tmp_path / RELEASE_EXCERPT.name
        path.write_bytes(RELEASE_EXCERPT.read_bytes().rstrip(b"\n"))
    got = _sha(path)
    with pytest.raises(pinned.PinnedFileError) as err:
        release.read_release(path)
    msg = str(err.value)
    assert str(path) in msg and got in msg and pinned.DEMO_RELEASE_SHA256[RELEASE_EXCERPT.name] in msg
    assert "git checkout -- data/demo/release/" in msg


def test_the_item_table_is_not_built_from_a_changed_copy(tmp_path):
    """The job's own read (build_items) refuses it: the parse-time check is not the only guard."""
    source = {"kind": "local", "path": str(GENERATION_ROWS)}
    good = build_item_table("truthfulqa", source, None, 0, 0,
                            sample={"source": "release", "path": str(RELEASE_EXCERPT)}, peer_source="release")
    assert len(good) == 4
    changed = _changed_copy(RELEASE_EXCERPT, tmp_path, b"I think", b"I thank")
    with pytest.raises(pinned.PinnedFileError, match="differs from the pinned"):
        build_item_table("truthfulqa", source, None, 0, 0,
                         sample={"source": "release", "path": str(changed)}, peer_source="release")
    # The benchmark rows the demo ships beside it are pinned as well.
    rows = _changed_copy(GENERATION_ROWS, tmp_path, b"question", b"questiom")
    with pytest.raises(pinned.PinnedFileError, match=rows.name):
        load_raw("truthfulqa", {"kind": "local", "path": str(rows)})


def test_a_file_under_another_name_is_not_pinned(tmp_path):
    """Pins go by name: a user's own release-format file is read (and its hash recorded)."""
    own = tmp_path / "my_items.jsonl"
    own.write_bytes(RELEASE_EXCERPT.read_bytes().replace(b"I think", b"I thank", 1))
    assert pinned.verify(own) is None
    assert len(release.read_release(own)) == 24


def test_a_changed_copy_stops_the_config_check_before_any_job(tmp_path):
    """validate_config with the working directory (what the Snakefile runs while it is parsed)."""
    work = tmp_path / "work"
    shutil.copytree(REPO / "data", work / "data")
    cfg = load_config(REPO / "config" / "demo.yaml")
    validate_config(cfg, workdir=work)  # the shipped copies pass
    _changed_copy(DEMO_RELEASE / "ARC-Challenge-Train.demo.jsonl", work / "data" / "demo" / "release",
                  b"answerKey", b"answerKeY")
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, workdir=work)
    msg = str(err.value)
    assert "`datasets.arc_challenge.local_path`: data/demo/release/ARC-Challenge-Train.demo.jsonl: sha256" in msg
    assert pinned.DEMO_RELEASE_SHA256["ARC-Challenge-Train.demo.jsonl"] in msg
