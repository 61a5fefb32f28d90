"""Study H end to end on the synthetic backend: the scorer recovers a planted anchoring pull."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake
from context_effects import dag
from context_effects.anchoring.requests import judgment_seed
from context_effects.anchoring.results import result_record
from context_effects.anchoring.scoring import dumps
from context_effects.config import validate_config
from context_effects.anchoring.synthetic import condition_mean, expected_pull
from context_effects.llm.backends.synthetic import SyntheticBackend
from context_effects.tables import run_notes

N_TASKS = 60
REPS = 3
JUDGES = {"anchored-sim": 0.5, "unanchored-sim": 0.0}  # planted λ


def _config(task_file: str) -> dict:
    return {
        "run": {"label": "synthetic-anchoring", "kind": "synthetic"},
        "datasets": {"truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl", "n_items": 4}},
        "models": {
            name: {"backend": "synthetic", "model_id": name, "synthetic": {"anchoring_lambda": lam}}
            for name, lam in JUDGES.items()
        },
        "conformity": {"enabled": False},
        "amel": {"enabled": False},
        "anchoring": {
            "judges": list(JUDGES),
            "benchmark_datasets": ["truthfulqa"],
            "task_files": [task_file],
            "tasks_per_dataset": 4,
            "repetitions": REPS,
            "bootstrap_resamples": 2000,
        },
    }


def _planted_pull(judge: str, tasks: pd.DataFrame) -> float:
    """The primary estimand's expectation from the planted values (ties scored 0, as the scorer does)."""
    b = SyntheticBackend(model_name=judge, params={"anchoring_lambda": JUDGES[judge]}, seed=0)
    return float(np.mean([expected_pull(b, t.task_id, t.gold_score, t.prior_score, REPS) for t in tasks.itertuples()]))


def test_expected_pull_matches_monte_carlo():
    """The exact expectation (convolution over repetitions, sign(0) = 0) against simulated repetitions."""
    b = SyntheticBackend(model_name="anchored-sim", params={"anchoring_lambda": 0.5}, seed=0)
    rng = np.random.default_rng(0)
    for task_id, gold, prior in (("t1", 5, 5), ("t2", 3, 1), ("t3", 1, 4)):
        sd = b.params["anchoring_noise_sd"]
        def draw(cond: str) -> np.ndarray:
            x = rng.normal(condition_mean(b, task_id, gold, cond, prior), sd, (200_000, REPS))
            return np.clip(np.floor(x + 0.5), 1, 5).mean(axis=1)

        blind, anchor = draw("blind"), draw("anchor")
        mc = float(np.mean(np.sign(prior - blind) * (anchor - blind)))
        assert expected_pull(b, task_id, gold, prior, REPS) == pytest.approx(mc, abs=0.01)


