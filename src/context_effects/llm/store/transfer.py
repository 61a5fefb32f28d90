"""Export of a whole response store to one file, and import of such a file into a store.

An export is one sealed Parquet file (``segments.write_sealed``: it carries its own
sha256, like a segment) of every stored row; reviewers replay a finished run from it
with zero model calls (docs/architecture.md, "The response store"; the ``export_store``
rule writes ``results/release/responses.parquet``). An import checks the file's digest and
recomputes every row's key from its stored request before anything reaches the store.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from context_effects.llm.store.responses import ResponseStore
from context_effects.llm.store.rows import conform, request_from_json
from context_effects.llm.store.segments import (
    MAX_SEGMENT_ROWS,
    ROW_GROUP_ROWS,
    Damage,
    Damaged,
    StoreDamaged,
    check_file,
    rechunk,
    write_sealed,
)


def export(store: ResponseStore, path: str | os.PathLike[str], *, skipped: list[Damage] | None = None) -> int:
    """Write every row of ``store`` to one Parquet file (carrying its own sha256); return the row count.

    Every segment is checked first. If any is damaged - found now, or quarantined earlier
    with rows not answered again since - nothing is written and :class:`StoreDamaged`
    names them, unless a ``skipped`` list is given: then the rest is exported and what
    was left out is added to that list.
    """
    path = Path(path)
    store.refresh(full=True)
    damage = store.damage()
    if damage and skipped is None:
        raise StoreDamaged(
            f"response store {store.root} is damaged; nothing exported (answer the lost requests again by "
            f"rerunning the jobs that asked them - every answer still stored is a free hit - "
            f"or pass --skip-damaged to export the rest)",
            damage,
        )
    left_out = list(damage)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = write_sealed(store.iter_tables(skipped=None if skipped is None else left_out), path)
    if skipped is not None:
        skipped.extend(left_out)
    return rows


def import_file(
    store: ResponseStore, path: str | os.PathLike[str], *, verify_keys: bool = True, allow_unchecked: bool = False
) -> int:
    """Add the rows of an exported file to ``store`` (keys already present are skipped); return rows added.

    The file's checksum is checked first: a damaged file is refused whole
    (:class:`StoreDamaged`), and so is one without a checksum, which is what a
    file rewritten with one answer changed looks like; ``allow_unchecked`` accepts
    it with a warning (an export made before checksums existed). With
    ``verify_keys`` every row's key is recomputed from its stored request, so an
    edited or mislabelled file cannot plant answers under the wrong request.
    """
    store.refresh()
    path = Path(path)
    try:
        checked = check_file(path, foreign_ok=True)
    except Damaged as exc:
        raise StoreDamaged(f"cannot import {path}", [Damage(path.name, str(path), str(exc))]) from None
    if not checked and not allow_unchecked:
        raise StoreDamaged(f"cannot import {path}", [Damage(path.name, str(path), (
            "no checksum: exports carry one, so this file was rewritten (an edited answer would go unnoticed) or "
            "exported before checksums existed; if you know it is the latter, import it with --allow-unchecked"))])
    if not checked:
        warnings.warn(
            f"{path} carries no checksum (exported before checksums, or rewritten): damage to its answers "
            f"cannot be detected" + ("; keys are still checked against their requests" if verify_keys else ""),
            stacklevel=2,
        )
    staged: set[str] = set()

    def fresh_tables() -> Iterator[pa.Table]:
        with open(path, "rb") as fh:
            for batch in pq.ParquetFile(fh, page_checksum_verification=True).iter_batches(batch_size=ROW_GROUP_ROWS):
                table = conform(pa.Table.from_batches([batch]))
                keys = table.column("key").to_pylist()
                if verify_keys:
                    for key, blob in zip(keys, table.column("request_json").to_pylist()):
                        actual = request_from_json(blob).key
                        if actual != key:
                            raise ValueError(f"{path}: stored key {key} does not match its request ({actual})")
                mask = []
                for k in keys:
                    mask.append(k not in store and k not in staged)
                    staged.add(k)
                table = table.filter(pa.array(mask, pa.bool_()))
                if table.num_rows:
                    yield table

    added = 0
    for chunk in rechunk(fresh_tables(), MAX_SEGMENT_ROWS):
        store.add_segment(chunk)
        added += chunk.num_rows
    return added
