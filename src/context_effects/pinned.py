"""Input files whose bytes are pinned by sha256, checked on every read that builds an output.

A checksum recorded once, when a file is downloaded, protects against a bad download
but not against a copy edited afterwards: a changed row of a release file would flow
silently into the item table and every number built on it. So every reader of such a
file (``context_effects.conformity.release.read_release``, the local-file reader of
``context_effects.datasets``) calls :func:`verify` first, and a mismatch stops the job,
naming the file, both hashes and how to get the pinned bytes back.

Files are pinned by name: a pinned name anywhere (the fetched copy under
``resources/release/``, a copy elsewhere, the demo's shipped excerpts) must carry the
pinned bytes. A file under another name is not pinned; its hash is still recorded in
the item table's metadata.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

#: The predecessor study's release files at the commit ``conformity.release`` pins
#: (``RELEASE_FILES`` holds their paths in that repository).
RELEASE_SHA256: dict[str, str] = {
    "truthfulqa_sample500.rq1_rq3.jsonl": "6bc2c36ac1d0d6eccb4ff2d89dba9a995e9631a3233d357839f8c09c030e6040",
    "arc_challenge_sample500.rq1_rq3.jsonl": "af25d7b482f84df20374c6683dc43a781c79d42149973f3972fb3395cbb9d246",
    "mmlu_pro_sample500.rq2a.jsonl": "5ea1ad208a4aca6231e34d6b594011476c96650fee96897ece831a98b8979374",
}

#: The demo's excerpts of the release and of the benchmark splits it sampled, shipped in
#: ``data/demo/release/`` (their provenance and the same checksums: PROVENANCE.md there).
DEMO_RELEASE_SHA256: dict[str, str] = {
    "truthfulqa_sample500.rq1_rq3.demo.jsonl": "7dd5f55ae8d1c570c3fd0edaa87d378cc8993f34d63118cb16fc834f0ad9e44e",
    "arc_challenge_sample500.rq1_rq3.demo.jsonl": "be2b1634fddde8d9ca49f4f49bec32746b4df9c1744fab1ca6f1768d0c8494eb",
    "truthfulqa_generation.demo.jsonl": "211a18201707043fa657ae910ce14f05a3549f0e45a7b97699947e14fcb94d53",
    "ARC-Challenge-Train.demo.jsonl": "fe6057d10fea64c57a766ae3aeea43fadb25233c3c0d299906f6c778737ecd20",
}

#: The rehearsal's excerpts (``data/rehearsal/``, PROVENANCE.md there): the first 120 items of
#: each release file and their benchmark rows.
REHEARSAL_SHA256: dict[str, str] = {
    "ARC-Challenge-Train.rehearsal.jsonl": "b3da4da1ede6ab616d11ae34fe1cf4e66fa5099d61190dacfbb661dd2ec428e8",
    "arc_challenge_sample500.rq1_rq3.rehearsal.jsonl": "9aa630cec65592db99cae7444dff1ee9aa0229f19409b4d7ed5c74ccd4d12f87",
    "mmlu_pro_sample500.rq2a.rehearsal.jsonl": "0d8538fe97028d11d4c8b89f9eddf1e7baadd53d9c6059947f658a4f701609ab",
    "mmlu_pro_test.rehearsal.jsonl": "8222a752817cb1a4d01a1232ed11b9dfb39d3999c2f5a816d960489b555df440",
    "truthfulqa_generation.rehearsal.jsonl": "6846faf3af0a7bb07632997a90c47bbd44f46ec03c713b6a7a2ad1919ddb24db",
    "truthfulqa_sample500.rq1_rq3.rehearsal.jsonl": "40f95f43db382f977be284fec57cdab8bcb5a197f70a438d8576981de558fcef",
}

PINNED_SHA256: dict[str, str] = {**RELEASE_SHA256, **DEMO_RELEASE_SHA256, **REHEARSAL_SHA256}

_HOW_TO_RESTORE = {
    **{name: "delete it and rerun: the fetch_release rule downloads the pinned file again (or copy the "
              "release file unchanged)" for name in RELEASE_SHA256},
    **{name: "restore the shipped copy (`git checkout -- data/demo/release/`)" for name in DEMO_RELEASE_SHA256},
    **{name: "restore the shipped copy (`git checkout -- data/rehearsal/`)" for name in REHEARSAL_SHA256},
}


class PinnedFileError(ValueError):
    """A pinned input file's bytes are not the pinned ones."""


def sha256_of(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(path: str | Path, shown: str | Path | None = None) -> str | None:
    """Check a file against its pin; return its sha256 (None if its name is not pinned).

    Raises PinnedFileError naming the file (as ``shown``, e.g. the path a config gives,
    when set), both hashes and the fix.
    """
    path = Path(path)
    want = PINNED_SHA256.get(path.name)
    if want is None:
        return None
    got = sha256_of(path)
    if got != want:
        raise PinnedFileError(
            f"{shown or path}: sha256 {got} differs from the pinned {want}: the file was changed after it was "
            f"fetched or shipped, and nothing is built from it. Fix: {_HOW_TO_RESTORE[path.name]}"
        )
    return got
