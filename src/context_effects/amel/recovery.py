"""Study A's (AMEL) planted values against the analyses' estimates (``context_effects.recovery``
gathers every study's rows into ``results/synthetic/recovery.csv``).

What is checked, for every measurement method the run has, the primary analysis
(``single_call``: one call per cell, each outcome a unit) first, then ``samples`` and
``first_token`` (``amel.design.METHOD_ORDER``):

* the headline quantities the analysis tables print (``results/tables/amel/<name>.csv``,
  :data:`TABLES`), overall (the seed's roster) and per model: the effects table's mean BS
  and Cohen's d; the asymmetry table's ratio of mean BS no/yes, ratio of mean |BS| and d_z
  of the per-item |BS| difference no − yes, also per history length k; the balanced
  table's mean shift of P(Yes) and its |shift| − |BS| difference; the length table's slope
  of BS on k; the framing table's ratios in each framing;
* per model and design cell, the mean bias score (the shift of P(Yes) for a balanced
  history) over the items in ``results/amel/bias_scores.parquet``, with its t interval.

Every planted value is exact, by quadrature over the planted item distribution
(``amel.synthetic``; no simulation), from :func:`planted_values`'s cell moments. A cell's
mean bias score is E[p_t − p_b] in r*'s direction for every method (a sampled share and a
single reply are unbiased for p). Whatever is not linear in the bias scores depends on the
method: E|BS| is E[p_t(1 − p_b) + p_b(1 − p_t)] for one call (BS = Y_t − Y_b, the two
replies independent given the item), E|X − Y|/n for n samples (X, Y binomial) and
E|p_t − p_b| for first-token probabilities. Cohen's d is mean/SD of the test's unit: for
``single_call`` a row, drawn from the main cells alike, so SD² = E[BS²] − E[BS]² with
BS² = |BS|; for the item-mean methods an item's mean M over its main cells, whose variance
adds the binomial noise of each cell's share and of the baseline it shares
(:func:`_unit_moments`). The asymmetry's d_z divides the mean of an item's D = mean |BS|
no − mean |BS| yes by its SD, whose moments condition on the item's baseline reply(s)
(:func:`_asymmetry_moments`). Pooled (overall) values mix the roster's models alike, as their
rows are; they are compared only when every roster model is synthetic.

Each interval's unit of replication is the item: the printed intervals where the table's
test takes the item (item means; the asymmetry and framing tables' Fieller intervals and
the exact interval of d_z, of per-item pairs; the length table's cluster-robust slope).
``single_call``'s one-sample tests take the row, and an item's rows share the item and its
baseline reply, so for its mean, d and balanced mean shift the rows use an item-clustered
interval computed here (:func:`clustered_mean_d`: deterministic, linearised) around the
printed estimate. The balanced |shift| − |BS| difference, printed without an interval,
gets the t interval of its per-item differences.

Not checked: the entropy strata and baseline-verdict congruence (strata of an observed
outcome), truth congruence (it depends on the items' answers, not on a planted value),
t, p, Spearman's ρ and the position ANOVA (test statistics), and the by-domain and
by-provider rows (the simulator plants no domain or provider effect beyond the models').
The logit-scale values c, A, τ and the k scale are listed as not directly estimated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from context_effects.recovery_rows import row

Config = Mapping[str, Any]

#: AMEL settings that decide the design cells (``amel.design.design_cells``) and how a
#: cell's P(Yes) is measured (``n_samples``: the replies behind a ``samples`` share).
DESIGN_KEYS = ("saturation_share", "history_lengths", "positions", "position_history_length",
               "position_biased_turns", "framing_swap", "framing_history_lengths", "balanced_history_lengths",
               "n_samples")
#: AMEL's logit-scale planted values, listed as not directly estimated.
LOGIT_PARAMS = {"conformity": "amel_conformity", "negativity_asymmetry": "amel_negativity_asymmetry",
                "yes_bias": "amel_yes_bias", "k_scale": "amel_k_scale"}
#: The measurement methods, primary first (``amel.design.METHOD_ORDER``; a test checks they agree).
METHODS = ("single_call", "samples", "first_token")
#: Methods whose one-sample tests take the row as the unit (``amel.analysis.ROW_UNIT_METHODS``).
ROW_UNIT_METHODS = frozenset({"single_call"})
#: The analysis tables whose printed values the rows check.
TABLES = ("effects", "asymmetry", "balanced", "length", "framing")
SATURATED = ("yes_saturated", "no_saturated")
#: The unit of every AMEL test (``amel.analysis.UNIT``).
UNIT = ["model", "domain", "item_id"]
OVERALL = "overall"


def table_path(name: str) -> str:
    """An analysis table as the registry writes it (``amel.outputs.table_path``; the registry is a
    layer beside this module, so it is not imported: a test checks the two agree)."""
    return f"results/tables/amel/{name}.csv"


def inputs() -> list[str]:
    """What the rows read: the bias scores and the analysis tables."""
    from context_effects.amel.dag import BIAS_SCORES

    return [BIAS_SCORES, *(table_path(n) for n in TABLES)]


def table_of_path(path: Any) -> str | None:
    """The analysis table a path of :func:`inputs` holds (None for the bias scores)."""
    from pathlib import Path

    p = Path(path)
    return p.stem if p.suffix == ".csv" and p.stem in TABLES else None


def planted_inputs(config: Config) -> dict[str, Any]:
    """What AMEL's part of ``planted.json`` needs beyond the models' values: the design."""
    from context_effects.llm.backends.synthetic import jsonable

    return {k: jsonable(config["amel"][k]) for k in DESIGN_KEYS}


# ----------------------------------------------------------------------------- planted values


def _cells(design: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every treatment cell of the design (saturated and balanced) with the (k, n_biased) its
    requests give the simulator."""
    from context_effects.amel.design import design_cells
    from context_effects.amel.requests import cell_meta

    cells = []
    for cell in design_cells(design):
        if cell.condition == "baseline":
            continue
        meta = cell_meta(cell, {"item_id": "", "domain": "", "answer": "Yes"}, "", "", 0)
        cells.append({"cell": cell.label, "framing": cell.framing, "condition": cell.condition, "k": cell.k,
                      "position": cell.position, "n_biased": cell.n_biased, "n_simulated": meta["n_biased"]})
    return cells


