"""The posterior-predictive check of seed 002 (context_effects.conformity.predictive): its
model with the published estimates planted, against the printed Tables 2 and 5."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from context_effects import rehearsal
from context_effects.conformity.outputs import REGISTRY
from context_effects.conformity.predictive import PUBLISHED_TABLES, predictive_table, published_dir

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO / "paper" / "published"


def _row(table: pd.DataFrame, quantity: str, dataset: str = "All") -> pd.Series:
    hit = table[(table["Quantity"] == quantity) & (table["Dataset"] == dataset)]
    assert len(hit) == 1, (quantity, dataset)
    return hit.iloc[0]


def test_the_printed_values_are_the_seeds_and_the_finding_is_the_incorrect_anchor():
    t = predictive_table(PUBLISHED)
    # Published cells are the transcribed ones (Table 5 prints 1.60 and 4.90; Table 2's
    # TruthfulQA all-correct minus all-wrong is 4.503 - 4.295).
    anchor = _row(t, "Mean Incorrect-Anchor Rating, Reference-Augmented")
    assert anchor["Published"] == pytest.approx(1.60)
    assert _row(t, "Mean Correct-Anchor Rating, Reference-Augmented")["Published"] == pytest.approx(4.90)
    assert _row(t, "Delta_C-W", "TruthfulQA")["Published"] == pytest.approx(4.503 - 4.295)
    # The model meets Table 2 and the reference-free anchors but not that anchor.
    means = t[(t["Table"] == "2") & t["Quantity"].isin(["NoPeer", "AllCorrect", "Mixed", "AllWrong"])]
    assert len(means) == 12 and means["Difference"].abs().max() < 0.2
    assert _row(t, "largest absolute difference, Table 2 mean ratings")["Difference"] == pytest.approx(
        means["Difference"].abs().max())
    for what in ("Correct", "Incorrect"):
        assert abs(_row(t, f"Mean {what}-Anchor Rating, Reference-Free")["Difference"]) < 0.02
    assert anchor["Difference"] > 0.5
    assert (t["Difference"] == t["Predicted"] - t["Published"]).iloc[:-1].all()


def test_numbers_the_model_can_produce_are_predicted_back(tmp_path):
    """Known answer: replace the printed Tables 2 and 5 by the planted model's own expected
    values at judging values unlike the calibrated ones, with an incorrect anchor it can
    reach; the check then finds every difference near zero (the calibration recovers a
    world of the model's form), so the seed's 0.7-point miss is the seed's."""
    root = tmp_path / "published"
    shutil.copytree(PUBLISHED, root)
    values = {"alpha": rehearsal.JUDGE_ALPHA, "sigma_b": rehearsal.SIGMA_B, "sigma_theta": rehearsal.SIGMA_THETA,
              "beta": {"truthfulqa": -1.1, "mmlu_pro": -1.25, "arc_challenge": -1.4},
              "kappa": [-1.0, 0.2, 1.5, 2.7], "reference_free_alpha_scale": 0.4}
    planted = rehearsal.predicted_targets(values, rehearsal.planted_shifts(PUBLISHED))
    for name in ("table2", "table5"):
        path = root / "conformity" / f"{name}.csv"
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
        for i, ident in enumerate(df["id"]):
            if ident in planted:
                df.loc[i, "value"] = f"{planted[ident]:.3f}"
        df.to_csv(path, index=False)
    t = predictive_table(root)
    assert np.abs(t["Difference"]).max() < 0.02, t.to_string()
    # and the seed's own tables do not give that
    assert np.abs(predictive_table(PUBLISHED)["Difference"]).max() > 0.5


def test_the_registry_entry_reads_the_repositorys_published_tables(tmp_path):
    spec = REGISTRY.table("posterior_predictive")
    files = spec.inputs({})["published"]
    assert [Path(f).stem for f in files] == list(PUBLISHED_TABLES)
    assert published_dir(files) == PUBLISHED.resolve()
    built = spec.build({"published": files}, spec.settings({}))
    assert "alpha 2.5" in built.notes[0] and "beta TruthfulQA -1.398" in built.notes[0]
    with pytest.raises(ValueError, match="more than one folder"):
        published_dir([files[0], str(tmp_path / "copy" / "conformity" / "table2.csv")])
