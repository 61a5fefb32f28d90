"""The paper config's size beside every size the seed papers print (docs/costs.md, "The paper's size").

The paper config is estimated here on the repository's rehearsal copies of the three
datasets (no hub), with 60 Study C items per dataset instead of 500: every Study C item
gets the same requests (the estimate's counts are checked against the DAG's shards in
tests/test_llm_estimate.py), so its sizes are per-item rates times the paper's 1,500
items; Study A's do not depend on the dataset's size (56 test items per domain from any
dataset of at least that many). The table in docs/costs.md must print exactly these
numbers, and a row that differs from the seed's by more than 1% must name the ledger
entry (docs/deviations.yaml) that says why: a change that moves the paper's size fails
here until both are written.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_snakemake
from context_effects.config import validate_config
from context_effects.costs import estimate, estimate_inputs

N_ITEMS = 60  # 120 verification items per benchmark: Study A's 56 test items and their histories
PAPER_ITEMS = 500
DATASETS = {
    "truthfulqa": {"source": "local", "local_path": "data/rehearsal/truthfulqa_generation.rehearsal.jsonl",
                   "sample": {"source": "release",
                              "path": "data/rehearsal/truthfulqa_sample500.rq1_rq3.rehearsal.jsonl"}},
    "mmlu_pro": {"source": "local", "local_path": "data/rehearsal/mmlu_pro_test.rehearsal.jsonl",
                 "balance_by": "category",
                 "sample": {"source": "release", "path": "data/rehearsal/mmlu_pro_sample500.rq2a.rehearsal.jsonl"}},
    "arc_challenge": {"source": "local", "local_path": "data/rehearsal/ARC-Challenge-Train.rehearsal.jsonl",
                      "sample": {"source": "release",
                                 "path": "data/rehearsal/arc_challenge_sample500.rq1_rq3.rehearsal.jsonl"}},
}


@pytest.fixture(scope="module")
def sizes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    workdir = tmp_path_factory.mktemp("paper-size")
    (workdir / "data").symlink_to(REPO / "data")
    raw = yaml.safe_load((REPO / "config/config.yaml").read_text())
    raw["datasets"] = {name: {**ds, "n_items": N_ITEMS} for name, ds in DATASETS.items()}
    raw["run"] = {**raw.get("run", {}), "preflight": False}
    cfg_path = workdir / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(raw, sort_keys=False))
    config = validate_config(raw, workdir=workdir)
    built = run_snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                          f"--configfile={cfg_path}", "--cores", "2", "--workflow-profile", "none",
                          *estimate_inputs(config), env={"OMP_NUM_THREADS": "1"}, timeout=900)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    est = estimate(config, workdir, pilot=None)
    return {row.quantity.split(" (extra")[0]: row for row in est.sizes}


def documented() -> dict[str, list[str]]:
    """The size table of docs/costs.md: quantity -> its cells."""
    text = (REPO / "docs/costs.md").read_text()
    section = text.split("## The paper's size", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 5 and not set(cells[0]) <= {"-", ":", " "} and cells[0] != "quantity":
            rows[cells[0]] = cells
    return rows


def _number(cell: str) -> float:
    return float(re.sub(r"[^0-9.]", "", cell))


def test_the_paper_config_is_the_seeds_size_or_says_why(sizes):
    at_paper = {}
    for quantity, row in sizes.items():
        value = row.run
        if quantity.startswith("Study C"):
            # Per-item rates at the paper's 500 items per dataset.
            assert value % (N_ITEMS * 3) == 0, (quantity, value)
            value = value // N_ITEMS * PAPER_ITEMS
        at_paper[quantity] = value
    # Study A: one call per cell (20 cells) for 224 items per model; 5 models measured
    # by first-token probabilities add one greedy request per cell, 6 without add 4
    # more samples of each of their 2 baselines.
    assert at_paper["Study A calls to the 11 roster models"] == 224 * (5 * 40 + 6 * 28) == 82_432
    assert abs(82_432 / 75_898 - 1) < 0.10  # within 10% of the seed's calls
    assert at_paper["Study A item-model pairs (the asymmetry test's n)"] == 2_464
    assert at_paper["Study C answers: every execution's main corpus and the anchors"] == 147_000
    # 147,000 blind + 108,000 informed, and each anchor's reference-free rating (Table 5).
    assert at_paper["Study C rating tasks per open judge (blind and informed; main corpus, anchors)"] == 258_000
    # The extra models are counted apart from the roster's calls.
    extra = [r for r in sizes.values() if r.quantity.startswith("Study A calls")][0].quantity
    assert "gpt-4o 8,960" in extra and "gpt-5.4-mini 6,272" in extra

    table = documented()
    ledger = {e["id"] for e in yaml.safe_load((REPO / "docs/deviations.yaml").read_text())["entries"]}
    for quantity, row in sizes.items():
        assert quantity in table, f"docs/costs.md's size table has no row {quantity!r}"
        cells = table[quantity]
        assert cells[1] == row.seed, (quantity, cells)
        if not quantity.startswith("GPU-hours"):  # GPU-hours depend on the items' lengths
            assert _number(cells[2]) == at_paper[quantity], (quantity, cells[2], at_paper[quantity])
        off = abs(at_paper[quantity] / row.seed_value - 1) > 0.01 if not quantity.startswith("GPU") else True
        if off:
            assert row.ledger in ledger, f"{quantity}: differs from the seed's {row.seed} and names no ledger entry"
            assert f"#{row.ledger}" in cells[-1], (quantity, cells)