def _is_main(c: Mapping[str, Any]) -> bool:
    """A cell of the main rows (``amel.analysis.main_rows``): standard framing, saturated, no position block."""
    return c["framing"] == "standard" and c["position"] is None and c["condition"] in SATURATED


def _p_yes(eff: Mapping[str, Any], z: np.ndarray, framing: str, condition: str = "baseline", n: int | None = None,
           position: str | None = None) -> np.ndarray:
    """P("Yes") at the item logits ``z`` (the simulator's logit, ``amel.synthetic``)."""
    from context_effects.amel.synthetic import _shift
    from context_effects.llm.backends.synthetic import sigmoid

    s = 1.0 if framing == "standard" else -1.0
    return sigmoid(s * z + eff["amel_yes_bias"] + _shift(eff, condition, n, position, framing))


def expected_abs_difference(pt: np.ndarray, pb: np.ndarray, w: np.ndarray, n_samples: int) -> dict[str, float]:
    """E|P̂_t − P̂_b| over the item distribution (nodes with weights ``w``) for each method: one
    reply each (|Y_t − Y_b| = 1 when they differ), the shares of ``n_samples`` replies each
    (binomial, independent given the item), and the probabilities themselves."""
    from scipy.stats import binom

    n = int(n_samples)
    x = np.arange(n + 1)
    ft, fb = binom.pmf(x[None, :], n, pt[:, None]), binom.pmf(x[None, :], n, pb[:, None])
    gap = np.abs(x[:, None] - x[None, :]) / n
    samples = np.einsum("ix,iy,xy->i", ft, fb, gap)
    return {"single_call": float(np.sum(w * (pt * (1 - pb) + pb * (1 - pt)))),
            "samples": float(np.sum(w * samples)),
            "first_token": float(np.sum(w * np.abs(pt - pb)))}


