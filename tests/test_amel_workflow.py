"""Study A rules end to end on the synthetic backend: items to tables and figures, planted effects recovered."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake
from context_effects.amel import stats
from context_effects.amel.synthetic import amel_p_yes
from context_effects.llm.backends.synthetic import SyntheticBackend

CONFIG = {
    "run": {"label": "synthetic-amel", "kind": "synthetic"},
    "datasets": {
        "truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl", "n_items": 8},
    },
    "models": {
        "qwen-sim": {"backend": "synthetic", "model_id": "qwen-sim", "family": "qwen", "params_b": 7.6},
    },
    "conformity": {"enabled": False},
    "anchoring": {"enabled": False},
    "amel": {
        "models": ["qwen-sim"],
        "benchmark_datasets": ["truthfulqa"],
        "item_files": {"code_review": "data/amel/code_review.jsonl"},
        "items_per_domain": 16,
        "history_lengths": [5, 10],
        "position_history_length": 10,
        "position_biased_turns": 3,
        "framing_history_lengths": [5],
        "balanced_history_lengths": [10],
        "saturation_share": 0.8,
        "n_samples": 5,
    },
}


def test_amel_rules_from_items_to_tables_recover_planted_bias(workdir):
    cfg_path = workdir / "config.yaml"
    cfg_path.write_text(yaml.safe_dump(CONFIG))
    args = ("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir), "--configfile=" + str(cfg_path))
    # Three tables and one figure through their rules (every table and figure function
    # is built in-process in test_amel.py: each Snakemake job costs seconds of start-up).
    tables = ("effects", "asymmetry", "framing")
    targets = [f"results/tables/amel/{name}.tex" for name in tables] + ["figures/amel/effects.png"]
    res = run_snakemake("--cores", "2", *args, *targets)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for name in tables:
        for path in (f"results/tables/amel/{name}.csv", f"results/tables/amel/{name}.tex"):
            assert (workdir / path).stat().st_size > 0, path
        assert "Synthetic backend" in (workdir / f"results/tables/amel/{name}.tex").read_text()
    for ext in ("pdf", "png"):
        assert (workdir / f"figures/amel/effects.{ext}").stat().st_size > 0
    items = pd.read_parquet(workdir / "results/amel/items/code_review.parquet")
    assert len(items) == 56 and items["is_test"].sum() == 16
    bs = pd.read_parquet(workdir / "results/amel/bias_scores.parquet")
    assert set(bs["domain"]) == {"truthfulqa", "code_review"}
    assert set(bs["method"]) == {"single_call", "samples", "first_token"} and not bs["extra_model"].any()
    saturated = bs["condition"] != "balanced"
    assert bs.loc[saturated, "bs"].notna().all() and bs.loc[~saturated, "shift"].notna().all()
    assert (bs["history_repeats"] == 0).all()
    main = bs[saturated & bs["position"].isna()]
    assert set(main["saturation_share"]) == {0.8} and set(main["prevailing_share"]) == {0.8}  # 4 of 5, 8 of 10
    bs = bs[bs["method"] == "first_token"]
    # Planted conformity recovered: with first-token probabilities every item's BS is
    # exactly the planted one (right item, cell, polarity and k all the way through),
    # and every cell's mean BS is significantly conforming.
    truth = SyntheticBackend(model_name="qwen-sim")
    for r in bs[bs["condition"] != "balanced"].itertuples():
        framing = r.framing
        planted_p = amel_p_yes(truth, r.item_id, r.condition, r.n_biased, r.position, framing)
        base_p = amel_p_yes(truth, r.item_id, framing=framing)
        sign = 1 if r.condition == "no_saturated" else -1
        assert r.bs == pytest.approx(sign * (planted_p - base_p), abs=1e-12), r
    main = bs[(bs["framing"] == "standard") & bs["position"].isna() & (bs["condition"] != "balanced")]
    for (cond, k), part in main.groupby(["condition", "k"]):
        s = stats.one_sample(part["bs"])
        assert s["n"] == 32 and s["ci_high"] < 0, (cond, k, s)
    effects = pd.read_csv(workdir / "results/tables/amel/effects.csv")
    assert list(effects["method"].unique()) == ["single_call", "samples", "first_token"]
    assert {"extra_model", "saturation_share", "n_rows"} <= set(effects.columns)
    effects = effects[effects["method"] == "first_token"]
    assert set(effects["scope"]) == {"overall", "model", "domain", "provider"}
    assert (effects["d"] < 0).all() and (effects["p"] < 0.05).all()
    assert effects.loc[effects["scope"] == "model", "params_b"].tolist() == [7.6]
    # A rerun has nothing to do.
    dry = run_snakemake("-n", *args, *targets)
    assert dry.returncode == 0 and "Nothing to be done" in dry.stdout + dry.stderr, dry.stdout[-2000:]
