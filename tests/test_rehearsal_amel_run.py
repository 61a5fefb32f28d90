"""Study A's rehearsal at the size of a test: config/rehearsal.yaml's planted world and
design (one call per cell, hosted stand-ins without first-token probabilities), Figure
14's seven planted models alone, 20 items per domain.

Its planted numbers must come back: Figure 14's single-call d's in the reproduction
report and every Study A row of the recovery table at about the nominal rate. And a
request builder that gives every cell's single call one shared sampling seed (what
`amel.requests` did before each request had a seed of its own) must show: on an engine
that seeds each request's generator (vLLM, and the synthetic backend like it), every
single call of a model then reads one uniform draw, so a cell's outcome is P(Yes) above
one threshold per model, a bias score is 0 or -1 (never +1), and the mean bias scores
come back far from the planted ones.

Figure 14's d's cannot show that fault, and the test says why: with one shared draw a
model's rows are -1 with some share m and 0 otherwise, so d = mean / SD is -sqrt(m /
(1 - m)) (times a factor of n), which for the m's of this design (0.03 to 0.12) lands
at 0.18 to 0.37, the range the seed prints. The recovery table's mean bias scores carry
the check.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, copy_repo, run_snakemake
from context_effects.paper.reproduction import compare, read_published
from context_effects.rehearsal import AMEL_PLANTED_MODELS

TARGETS = ("results/tables/amel/effects.csv", "results/synthetic/recovery.csv")


class StudyA:
    def __init__(self, repo: Path, config: Path):
        self.repo, self.config = repo, config

    def snakemake(self) -> None:
        res = run_snakemake("--snakefile", str(self.repo / "Snakefile"), "--directory", str(self.repo),
                            f"--configfile={self.config}", "--workflow-profile", "none", "--cores", "2",
                            *TARGETS, cwd=self.repo, env={"OMP_NUM_THREADS": "1"}, timeout=1800)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-8000:]

    def report(self) -> pd.DataFrame:
        published = read_published(sorted((self.repo / "paper" / "published").glob("amel/*.csv")))
        report = compare(published, self.repo / "results", "rehearsal")
        return report[report["role"] == "planted"]

    def recovery(self) -> pd.DataFrame:
        table = pd.read_csv(self.repo / "results" / "synthetic" / "recovery.csv")
        table = table[(table["study"] == "amel") & (table["comparable"] == "yes") & table["covered"].notna()]
        return table[table["parameter"].str.endswith("(single_call)")]

    def main_rows(self) -> pd.DataFrame:
        bs = pd.read_parquet(self.repo / "results" / "amel" / "bias_scores.parquet")
        return bs[(bs["method"] == "single_call") & bs["condition"].isin(["yes_saturated", "no_saturated"])
                  & bs["position"].isna() & (bs["framing"] == "standard")]


@pytest.fixture(scope="module")
def study_a(tmp_path_factory: pytest.TempPathFactory) -> StudyA:
    repo = copy_repo(tmp_path_factory.mktemp("rehearsal-a") / "repo")
    cfg = yaml.safe_load((REPO / "config" / "rehearsal.yaml").read_text())
    cfg["conformity"]["enabled"] = False
    cfg["anchoring"]["enabled"] = False
    cfg["amel"]["models"], cfg["amel"]["extra_models"] = list(AMEL_PLANTED_MODELS), []
    config = repo / "config" / "rehearsal-a.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    run = StudyA(repo, config)
    run.snakemake()
    return run


def _mean_rows(recovery: pd.DataFrame) -> pd.DataFrame:
    return recovery[(recovery["parameter"] == "mean BS (single_call)") & (recovery["model"] != "overall")]


def test_the_rehearsal_prints_study_as_planted_numbers_back(study_a):
    report = study_a.report()
    d_rows = report[report["id"].str.startswith("figure14.")]
    assert len(d_rows) == 7 and set(d_rows["status"]) <= {"recovered", "missed"}, d_rows[["id", "status"]]
    # 7 rows at a true rate of 0.95: P(at most 4 recovered) = 0.004.
    assert (d_rows["status"] == "recovered").sum() >= 5, d_rows.to_string()
    recovery = study_a.recovery()
    assert len(recovery) >= 150
    covered = (recovery["covered"] == "yes").mean()
    assert covered >= 0.88, recovery[recovery["covered"] == "no"].to_string()
    means = _mean_rows(recovery)
    assert len(means) == 7 and (means["covered"] == "yes").sum() >= 5, means.to_string()
    # Independent draws: an item can move against the history too.
    assert (study_a.main_rows()["bs"] > 0).any()


def test_one_shared_sampling_seed_turns_study_as_rows_missed(study_a):
    source = study_a.repo / "src" / "context_effects" / "amel" / "requests.py"
    text = source.read_text()
    right = '    return request_seed(run_seed, "amel", PRIMARY_METHOD, model_name, domain, item_id, cell.label, index)\n'
    assert right in text
    before = _mean_rows(study_a.recovery())
    try:
        source.write_text(text.replace(right, "    return run_seed + index\n"))
        study_a.snakemake()
        after = study_a.recovery()
        rows = study_a.main_rows()
        report = study_a.report()
    finally:
        source.write_text(text)
    means = _mean_rows(after)
    shown = means.merge(before[["model", "estimate", "covered"]], on="model", suffixes=("", " before"))
    shown = shown[["model", "planted", "estimate before", "covered before", "estimate", "covered"]].to_string()
    # One draw per model: a single call is P(Yes) above one threshold, so no item moves against its history.
    assert (rows["bs"] <= 0).all() and set(rows["bs"].unique()) <= {-1.0, 0.0}
    assert (means["covered"] == "no").sum() >= 5, shown
    assert (after["covered"] == "yes").mean() < 0.8
    # Figure 14's d's cannot tell: d is -sqrt(m / (1 - m)) of the share m of -1 rows.
    for model, part in rows.groupby("model"):
        m, n = float((part["bs"] == -1).mean()), len(part)
        d = part["bs"].mean() / part["bs"].std()
        assert d == pytest.approx(-math.sqrt(m / (1 - m)) * math.sqrt((n - 1) / n), rel=1e-9), model
    d_rows = report[report["id"].str.startswith("figure14.")]
    assert np.all(np.abs(d_rows["reproduced"]) < 0.6)