def _unit_moments(pts: Sequence[np.ndarray], signs: np.ndarray, pb: np.ndarray, w: np.ndarray,
                  abs_single: Sequence[float], n_samples: int) -> dict[str, float]:
    """E[U²] of the unit of the effects table's test over one model's main cells: for
    ``single_call`` a row of a cell drawn alike (BS² = |BS|); for ``samples`` and
    ``first_token`` an item's mean M = (1/C)·Σ_c σ_c·(P̂_c − P̂_b) (σ_c = −1 yes-, +1
    no-saturated, P̂_b the item's one baseline), E[M²] = E[E[M|z]² + Var(M|z)] with
    Var(M|z) = (Σ_c p_c(1 − p_c) + (Σ_c σ_c)²·p_b(1 − p_b)) / (n·C²) for n samples, 0 for
    exact probabilities."""
    if not len(pts):
        return dict.fromkeys(METHODS, math.nan)
    pt = np.stack(pts)
    c = len(pts)
    m_z = np.mean(signs[:, None] * (pt - pb[None, :]), axis=0)
    var_z = (np.sum(pt * (1 - pt), axis=0) + signs.sum() ** 2 * pb * (1 - pb)) / (int(n_samples) * c * c)
    return {"single_call": float(np.mean(abs_single)),
            "samples": float(np.sum(w * (m_z ** 2 + var_z))),
            "first_token": float(np.sum(w * m_z ** 2))}


def _asymmetry_moments(pt_no: Sequence[np.ndarray], pt_yes: Sequence[np.ndarray], pb: np.ndarray, w: np.ndarray,
                       n_samples: int) -> dict[str, dict[str, float]]:
    """E[D] and E[D²] of an item's D = mean |BS| of its no-saturated cells − mean |BS| of its
    yes-saturated ones (the asymmetry table's paired difference, whose d_z it prints), by method.
    Given the item, the cells' replies are independent once its baseline is fixed: for ``n``
    replies per cell (``single_call``: n = 1), given the baseline's X_b = x of n, each
    |BS_c| = |X_c − x|/n has its binomial mean and variance, so D|x has mean Σ±E/K and
    variance Σ Var/K²; E[D²] sums over x and integrates over the items. For ``first_token``
    D is a function of the item alone."""
    from scipy.stats import binom

    def sampled(n: int) -> tuple[float, float]:
        x = np.arange(n + 1)
        fb = binom.pmf(x[None, :], n, pb[:, None])  # nodes x baseline count
        mean = np.zeros_like(fb)
        var = np.zeros_like(fb)
        for cells, sign in ((pt_no, 1.0), (pt_yes, -1.0)):
            for pt in cells:
                ft = binom.pmf(x[None, :], n, pt[:, None])  # nodes x treatment count
                gap = np.abs(x[:, None] - x[None, :]) / n  # treatment count x baseline count
                m1 = ft @ gap
                m2 = ft @ gap ** 2
                mean += sign * m1 / len(cells)
                var += (m2 - m1 ** 2) / len(cells) ** 2
        return float(np.sum(w * np.sum(fb * mean, axis=1))), float(np.sum(w * np.sum(fb * (var + mean ** 2), axis=1)))

    exact = (np.mean([np.abs(pt - pb) for pt in pt_no], axis=0)
             - np.mean([np.abs(pt - pb) for pt in pt_yes], axis=0))
    out = {"single_call": sampled(1), "samples": sampled(int(n_samples)),
           "first_token": (float(np.sum(w * exact)), float(np.sum(w * exact ** 2)))}
    return {m: {"mean": a, "second": b} for m, (a, b) in out.items()}


