"""The response store's command line, ``python -m context_effects.llm.store`` (the
package's ``__main__``): export, import, verify, stats and compact a store folder."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from context_effects.llm.store.responses import ResponseStore
from context_effects.llm.store.segments import (
    CLEARED_DIR,
    QUARANTINE_DIR,
    SEGMENT_DIR,
    Damage,
    StoreDamaged,
    VerifyReport,
)
from context_effects.llm.store.transfer import export, import_file

DESCRIPTION = 'Content-addressed response store (docs/architecture.md, "The response store").'


def _print_verify(report: VerifyReport, root: str) -> None:
    for d in report.damaged:
        print(
            f"DAMAGED      {d.segment}: {d.reason}"
            + (f" -> moved to {d.path}" if QUARANTINE_DIR in Path(d.path).parts else "")
        )
    for name in report.unchecked:
        print(f"UNCHECKED    {name}: no checksum (written before checksums); `compact` rewrites it with one")
    for q in report.quarantined:
        print(f"QUARANTINED  {q.path}: {q.reason}; {q.status()}")
    lost = [q for q in report.quarantined if not q.resolved and q.keys is not None]
    unknown = [q for q in report.quarantined if q.keys is None]
    print(
        f"{root}: {len(report.ok)} segments ok, {len(report.unchecked)} unchecked, {len(report.damaged)} damaged; "
        f"{len(report.quarantined)} quarantined ({len(lost)} with rows not answered again, "
        f"{len(unknown)} of unknown content)"
        + ("" if report.clean else " - NOT CLEAN")
    )


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m context_effects.llm.store", description=DESCRIPTION)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("export", help="write the whole store to one Parquet file")
    p.add_argument("root")
    p.add_argument("out")
    p.add_argument(
        "--skip-damaged",
        action="store_true",
        help="export the rows of the undamaged segments and list what was left out",
    )
    p = sub.add_parser("import", help="add rows from an exported Parquet file")
    p.add_argument("root")
    p.add_argument("src")
    p.add_argument("--no-verify", action="store_true", help="skip recomputing each row's key")
    p.add_argument(
        "--allow-unchecked",
        action="store_true",
        help="accept a file without a checksum (exported before checksums existed); damage to it goes undetected",
    )
    p = sub.add_parser(
        "verify", help="check every segment's checksum; exit 1 if any is damaged or quarantined rows are missing"
    )
    p.add_argument("root")
    p.add_argument("--quarantine", action="store_true", help="move damaged segments to ROOT/quarantine/")
    p = sub.add_parser(
        "clear",
        help="set aside a quarantined segment of unknown content after the workflow was rerun (verify names it)",
    )
    p.add_argument("root")
    p.add_argument("segment")
    p = sub.add_parser("stats", help="print a JSON summary")
    p.add_argument("root")
    p = sub.add_parser("compact", help="merge segments, drop duplicates and stale temp files, add missing checksums")
    p.add_argument("root")
    args = ap.parse_args(argv)

    if args.cmd != "import" and not Path(args.root, SEGMENT_DIR).is_dir():
        print(f"no response store at {args.root}", file=sys.stderr)
        return 2
    store = ResponseStore(args.root)
    try:
        if args.cmd == "export":
            skipped: list[Damage] | None = [] if args.skip_damaged else None
            n = export(store, args.out, skipped=skipped)
            print(f"exported {n} rows to {args.out}")
            if skipped:
                print(
                    f"skipped {len(skipped)} damaged segment(s) (--skip-damaged); their rows are not in {args.out}:"
                )
                for d in skipped:
                    print(f"  {d}")
        elif args.cmd == "import":
            n = import_file(store, args.src, verify_keys=not args.no_verify, allow_unchecked=args.allow_unchecked)
            print(f"imported {n} new rows into {args.root} ({len(store)} total)")
        elif args.cmd == "verify":
            report = store.verify(quarantine=args.quarantine)
            _print_verify(report, args.root)
            return 0 if report.clean else 1
        elif args.cmd == "clear":
            entry = store.clear(args.segment)
            print(f"cleared {entry.path}: moved to {store.quarantine_dir / CLEARED_DIR}")
        elif args.cmd == "stats":
            print(json.dumps(store.stats(), indent=2, sort_keys=True))
        elif args.cmd == "compact":
            print(json.dumps(store.compact(), indent=2, sort_keys=True))
    except (StoreDamaged, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
