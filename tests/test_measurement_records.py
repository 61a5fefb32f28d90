"""A fit's files carry the settings they were made with, and every reader refuses a fit
made with settings the config no longer gives (a fit job that finished on a node after the
run was interrupted has no Snakemake metadata, so no rerun trigger sees the change); and
Table 15 as seed 002 computes it: the θ̂ of a blind-only fit over every execution,
correlated over every answer of every execution."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats

from conftest import REPO, run_snakemake
from context_effects.config import validate_config
from context_effects.measurement.data import RatingsError
from context_effects.measurement.pipeline import (
    BLIND_QUALITY,
    QUALITY_COLUMNS,
    RECORD_KEY,
    RECORD_SHA256_COLUMN,
    fit_dir,
    fit_plan,
    made_with,
    record_sha256,
    select_ratings,
    write_quality,
)
from context_effects.measurement.records import (
    StaleFitError,
    check_quality,
    differences,
    fit_keys,
    numbers_key,
    quality_record,
)
from context_effects.measurement.report import build_table, table_settings
from context_effects.outputs import registry

FIT = {"chains": 2, "warmup": 150, "samples": 150, "precision": "float32", "theta_anchor_sensitivity": [1.5],
       "generator_mean_sensitivity": False, "reference_free_sensitivity": False}


def _raw(seeds=(42, 43), **fit) -> dict:
    """One dataset, two generators and two judges of three families (so a self-excluded fit
    exists), executions ``seeds``."""
    families = {"g1": "a", "g2": "b", "j1": "a", "j2": "c"}
    return {
        "run": {"kind": "synthetic"},
        "datasets": {"truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl"}},
        "models": {m: {"backend": "synthetic", "model_id": m, "family": f} for m, f in families.items()},
        "conformity": {"datasets": ["truthfulqa"], "generators": ["g1", "g2"], "judges": ["j1", "j2"],
                       "seeds": list(seeds), "primary_seed": 42, "decomposition": {"enabled": False},
                       "fit": {**FIT, **fit}},
        "amel": {"enabled": False}, "anchoring": {"enabled": False},
    }


def _config(seeds=(42, 43), **fit) -> dict:
    return validate_config(_raw(seeds, **fit))


def _summary(spec) -> pd.DataFrame:
    rows = [{"block": "total_shift", "parameter": f"total_shift[{g},{c}]", "generator": g, "condition": c,
             "mean": -0.2, "q2.5": -0.3, "q97.5": -0.1} for g in ("g1", "g2")
            for c in ("peer_correct", "peer_wrong", "peer_mixed")]
    rows += [{"block": "asym_total", "parameter": f"asym_total[{g}]", "generator": g, "mean": 0.3, "q2.5": 0.1,
              "q97.5": 0.5} for g in ("g1", "g2")]
    rows += [{"block": "gamma", "parameter": f"gamma[{j}]", "judge": j, "mean": 0.1, "q2.5": -0.1, "q97.5": 0.3,
              "pr_gt0": 0.8} for j in spec.judges]
    return pd.DataFrame(rows)


_DIAG = {"method": "nuts", "max_rhat": 1.001, "max_rhat_at": "eta", "min_ess_bulk": 900.0, "min_ess_bulk_at": "eta",
         "min_ess_tail": 900.0, "min_ess_tail_at": "eta", "divergences": 0, "chains": 2, "draws_per_chain": 150,
         "data": {}}


def _write_fits(root: Path, config: dict) -> None:
    """Every fit of the plan's folder as a fit job of ``config`` writes it: summary.csv with the
    record's hash, diagnostics.json and quality.parquet with the record, and no Snakemake
    metadata (as a job that finished unpolled after an interrupted run leaves them)."""
    for spec in fit_plan(config):
        d = root / fit_dir(spec)
        d.mkdir(parents=True, exist_ok=True)
        record = made_with(config, spec)
        _summary(spec).assign(**{RECORD_SHA256_COLUMN: record_sha256(record)}).to_csv(d / "summary.csv",
                                                                                      index=False)
        (d / "diagnostics.json").write_text(json.dumps({**_DIAG, "fit": spec.as_dict(), RECORD_KEY: record}))
        quality = pd.DataFrame({"answer_id": ["a"], "theta_mean": [0.1], "theta_sd": [0.2]})
        write_quality(quality.reindex(columns=list(QUALITY_COLUMNS)), d / "quality.parquet", record)


# ----------------------------------------------------------------------------- which settings count


def test_only_settings_that_change_the_numbers_count():
    cfg = _config()
    plan = {s.variant: s for s in fit_plan(cfg)}
    main, selfex = plan["main"], plan["self-excluded"]
    record = made_with(cfg, main)
    assert numbers_key(numbers_key(record)) == numbers_key(record)
    # Where the chains run, the settings-level anchor scale (a fit uses its spec's) and the SVI
    # keys of a NUTS fit change no number.
    for change in ({"chain_method": "sequential"}, {"svi_steps": 10}, {"svi_guide": "normal"}):
        assert differences(made_with(_config(**change), main), record) == [], change
    other = made_with(_config(warmup=200, seed=7), main)
    assert differences(record, other) == [("conformity.fit.seed", 42, 7), ("conformity.fit.warmup", 150, 200)]
    # An option's default equals its absence (fits made before the option existed).
    assert differences(made_with(_config(init="median"), main), record) == []
    assert differences(made_with(_config(init="svi"), main), record) == [("conformity.fit.init", "svi", "median")]
    assert differences(made_with(_config(sampler="numpyro"), main), record) == []
    assert differences(made_with(_config(sampler="nutpie"), main), record) == [
        ("conformity.fit.sampler", "nutpie", "numpyro")]
    assert differences(made_with(_config(warmup_windows=None), main), record) == []
    assert differences(made_with(_config(warmup_windows=[10, 150, 30]), main), record) == [
        ("conformity.fit.warmup_windows", [10, 150, 30], None)]
    # The anchor scale is the spec's: it counts through the spec.
    scale = _raw(theta_anchor=2.0)
    for m in ("g1", "g2"):  # the synthetic models plant their anchors at the fit's scale
        scale["models"][m]["synthetic"] = {"theta_anchor": 2.0}
    scale = validate_config(scale)
    scaled_main = next(s for s in fit_plan(scale) if s.variant == "main")
    assert differences(made_with(scale, scaled_main), record) == [("fit plan (theta_anchor)", 2.0, 1.5)]
    # SVI reads its own keys and none of NUTS's.
    svi = _config(method="svi", svi_steps=100)
    assert differences(made_with(svi, main), made_with(_config(method="svi", svi_steps=100, warmup=9), main)) == []
    assert differences(made_with(svi, main), made_with(_config(method="svi", svi_steps=100, sampler="nutpie"),
                                                       main)) == []
    assert differences(made_with(svi, main), made_with(_config(method="svi", svi_steps=100,
                                                               warmup_windows=[10, 150, 30]), main)) == []
    assert differences(made_with(svi, main), made_with(_config(method="svi", svi_steps=200), main)) == [
        ("conformity.fit.svi_steps", 100, 200)]
    # Model families change only a fit that drops self-ratings.
    moved = _raw()
    moved["models"]["g2"]["family"] = "c"
    moved = validate_config(moved)
    assert differences(made_with(moved, main), record) == []
    assert differences(made_with(moved, selfex), made_with(cfg, selfex)) == [("models.g2.family", "c", "b")]


# ----------------------------------------------------------------------------- readers refuse


def test_tables_9_and_17_refuse_a_fit_made_with_other_settings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    old = _config()
    _write_fits(tmp_path, old)
    for number in ("3", "9", "17"):
        assert len(build_table(number, table_settings(old, number)).df)
    # Settings that change no number: the tables build from the same fits.
    same = _config(chain_method="sequential")
    assert build_table("9", table_settings(same, "9")).df.equals(build_table("9", table_settings(old, "9")).df)
    # A settings change the fits' files do not record: every table that reads them stops.
    new = _config(warmup=300)
    for number in ("9", "17", "3"):
        with pytest.raises(StaleFitError) as err:
            build_table(number, table_settings(new, number))
        msg = str(err.value)
        assert "conformity.fit.warmup: recorded 150, config 300" in msg
        assert "results/conformity/fits/truthfulqa/main/diagnostics.json" in msg
        assert "--forcerun results/conformity/fits/truthfulqa/main/summary.csv" in msg
        assert "--forcerun conformity_fit" in msg and "delete results/conformity/fits/truthfulqa/main/" in msg


def test_a_fit_without_a_record_or_of_two_runs_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = _config()
    _write_fits(tmp_path, cfg)
    folder = tmp_path / "results/conformity/fits/truthfulqa/main"
    diag = json.loads((folder / "diagnostics.json").read_text())
    # The summary of a run with other settings beside this run's diagnostics.
    summary = pd.read_csv(folder / "summary.csv")
    other = made_with(_config(samples=151), fit_plan(cfg)[0])
    summary.assign(**{RECORD_SHA256_COLUMN: record_sha256(other)}).to_csv(folder / "summary.csv", index=False)
    with pytest.raises(StaleFitError, match="summary and diagnostics come from different runs"):
        build_table("3", table_settings(cfg, "3"))
    # A fit written before fits recorded their settings.
    (folder / "diagnostics.json").write_text(json.dumps({k: v for k, v in diag.items() if k != RECORD_KEY}))
    with pytest.raises(StaleFitError, match="carries no record of the settings fit truthfulqa/main was made with"):
        build_table("3", table_settings(cfg, "3"))


def test_figures_recovery_and_quality_readers_refuse_a_stale_fit(tmp_path, monkeypatch):
    from context_effects.recovery import write_recovery

    monkeypatch.chdir(tmp_path)
    old, new = _config(), _config(samples=200)
    _write_fits(tmp_path, old)
    fig = registry("conformity").figure("eta_forest")
    inputs = fig.inputs(new)
    fig.draw(fig.inputs(old), fig.settings(old))
    with pytest.raises(StaleFitError, match="conformity.fit.samples: recorded 150, config 200"):
        fig.draw(inputs, fig.settings(new))
    (tmp_path / "planted.json").write_text("{}")
    summary = "results/conformity/fits/truthfulqa/main/summary.csv"
    keys = {"truthfulqa/main": fit_keys(new, fit_plan(new)[:1])["truthfulqa/main"]}
    with pytest.raises(StaleFitError, match="conformity.fit.samples: recorded 150, config 200"):
        write_recovery("planted.json", [summary], [], [], "recovery.csv", "recovery.md", keys)
    assert not Path("recovery.csv").exists()
    quality = f"{fit_dir(fit_plan(old)[0])}/quality.parquet"
    assert quality_record(quality) == made_with(old, fit_plan(old)[0])
    check_quality(quality, fit_keys(old, fit_plan(old)[:1])["truthfulqa/main"])
    with pytest.raises(StaleFitError, match="quality.parquet was made with other settings"):
        check_quality(quality, keys["truthfulqa/main"])


def test_the_table_job_stops_on_fits_left_by_an_interrupted_run(workdir):
    """The table rule on fit folders without Snakemake metadata (what an interrupted cluster
    run leaves) and a config whose warm-up changed since: Snakemake keeps the fits, and the
    table job stops naming file, setting and fix, writing nothing. (The same job on fits made
    with the config's settings is every table of the shared synthetic run.)"""
    _write_fits(workdir, _config())
    target = "results/tables/conformity/table9.csv"
    (workdir / "config.yaml").write_text(yaml.safe_dump(_raw(warmup=400)))
    res = run_snakemake(target, "--cores", "1", "--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                        "--configfile=" + str(workdir / "config.yaml"), "--allowed-rules", "conformity_fit_table",
                        env={"OMP_NUM_THREADS": "1"})
    out = res.stdout + res.stderr
    assert res.returncode != 0 and "StaleFitError" in out, out[-3000:]
    assert "conformity.fit.warmup: recorded 150, config 400" in out and "--forcerun" in out
    assert not (workdir / target).exists()


# ----------------------------------------------------------------------------- Table 15's fit


def test_blind_quality_fit_covers_every_execution_with_blind_ratings_only():
    cfg = _config(seeds=(42, 43, 44))
    plan = {s.variant: s for s in fit_plan(cfg)}
    blind, main = plan[BLIND_QUALITY], plan["main"]
    assert blind.seeds == (42, 43, 44) and blind.executions == (42, 43, 44) and blind.blind_only
    assert (blind.corpus, blind.judges, blind.theta_anchor, blind.shift_prior, blind.generator_mean) == (
        main.corpus, main.judges, main.theta_anchor, main.shift_prior, main.generator_mean)
    assert main.executions == (42,) and not main.blind_only
    # The other fits' rule params are what they were before these fields existed.
    assert not {"seeds", "blind_only"} & set(main.as_dict())
    assert blind.as_dict()["seeds"] == [42, 43, 44] and blind.as_dict()["blind_only"] is True

    base = {"generator": "g1", "item_id": "q1", "status": "ok", "rating": 4, "reference": None}
    rows = [{**base, "answer_id": f"a{seed}{p}", "trial_id": f"t{seed}", "corpus": "main", "seed": seed,
             "condition": "peer_wrong", "pass": p, "d": -1 if p == "informed" else 0, "judge": j}
            for seed in (42, 43, 44) for p in ("blind", "informed") for j in ("j1", "j2")]
    rows += [{**base, "answer_id": "anc", "trial_id": None, "generator": None, "corpus": "anchor", "seed": None,
              "condition": "anchor_correct", "pass": "blind", "d": 0, "reference": "augmented", "judge": j}
             for j in ("j1", "j2")]
    table = pd.DataFrame(rows)
    kept = select_ratings(table, blind)
    assert set(kept["answer_id"]) == {"a42blind", "a43blind", "a44blind", "anc"}
    assert set(kept["pass"]) == {"blind"}
    assert set(select_ratings(table, main)["answer_id"]) == {"a42blind", "a42informed", "anc"}
    with pytest.raises(RatingsError, match="no main-corpus ratings of seed 44"):
        select_ratings(table[table["seed"] != 44], blind)


def _metric_rows(theta: dict[str, float], rng) -> pd.DataFrame:
    ids = list(theta)
    t = np.array([theta[a] for a in ids])
    return pd.DataFrame({
        "answer_id": ids, "dataset": "truthfulqa", "is_anchor": False,
        "rougeL_recall": t + rng.normal(size=len(ids)), "meteor": t + 2 * rng.normal(size=len(ids)),
        "bertscore_f1": t + 0.5 * rng.normal(size=len(ids)), "sim_gold": rng.normal(size=len(ids)),
        "nli_gold_entailment": t + rng.normal(size=len(ids)), "false_endorsement": -t + rng.normal(size=len(ids)),
        "nli_status": "ok"})


def test_table15_uses_blind_theta_of_every_execution_and_keeps_the_main_fit_as_a_sensitivity(tmp_path,
                                                                                         monkeypatch):
    """Two executions of 30 answers. The metrics track each answer's true quality; the blind
    fit's θ̂ is that quality, the main fit's θ̂ (seed 42 only) is pulled by informed ratings
    toward the peer block's polarity (+0.8 for all-correct, -0.8 for all-wrong blocks). The
    seed's Table 15 correlates all 60 answers with the blind θ̂; table15_main_fit the 30
    primary answers with the main fit's: different numbers, each the Spearman ρ of its own
    pairs."""
    monkeypatch.chdir(tmp_path)
    cfg = _config()
    plan = {s.variant: s for s in fit_plan(cfg)}
    rng = np.random.default_rng(3)
    conditions = ["peer_correct", "peer_wrong", "peer_mixed"] * 10
    true = {f"truthfulqa|main|{seed}|g1|q{i}|{c}": float(rng.normal())
            for seed in (42, 43) for i, c in enumerate(conditions)}
    pull = {"peer_correct": 0.8, "peer_wrong": -0.8, "peer_mixed": 0.0}
    main_theta = {a: v + pull[a.rsplit("|", 1)[1]] for a, v in true.items() if "|42|" in a}
    rows = _metric_rows(true, rng)
    Path("results/conformity/metrics").mkdir(parents=True)
    rows.to_parquet("results/conformity/metrics/truthfulqa.parquet")

    def quality(theta):
        return pd.DataFrame({"answer_id": list(theta), "theta_mean": list(theta.values()), "theta_sd": 0.1,
                             "dataset": "truthfulqa"}).reindex(columns=list(QUALITY_COLUMNS))

    Path("results/conformity/quality").mkdir(parents=True)
    write_quality(quality(true), "results/conformity/quality/truthfulqa.parquet", made_with(cfg, plan[BLIND_QUALITY]))
    Path(fit_dir(plan["main"])).mkdir(parents=True)
    write_quality(quality(main_theta), f"{fit_dir(plan['main'])}/quality.parquet", made_with(cfg, plan["main"]))

    def build(name, config):
        spec = registry("conformity").table(name)
        return spec.build(spec.inputs(config), spec.settings(config))

    t15 = build("table15", cfg).df.set_index("Metric")["TruthfulQA"]
    sens = build("table15_main_fit", cfg).df.set_index("Metric")["TruthfulQA"]
    assert t15["Answers (n)"] == 60 and sens["Answers (n)"] == 30
    ids = list(true)
    primary = [a for a in ids if "|42|" in a]
    metric = rows.set_index("answer_id")
    for label, col, sign in (("ROUGE-L Recall", "rougeL_recall", 1), ("-False Endorsement", "false_endorsement", -1)):
        seed_rho = stats.spearmanr([true[a] for a in ids], sign * metric.loc[ids, col]).statistic
        main_rho = stats.spearmanr([main_theta[a] for a in primary], sign * metric.loc[primary, col]).statistic
        assert t15[label] == pytest.approx(seed_rho) and sens[label] == pytest.approx(main_rho)
        assert abs(t15[label] - sens[label]) > 0.05, (label, t15[label], sens[label])
    # The quality tables are fit outputs too: a settings change stops both tables.
    for name in ("table15", "table15_main_fit"):
        with pytest.raises(StaleFitError, match="conformity.fit.chains: recorded 2, config 4"):
            build(name, _config(chains=4))


@pytest.mark.parametrize("sampler", ["numpyro", "nutpie"])
def test_a_fit_job_records_its_settings_in_every_file_and_the_blind_fit_reads_every_execution(tmp_path,
                                                                                              monkeypatch, sampler):
    """run_fit (the fit rule's job) of the blind-quality fit on two simulated executions: every
    file carries the record the readers compare, and θ̂ covers both executions' answers,
    fitted from their blind ratings alone; with either sampler (nutpie's is in the record,
    numpyro's, the default, is not, so fits made before the setting existed stay current),
    numpyro's with warm-up windows of its own, which reach the fit."""
    import xarray as xr

    from context_effects.measurement.pipeline import fit_families, run_fit, sampler_settings
    from context_effects.measurement.simulate import simulate_ratings

    monkeypatch.setenv("CONTEXT_EFFECTS_JAX_CACHE", str(tmp_path / "jax"))
    windows = [5, 10, 5] if sampler == "numpyro" else None  # the 20 warm-up iterations, numpyro's schedule differs
    cfg = _config(chains=1, warmup=20, samples=20, warmup_windows=windows,
                  **({"sampler": sampler} if sampler != "numpyro" else {}))
    assert ("sampler" in sampler_settings(cfg)) == (sampler != "numpyro")
    assert sampler_settings(cfg).get("warmup_windows") == windows
    spec = next(s for s in fit_plan(cfg) if s.kind == BLIND_QUALITY)
    parts = []
    for i, seed in enumerate((42, 43)):
        t, _ = simulate_ratings(n_items=3, generators=("g1", "g2"), judges=("j1", "j2"), seed=i, seed_label=seed)
        anchor = t["condition"].str.startswith("anchor")
        t = t.assign(corpus=np.where(anchor, "anchor", "main"), seed=np.where(anchor, None, seed),
                     reference=np.where(anchor, "augmented", None))
        parts.append(t if i == 0 else t[~anchor])
    ratings = pd.concat(parts, ignore_index=True)
    ratings.to_parquet(tmp_path / "ratings.parquet")
    out = tmp_path / fit_dir(spec)
    diag = run_fit(tmp_path / "ratings.parquet", spec, sampler_settings(cfg), fit_families(cfg, spec), out)
    record = made_with(cfg, spec)
    assert diag[RECORD_KEY] == record and diag["fit"] == spec.as_dict()
    assert quality_record(out / "quality.parquet") == record
    assert diag["settings"].get("sampler", "numpyro") == sampler and diag["chains"] == 1
    assert diag["settings"].get("warmup_windows") == windows
    assert set(pd.read_csv(out / "summary.csv")[RECORD_SHA256_COLUMN]) == {record_sha256(record)}
    with xr.open_dataset(out / "posterior.nc", group="posterior") as post:
        assert json.loads(post.attrs[RECORD_KEY]) == record
    keys = fit_keys(cfg, [spec])
    monkeypatch.chdir(tmp_path)
    built = build_table("9", {**table_settings(cfg, "9"), "fits": [spec.as_dict()], "made_with": keys})
    assert built.df["Fit"].tolist() == ["Blind ratings, every execution (Table 15)"]
    blind = ratings[(ratings["pass"] == "blind")]
    assert diag["data"]["n_ratings"] == len(blind) < len(ratings)
    quality = pd.read_parquet(out / "quality.parquet")
    experimental = set(blind.loc[blind["corpus"] == "main", "answer_id"])
    assert set(quality["answer_id"]) == experimental and set(quality["seed"]) == {42, 43}