def _model_planted(eff: Mapping[str, Any], design: Mapping[str, Any]) -> dict[str, Any]:
    from context_effects.amel.synthetic import _z_grid, cell_targets, planted

    p = planted(eff)
    out = {k: p[k] for k in ("yes_bias", "conformity", "negativity_asymmetry", "token_asymmetry", "semantic_asymmetry",
                             "asymmetry_ratio_logit", "k_scale", "position_weights", "deterministic_share")}
    out["deterministic_logit"] = list(eff["amel_deterministic_logit"])
    out["uncertain_logit_sd"] = eff["amel_uncertain_logit_sd"]
    n_samples = int(design["n_samples"])
    z, w = _z_grid(eff)
    base = {fr: _p_yes(eff, z, fr) for fr in ("standard", "swapped")}
    cells, main_pt = [], []
    for c in _cells(design):
        pt, pb = _p_yes(eff, z, c["framing"], c["condition"], c["n_simulated"], c["position"]), base[c["framing"]]
        entry = {**c, **cell_targets(eff, c["condition"], c["n_simulated"], c["position"], c["framing"]),
                 # E|BS| (E|shift| for a balanced history) by method: what the ratios of mean |BS| read
                 "expected_abs": expected_abs_difference(pt, pb, w, n_samples)}
        if c["condition"] == "balanced":
            # No prevailing verdict, no bias score: the planted effect is the shift of P(Yes) (zero).
            entry["expected_shift"] = float(np.sum(w * (pt - pb)))
        cells.append(entry)
        if _is_main(c):
            main_pt.append(pt)
    main = [c for c in cells if _is_main(c)]
    signs = np.array([-1.0 if c["condition"] == "yes_saturated" else 1.0 for c in main])
    out["unit_second_moment"] = _unit_moments(main_pt, signs, base["standard"], w,
                                              [c["expected_abs"]["single_call"] for c in main], n_samples)

    def pair_moments(keep: Any) -> dict[str, dict[str, float]] | None:
        no = [pt for c, pt in zip(main, main_pt) if keep(c) and c["condition"] == "no_saturated"]
        yes = [pt for c, pt in zip(main, main_pt) if keep(c) and c["condition"] == "yes_saturated"]
        return _asymmetry_moments(no, yes, base["standard"], w, n_samples) if no and yes else None

    out["asymmetry_moments"] = {"all": pair_moments(lambda c: True),
                                "by_k": {str(k): pair_moments(lambda c, k=k: c["k"] == k)
                                         for k in sorted({c["k"] for c in main})}}
    out["cells"] = cells
    out["headline"] = headline([out], design)
    return out


def _ratio(num: float, den: float) -> float:
    """|num| / |den| as the tables print a ratio (``amel.stats.ratio``)."""
    num, den = abs(num), abs(den)
    if den == 0:
        return math.inf if num > 0 else math.nan
    return num / den


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else math.nan


def _d_z(moments: Sequence[Mapping[str, Any] | None], method: str) -> float:
    """d_z = E[D] / SD[D] of the pooled items' D (each model's items alike)."""
    if not moments or any(m is None for m in moments):
        return math.nan
    m1 = _mean([m[method]["mean"] for m in moments])
    m2 = _mean([m[method]["second"] for m in moments])
    return m1 / math.sqrt(m2 - m1 * m1) if m2 > m1 * m1 else math.nan


def _asymmetry(cells: Sequence[Mapping[str, Any]], method: str) -> dict[str, float]:
    """Ratio of mean BS no/yes and of mean |BS| over ``cells`` (each weighted alike, as an
    item's pairs average its k's)."""
    yes = [c for c in cells if c["condition"] == "yes_saturated"]
    no = [c for c in cells if c["condition"] == "no_saturated"]
    if not yes or not no:
        return {"ratio": math.nan, "ratio_abs": math.nan}
    return {"ratio": _ratio(_mean([c["expected_bias_score"] for c in no]),
                            _mean([c["expected_bias_score"] for c in yes])),
            "ratio_abs": _ratio(_mean([c["expected_abs"][method] for c in no]),
                                _mean([c["expected_abs"][method] for c in yes]))}


