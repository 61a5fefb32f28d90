"""The rehearsal at the size of a test: config/rehearsal.yaml's planted world and design on
TruthfulQA alone (the dataset of every Study C refit: hosted judges, anchor scales,
self-exclusion), one execution, few items and short chains. The model-based tables its
fits give must print the planted (published) numbers back at about the nominal rate,
and a builder given a wrong definition must turn its rows `missed`.

`make rehearsal` runs the documented size (docs/rehearsal.md); this is its smoke test
with a binomial tolerance, not its measurement."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, copy_repo, run_snakemake
from context_effects.paper.reproduction import compare, read_published

#: Study C's model-based tables on TruthfulQA (Table 4's γ_j are TruthfulQA's fits).
TABLES = ("conformity/table3", "conformity/table4", "conformity/table10", "conformity/table17",
          "conformity/table20")
OTHER_DATASETS = ("MMLU-Pro", "ARC-Challenge")
N_ITEMS = 60
#: Short chains: at 2 x (150 + 150) 87 of the 88 planted rows came back (85 at 200 + 200),
#: for 152 CPU-s of jobs against 173 (docs/benchmarks.md, "The test suite").
FIT = {"chains": 2, "warmup": 150, "samples": 150, "chain_method": "sequential",
       "reference_free_sensitivity": False, "generator_mean_sensitivity": False}
#: The share of planted rows that must come back inside their 95% intervals. The rows are
#: not independent (Table 17's main-fit column is Table 3's Asym_total, Table 20's row at
#: θ_a = 1.5 is Table 10's), so the tolerance is that of about 30 independent rows: at a
#: true rate of 0.95, P(share < 0.8) = binom.cdf(23, 30, 0.95) < 0.001; at 0.92, about what
#: the model's small-sample bias leaves at this size (docs/deviations.yaml#rehearsal-size),
#: 0.008. At 30 items a share of 0.795 came out: the size is 60 for that reason.
MIN_SHARE = 0.8


class Rehearsal:
    def __init__(self, repo: Path, config: Path):
        self.repo, self.config = repo, config

    def snakemake(self, *targets: str):
        res = run_snakemake("--snakefile", str(self.repo / "Snakefile"), "--directory", str(self.repo),
                            f"--configfile={self.config}", "--workflow-profile", "none", "--cores", "2",
                            *targets, cwd=self.repo, env={"OMP_NUM_THREADS": "1"}, timeout=3000)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-8000:]
        return res

    def report(self) -> pd.DataFrame:
        published = read_published(sorted((self.repo / "paper" / "published").glob("*/*.csv")))
        rows = published[published["table"].isin(TABLES)]
        rows = rows[~rows["row"].str.contains("|".join(f"Dataset={d}" for d in OTHER_DATASETS))]
        return compare(rows, self.repo / "results", "rehearsal")


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory: pytest.TempPathFactory) -> Rehearsal:
    repo = copy_repo(tmp_path_factory.mktemp("rehearsal") / "repo")
    cfg = yaml.safe_load((REPO / "config" / "rehearsal.yaml").read_text())
    cfg["datasets"]["truthfulqa"]["n_items"] = N_ITEMS
    c = cfg["conformity"]
    c["datasets"], c["seeds"] = ["truthfulqa"], [c["primary_seed"]]
    c["fit"].update(FIT)
    cfg["amel"]["enabled"] = False
    cfg["anchoring"]["enabled"] = False
    config = repo / "config" / "rehearsal-test.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    run = Rehearsal(repo, config)
    run.snakemake(*(f"results/tables/{t}.csv" for t in TABLES))
    return run


def test_the_planted_numbers_come_back_at_about_the_nominal_rate(rehearsal):
    report = rehearsal.report()
    planted = report[report["role"] == "planted"]
    assert len(planted) >= 60, len(planted)
    assert set(planted["status"]) <= {"recovered", "missed"}, planted[
        ~planted["status"].isin(["recovered", "missed"])][["id", "status", "reason"]].to_string()
    k, n = int((planted["status"] == "recovered").sum()), len(planted)
    missed = planted[planted["status"] == "missed"][["id", "published", "reproduced_lower", "reproduced_upper"]]
    assert k / n >= MIN_SHARE, f"{k}/{n} recovered; missed:\n{missed.to_string()}"
    # not vacuous: the intervals are narrower than the planted effects they hold
    widths = planted["reproduced_upper"] - planted["reproduced_lower"]
    assert widths.median() < 1.0, widths.describe()


def test_a_wrong_source_fit_for_table20_turns_its_rows_missed(rehearsal):
    """Table 20 with each anchor-scale row read from the other refit's summary (θ_a 1.0 <->
    2.0) under its own label: the magnitudes the seed prints (about 0.17 at 1.0, 0.35 at
    2.0) no longer come back."""
    report = rehearsal.report()
    rows = report[report["id"].str.match(r"table20\..*\.theta_(1_0|2_0)$")]
    assert len(rows) == 8 and set(rows["status"]) <= {"recovered", "missed"}, rows[["id", "status"]]
    source = rehearsal.repo / "src" / "context_effects" / "measurement" / "report.py"
    text = source.read_text()
    right = "            fits = [(t, self._res(by_theta[t])) for t in sorted(by_theta)]\n"
    # each row labelled with its own refit, as a wrong fit_dir mapping would leave it
    wrong = ("            swap = {min(by_theta): max(by_theta), max(by_theta): min(by_theta)}\n"
             "            fits = [(t, self._res(by_theta[swap.get(t, t)])) for t in sorted(by_theta)]\n"
             "            fits = [(t, type(r)(by_theta[t], r.summary, r.diag, r.failures)) for t, r in fits]\n")
    assert right in text
    try:
        source.write_text(text.replace(right, wrong))
        rehearsal.snakemake("results/tables/conformity/table20.csv")
        moved = rehearsal.report()
    finally:
        source.write_text(text)
    moved = moved[moved["id"].isin(rows["id"])]
    shown = moved.merge(rows[["id", "reproduced", "status"]], on="id", suffixes=("", " before"))
    shown = shown[["id", "published", "reproduced before", "status before", "reproduced", "status"]].to_string()
    # At this size an interval is about 0.3 wide and the swap moves a row by 0.12-0.23 (the
    # printed rows at 1.0 and 2.0 differ by that): a recovered row turns missed, and on average
    # the rows move away from the printed value, to about twice their distance.
    turned = (moved.set_index("id")["status"] == "missed") & (rows.set_index("id")["status"] == "recovered")
    assert turned.sum() >= 1, shown
    error_before = (rows["reproduced"] - rows["published"]).abs().to_numpy()
    error_after = (moved["reproduced"] - moved["published"]).abs().to_numpy()
    assert error_after.mean() >= 1.5 * error_before.mean(), shown
