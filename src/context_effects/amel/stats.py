"""The statistics of the AMEL analysis, each a thin, tested wrapper over SciPy/statsmodels.

Conventions (stated because the seed paper does not spell them out):

* Cohen's d of bias scores is the one-sample d against 0, ``mean / sd``
  (``sd`` with ddof = 1), with the one-sample t-test of the same values; the
  paper's overall "d = -0.17, p < 1e-46" is of this kind (negative = conforming).
* Between two groups (entropy strata, congruent vs incongruent): Welch's
  t-test, d with the pooled SD.
* Paired comparisons (negativity asymmetry per item): the paired t-test and
  d_z = mean(diff) / sd(diff).
* Confidence intervals of means are t intervals (default 95%). The interval of a
  one-sample d is the exact one of the noncentral t (:func:`d_interval`); the interval
  of a ratio of two paired means is Fieller's (:func:`fieller_ratio`). Where the values
  are rows that share an item (its history lengths and polarities answer one item, and
  each row's bias score shares the item's baseline reply), the intervals of the mean and
  of d resample items instead (:func:`cluster_bootstrap`): the item is the unit of
  independent replication, whatever the correlation of its rows.
* The unit of every test is the item (model x domain x item): repeated rows of
  one item (its k's, polarities, positions) are averaged before a test
  (``context_effects.amel.analysis``), and the OLS slope of BS on k, which
  needs the rows, has a cluster-robust SE by item.
* Length: Spearman's rho (of the rows) and the OLS slope of BS on k
  (statsmodels, with its t-test and CI).
* Position: every item is asked with the biased block at each position, so a
  one-way repeated-measures ANOVA of the item means (items with every position).
* Congruence: where an item has congruent and incongruent cells (both polarities
  in the scope), the paired t of its two means; a scope of one polarity compares
  different items (Welch).
Fewer than two values give NaN statistics, never an exception.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import stats

NAN = math.nan


def _clean(x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=float)
    return a[np.isfinite(a)]


def mean_ci(x: Any, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and its t confidence interval."""
    a = _clean(x)
    if len(a) == 0:
        return NAN, NAN, NAN
    m = float(a.mean())
    if len(a) < 2:
        return m, NAN, NAN
    se = float(a.std(ddof=1) / math.sqrt(len(a)))
    if se == 0:
        return m, m, m
    lo, hi = stats.t.interval(level, len(a) - 1, loc=m, scale=se)
    return m, float(lo), float(hi)