def headline(models: Sequence[Mapping[str, Any]], design: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The planted values of the headline quantities, by method, of the rows of ``models``
    (one model's planted values, or the roster's: each model has the same cells and items,
    so each weighs alike). Quantities as the tables define them (``amel.analysis``)."""
    cells = [c for m in models for c in m["cells"]]
    main = [c for c in cells if _is_main(c)]
    bal = [c for c in cells if c["condition"] == "balanced"]
    bal_ks = {c["k"] for c in bal}
    framing_ks = {int(k) for k in design["framing_history_lengths"]}
    out: dict[str, dict[str, Any]] = {}
    for method in METHODS:
        mu = _mean([c["expected_bias_score"] for c in main])
        m2 = _mean([m["unit_second_moment"][method] for m in models])
        h: dict[str, Any] = {"mean_bs": mu, "d": mu / math.sqrt(m2 - mu * mu) if m2 > mu * mu else math.nan}
        h.update(_asymmetry(main, method))
        moments = [m.get("asymmetry_moments") for m in models]
        h["d_z"] = _d_z([m and m["all"] for m in moments], method)
        h["by_k"] = {str(k): {**_asymmetry([c for c in main if c["k"] == k], method),
                              "d_z": _d_z([m and m["by_k"].get(str(k)) for m in moments], method)}
                     for k in sorted({c["k"] for c in main})}
        ks, bs = np.array([c["k"] for c in main], float), np.array([c["expected_bias_score"] for c in main])
        # OLS of BS on k over rows spread alike over the main cells: the cells' own slope.
        h["slope"] = (float(np.sum((ks - ks.mean()) * (bs - bs.mean())) / np.sum((ks - ks.mean()) ** 2))
                      if len(set(ks)) > 1 else math.nan)
        if bal:
            sat = [c for c in main if c["k"] in bal_ks]
            h["balanced_mean_shift"] = _mean([c["expected_shift"] for c in bal])
            h["balanced_diff"] = (_mean([c["expected_abs"][method] for c in bal])
                                  - _mean([c["expected_abs"][method] for c in sat])) if sat else math.nan
        framed = [c for c in cells if c["position"] is None and c["condition"] in SATURATED and c["k"] in framing_ks]
        h["framing"] = {fr: _asymmetry([c for c in framed if c["framing"] == fr], method)
                        for fr in ("standard", "swapped") if any(c["framing"] == fr for c in framed)}
        out[method] = h
    return out


def planted_values(design: Mapping[str, Any], models: Sequence[str],
                   resolved: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """AMEL's part of ``planted.json``: the design, each model's planted values per cell and its
    headline values, and the headline values pooled over the planted models (the overall rows)."""
    per_model = {m: _model_planted(resolved[m], design) for m in models}
    return {"design": dict(design), "models": per_model,
            "pooled": {"models": list(models), "headline": headline(list(per_model.values()), design)}}


# ----------------------------------------------------------------------------- intervals


def clustered_mean_d(values: Any, clusters: Any, level: float = 0.95) -> dict[str, float]:
    """The mean and Cohen's d (mean / SD, ddof 1) of ``values`` with standard errors whose unit of
    replication is the cluster (the item): each is linearised (the mean's influence x − m; d's
    (x − m)/s − d·((x − m)² − s²)/(2s²)), summed within cluster, and its variance is the
    cluster-robust G/(G − 1)·Σ_g T_g² / N² (G clusters); ``q`` is the t quantile with G − 1
    degrees of freedom. With one value per cluster the mean's interval m ± q·se is the t interval."""
    from scipy import stats

    x = np.asarray(values, dtype=float)
    keep = np.isfinite(x)
    x = x[keep]
    codes = pd.factorize(pd.Series(np.asarray(clusters, dtype=object)[keep]), sort=True)[0]
    n, g = len(x), (int(codes.max()) + 1 if len(codes) else 0)
    out = {"n": n, "n_clusters": g, "mean": math.nan, "se_mean": math.nan, "d": math.nan, "se_d": math.nan,
           "q": math.nan}
    if n < 2 or g < 2:
        return out
    m = float(x.mean())
    dev = x - m
    s0 = math.sqrt(float(np.mean(dev ** 2)))
    c = g / (g - 1)
    out.update(mean=m, se_mean=math.sqrt(c * float(np.sum(np.bincount(codes, dev) ** 2))) / n,
               q=float(stats.t.ppf(0.5 + level / 2.0, g - 1)))
    if s0 > 0:
        d0 = m / s0
        psi = dev / s0 - d0 * (dev ** 2 - s0 ** 2) / (2.0 * s0 ** 2)
        out.update(d=m / float(x.std(ddof=1)), se_d=math.sqrt(c * float(np.sum(np.bincount(codes, psi) ** 2))) / n)
    return out


def _unit_keys(df: pd.DataFrame) -> pd.Series:
    return df[UNIT].astype(str).agg("|".join, axis=1) if len(df) else pd.Series([], dtype=object)


# ----------------------------------------------------------------------------- rows


def _tables(bias_scores: pd.DataFrame, design: Mapping[str, Any]) -> dict[str, pd.DataFrame]:
    """The analysis tables as the registry builds them from the bias scores (``amel.outputs``)."""
    from context_effects.amel import analysis

    return {"effects": analysis.effects_table(bias_scores), "asymmetry": analysis.asymmetry_table(bias_scores),
            "balanced": analysis.balanced_table(bias_scores), "length": analysis.length_table(bias_scores),
            "framing": analysis.framing_table(bias_scores, design["framing_history_lengths"])}


def _find(table: pd.DataFrame | None, method: str, scope: str, group: str, **where: Any) -> Mapping[str, Any] | None:
    """The one row of an analysis table with these method, scope, group (and ``where``) values."""
    if table is None or not len(table):
        return None
    sel = (table["method"] == method) & (table["scope"] == scope) & (table["group"].astype(str) == str(group))
    for col, value in where.items():
        sel &= table[col].astype(str) == str(value)
    hits = table[sel]
    return hits.iloc[0].to_dict() if len(hits) else None


def _f(v: Any) -> float:
    return math.nan if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def bias_score_rows(planted: Mapping[str, Any], bias_scores: pd.DataFrame,
                    tables: Mapping[str, pd.DataFrame] | None = None) -> list[dict]:
    """AMEL rows (module docstring): ``bias_scores`` the run's item-level file, ``tables`` the analysis
    tables as written (:data:`TABLES`; built from ``bias_scores`` when not given)."""
    from context_effects.amel.stats import mean_ci

    pa = planted["amel"]
    design = pa["design"]
    if "method" not in bias_scores:
        raise ValueError("the bias scores have no `method` column: rebuild results/amel/bias_scores.parquet")
    given = dict(tables or {})
    tables = given if set(TABLES) <= set(given) else {**_tables(bias_scores, design), **given}
    present = set(bias_scores["method"].dropna())
    methods = [m for m in METHODS if m in present] + sorted(present - set(METHODS))
    extra = (bias_scores["extra_model"].astype(bool) if "extra_model" in bias_scores
             else pd.Series(False, index=bias_scores.index))
    roster = sorted(set(bias_scores.loc[~extra, "model"]))
    models = list(pa["models"])
    pooled_ok = set(roster) == set(models)
    pooled_note = "" if pooled_ok else (f"the roster's pooled rows include models without planted values "
                                        f"({', '.join(sorted(set(roster) - set(models)))})")
    rows: list[dict] = []

    def scopes(method: str) -> list[tuple[str, str, str, Mapping[str, Any], pd.DataFrame]]:
        """(scope, group, model label, planted headline, the scope's bias-score rows) of the overall and model rows."""
        part = bias_scores[bias_scores["method"] == method]
        pooled = part[part["model"].isin(roster)]
        # A method some models lack (first-token probabilities) pools the models it measured:
        # the planted value is theirs.
        measured = sorted(set(pooled["model"]))
        target = pa["pooled"]["headline"].get(method, {})
        if pooled_ok and set(measured) != set(pa["pooled"]["models"]) and set(measured) <= set(models):
            target = headline([pa["models"][m] for m in measured], design).get(method, {})
        out = [("overall", "all", OVERALL, target, pooled)]
        for m in models:
            out.append(("model", m, m, pa["models"][m]["headline"].get(method, {}), part[part["model"] == m]))
        return out

    def add(table: str, model: str, parameter: str, method: str, planted_value: Any, estimate: Any,
            lo: Any = math.nan, hi: Any = math.nan, note: str = "") -> None:
        comparable = model != OVERALL or pooled_ok
        notes = [n for n in (note, "" if comparable else pooled_note) if n]
        rows.append(row("amel", f"tables/amel/{table}", model, f"{parameter} ({method})", _f(planted_value),
                        _f(estimate), _f(lo), _f(hi), comparable=comparable, note="; ".join(notes)))

    def ratio_rows(table: str, label: str, suffix: str, method: str, t: Mapping[str, Any], r: Any,
                   with_d_z: bool) -> None:
        """The no/yes ratios of mean BS and of mean |BS| (and d_z, where asked and the table has it)."""
        note = "Fieller interval of per-item pairs (the table's)"
        add(table, label, f"ratio of mean BS no/yes{suffix}", method, t["ratio"], r["ratio"], r["ratio_ci_low"],
            r["ratio_ci_high"], note)
        add(table, label, f"ratio of mean |BS| no/yes{suffix}", method, t["ratio_abs"], r["ratio_abs"],
            r["ratio_abs_ci_low"], r["ratio_abs_ci_high"], note)
        if with_d_z and "d_z" in r:
            add(table, label, f"d_z of |BS| no - yes{suffix}", method, t["d_z"], r["d_z"], r.get("d_z_ci_low"),
                r.get("d_z_ci_high"), "the table's exact interval (per-item pairs)")

    for method in methods:
        row_unit = method in ROW_UNIT_METHODS
        for scope, group, label, target, part in scopes(method):
            main = part[(part["framing"] == "standard") & part["position"].isna()
                        & part["condition"].isin(SATURATED)]
            r = _find(tables.get("effects"), method, scope, group)
            if r is not None and target:
                if row_unit:
                    s = clustered_mean_d(main["bs"], _unit_keys(main))
                    m_lo, m_hi = r["mean_bs"] - s["q"] * s["se_mean"], r["mean_bs"] + s["q"] * s["se_mean"]
                    d_lo, d_hi = r["d"] - s["q"] * s["se_d"], r["d"] + s["q"] * s["se_d"]
                    note = (f"item-clustered interval computed here ({s['n_clusters']} items, {s['n']} rows), "
                            "around the printed estimate")
                else:
                    m_lo, m_hi, d_lo, d_hi = r["ci_low"], r["ci_high"], r["d_ci_low"], r["d_ci_high"]
                    note = "the table's interval (item means)"
                add("effects", label, "mean BS", method, target["mean_bs"], r["mean_bs"], m_lo, m_hi, note)
                add("effects", label, "Cohen's d", method, target["d"], r["d"], d_lo, d_hi, note)
            r = _find(tables.get("asymmetry"), method, scope, group)
            if r is not None and target:
                ratio_rows("asymmetry", label, "", method, target, r, with_d_z=True)
            if scope == "overall" and target:
                for k, t in target["by_k"].items():
                    r = _find(tables.get("asymmetry"), method, "k", k)
                    if r is not None:
                        ratio_rows("asymmetry", label, f", k={k}", method, t, r, with_d_z=True)
            r = _find(tables.get("balanced"), method, scope, group)
            if r is not None and target and "balanced_mean_shift" in target:
                bal = part[(part["framing"] == "standard") & (part["condition"] == "balanced")]
                if row_unit:
                    s = clustered_mean_d(bal["shift"], _unit_keys(bal))
                    lo, hi = r["mean_shift"] - s["q"] * s["se_mean"], r["mean_shift"] + s["q"] * s["se_mean"]
                    note = f"item-clustered interval ({s['n_clusters']} items, {s['n']} rows)"
                else:
                    lo, hi, note = r["ci_low"], r["ci_high"], "the table's interval (item means)"
                add("balanced", label, "mean shift of P(Yes), balanced", method, target["balanced_mean_shift"],
                    r["mean_shift"], lo, hi, note)
                diffs = _balanced_pairs(bal, main)
                _, lo, hi = mean_ci(diffs)
                centre = float(np.mean(diffs)) if len(diffs) else math.nan
                add("balanced", label, "mean |shift| balanced - mean |BS| saturated", method,
                    target["balanced_diff"], r["diff"], _f(r["diff"]) - centre + lo, _f(r["diff"]) - centre + hi,
                    f"t interval of the {len(diffs)} per-item differences, computed here (the table prints none)")
            r = _find(tables.get("length"), method, scope, group)
            if r is not None and target and math.isfinite(target["slope"]):
                add("length", label, "OLS slope of BS on k", method, target["slope"], r["slope"], r["slope_ci_low"],
                    r["slope_ci_high"], "the table's interval (cluster-robust by item)")
            for framing, t in (target.get("framing") or {}).items():
                r = _find(tables.get("framing"), method, scope, group, framing=framing)
                if r is not None:
                    ratio_rows("framing", label, f", {framing} framing", method, t, r, with_d_z=False)
        rows += _cell_rows(pa, bias_scores[bias_scores["method"] == method], method)
    for model, pm in pa["models"].items():
        for name, key in LOGIT_PARAMS.items():
            rows.append(row("amel", "amel/bias_scores", model, key, pm[name], comparable=False,
                            note="logit-scale planted value; the analyses estimate bias scores on the probability "
                                 "scale (the rows above hold what it implies)"))
    return rows


def _balanced_pairs(bal: pd.DataFrame, main: pd.DataFrame) -> np.ndarray:
    """Per item, mean |shift| after its balanced histories minus mean |BS| after its saturated ones
    of the same k's (``amel.analysis.balanced_table``'s pairs)."""
    sat = main[main["k"].isin(bal["k"].unique())]
    a = bal.assign(v=bal["shift"].abs()).groupby(UNIT)["v"].mean()
    b = sat.assign(v=sat["bs"].abs()).groupby(UNIT)["v"].mean()
    both = pd.concat([a.rename("a"), b.rename("b")], axis=1, join="inner").dropna()
    return (both["a"] - both["b"]).to_numpy(float)


def _cell_rows(pa: Mapping[str, Any], part: pd.DataFrame, method: str) -> list[dict]:
    """Per model and design cell: the mean bias score (shift, for a balanced history) over the items
    with its t interval (one row per item and cell: the item is the unit) against the planted mean."""
    from context_effects.amel.stats import mean_ci

    rows = []
    for model, pm in pa["models"].items():
        mine = part[part["model"] == model]
        for c in pm["cells"]:
            balanced = c["condition"] == "balanced"
            values = mine.loc[mine["cell"] == c["cell"], "shift" if balanced else "bs"].to_numpy(float)
            if not np.isfinite(values).any():
                continue
            m, lo, hi = mean_ci(values)
            name = f"shift[{c['cell']}]" if balanced else f"bias_score[{c['cell']}]"
            planted_value = c.get("expected_shift", 0.0) if balanced else c["expected_bias_score"]
            rows.append(row("amel", "amel/bias_scores", model, f"{name} ({method})", planted_value, m, lo, hi,
                            note=f"mean over {int(np.isfinite(values).sum())} items; planted = population mean "
                                 "over the item distribution"))
    return rows
