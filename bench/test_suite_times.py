"""Where the test suite's time goes, per test file, and how two runs compare.

A run's per-test times come from pytest's own JUnit XML (which pytest-xdist fills in
from every worker), so the measured run is exactly `make test`'s pytest command:

    .venv/bin/pytest -n 2 --dist loadscope --no-loadscope-reorder --junitxml=after.xml
    .venv/bin/python bench/test_suite_times.py after.xml --json bench/results/test_suite_after.json
    .venv/bin/python bench/test_suite_times.py bench/results/test_suite_before.json \
        bench/results/test_suite_after.json

With one run it prints each file's tests and summed seconds (set-up, call and teardown of
every test; under xdist these are worker-seconds, so their sum exceeds the wall time);
with two it sets them side by side. A ``.json`` argument is a summary this script wrote.
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path


def from_junit(path: Path) -> dict:
    """Per-file test counts and seconds from a JUnit XML file of pytest."""
    seconds: dict[str, float] = defaultdict(float)
    tests: Counter = Counter()
    for case in ET.parse(path).getroot().iter("testcase"):
        # classname is the dotted module path, plus the class for tests in a class.
        parts = case.get("classname", "").split(".")
        module = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
        name = "/".join(parts[: module + 1]) + ".py"
        seconds[name] += float(case.get("time", 0.0))
        tests[name] += 1
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    return {"files": {f: {"tests": tests[f], "seconds": round(seconds[f], 2)} for f in sorted(seconds)},
            "wall_seconds": float(suite.get("time", 0.0)) if suite is not None else None}


def load(path: Path) -> dict:
    return json.loads(path.read_text()) if path.suffix == ".json" else from_junit(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="one or two JUnit XML files or summaries (.json)")
    ap.add_argument("--json", type=Path, help="write the (first) run's summary here")
    ap.add_argument("--min-seconds", type=float, default=10.0, help="files below this in both runs are pooled")
    args = ap.parse_args()
    runs = [load(p) for p in args.runs[:2]]
    if args.json:
        args.json.write_text(json.dumps(runs[0], indent=1) + "\n")
    files = sorted({f for r in runs for f in r["files"]},
                   key=lambda f: -max(r["files"].get(f, {}).get("seconds", 0.0) for r in runs))
    head = " | ".join(f"tests, s ({p.name})" for p in args.runs[:2])
    print(f"| file | {head} |")
    print("|---|" + "---|" * len(runs))
    pooled = [[0, 0.0] for _ in runs]
    for f in files:
        cells = [r["files"].get(f, {"tests": 0, "seconds": 0.0}) for r in runs]
        if max(c["seconds"] for c in cells) < args.min_seconds:
            for acc, c in zip(pooled, cells):
                acc[0] += c["tests"]
                acc[1] += c["seconds"]
            continue
        print(f"| `{f}` | " + " | ".join(f"{c['tests']}, {c['seconds']:.0f}" for c in cells) + " |")
    print("| the other files | " + " | ".join(f"{n}, {s:.0f}" for n, s in pooled) + " |")
    totals = [(sum(c["tests"] for c in r["files"].values()), sum(c["seconds"] for c in r["files"].values()))
              for r in runs]
    print("| **all** (sum of test seconds) | " + " | ".join(f"{n}, {s:.0f}" for n, s in totals) + " |")
    walls = [r.get("wall_seconds") for r in runs]
    print("| wall time of pytest | " + " | ".join(f"{w / 60:.1f} min" if w else "–" for w in walls) + " |")


if __name__ == "__main__":
    main()
