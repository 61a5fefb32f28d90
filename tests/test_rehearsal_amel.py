"""Study A in the rehearsal: the intervals the report checks (Cohen's d, the asymmetry
ratio), the published rows that name them, and the calibration that plants Figure 14."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from context_effects import rehearsal
from context_effects.amel import analysis, stats
from context_effects.paper.lookup import lookup
from context_effects.paper.reproduction import compare, read_published
from context_effects.tables import write_table

REPO = Path(__file__).resolve().parents[1]
PUBLISHED = REPO / "paper/published"
STUDY_C_MODELS = ("qwen2.5-7b", "mistral-7b", "gemma-2-9b", "llama-3.1-8b", "gpt-4o", "gpt-5.4-mini")


def _rehearsal_config():
    return yaml.safe_load((REPO / "config/rehearsal.yaml").read_text())


# ----------------------------------------------------------------------------- the interval of d


def _nct_cdf_by_integration(t: float, df: int, ncp: float) -> float:
    """P(T <= t) for T = (Z + ncp) / sqrt(V / df), V ~ chi2(df), integrated from that
    definition: a reference that does not use scipy.stats.nct."""
    from scipy import integrate
    from scipy.stats import chi2, norm

    def f(v: float) -> float:
        return norm.cdf(t * math.sqrt(v / df) - ncp) * chi2.pdf(v, df)

    lo, hi = chi2.ppf(1e-12, df), chi2.ppf(1 - 1e-12, df)
    return integrate.quad(f, lo, hi, limit=200, epsabs=1e-13)[0]


@pytest.mark.parametrize("d, n", [(0.5, 20), (-0.3, 50), (0.05, 12)])
def test_d_interval_inverts_the_noncentral_t(d, n):
    from scipy.optimize import brentq

    t = d * math.sqrt(n)
    ref = [brentq(lambda ncp, q=q: _nct_cdf_by_integration(t, n - 1, ncp) - q, t - 10, t + 10) / math.sqrt(n)
           for q in (0.975, 0.025)]
    assert stats.d_interval(d, n) == pytest.approx(ref, abs=1e-6)


def test_d_interval_covers_a_planted_d():
    """The unit is the replication: 1,000 samples of 30 normal values with d = 0.4 planted."""
    rng = np.random.default_rng(2024)
    hits = 0
    for _ in range(1000):
        x = rng.normal(0.4, 1.0, 30)
        s = stats.one_sample(x)
        hits += s["d_ci_low"] <= 0.4 <= s["d_ci_high"]
    assert 0.93 <= hits / 1000 <= 0.97


def test_d_interval_is_the_large_sample_one_for_many_values():
    """For large n the exact interval meets d ± z·sqrt(1/n + d²/(2n)) (the normal
    approximation of d's sampling distribution)."""
    d, n = -0.2, 5000
    half = 1.959964 * math.sqrt(1 / n + d * d / (2 * n))
    lo, hi = stats.d_interval(d, n)
    assert (lo, hi) == pytest.approx((d - half, d + half), abs=2e-4)


def test_d_interval_needs_two_values():
    assert all(math.isnan(x) for x in stats.d_interval(0.3, 1))
    s = stats.one_sample([0.1])
    assert math.isnan(s["d_ci_low"]) and math.isnan(s["d_ci_high"])


# ----------------------------------------------------------------------------- the interval of the ratio


def test_fieller_interval_covers_a_planted_ratio():
    """Paired values whose means stand 1.6 : 1, correlated within pair (as |BS no| and
    |BS yes| of one item are); the unit is the replication."""
    rng = np.random.default_rng(7)
    cov = [[0.04, 0.012], [0.012, 0.02]]
    hits, bounded = 0, 0
    for _ in range(1000):
        a, b = rng.multivariate_normal([0.16, 0.10], cov, 80).T
        r, lo, hi = stats.fieller_ratio(a, b)
        assert r == pytest.approx(a.mean() / b.mean())
        if not math.isnan(lo):
            bounded += 1
            hits += lo <= 1.6 <= hi
    assert bounded >= 998  # an unbounded set needs mean(b) over 4 SEs below its 0.10
    assert 0.93 <= hits / 1000 <= 0.97


def test_fieller_meets_the_delta_method_when_the_denominator_is_precise():
    rng = np.random.default_rng(3)
    a, b = rng.normal(0.3, 0.2, 4000), rng.normal(0.2, 0.2, 4000)
    r, lo, hi = stats.fieller_ratio(a, b)
    n = len(a)
    var = (a.var(ddof=1) - 2 * r * np.cov(a, b)[0, 1] + r * r * b.var(ddof=1)) / (n * b.mean() ** 2)
    assert (lo, hi) == pytest.approx((r - 1.96 * math.sqrt(var), r + 1.96 * math.sqrt(var)), abs=2e-3)


def test_fieller_is_unbounded_when_the_denominator_may_be_zero():
    r, lo, hi = stats.fieller_ratio([1.0, 1.2, 0.8, 1.1], [0.5, -0.6, 0.4, -0.3])
    assert math.isfinite(r) and math.isnan(lo) and math.isnan(hi)


def _bias_rows(n_items: int, rng: np.random.Generator) -> pd.DataFrame:
    """Single-call rows (BS in {-1, 0, 1}) of one model, mean BS −0.10 after yes- and
    −0.16 after no-saturated histories."""
    rows = []
    for i in range(n_items):
        for pol, cond, mean in (("yes", "yes_saturated", -0.1), ("no", "no_saturated", -0.16)):
            for k in (5, 10):
                bs = float(rng.choice([-1.0, 0.0, 1.0], p=[0.25 - mean / 2, 0.5, 0.25 + mean / 2]))
                rows.append(dict(model="m", method="single_call", domain="d", item_id=f"i{i}", framing="standard",
                                 position=None, condition=cond, polarity=pol, k=k, provider="p", params_b=1.0, bs=bs))
    return pd.DataFrame(rows)


def test_the_tables_carry_the_intervals():
    bs = _bias_rows(200, np.random.default_rng(1))
    eff = analysis.effects_table(bs).set_index(["scope", "group"])
    row = eff.loc[("model", "m")]
    assert row["d_ci_low"] < row["d"] < row["d_ci_high"]
    # Four rows per item: the intervals resample items, not rows.
    part = bs[bs["condition"].isin(["yes_saturated", "no_saturated"])]
    boot = stats.cluster_bootstrap(part["bs"], part["item_id"])
    assert (row["d_ci_low"], row["d_ci_high"]) == pytest.approx((boot["d_ci_low"], boot["d_ci_high"]))
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((boot["ci_low"], boot["ci_high"]))
    asym = analysis.asymmetry_table(bs).set_index(["scope", "group"]).loc[("overall", "all")]
    for col in ("ratio", "ratio_abs"):
        assert asym[f"{col}_ci_low"] < asym[col] < asym[f"{col}_ci_high"], col
    scaling = analysis.scaling_table(bs)
    assert {"d_ci_low", "d_ci_high"} <= set(scaling.columns)


# ----------------------------------------------------------------------------- the published rows


def test_published_d_rows_read_the_interval_and_flip_its_sign(tmp_path):
    """Figure 14 prints |d| (scale −1): the report flips the table's d and its ends, sorts
    them, and checks the printed value against that interval."""
    t = tmp_path / "results/tables/amel"
    effects = pd.DataFrame({"method": ["single_call"] * 2, "scope": ["model", "model"],
                            "group": ["gpt-5-nano", "gpt-5.2"], "d": [-0.30, -0.30],
                            "d_ci_low": [-0.38, -0.38], "d_ci_high": [-0.22, -0.22]})
    write_table(effects, t / "effects.csv", t / "effects.tex", "Effects", "tab:e")
    cell = lookup("amel/effects", "method=single_call; scope=model; group=gpt-5-nano", "d @ d_ci_low, d_ci_high",
                  results=tmp_path / "results")
    assert (cell.value, cell.lower, cell.upper) == pytest.approx((-0.30, -0.38, -0.22))
    published = read_published([PUBLISHED / "amel/figure14.csv"])
    published = published[published["id"].isin(["figure14.openai.nano", "figure14.openai.gpt52"])]
    report = compare(published.drop(columns="file"), tmp_path / "results", "rehearsal").set_index("id")
    nano, gpt52 = report.loc["figure14.openai.nano"], report.loc["figure14.openai.gpt52"]
    assert nano["status"] == "recovered"  # 0.34 inside [0.22, 0.38]
    assert (nano["reproduced"], nano["reproduced_lower"], nano["reproduced_upper"]) == pytest.approx((0.30, 0.38, 0.22))
    assert gpt52["status"] == "missed"  # 0.17 below 0.22
    paper = compare(published.drop(columns="file"), tmp_path / "results", "paper").set_index("id")
    assert paper.loc["figure14.openai.nano", "status"] == "agrees"
    assert "95% interval" in paper.loc["figure14.openai.nano", "reason"]


def test_study_a_roles():
    published = read_published(sorted((PUBLISHED / "amel").glob("*.csv"))).set_index("id")
    roles = {key: rehearsal.row_role(r) for key, r in published.iterrows()}
    planted = sorted(k for k, (role, _) in roles.items() if role == "planted")
    assert planted == sorted([*(k for k in published.index if k.startswith("figure14.")),
                              "abstract.d_haiku", "abstract.d_opus", "abstract.d_nano", "abstract.d_gpt52"])
    role, why = roles["abstract.asymmetry_ratio"]
    assert role == "unplantable" and "1.22" in why
    assert roles["abstract.d_overall"][0] == "unplantable" and "open models" in roles["abstract.d_overall"][1]
    for key in ("abstract.d_high_entropy", "abstract.spearman_length", "figure8.nano.ratio_standard",
                "abstract.asymmetry_t"):
        assert roles[key][0] == "unplantable" and roles[key][1], key
    assert set(rehearsal.AMEL_PLANTED_MODELS) == set(rehearsal.figure14_targets(PUBLISHED))


# ----------------------------------------------------------------------------- the calibration


def test_main_cells_follow_the_rehearsal_design():
    cells = rehearsal.amel_main_cells(_rehearsal_config()["amel"])
    # 80% of k turns carry the prevailing verdict: the net excess 2·0.8k − k
    assert sorted(cells) == sorted((c, n) for c in ("yes_saturated", "no_saturated") for n in (3, 6, 12, 30))


def test_calibration_plants_figure14_and_the_asymmetry():
    cfg = _rehearsal_config()
    cells = rehearsal.amel_main_cells(cfg["amel"])
    models = cfg["models"]
    targets = rehearsal.figure14_targets(PUBLISHED)
    assert targets["gpt-5-nano"] == pytest.approx(-0.34)
    for name, d in targets.items():
        got = rehearsal.amel_expected(models[name]["synthetic"], cells)["d"]
        assert got == pytest.approx(d, abs=2e-3), name
    roster = {name: models[name]["synthetic"] for name in cfg["amel"]["models"]}
    pooled = rehearsal.pooled_amel_ratios(roster, cells)
    assert pooled["ratio"] == pytest.approx(rehearsal.amel_asymmetry_target(PUBLISHED), abs=5e-3)
    # the reading the published row takes cannot be met (rehearsal.AMEL_UNPLANTED says why)
    assert pooled["ratio_abs"] < 1.22
    top = {**roster, **{m: {"amel_conformity": rehearsal._conformity_for(d, rehearsal.AMEL_ASYMMETRY_RANGE[1], cells),
                            "amel_negativity_asymmetry": rehearsal.AMEL_ASYMMETRY_RANGE[1]}
                        for m, d in targets.items()}}
    assert rehearsal.pooled_amel_ratios(top, cells)["ratio_abs"] < 1.22


def test_study_c_models_keep_their_amel_values():
    """A changed AMEL value would change their revision and rerun Study C."""
    models = _rehearsal_config()["models"]
    for name in STUDY_C_MODELS:
        assert not [k for k in models[name]["synthetic"] if k.startswith("amel_")], name
    for name in rehearsal.AMEL_PLANTED_MODELS:
        assert set(models[name]["synthetic"]) == {"amel_conformity", "amel_negativity_asymmetry"}, name


def test_expected_d_is_what_simulated_single_calls_give():
    """amel_expected against the synthetic backend's own items and draws: many items of
    one planted model, one Bernoulli reply per cell, d over the rows."""
    from context_effects.amel.synthetic import amel_p_yes
    from context_effects.llm.backends.synthetic import SyntheticBackend

    params = {"amel_conformity": 1.5, "amel_negativity_asymmetry": 2.0}
    cells = rehearsal.amel_main_cells(_rehearsal_config()["amel"])
    backend = SyntheticBackend(model_name="m", seed=11, params=params)
    rng = np.random.default_rng(5)
    rows, no, yes = [], [], []
    for i in range(3000):
        p_base = amel_p_yes(backend, f"i{i}")
        y_base = rng.random() < p_base
        for cond, n in cells:
            y = rng.random() < amel_p_yes(backend, f"i{i}", cond, n)
            # r* is "No" after a yes-saturated history
            bs = float((not y) - (not y_base)) if cond == "yes_saturated" else float(y - y_base)
            rows.append(bs)
            (yes if cond == "yes_saturated" else no).append(bs)
    rows = np.asarray(rows)
    want = rehearsal.amel_expected(params, cells)
    assert rows.mean() / rows.std(ddof=1) == pytest.approx(want["d"], abs=0.03)
    assert np.mean(no) / np.mean(yes) == pytest.approx(want["mean_no"] / want["mean_yes"], rel=0.15)


def _design_rows(n_items: int, rng: np.random.Generator,
                 shifts: tuple[float, float] = (0.10, -0.16)) -> tuple[np.ndarray, np.ndarray]:
    """Single-call bias scores of the paper's design for one model: per item a baseline
    reply (Yes with the item's probability) and 8 treated replies (4 history lengths x 2
    polarities), each row's BS = treated - baseline, so an item's rows share its baseline."""
    p = rng.beta(0.6, 0.6, n_items)  # items from near-certain No to near-certain Yes
    base = rng.random(n_items) < p
    shift = np.repeat([list(shifts)], n_items, axis=0)  # after yes- / no-saturated histories
    treated_p = np.clip(p[:, None, None] + shift[:, None, :], 0, 1) * np.ones((1, 4, 1))
    treated = rng.random(treated_p.shape) < treated_p
    bs = treated.astype(float) - base[:, None, None]
    # toward the prevailing polarity is negative: yes rows count -(BS), as the scores do
    bs[:, :, 0] *= -1
    items = np.repeat(np.arange(n_items), 8)
    return bs.reshape(-1), items


def test_the_item_bootstrap_covers_d_at_the_papers_design():
    """Coverage of a planted d by the item bootstrap's 95% interval, on single calls of
    the paper's design (rows sharing their item and its baseline reply): 200 data sets of
    150 items, each judged against the d of a million items of the same world. The exact
    interval that takes rows as independent is also measured: it is not 95% here."""
    world = np.random.default_rng(11)
    big, _ = _design_rows(1_000_000, world)
    planted = big.mean() / big.std(ddof=1)
    rng = np.random.default_rng(12)
    boot_hits = exact_hits = 0
    reps = 200
    for _ in range(reps):
        bs, items = _design_rows(150, rng)
        s = stats.one_sample(bs, clusters=items)
        boot_hits += s["d_ci_low"] <= planted <= s["d_ci_high"]
        lo, hi = stats.d_interval(s["d"], len(bs))
        exact_hits += lo <= planted <= hi
    # 95% within about 2.5 binomial SEs of 200 replicates (SE 0.015)
    assert 0.91 <= boot_hits / reps <= 0.99, boot_hits / reps
    assert abs(exact_hits / reps - 0.95) > 0.03, exact_hits / reps


def test_the_item_clustered_test_holds_its_size_where_rows_share_an_item():
    """No shift at all, rows sharing their item's baseline reply: the test clustered by item
    rejects at its nominal 5%; taking the rows as independent does not (here far less often:
    an item's yes- and no-saturated rows carry its baseline with opposite signs). With one value per
    item it is the ordinary one-sample t-test."""
    from scipy import stats as scipy_stats

    rng = np.random.default_rng(21)
    reps, clustered, rowwise = 400, 0, 0
    for _ in range(reps):
        bs, items = _design_rows(120, rng, shifts=(0.0, 0.0))
        clustered += stats.one_sample(bs, clusters=items)["p"] < 0.05
        rowwise += scipy_stats.ttest_1samp(bs, 0.0).pvalue < 0.05
    # 5% within about 2.5 binomial SEs of 400 replicates (SE 0.011)
    assert 0.023 <= clustered / reps <= 0.078, clustered / reps
    assert abs(rowwise / reps - 0.05) > 0.03, rowwise / reps
    x = rng.normal(0.2, 1.0, 40)
    one = stats.cluster_t(x, np.arange(40))
    ref = scipy_stats.ttest_1samp(x, 0.0)
    assert (one["t"], one["p"]) == pytest.approx((ref.statistic, ref.pvalue), rel=1e-9)