def d_interval(d: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact confidence interval of a one-sample Cohen's d = mean / sd from n values.

    t = d·sqrt(n) follows the noncentral t with n − 1 degrees of freedom and noncentrality
    δ = d_pop·sqrt(n); the interval is the δ at which the observed t is the upper and the
    lower (1 − level)/2 quantile, divided by sqrt(n): exact for normal values, where a
    normal approximation of d's SE is not once d is large against 1/sqrt(n)."""
    from scipy.optimize import brentq

    if n < 2 or not math.isfinite(d):
        return NAN, NAN
    df, t = n - 1, d * math.sqrt(n)
    alpha = (1.0 - level) / 2.0
    # T's spread at δ = t, widened until the bracket holds the root
    spread = math.sqrt(1.0 + t * t / (2.0 * df)) + 1.0

    def bound(q: float) -> float:
        def f(ncp: float) -> float:
            c = float(stats.nct.cdf(t, df, ncp))
            if not math.isfinite(c):  # SciPy's nct fails far in a tail, where the cdf is 0 or 1
                c = 0.0 if ncp > t else 1.0
            return c - q

        width = 3.0 * spread
        for _ in range(30):
            lo, hi = t - width, t + width
            flo, fhi = f(lo), f(hi)
            if math.isfinite(flo) and math.isfinite(fhi) and flo > 0 > fhi:
                return brentq(f, lo, hi, xtol=1e-10, rtol=1e-12)
            width *= 2.0
        return NAN

    return bound(1.0 - alpha) / math.sqrt(n), bound(alpha) / math.sqrt(n)


#: Resamples of the item bootstrap, and its seed (an interval is a function of its data).
BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 20260522


def cluster_bootstrap(x: Any, clusters: Any, level: float = 0.95,
                      resamples: int = BOOTSTRAP_RESAMPLES) -> dict[str, float]:
    """Percentile intervals of the mean and of Cohen's d = mean / sd of the values ``x``,
    resampling whole clusters (items) with replacement: each resample weights every
    cluster by how often it was drawn, and its mean and SD are those of the rows so
    weighted. Keys ``ci_low``/``ci_high`` (the mean's), ``d_ci_low``/``d_ci_high``."""
    a = np.asarray(x, dtype=float)
    keep = np.isfinite(a)
    a = a[keep]
    labels = pd_codes(np.asarray(clusters, dtype=object)[keep])
    out = {"ci_low": NAN, "ci_high": NAN, "d_ci_low": NAN, "d_ci_high": NAN}
    n_clusters = int(labels.max()) + 1 if len(labels) else 0
    if n_clusters < 2 or len(a) < 2:
        return out
    count = np.bincount(labels, minlength=n_clusters).astype(float)
    total = np.bincount(labels, weights=a, minlength=n_clusters)
    squares = np.bincount(labels, weights=a * a, minlength=n_clusters)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    alpha = (1.0 - level) / 2.0
    means, ds = [], []
    for start in range(0, resamples, 500):
        draws = rng.multinomial(n_clusters, np.full(n_clusters, 1.0 / n_clusters), size=min(500, resamples - start))
        n = draws @ count
        mean = (draws @ total) / n
        var = (draws @ squares - n * mean * mean) / np.maximum(n - 1.0, 1.0)
        sd = np.sqrt(np.clip(var, 0.0, None))
        means.append(mean)
        ds.append(np.where(sd > 0, mean / np.where(sd > 0, sd, 1.0), np.nan))
    m, d = np.concatenate(means), np.concatenate(ds)
    out["ci_low"], out["ci_high"] = (float(v) for v in np.quantile(m, [alpha, 1.0 - alpha]))
    d = d[np.isfinite(d)]
    if len(d):
        out["d_ci_low"], out["d_ci_high"] = (float(v) for v in np.quantile(d, [alpha, 1.0 - alpha]))
    return out


def pd_codes(values: np.ndarray) -> np.ndarray:
    """Integer codes 0..k-1 of the distinct ``values`` (any hashable labels)."""
    _, codes = np.unique(values.astype(str), return_inverse=True)
    return codes.astype(np.int64)


def one_sample(x: Any, level: float = 0.95, clusters: Any = None) -> dict[str, float]:
    """n, mean, CI, sd, Cohen's d (mean / sd) with its exact CI (:func:`d_interval`) and
    the one-sample t-test against 0. With ``clusters`` (the item of each value), the
    intervals of the mean and of d are the item bootstrap's (:func:`cluster_bootstrap`)
    and the test is clustered by item (:func:`cluster_t`, which adds ``n_clusters``)."""
    a = _clean(x)
    m, lo, hi = mean_ci(a, level)
    out = {"n": len(a), "mean": m, "ci_low": lo, "ci_high": hi, "sd": NAN, "d": NAN, "d_ci_low": NAN,
           "d_ci_high": NAN, "t": NAN, "p": NAN}
    if len(a) >= 2:
        sd = float(a.std(ddof=1))
        out["sd"] = sd
        if sd > 0:
            res = stats.ttest_1samp(a, 0.0)
            d = m / sd
            d_lo, d_hi = d_interval(d, len(a), level)
            out.update(d=d, d_ci_low=d_lo, d_ci_high=d_hi, t=float(res.statistic), p=float(res.pvalue))
    if clusters is not None and len(a) >= 2:
        finite = np.isfinite(np.asarray(x, dtype=float))
        groups = np.asarray(clusters, dtype=object)[finite]
        out.update(cluster_bootstrap(a, groups, level))
        out.update(cluster_t(a, groups))
    return out


def cluster_t(x: Any, clusters: Any) -> dict[str, float]:
    """The one-sample t-test of ``x`` against 0 with a cluster-robust SE by ``clusters``
    (statsmodels' intercept-only OLS, ``cov_type="cluster"``, t with clusters − 1 degrees
    of freedom): ``t``, ``p`` and ``n_clusters``. With one value per cluster it is the
    ordinary one-sample t-test."""
    import statsmodels.api as sm

    a = np.asarray(x, dtype=float)
    codes = pd_codes(np.asarray(clusters, dtype=object))
    out = {"t": NAN, "p": NAN, "n_clusters": int(codes.max()) + 1 if len(codes) else 0}
    if out["n_clusters"] < 2 or a.std() == 0:
        return out
    fit = sm.OLS(a, np.ones_like(a)).fit(cov_type="cluster", cov_kwds={"groups": codes}, use_t=True)
    out.update(t=float(fit.tvalues[0]), p=float(fit.pvalues[0]))
    return out


def pooled_d(a: Any, b: Any) -> float:
    """Cohen's d of a vs b with the pooled SD."""
    a, b = _clean(a), _clean(b)
    if len(a) < 2 or len(b) < 2:
        return NAN
    pooled = ((len(a) - 1) * a.var(ddof=1) + (len(b) - 1) * b.var(ddof=1)) / (len(a) + len(b) - 2)
    return float((a.mean() - b.mean()) / math.sqrt(pooled)) if pooled > 0 else NAN


def welch(a: Any, b: Any) -> dict[str, float]:
    """Mean difference a - b, pooled-SD d, Welch's t-test."""
    a, b = _clean(a), _clean(b)
    out = {"n_a": len(a), "n_b": len(b), "diff": NAN, "d": NAN, "t": NAN, "p": NAN}
    if len(a) >= 1 and len(b) >= 1:
        out["diff"] = float(a.mean() - b.mean())
    if len(a) >= 2 and len(b) >= 2 and (a.var() > 0 or b.var() > 0):
        res = stats.ttest_ind(a, b, equal_var=False)
        out.update(d=pooled_d(a, b), t=float(res.statistic), p=float(res.pvalue))
    return out


def paired(a: Any, b: Any) -> dict[str, float]:
    """Paired comparison of a and b (same length; pairs with a missing value dropped)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.shape} vs {b.shape}")
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    diff = a - b
    out = {"n": len(a), "mean_a": NAN, "mean_b": NAN, "diff": NAN, "d_z": NAN, "t": NAN, "p": NAN}
    if len(a):
        out.update(mean_a=float(a.mean()), mean_b=float(b.mean()), diff=float(diff.mean()))
    if len(a) >= 2 and diff.std(ddof=1) > 0:
        res = stats.ttest_rel(a, b)
        out.update(d_z=float(diff.mean() / diff.std(ddof=1)), t=float(res.statistic), p=float(res.pvalue))
    return out


def spearman(x: Any, y: Any) -> tuple[float, float]:
    """Spearman's rho and its p-value (NaN when either side is constant)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if len(x) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return NAN, NAN
    res = stats.spearmanr(x, y)
    return float(res.statistic), float(res.pvalue)


def ols_slope(x: Any, y: Any, level: float = 0.95, groups: Any = None) -> dict[str, float]:
    """OLS of y on x with an intercept (statsmodels): slope, SE, CI, t and p; with ``groups``
    the SE is cluster-robust by group (statsmodels' ``cov_type="cluster"``)."""
    import statsmodels.api as sm

    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    out = {"n": len(x), "intercept": NAN, "slope": NAN, "se": NAN, "ci_low": NAN, "ci_high": NAN, "t": NAN, "p": NAN}
    if len(x) < 3 or np.ptp(x) == 0:
        return out
    if groups is None:
        fit = sm.OLS(y, sm.add_constant(x)).fit()
    else:
        codes = np.unique(np.asarray(groups, dtype=object)[keep].astype(str), return_inverse=True)[1]
        if codes.max() < 1:
            return out
        fit = sm.OLS(y, sm.add_constant(x)).fit(cov_type="cluster", cov_kwds={"groups": codes})
    lo, hi = fit.conf_int(alpha=1 - level)[1]
    out.update(
        intercept=float(fit.params[0]),
        slope=float(fit.params[1]),
        se=float(fit.bse[1]),
        ci_low=float(lo),
        ci_high=float(hi),
        t=float(fit.tvalues[1]),
        p=float(fit.pvalues[1]),
    )
    return out


def rm_anova(wide: Any) -> dict[str, float]:
    """One-way repeated-measures ANOVA of a subjects x conditions array (rows with a
    missing value dropped): F, its degrees of freedom and p. Each subject (an item) is
    measured in every condition (position), so between-item variance leaves the error term."""
    a = np.asarray(wide, dtype=float)
    out = {"n": 0, "F": NAN, "df_num": NAN, "df_den": NAN, "p": NAN}
    if a.ndim != 2 or a.shape[1] < 2:
        return out
    a = a[np.isfinite(a).all(axis=1)]
    n, k = a.shape
    out["n"] = n
    if n < 2:
        return out
    grand = a.mean()
    ss_cond = n * float(((a.mean(axis=0) - grand) ** 2).sum())
    ss_subj = k * float(((a.mean(axis=1) - grand) ** 2).sum())
    ss_err = float(((a - grand) ** 2).sum()) - ss_cond - ss_subj
    df_num, df_den = k - 1, (n - 1) * (k - 1)
    out.update(df_num=df_num, df_den=df_den)
    if ss_err <= 1e-15 * max(1.0, ss_cond):
        return out
    f = (ss_cond / df_num) / (ss_err / df_den)
    out.update(F=float(f), p=float(stats.f.sf(f, df_num, df_den)))
    return out


def fieller_ratio(a: Any, b: Any, level: float = 0.95) -> tuple[float, float, float]:
    """mean(a) / mean(b) of paired values and Fieller's confidence interval (pairs with a
    missing value dropped).

    The set of ρ at which the paired t of a − ρ·b does not reject 0: exact when the pair
    of means is bivariate normal, and unlike the delta method it keeps a ratio's skew and
    does not assume the denominator's mean is far from 0 against its SE. When that mean
    is not significantly different from 0 (g = t²·var(mean b)/mean(b)² >= 1) the set is
    unbounded, and both ends are NaN."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"paired samples differ in length: {a.shape} vs {b.shape}")
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    n = len(a)
    if n == 0 or b.mean() == 0:
        return NAN, NAN, NAN
    ma, mb = float(a.mean()), float(b.mean())
    r = ma / mb
    if n < 3:
        return r, NAN, NAN
    cov = np.cov(a, b, ddof=1) / n
    v11, v12, v22 = float(cov[0, 0]), float(cov[0, 1]), float(cov[1, 1])
    t2 = float(stats.t.ppf(0.5 + level / 2.0, n - 1)) ** 2
    # (ma − ρ·mb)² = t²·(v11 − 2ρ·v12 + ρ²·v22), a quadratic in ρ
    qa, qb, qc = mb * mb - t2 * v22, ma * mb - t2 * v12, ma * ma - t2 * v11
    disc = qb * qb - qa * qc
    if qa <= 0 or disc < 0:
        return r, NAN, NAN
    root = math.sqrt(disc)
    return r, (qb - root) / qa, (qb + root) / qa


def ratio(num: float, den: float) -> float:
    """|num| / |den| (inf when den is 0 and num is not, NaN when both are)."""
    num, den = abs(num), abs(den)
    if den == 0:
        return math.inf if num > 0 else NAN
    return num / den
