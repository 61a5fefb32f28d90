"""The rehearsal: the paper's design on synthetic models planted with the seeds' own estimates.

A wrong definition in a table builder (the wrong formula, the wrong fit behind a table)
is invisible on the demo and on simulated worlds of our own making: nothing there says
what the number should have been. Planted with the numbers the seed papers print, the
pipeline must print them back — each published model-based number inside the run's 95%
interval — so the reproduction report becomes a test of fidelity that runs without a GPU
(``config/rehearsal.yaml``, docs/rehearsal.md).

What is planted, from ``paper/published/conformity/``:

* each generator's Round-2 shifts η on each dataset: the peer arms from Table 3 (the
  main fit), the no-peer arm from the dataset's decomposition (its Δ_sp: the main corpus
  has a no-peer arm, Table 3 prints none);
* each generator's decomposition-corpus shifts on each dataset from Tables 10-12
  (Δ_sp, Δ_sp + Δ_content,k, Δ_sp + Δ_content,k + Δ_pp,c), a run of their own;
* each judge's peer-context loading γ_j from Table 4, hosted judges included.

The seed prints no α, β, κ, σ_b or σ_θ. α, σ_b and σ_θ are fixed (:data:`JUDGE_ALPHA`
says why); :func:`calibrate_judging` chooses β (per dataset), κ and the reference-free α
scale so that the planted world's expected blind ratings reproduce Table 2 (per dataset
and arm, pooled over generators) and its expected anchor ratings reproduce Table 5
(reference-augmented and reference-free), by least squares; all are listed in the config.
Every generator plants quality_mean 0: the paper's model has b_t ~ N(0, σ_b), and
generator means that differ move its shifts (the generator-mean refits show how much).

From ``paper/published/amel/`` (Study A), :func:`calibrate_amel` plants the seven hosted
models of Figure 14, which serve Study A alone: each model's conformity c so that the
expected single-call Cohen's d of its bias scores is Figure 14's, and one negativity
asymmetry A shared by the seven so that the pooled ratio of mean bias scores (no/yes)
over the seed's 11 models is the abstract's 1.62. The open models and the hosted judges
keep their AMEL values (the synthetic defaults): they are Study C's models too, and a
changed value changes their revision and reruns every answer and fit of Study C.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from context_effects.conformity.conditions import DATASET_LABELS

Config = Mapping[str, Any]

PUBLISHED = Path("paper/published")
#: The seed's decomposition table of each dataset (Appendix D.1-D.3).
DECOMPOSITION_TABLES = {"truthfulqa": "table10", "mmlu_pro": "table11", "arc_challenge": "table12"}
POLARITY_IDS = {"correct": "all_correct", "wrong": "all_wrong", "mixed": "mixed"}
#: The anchors' latent values, as the seed pins them (its θ_a = 1.5).
THETA_ANCHOR = 1.5
#: Table 2 pools these arms of the main corpus; its columns by arm.
TABLE2_ARMS = {"no_peer": "no_peer", "peer_correct": "all_correct", "peer_mixed": "mixed", "peer_wrong": "all_wrong"}
#: Fixed, not fitted: Tables 2 and 5 fix the judges' mean ratings, not the spread of the
#: answers or the judges' slope, and least squares on them alone runs to a step-function
#: judge (α ≈ 5.5) over answers of no spread, a world the paper's model (log α ~ N(0, 0.4))
#: cannot recover. α = 2.5 is the steepest slope within about two prior SDs; σ_b and σ_θ
#: keep answers' spread at the size of the planted shifts' range. At these values Table 2
#: is met within 0.18, Table 5's reference-free means within 0.01 and its correct anchor
#: within 0.1, but not its incorrect anchor (about 2.3 against the printed 1.60): no judge of
#: the model's form with a plausible slope and every rating in use rates answers near 4.5
#: and that anchor near 1.6. The posterior-predictive section of the report sets them side
#: by side.
JUDGE_ALPHA = 2.5
SIGMA_B = 0.5
SIGMA_THETA = 0.2
#: Weight of the model's priors against the calibration targets (rating units).
PRIOR_WEIGHT = 0.02
#: Least distance between adjacent cutpoints: every rating stays in use (a judge whose
#: cutpoints meet rates 1 or 5 only, and the ordinal scale then says little about α and
#: σ apart: a smaller rehearsal with gaps of 0.5 recovered neither).
MIN_CUTPOINT_GAP = 1.0


def read_table(name: str, published: Path = PUBLISHED) -> pd.DataFrame:
    df = pd.read_csv(published / "conformity" / f"{name}.csv", dtype=str, keep_default_na=False)
    return df.set_index("id")


def _value(df: pd.DataFrame, key: str) -> float:
    if key not in df.index:
        raise KeyError(f"published number {key!r} not found")
    return float(df.loc[key, "value"].replace("−", "-"))


def _selector_value(row: str, column: str) -> str:
    for part in row.split(";"):
        k, _, v = part.partition("=")
        if k.strip() == column:
            return v.strip()
    raise KeyError(f"{column!r} not in row selector {row!r}")


def _short_names(df: pd.DataFrame, column: str) -> dict[str, str]:
    """The short model key of the ids (``table3.truthfulqa.<key>.…``) -> the display name."""
    out = {}
    for key, r in df.iterrows():
        if r["row"] and column in r["row"]:
            parts = key.split(".")
            short = parts[2] if parts[0] == "table3" else parts[1]
            out[short] = _selector_value(r["row"], column)
    return out


def planted_shifts(published: Path = PUBLISHED) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """Display name -> dataset -> {"eta": main-corpus shifts, "decomposition_eta": the
    decomposition corpus's} from Tables 3 and 10-12 (module docstring)."""
    t3 = read_table("table3", published)
    names = _short_names(t3, "Model")
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for dataset, table in DECOMPOSITION_TABLES.items():
        dec_t = read_table(table, published)
        for short, display in names.items():
            sp = _value(dec_t, f"{table}.{short}.delta_sp")
            dec = {"no_peer": sp}
            for pol, pid in POLARITY_IDS.items():
                content = sp + _value(dec_t, f"{table}.{short}.{pid}.delta_content")
                dec[f"content_{pol}"] = round(content, 6)
                dec[f"peer_{pol}"] = round(content + _value(dec_t, f"{table}.{short}.{pid}.delta_pp"), 6)
            main = {"no_peer": sp, **{f"peer_{pol}": _value(t3, f"table3.{dataset}.{short}.{pid}")
                                      for pol, pid in POLARITY_IDS.items()}}
            out.setdefault(display, {})[dataset] = {"eta": main, "decomposition_eta": dec}
    return out


def round1_match_rate(published: Path = PUBLISHED) -> float:
    """Share of Round-1 answers identical across nominally identical greedy runs (§2.2's 54%)."""
    text = pd.read_csv(published / "conformity" / "text.csv", dtype=str, keep_default_na=False).set_index("id")
    return _value(text, "s2_2.decomp.round1_match_rate") / 100.0


def planted_gammas(published: Path = PUBLISHED) -> dict[str, float]:
    """Judge display name -> γ_j of Table 4."""
    t4 = read_table("table4", published)
    return {_selector_value(r["row"], "Judge"): _value(t4, key)
            for key, r in t4.iterrows() if key.endswith(".gamma")}


# ----------------------------------------------------------------------------- calibration


def _expected_rating(mu: np.ndarray, kappa: np.ndarray) -> np.ndarray:
    """E[y] of the ordered logistic with cutpoints κ at linear predictors μ (ratings 1-5)."""
    from scipy.special import expit

    cum = expit(kappa[None, :] - mu[:, None])  # P(y <= k)
    return 1.0 + np.sum(1.0 - cum, axis=1)


_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(40)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()


def _mean_blind_rating(eta: float, sd: float, alpha: float, beta: float, kappa: np.ndarray) -> float:
    theta = eta + sd * _NODES
    return float(np.sum(_WEIGHTS * _expected_rating(alpha * (theta - beta), kappa)))


def calibration_targets(published: Path = PUBLISHED) -> dict[str, float]:
    """The model-free numbers the judging values are chosen to reproduce (Tables 2 and 5)."""
    t2, t5 = read_table("table2", published), read_table("table5", published)
    out = {f"table2.{d}.{col}": _value(t2, f"table2.{d}.{col}") for d in DATASET_LABELS for col in TABLE2_ARMS.values()}
    for kind in ("reference_augmented", "reference_free"):
        for what in ("mean_correct", "mean_incorrect"):
            out[f"table5.{what}.{kind}"] = _value(t5, f"table5.{what}.{kind}")
    return out


def predicted_targets(values: Mapping[str, Any], shifts: Mapping[str, Mapping[str, Mapping[str, Any]]]
                      ) -> dict[str, float]:
    """The planted world's expected value of every calibration target (same keys)."""
    kappa = np.asarray(values["kappa"], dtype=float)
    sd = float(np.hypot(values["sigma_b"], values["sigma_theta"]))
    out = {}
    for d in DATASET_LABELS:
        beta = values["beta"][d]
        for arm, col in TABLE2_ARMS.items():
            means = [_mean_blind_rating(by_d[d]["eta"][arm], sd, values["alpha"], beta, kappa)
                     for by_d in shifts.values()]
            out[f"table2.{d}.{col}"] = float(np.mean(means))
    for kind, scale in (("reference_augmented", 1.0), ("reference_free", values["reference_free_alpha_scale"])):
        for what, theta in (("mean_correct", THETA_ANCHOR), ("mean_incorrect", -THETA_ANCHOR)):
            mus = np.array([values["alpha"] * scale * (theta - values["beta"][d]) for d in DATASET_LABELS])
            out[f"table5.{what}.{kind}"] = float(np.mean(_expected_rating(mus, kappa)))
    return out


@functools.cache
def calibrate_judging(published: Path = PUBLISHED) -> dict[str, Any]:
    """β per dataset, κ and the reference-free α scale, by least squares on Tables 2 and 5
    (module docstring), with α, σ_b and σ_θ fixed (:data:`JUDGE_ALPHA`, :data:`SIGMA_B`,
    :data:`SIGMA_THETA`); rounded to what the config lists."""
    from scipy.optimize import least_squares

    shifts = planted_shifts(published)
    targets = calibration_targets(published)
    keys = list(targets)
    datasets = list(DATASET_LABELS)

    def unpack(x: np.ndarray) -> dict[str, Any]:
        return {"alpha": JUDGE_ALPHA, "beta": dict(zip(datasets, map(float, x[0:3]))),
                "kappa": list(np.cumsum(np.r_[x[3], MIN_CUTPOINT_GAP + np.exp(x[4:7])])),
                "reference_free_alpha_scale": float(np.exp(x[7])), "sigma_b": SIGMA_B, "sigma_theta": SIGMA_THETA}

    def resid(x: np.ndarray) -> np.ndarray:
        v = unpack(x)
        pred = predicted_targets(v, shifts)
        # The model's priors β ~ N(0, 1), κ_raw ~ N(0, 1), weakly: the targets leave a
        # common shift of β and κ nearly free, and the prior picks the least extreme one.
        prior = [*v["beta"].values(), *v["kappa"]]
        return np.array([*(pred[k] - targets[k] for k in keys), *(PRIOR_WEIGHT * np.asarray(prior))])

    x0 = np.array([-1.0, -1.0, -1.0, -2.0, 0.0, 0.0, 0.0, np.log(0.5)])
    fit = least_squares(resid, x0, method="lm", max_nfev=20000, xtol=1e-12, ftol=1e-12)
    v = unpack(fit.x)
    return {"alpha": JUDGE_ALPHA, "beta": {d: round(b, 3) for d, b in v["beta"].items()},
            "kappa": [round(float(k), 3) for k in v["kappa"]], "sigma_b": SIGMA_B, "sigma_theta": SIGMA_THETA,
            "reference_free_alpha_scale": round(v["reference_free_alpha_scale"], 3)}


# ----------------------------------------------------------------------------- the config's models


# ----------------------------------------------------------------------------- Study A


def read_amel(name: str, published: Path = PUBLISHED) -> pd.DataFrame:
    df = pd.read_csv(published / "amel" / f"{name}.csv", dtype=str, keep_default_na=False)
    return df.set_index("id")


def figure14_targets(published: Path = PUBLISHED) -> dict[str, float]:
    """Model key -> the single-call d Figure 14 prints for it, signed as the effects table
    holds it (the figure prints |d|; its rows carry scale −1)."""
    f14 = read_amel("figure14", published)
    out = {}
    for key, r in f14.iterrows():
        scale = float(r["scale"] or 1.0)
        out[_selector_value(r["row"], "group")] = _value(f14, key) / scale
    return out


def amel_asymmetry_target(published: Path = PUBLISHED) -> float:
    """The abstract's negativity asymmetry (no/yes, pooled over the seed's models)."""
    return _value(read_amel("text", published), "abstract.asymmetry_ratio")


def amel_main_cells(amel_cfg: Config) -> list[tuple[str, int]]:
    """(condition, n_biased) of every cell whose rows enter the effects and asymmetry
    tables (the main rows: standard framing, saturated, no position block), as the
    design builds them from ``amel_cfg`` (schema defaults filled) and the requests plant them."""
    from context_effects.amel.design import design_cells
    from context_effects.amel.requests import cell_meta
    from context_effects.config import fill_defaults, load_schema

    amel = fill_defaults({"amel": dict(amel_cfg)}, load_schema())["amel"]
    item = {"item_id": "i", "domain": "d", "answer": "Yes"}
    out = []
    for cell in design_cells(amel):
        if cell.framing == "standard" and cell.position is None and cell.condition in ("yes_saturated", "no_saturated"):
            meta = cell_meta(cell, item, "m", "samples", 0, amel["saturation_share"])
            out.append((cell.condition, int(meta["n_biased"])))
    return out


def amel_expected(params: Mapping[str, Any] | None, cells: Sequence[tuple[str, int]]) -> dict[str, float]:
    """The expected single-call values of one model over the planted item distribution
    (quadrature, no sampling), each main cell weighted alike as the tables weight its rows.

    A single-call bias score is BS = Y_t − Y_b, Y_t and Y_b the treatment's and the
    baseline's verdict against the history (r*) as 0/1, independent given the item, so
    E[BS] = E[p_t − p_b] and E[BS²] = E[|BS|] = E[p_t(1 − p_b) + p_b(1 − p_t)]: ``d`` is
    the population mean over sd of a row drawn from the main rows; ``mean_no``/``mean_yes``
    the mean BS and ``abs_no``/``abs_yes`` the mean |BS| of each polarity."""
    from context_effects.amel.synthetic import _shift, _z_grid
    from context_effects.llm.backends.synthetic import effective_params, sigmoid

    eff, _ = effective_params("m", params)
    z, w = _z_grid(eff)
    base = z + eff["amel_yes_bias"]
    pb_yes = sigmoid(base)
    by = {"yes_saturated": ([], []), "no_saturated": ([], [])}
    for cond, n in cells:
        pt_yes = sigmoid(base + _shift(eff, cond, n, None, "standard"))
        # r* is the verdict against the history: "No" after yes-saturated
        pt, pb = (1.0 - pt_yes, 1.0 - pb_yes) if cond == "yes_saturated" else (pt_yes, pb_yes)
        by[cond][0].append(float(np.sum(w * (pt - pb))))
        by[cond][1].append(float(np.sum(w * (pt * (1.0 - pb) + pb * (1.0 - pt)))))
    means = by["yes_saturated"][0] + by["no_saturated"][0]
    squares = by["yes_saturated"][1] + by["no_saturated"][1]
    mu, m2 = float(np.mean(means)), float(np.mean(squares))
    return {"d": mu / math.sqrt(m2 - mu * mu), "mean_yes": float(np.mean(by["yes_saturated"][0])),
            "mean_no": float(np.mean(by["no_saturated"][0])), "abs_yes": float(np.mean(by["yes_saturated"][1])),
            "abs_no": float(np.mean(by["no_saturated"][1]))}


def pooled_amel_ratios(params: Mapping[str, Mapping[str, Any] | None], cells: Sequence[tuple[str, int]]
                       ) -> dict[str, float]:
    """The expected pooled asymmetry over the models of ``params`` (each with as many
    items): ``ratio`` = |mean BS no| / |mean BS yes|, ``ratio_abs`` = mean |BS no| / mean |BS yes|."""
    e = [amel_expected(p, cells) for p in params.values()]
    return {"ratio": abs(sum(x["mean_no"] for x in e)) / abs(sum(x["mean_yes"] for x in e)),
            "ratio_abs": sum(x["abs_no"] for x in e) / sum(x["abs_yes"] for x in e)}


#: The conformity a Figure-14 model may take (logit units at f = w = 1).
AMEL_CONFORMITY_RANGE = (1e-4, 20.0)
#: The negativity asymmetry the seven models may share.
AMEL_ASYMMETRY_RANGE = (1.0, 20.0)


def _conformity_for(d: float, asymmetry: float, cells: Sequence[tuple[str, int]]) -> float:
    from scipy.optimize import brentq

    def f(c: float) -> float:
        return amel_expected({"amel_conformity": c, "amel_negativity_asymmetry": asymmetry}, cells)["d"] - d

    return float(brentq(f, *AMEL_CONFORMITY_RANGE, xtol=1e-10))


@functools.cache
def _calibrate_amel(fixed: tuple[tuple[str, str], ...], targets: tuple[tuple[str, float], ...], ratio: float,
                    cells: tuple[tuple[str, int], ...]) -> dict[str, dict[str, float]]:
    import json

    from scipy.optimize import brentq

    fixed_params = {name: json.loads(p) for name, p in fixed}

    def free(asym: float) -> dict[str, dict[str, float]]:
        return {m: {"amel_conformity": _conformity_for(d, asym, cells), "amel_negativity_asymmetry": asym}
                for m, d in targets}

    def misfit(asym: float) -> float:
        return pooled_amel_ratios({**fixed_params, **free(asym)}, cells)["ratio"] - ratio

    asym = float(brentq(misfit, *AMEL_ASYMMETRY_RANGE, xtol=1e-8))
    # rounded to what the config lists; c after A is rounded, so each d holds at the listed A
    asym = round(asym, 3)
    return {m: {"amel_conformity": round(v["amel_conformity"], 3), "amel_negativity_asymmetry": asym}
            for m, v in free(asym).items()}


def calibrate_amel(fixed: Mapping[str, Mapping[str, Any] | None], amel_cfg: Config,
                   published: Path = PUBLISHED) -> dict[str, dict[str, float]]:
    """Figure 14's models -> their planted ``amel_conformity`` and ``amel_negativity_asymmetry``
    (module docstring). ``fixed``: the synthetic values of the seed's other models, which
    stay as they are; ``amel_cfg``: the design the rehearsal runs (its main cells decide
    the expectations, :func:`amel_expected`).

    Each model's c meets its d exactly at any A (d grows with c), and the pooled ratio of
    mean BS grows with the shared A, so A is a one-dimensional root. The abstract's ratio
    is read (paper/published/amel/text.csv) as mean |BS|, whose single-call expectation
    carries the baseline's own sampling noise in both polarities: with Figure 14's d it
    stays below about 1.22 at any A (:func:`pooled_amel_ratios` gives it), so the ratio
    planted is that of mean BS, the asymmetry of the shifts themselves."""
    import json

    targets = figure14_targets(published)
    clash = sorted(set(targets) & set(fixed))
    if clash:
        raise ValueError(f"Figure 14's models {clash} are given fixed values too: each is planted or fixed")
    cells = tuple(amel_main_cells(amel_cfg))
    frozen = tuple(sorted((n, json.dumps(dict(p or {}), sort_keys=True)) for n, p in fixed.items()))
    return _calibrate_amel(frozen, tuple(sorted(targets.items())), amel_asymmetry_target(published), cells)


def amel_fixed_values(block: Mapping[str, Mapping[str, Any]], roster: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The AMEL values of the roster models Figure 14 does not plant (their ``synthetic:``)."""
    return {name: dict(block.get(name, {})) for name in roster}


def planted_models(models: Mapping[str, Mapping[str, Any]], generators: Sequence[str], judges: Sequence[str],
                   published: Path = PUBLISHED) -> dict[str, dict[str, Any]]:
    """Model name -> its ``synthetic:`` values in the rehearsal (Study C part): generators
    get their shifts by dataset, judges their γ_j and the calibrated judging values."""
    shifts, gammas, judging = planted_shifts(published), planted_gammas(published), calibrate_judging(published)
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys([*generators, *judges]):
        display = models[name]["display_name"]
        syn: dict[str, Any] = {"quality_mean": 0.0, "sigma_b": judging["sigma_b"],
                               "sigma_theta": judging["sigma_theta"], "theta_anchor": THETA_ANCHOR}
        if name in generators:
            syn["round1_mismatch_rate"] = round(1.0 - round1_match_rate(published), 6)
        if name in judges:
            if display not in gammas:
                raise KeyError(f"Table 4 prints no γ for judge {display!r} ({name})")
            syn |= {"alpha": judging["alpha"], "gamma": gammas[display], "kappa": judging["kappa"],
                    "reference_free_alpha_scale": judging["reference_free_alpha_scale"]}
        by_dataset: dict[str, dict[str, Any]] = {}
        for d in DATASET_LABELS:
            layer: dict[str, Any] = {}
            if name in generators:
                if display not in shifts:
                    raise KeyError(f"Table 3 prints no shifts for generator {display!r} ({name})")
                layer |= shifts[display][d]
            if name in judges:
                layer["beta"] = judging["beta"][d]
            by_dataset[d] = layer
        syn["by_dataset"] = by_dataset
        out[name] = syn
    return out



# ----------------------------------------------------------------------------- the report's rehearsal statuses

#: Published numbers planted in the rehearsal (table -> the columns planted; None = all):
#: posterior summaries of the fits whose parameters the config plants.
PLANTED = {
    "conformity/table3": None,
    "conformity/table10": None,
    "conformity/table11": None,
    "conformity/table12": None,
    "conformity/table17": None,
    "conformity/table20": None,
    "conformity/table4": ("gamma_j @ 95% CrI",),
}
#: Numbers no synthetic world carries, and why.
UNPLANTABLE = {
    "conformity/table9": "a sampler diagnostic of the paper's fits on the paper's data",
    "conformity/table13": "a text metric (a synthetic answer is a quality tag and a sentence)",
    "conformity/table14": "a text metric (a synthetic answer is a quality tag and a sentence)",
    "conformity/table15": "a correlation with text metrics (a synthetic answer is a quality tag and a sentence)",
    "conformity/table16": "a classifier score (a synthetic answer is a quality tag and a sentence)",
    "conformity/table18": "a text metric (a synthetic answer is a quality tag and a sentence)",
    "conformity/table6": "a property of the real models",
    "conformity/table7": "a cost of the real run",
    "conformity/table8": "a setting sent to the real models",
    "conformity/table8_requests": "a setting sent to the real models",
    "run/request_counts": "a count of the run's requests, a size of its design (the rehearsal asks fewer items)",
}
#: Figure 14's models (paper/published/amel/figure14.csv): each one's single-call d is
#: planted (:func:`calibrate_amel`), where Figure 14 or the abstract prints it.
AMEL_PLANTED_MODELS = ("gpt-5-nano", "gpt-5.2", "claude-haiku", "claude-sonnet", "claude-opus", "gemini-flash",
                       "gemini-pro")
#: Why Study A's other numbers are not planted: (table, column) -> why; by table, else.
_OPEN_MODELS = ("the seed's four open models keep the synthetic AMEL defaults (they are Study C's models too: "
                "a changed value reruns Study C)")
AMEL_UNPLANTED = {
    ("amel/asymmetry", "ratio_abs"): (
        "not plantable with Figure 14's d: a single-call mean |BS| carries the baseline's own sampling "
        "noise in both polarities, so at Figure 14's d the pooled ratio of mean |BS| stays below about "
        "1.22 at any asymmetry; the ratio of mean BS is planted at 1.62 instead (docs/rehearsal.md)"),
    ("amel/asymmetry", "d_z"): (
        "the asymmetry's paired effect size: its pairs' spread carries each model's single-call noise, which "
        "the rehearsal does not plant (the ratio of mean BS is planted at 1.62)"),
    ("amel/asymmetry", "p"): "a test statistic: it falls with the items, which the rehearsal cuts to 20 per domain",
    ("amel/asymmetry", "n_pairs"): "a count of the design: the rehearsal asks 20 items per domain",
    ("amel/effects", "p"): "a test statistic: it falls with the items, which the rehearsal cuts to 20 per domain",
    ("amel/effects", "d"): f"pooled over all 11 models, and {_OPEN_MODELS}",
    "amel/entropy": "the entropy strata are not planted: every model keeps the synthetic item distribution",
    "amel/length": "the length dependence is not planted: every model keeps the synthetic f(n)",
    "amel/framing": "the framing swap is not planted: every model keeps the synthetic token share of the asymmetry",
}
#: The reproduction report's statuses in a rehearsal (context_effects.paper.reproduction).
REHEARSAL_STATUSES = ("recovered", "missed", "not planted", "not produced")
#: Model-free numbers: with the paper's estimates planted, the run's value is the seed
#: model's prediction of its own raw table (the posterior-predictive section).
PREDICTED_WHY = "model-free: the planted model's prediction of it is in the posterior-predictive section"


def row_role(p: Mapping[str, Any]) -> tuple[str, str]:
    """(role, why) of a published row in the rehearsal: ``planted`` (checked against the
    run's interval), ``predicted`` (model-free), ``unplantable``, ``setting`` or ``not produced``."""
    table, column = p["table"], p["column"]
    if not table:
        return "not produced", "no table of this project reproduces it"
    if table == "manifest":
        return "setting", "a design setting (the rehearsal runs the paper's design on fewer items and draws)"
    if table in UNPLANTABLE:
        return "unplantable", UNPLANTABLE[table]
    if table in PLANTED and (PLANTED[table] is None or column in PLANTED[table]):
        return "planted", ""
    if table.startswith("amel/"):
        return _amel_role(table, column, p.get("row") or "")
    if table.startswith("anchoring/"):
        return "unplantable", "Study H's judges keep the synthetic defaults in this rehearsal (docs/rehearsal.md)"
    return "predicted", PREDICTED_WHY


def _amel_role(table: str, column: str, row: str) -> tuple[str, str]:
    from context_effects.paper.lookup import parse_row

    value, _, interval = (part.strip() for part in column.partition("@"))
    sel = parse_row(row)
    if (table == "amel/effects" and value == "d" and interval and sel.get("method") == "single_call"
            and sel.get("scope") == "model" and sel.get("group") in AMEL_PLANTED_MODELS):
        return "planted", ""
    why = AMEL_UNPLANTED.get((table, value)) or AMEL_UNPLANTED.get(table)
    return "unplantable", why or f"not planted: {_OPEN_MODELS}, and Figure 14's models plant only their d"


def recovered_share(report: pd.DataFrame, study: str | None = None) -> tuple[int, int, float, float, float]:
    """(recovered, planted rows checked, share, 95% Clopper-Pearson low, high)."""
    from scipy.stats import binomtest

    rows = report[report["status"].isin(["recovered", "missed"])]
    if study is not None:
        rows = rows[rows["study"] == study]
    k, n = int((rows["status"] == "recovered").sum()), len(rows)
    if n == 0:
        return 0, 0, math.nan, math.nan, math.nan
    ci = binomtest(k, n).proportion_ci(0.95)
    return k, n, k / n, float(ci.low), float(ci.high)


def _cell(x: Any, lo: Any = None, hi: Any = None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    text = f"{x:+.3f}" if abs(x) < 100 else f"{x:.1f}"
    if lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi)):
        text += f" [{lo:+.3f}, {hi:+.3f}]"
    return text


def by_table(report: pd.DataFrame) -> pd.DataFrame:
    """Per results table with planted rows: how many were checked, recovered and missed,
    the misses a calibrated 95% interval leaves (5%), the farthest miss (half-widths), and
    the least-squares slope and mean difference of the run's value on the planted one. A
    wrong definition shows as a table whose misses exceed that count or whose slope and
    mean difference leave 1 and 0; misses of noise lie near their intervals, spread over
    tables."""
    rows = report[report["status"].isin(["recovered", "missed"])]
    out = []
    # by the results table a row is read from (text rows that cite a table count with it)
    for table, g in rows.groupby(rows["source"].str.split(" ").str[0], sort=True):
        x, y = g["published"].to_numpy(float), g["reproduced"].to_numpy(float)
        missed = g[g["status"] == "missed"]
        slope = float(np.polyfit(x, y, 1)[0]) if len(g) > 2 and np.ptp(x) > 0 else math.nan
        out.append({"table": table, "checked": len(g), "recovered": len(g) - len(missed), "missed": len(missed),
                    "expected_missed": 0.05 * len(g),
                    "farthest_miss": float(missed["distance"].max()) if len(missed) else math.nan,
                    "slope": slope, "mean_difference": float(np.mean(y - x))})
    return pd.DataFrame(out, columns=["table", "checked", "recovered", "missed", "expected_missed", "farthest_miss",
                                      "slope", "mean_difference"])


def report_markdown(report: pd.DataFrame) -> str:
    """The reproduction report of a rehearsal: statuses, the recovered share, every missed
    row, the posterior-predictive section, then every row."""
    lines = ["# Reproduction report: rehearsal", "",
             "The paper's design on synthetic models planted with the seed papers' own estimates "
             "(config/rehearsal.yaml, docs/rehearsal.md). `recovered`: the published value is inside the "
             "run's 95% interval; `missed`: outside, by the distance shown; `not planted`: a number no "
             "synthetic world carries, or a model-free number (posterior-predictive section); "
             "`not produced`: no table of this run holds it.", "",
             "| study | " + " | ".join(REHEARSAL_STATUSES) + " |", "|---|" + "---|" * len(REHEARSAL_STATUSES)]
    counts = report.groupby(["study", "status"]).size().unstack(fill_value=0)
    for study, r in counts.reindex(columns=list(REHEARSAL_STATUSES), fill_value=0).iterrows():
        lines.append(f"| {study} | " + " | ".join(str(r[st]) for st in REHEARSAL_STATUSES) + " |")
    lines += ["", "| study | recovered / planted | share | 95% interval |", "|---|---|---|---|"]
    for study in sorted(set(report["study"])):
        k, n, share, lo, hi = recovered_share(report, study)
        if n:
            lines.append(f"| {study} | {k} / {n} | {share:.3f} | [{lo:.3f}, {hi:.3f}] |")
    tables = by_table(report)
    if len(tables):
        lines += ["", "## By table", "",
                  "A calibrated 95% interval misses 5% of planted values, near the interval and in every table "
                  "alike; a wrong definition misses more in its own table, or moves the slope of the run's "
                  "values on the planted ones from 1 and their mean difference from 0 (half-widths: the "
                  "farthest miss's distance from its interval, in half-widths of that interval).", "",
                  "| table | checked | recovered | missed | expected missed | farthest miss (half-widths) | slope "
                  "| mean difference |", "|---|---|---|---|---|---|---|---|"]
        for r in tables.to_dict("records"):
            farthest = "" if math.isnan(r["farthest_miss"]) else f"{r['farthest_miss']:.2f}"
            lines.append(f"| {r['table']} | {r['checked']} | {r['recovered']} | {r['missed']} | "
                         f"{r['expected_missed']:.1f} | {farthest} | {r['slope']:.2f} | {r['mean_difference']:+.3f} |")
    missed = report[report["status"] == "missed"]
    lines += ["", "## Missed", ""]
    if missed.empty:
        lines.append("None.")
    else:
        lines += ["| id | quantity | published | run | why |", "|---|---|---|---|---|"]
        for r in missed.to_dict("records"):
            lines.append(f"| {r['id']} | {r['quantity']} | {_cell(r['published'])} | "
                         f"{_cell(r['reproduced'], r['reproduced_lower'], r['reproduced_upper'])} | "
                         f"{r['reason']} |")
    pred = report[report.get("role", pd.Series(dtype=str)) == "predicted"]
    lines += ["", "## Posterior-predictive check of the seed paper", "",
              "With the paper's estimates planted, each model-free number below is what the seed's own "
              "model predicts for its raw tables. A large difference is a finding about the seed paper: "
              "its model does not reproduce its own descriptive numbers.", "",
              "| id | quantity | published | predicted (run) | difference |", "|---|---|---|---|---|"]
    for r in pred.to_dict("records"):
        lines.append(f"| {r['id']} | {r['quantity']} | {_cell(r['published'])} | "
                     f"{_cell(r['reproduced'], r['reproduced_lower'], r['reproduced_upper'])} | "
                     f"{_cell(r['difference'])} |")
    lines += ["", "## Every number", "", "| id | status | published | run | why |", "|---|---|---|---|---|"]
    for r in report.to_dict("records"):
        lines.append(f"| {r['id']} | {r['status']} | {_cell(r['published'])} | "
                     f"{_cell(r['reproduced'], r['reproduced_lower'], r['reproduced_upper'])} | "
                     f"{str(r['reason']).replace('|', '/')} |")
    return "\n".join(lines) + "\n"

def models_block(paper_models: Mapping[str, Mapping[str, Any]], generators: Sequence[str], judges: Sequence[str],
                 others: Sequence[str], published: Path = PUBLISHED,
                 amel: Config | None = None) -> dict[str, dict[str, Any]]:
    """The rehearsal config's ``models:``: every model of the paper config on the synthetic
    backend under its own name and display name (the published rows select by those),
    without first-token probabilities where the paper's model is served without them,
    planted by :func:`planted_models`; with ``amel`` (the rehearsal's ``amel:`` block)
    Figure 14's models by :func:`calibrate_amel`; the rest keep the synthetic defaults."""
    from context_effects.config import fill_defaults, load_schema
    from context_effects.llm.capabilities import profile

    planted = planted_models(paper_models, generators, judges, published)
    served = fill_defaults({"models": dict(paper_models)}, load_schema())["models"]
    if amel is not None:
        f14 = figure14_targets(published)
        roster = [m for m in amel["models"] if m not in f14]
        planted |= calibrate_amel(amel_fixed_values(planted, roster), amel, published)
    out = {}
    for name in dict.fromkeys([*generators, *judges, *others]):
        m = paper_models[name]
        entry = {"backend": "synthetic", "model_id": name, "display_name": m["display_name"], "family": m["family"]}
        if "params_b" in m:
            entry["params_b"] = m["params_b"]
        if not profile(served[name])["logprobs"]:
            # Measured as the model is served: no first-token probabilities (Study A's
            # entropy strata then come from sampled baselines).
            entry["capabilities"] = {"logprobs": False}
        entry["synthetic"] = planted.get(name, {})
        out[name] = entry
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Print the rehearsal's ``models:`` block for the paper config (the values
    ``config/rehearsal.yaml`` holds; tests/test_rehearsal.py checks they agree)."""
    import argparse

    import yaml

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--paper-config", default="config/config.yaml")
    ap.add_argument("--published", default=str(PUBLISHED))
    ap.add_argument("--rehearsal-config", default="config/rehearsal.yaml",
                    help="its amel: block is the design Study A's values are calibrated for")
    a = ap.parse_args(argv)
    cfg = yaml.safe_load(Path(a.paper_config).read_text())
    design = yaml.safe_load(Path(a.rehearsal_config).read_text())["amel"]
    c = cfg["conformity"]
    others = [*cfg["amel"]["models"], *cfg["amel"].get("extra_models", []), *cfg["anchoring"]["judges"]]
    block = models_block(cfg["models"], c["generators"], [*c["judges"], *c["hosted_judges"]], others,
                         Path(a.published), design)
    class NoAliases(yaml.SafeDumper):  # judges share one κ list: write it out each time
        def ignore_aliases(self, data: Any) -> bool:
            return True

    print(yaml.dump({"models": block}, Dumper=NoAliases, sort_keys=False, default_flow_style=None, width=110))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
