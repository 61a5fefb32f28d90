"""The seed paper's model against its own descriptive tables: a posterior-predictive check.

Seed 002 prints its model's estimates (the shifts η of Table 3 and Tables 10-12, the
loadings γ_j of Table 4) and, apart, the raw numbers that model was fitted to summarise
(the mean blind ratings of Table 2, the anchor ratings of Table 5). With the estimates
planted, the model predicts the raw numbers; where no judging values of the model's form
reproduce them, the paper's model and its own data disagree.

The seed prints no α, β, κ, σ_b or σ_θ, so the prediction is the closest the model
comes: α, σ_b and σ_θ fixed and β (per dataset), κ and the reference-free α scale chosen
by least squares on these very numbers (``context_effects.rehearsal.calibrate_judging``,
whose docstring says why α is fixed at 2.5, within its prior). The values are expected
ratings of the planted world (exact: Gauss-Hermite over the answers' latent spread), not
a simulation; the rehearsal's report (docs/rehearsal.md) sets a simulated run beside them.
The table is a property of the published numbers, the same in every run.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from context_effects.conformity.conditions import DATASET_LABELS

#: The seed's tables the prediction reads (paper/published/conformity/<name>.csv).
PUBLISHED_TABLES = ("table2", "table3", "table4", "table5", "table10", "table11", "table12")
TABLE2_COLUMNS = {"no_peer": "NoPeer", "all_correct": "AllCorrect", "mixed": "Mixed", "all_wrong": "AllWrong"}
TABLE5_ROWS = {"mean_correct": "Mean Correct-Anchor Rating", "mean_incorrect": "Mean Incorrect-Anchor Rating"}
TABLE5_COLUMNS = {"reference_free": "Reference-Free", "reference_augmented": "Reference-Augmented"}
ALL = "All"
LARGEST_TABLE2 = "largest absolute difference, Table 2 mean ratings"


def published_dir(files: list[str]) -> Path:
    """The ``paper/published`` folder the given ``conformity/<table>.csv`` files lie in."""
    parents = {Path(f).resolve().parent.parent for f in files}
    if len(parents) != 1:
        raise ValueError(f"the published tables come from more than one folder: {sorted(map(str, parents))}")
    return parents.pop()


def predictive_table(published: Path) -> pd.DataFrame:
    """One row per number of Tables 2 and 5 that the planted model predicts: the published
    value, the model's expected value and their difference (predicted - published), then
    the largest |difference| of Table 2's mean ratings."""
    from context_effects.rehearsal import calibrate_judging, calibration_targets, planted_shifts, predicted_targets

    published = Path(published)
    values = calibrate_judging(published)
    targets = calibration_targets(published)
    pred = predicted_targets(values, planted_shifts(published))
    rows = []

    def add(table: str, dataset: str, quantity: str, pub: float, model: float) -> None:
        rows.append({"Table": table, "Dataset": dataset, "Quantity": quantity, "Published": pub,
                     "Predicted": model, "Difference": model - pub})

    for d, label in DATASET_LABELS.items():
        for key, column in TABLE2_COLUMNS.items():
            add("2", label, column, targets[f"table2.{d}.{key}"], pred[f"table2.{d}.{key}"])
        add("2", label, "Delta_C-W", targets[f"table2.{d}.all_correct"] - targets[f"table2.{d}.all_wrong"],
            pred[f"table2.{d}.all_correct"] - pred[f"table2.{d}.all_wrong"])
    for kind, column in TABLE5_COLUMNS.items():
        for what, quantity in TABLE5_ROWS.items():
            add("5", ALL, f"{quantity}, {column}", targets[f"table5.{what}.{kind}"], pred[f"table5.{what}.{kind}"])
    means = [r for r in rows if r["Table"] == "2" and r["Quantity"] in TABLE2_COLUMNS.values()]
    worst = max(means, key=lambda r: abs(r["Difference"]))
    rows.append({**worst, "Dataset": ALL, "Quantity": LARGEST_TABLE2,
                 "Difference": abs(worst["Difference"]), "Published": None, "Predicted": None})
    return pd.DataFrame(rows, columns=["Table", "Dataset", "Quantity", "Published", "Predicted", "Difference"])


def predictive_note(published: Path) -> str:
    """The table's note: what is planted, fixed and fitted, with the judging values."""
    from context_effects.rehearsal import calibrate_judging

    v = calibrate_judging(Path(published))
    beta = ", ".join(f"{DATASET_LABELS[d]} {b:+.3f}" for d, b in v["beta"].items())
    return (f"Seed 002's estimates planted (shifts from Tables 3 and 10-12, gamma_j from Table 4); fixed: alpha "
            f"{v['alpha']:g}, sigma_b {v['sigma_b']:g}, sigma_theta {v['sigma_theta']:g}; chosen by least squares "
            f"on the published column: beta {beta}; cutpoints {', '.join(f'{k:+.3f}' for k in v['kappa'])}; "
            f"reference-free alpha scale {v['reference_free_alpha_scale']:.3f}. Predicted = the planted world's "
            "expected rating; the same in every run (docs/rehearsal.md).")