def test_synthetic_run_recovers_the_planted_pull(workdir):
    task_file = workdir / "tasks.jsonl"
    with task_file.open("w") as fh:
        for i in range(N_TASKS):
            fh.write(json.dumps({"task_id": f"syn-{i:03d}", "question": f"Synthetic question {i}?",
                                 "answer": f"Synthetic answer {i}.", "reference_answer": f"Reference {i}.",
                                 "gold_score": 1 + i % 5}) + "\n")
    cfg_path = workdir / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(_config(str(task_file))))
    args = ("--cores", "2", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
            "--configfile=" + str(cfg_path))
    res = run_snakemake(*args)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]

    tasks = pd.read_parquet(workdir / "results/anchoring/tasks.parquet")
    assert len(tasks) == N_TASKS + 4
    high = int((tasks["prior_side"] == "high").sum())
    assert abs(high - (len(tasks) - high)) <= 1

    estimates = {}
    for judge in JUDGES:
        rec = json.loads((workdir / f"results/anchoring/runs/{judge}.json").read_text())
        # The published artefact: model, version, provider, date, settings, raw judgments, scorer, limitations.
        assert rec["model"]["provider"] == "synthetic" and rec["model"]["version"].startswith("synthetic-")
        assert rec["model"]["engine_versions"] == ["synthetic-1"]
        # One version answered every judgment, and the result file says which.
        (served, n_served), = rec["model"]["served_versions"].items()
        assert served.endswith("@" + rec["model"]["version"]) and n_served == len(rec["judgments"])
        assert rec["date"]["date"] == rec["date"]["last_response"][:10]
        assert rec["settings"]["repetitions"] == REPS and rec["settings"]["temperature"] == 1.0
        # Each judgment row records its sampling seed and settings; repetitions differ in both seed and key.
        js = pd.DataFrame(rec["judgments"])
        own = [judgment_seed(42, judge, j.task_id, j.condition, j.repetition) for j in js.itertuples()]
        assert js["sampling_seed"].tolist() == own and (js["temperature"] == 1.0).all()
        assert (js.groupby(["task_id", "condition"])["key"].nunique() == REPS).all()
        assert rec["settings"]["templates"]["version"] and rec["settings"]["output_schema"]["required"] == ["score"]
        assert len(rec["judgments"]) == len(tasks) * 3 * REPS
        assert sorted(j["order"] for j in rec["judgments"]) == list(range(len(rec["judgments"])))
        assert all(j["score"] is not None for j in rec["judgments"])
        assert len(rec["limitations"]) >= 6 and "Synthetic backend" in rec["run"]["notes"][0]
        design = rec["design"]
        assert design["prior_design"] == "midpoint-balanced-within-gold" and design["n_prior_high"] == high
        assert design["n_above"] + design["n_equal"] + design["n_below"] == len(tasks)
        assert design["prior_gold_correlation"]["ci_low"] < 0 < design["prior_gold_correlation"]["ci_high"]
        assert {t["prior_side"] for t in design["tasks"]} == {"high", "low"}
        pull = rec["scorer"]["summary"]["pull"]
        assert pull["tie_handling"] == "ties scored 0 (primary)"
        # The sensitivity analysis is the same pulls without the ties: sums agree.
        excl = rec["scorer"]["summary"]["pull_ties_excluded"]
        assert excl["n_used"] == pull["n_used"] - pull["n_ties"]
        assert excl["mean"]["estimate"] * excl["n_used"] == pytest.approx(pull["mean"]["estimate"] * pull["n_used"])
        target = _planted_pull(judge, tasks)
        est = pull["mean"]
        assert est["ci_low"] <= target <= est["ci_high"], (judge, target, est)
        assert est["estimate"] == pytest.approx(target, abs=0.15)
        estimates[judge] = (est, target)
        print(judge, target, est)

    anchored, target = estimates["anchored-sim"]
    assert target > 0.5 and anchored["ci_low"] > 0  # a real pull toward the prior is found
    unanchored, null_target = estimates["unanchored-sim"]
    assert abs(null_target) < 0.1 and unanchored["ci_low"] <= 0 <= unanchored["ci_high"]

    table = pd.read_csv(workdir / "results/tables/anchoring/pull.csv")
    primary = table[table["Tie handling"] == "ties scored 0 (primary)"]
    assert primary["Mean pull"].tolist() == pytest.approx([estimates[j][0]["estimate"] for j in JUDGES])
    assert (table["Tie handling"] == "ties excluded (sensitivity)").sum() == len(JUDGES)
    tex = (workdir / "results/tables/anchoring/pull.tex").read_text()
    assert "Synthetic backend" in tex and r"\label{tab:anchoring-pull}" in tex
    for ext in ("pdf", "png"):
        assert (workdir / f"figures/anchoring/pull_distribution.{ext}").stat().st_size > 0

    # Rescoring the same responses writes the same bytes: the date is the responses', not the clock's.
    cfg = validate_config(_config(str(task_file)))
    for j in JUDGES:
        again = result_record(
            workdir / "results/anchoring/tasks.parquet",
            workdir / f"results/responses/anchoring/judge/{j}/tasks.parquet",
            judge=j,
            model_cfg=dag.model_settings(cfg, j),  # what the rule passes: no speed settings
            settings=cfg["anchoring"],
            run_cfg=cfg["run"],
            notes=run_notes(cfg["run"]["kind"]),
        )
        assert dumps(again) == (workdir / f"results/anchoring/runs/{j}.json").read_text()
