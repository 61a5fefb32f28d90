"""From response shards to P(Yes) per cell, bias scores and baseline entropy.

P(Yes)
------
``first_token``: the probe probabilities of "Yes"/"yes" and "No"/"no" at the
first generated position (``probe_probs``; else the top ``first_token_logprobs``
with surrounding whitespace ignored), renormalised over the two verdicts:
``P(Yes) = p_yes / (p_yes + p_no)``. ``yes_no_mass = p_yes + p_no`` says how
much of the first token went to a verdict at all (low for poor judges). A
verdict absent from the top alternatives counts as 0 and is flagged in
``probe_missing``; with neither present P(Yes) is missing.

Sampled replies give three kinds of row: ``single_call`` (the cell's first
reply alone, an outcome 1 or 0: the primary analysis), ``samples`` (the share
of Yes among the cell's ``n_samples`` replies that parse as a verdict, the first
word, case and punctuation ignored; ``n_valid`` of ``n_requests``; only when
``n_samples`` > 1) and, for baseline cells, ``baseline_samples`` (the share over
every sampled reply of the baseline, the extra entropy samples included).

A cell measured several ways gives one row per ``method``; everything
downstream keeps them apart (a baseline is always of the same method).

Bias score (seed 000)
---------------------
``BS = P(r* | treatment) - P(r* | baseline)`` with r* the verdict *against* the
history's prevailing polarity ("No" after yes-saturated, "Yes" after
no-saturated) and the baseline of the same framing. BS < 0 = conforming.

A balanced history has no prevailing polarity, so no r* and no BS: its rows
carry ``shift = P(Yes | treatment) - P(Yes | baseline)`` (every treatment row
has it) and the ``balanced`` analysis compares ``|shift|`` with the saturated
cells' ``|BS|``.

Baseline entropy
----------------
``H = -p log2 p - (1 - p) log2 (1 - p)`` of the baseline P(Yes) (bits; 0 =
deterministic, 1 = maximally uncertain), per item x model x framing. An item
is in the ``deterministic`` stratum when H < ``entropy_threshold_bits`` for
first-token probabilities, and when every sample agreed (H = 0) for sampled
answers; ``uncertain`` otherwise. A ``single_call`` row (one reply per cell)
takes the entropy and stratum of its baseline measured the cheapest faithful
way (``baseline_uncertainty``): the model's first-token P(Yes) where measured,
else the baseline's ``baseline_samples`` replies.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from context_effects.llm.capabilities import served_model
from context_effects.llm.shards import read_response_shard

#: The method of a baseline's rows from every sampled reply (extra entropy samples
#: included): the source of the entropy strata of a model without first-token
#: probabilities; only baseline cells have it, so no bias score does.
BASELINE_SAMPLES = "baseline_samples"
PROB_COLUMNS = (
    "model",
    "domain",
    "item_id",
    "answer",
    "cell",
    "framing",
    "condition",
    "k",
    "n_biased",
    "position",
    "method",
    "p_yes",
    "yes_no_mass",
    "probe_missing",
    "n_requests",
    "n_valid",
    "n_failed",
    "tokens_in",
    "history_repeats",
    "saturation_share",
    "prevailing_share",
    "served_model",
    "system_fingerprint",
)
_WORD = re.compile(r"[A-Za-z]+")


def _load(blob: Any) -> dict[str, float] | None:
    if blob is None or (isinstance(blob, float) and math.isnan(blob)):
        return None
    out = json.loads(blob) if isinstance(blob, str) else blob
    return out or None


def first_token_p_yes(
    probe_probs: Mapping[str, float] | None, top_logprobs: Mapping[str, float] | None
) -> tuple[float, float, bool]:
    """(P(Yes), yes/no mass, one verdict missing) from first-token probabilities; NaN if none."""
    source: dict[str, float] = {}
    if probe_probs:
        source = {t: float(p) for t, p in probe_probs.items()}
    elif top_logprobs:
        source = {t: math.exp(float(lp)) for t, lp in top_logprobs.items() if math.isfinite(float(lp))}
    mass = {"yes": 0.0, "no": 0.0}
    seen = {"yes": False, "no": False}
    for token, p in source.items():
        word = token.strip().lower()
        if word in mass:
            mass[word] += p
            seen[word] = True
    total = mass["yes"] + mass["no"]
    if not (seen["yes"] or seen["no"]) or total <= 0:
        return math.nan, total, True
    return mass["yes"] / total, total, not (seen["yes"] and seen["no"])


def parse_verdict(text: str | None) -> str | None:
    """'Yes' / 'No' from a sampled reply (its first word), else None."""
    if not text:
        return None
    m = _WORD.search(text)
    if not m:
        return None
    word = m.group(0).lower()
    return {"yes": "Yes", "no": "No"}.get(word)


def probabilities(
    response_paths: Sequence[str | Path], request_paths: Sequence[str | Path] | None = None
) -> pd.DataFrame:
    """One row per model x item x cell with P(Yes) and how it was measured.

    ``request_paths`` (parallel to ``response_paths``) are the request shards the
    files answer: each response shard must cover its requests one to one
    (``llm.shards.check_response_coverage``), else a lost sample would silently
    shrink ``n_requests`` and shift P(Yes). The rule always passes them.
    """
    if request_paths is not None and len(request_paths) != len(response_paths):
        raise ValueError(f"{len(response_paths)} response shards but {len(request_paths)} request shards")
    groups: dict[tuple[str, str, str], dict[str, Any]] = {}
    for i, path in enumerate(response_paths):
        requests, table = read_response_shard(
            path,
            ["text", "ok", "probe_probs", "first_token_logprobs", "tokens_in", "notes"],
            requests_path=None if request_paths is None else request_paths[i],
        )
        rows = table[["text", "ok", "probe_probs", "first_token_logprobs", "tokens_in", "notes"]].itertuples(
            index=False)
        for req, (text, ok, probes, top, tokens_in, notes) in zip(requests, rows):
            meta = req.meta
            key = (meta["model"], meta["item_id"], meta["cell"], meta["method"])
            g = groups.get(key)
            if g is None:
                g = groups[key] = {"meta": meta, "replies": [], "first": None, "first_failed": 0,
                                   "tokens_in": None, "served": set()}
            if ok:
                g["served"].add(served_model(req, notes))
                if tokens_in is not None and not pd.isna(tokens_in):
                    g["tokens_in"] = int(tokens_in)
            if meta["method"] == "first_token":
                if ok:
                    g["first"] = first_token_p_yes(_load(probes), _load(top))
                else:
                    g["first_failed"] += 1
            else:
                # (sample index, the reply's verdict; None = failed or not a verdict, failed)
                g["replies"].append((req.sample_index, parse_verdict(text) if ok else None, not ok))
    rows = []
    for (model, item_id, cell, _), g in groups.items():
        meta = g["meta"]
        if meta["method"] == "first_token":
            p, mass, missing = g["first"] if g["first"] is not None else (math.nan, math.nan, True)
            n_valid = int(g["first"] is not None and not math.isnan(p))
            rows.append(_probability_row(model, item_id, cell, meta, {**g, "n": 1, "failed": g["first_failed"]},
                                         "first_token", p, mass, missing, n_valid))
            continue
        replies = sorted(g["replies"], key=lambda r: r[0])
        # Shards written before `n_samples` was in the meta: every reply is a sample.
        n_samples = int(meta.get("n_samples") or len(replies))
        # The seed's design (one call per cell): the cell's first sampled reply alone,
        # an outcome of 1 (Yes) or 0 (No), missing when that reply failed or did not parse.
        rows.append(_sampled_row(model, item_id, cell, meta, g, "single_call", [r for r in replies if r[0] == 0]))
        if n_samples > 1:
            rows.append(_sampled_row(model, item_id, cell, meta, g, "samples",
                                     [r for r in replies if r[0] < n_samples]))
        if meta["condition"] == "baseline":
            # Every sampled reply of a baseline, extra ones included: its uncertainty
            # (the entropy stratum of a model without first-token probabilities).
            rows.append(_sampled_row(model, item_id, cell, meta, g, BASELINE_SAMPLES, replies))
    if not rows:
        raise ValueError("no AMEL responses found in the given shards")
    df = pd.DataFrame(rows, columns=list(PROB_COLUMNS))
    return df.sort_values(["model", "method", "domain", "item_id", "cell"], kind="stable").reset_index(drop=True)


def _sampled_row(model: str, item_id: str, cell: str, meta: Mapping[str, Any], g: Mapping[str, Any],
                 method: str, replies: Sequence[tuple[int, str | None, bool]]) -> dict[str, Any]:
    """A cell's P(Yes) from some of its sampled replies: the share of Yes among those that parse."""
    parsed = [v for _, v, _ in replies if v is not None]
    n_valid = len(parsed)
    p = sum(v == "Yes" for v in parsed) / n_valid if n_valid else math.nan
    counts = {**g, "n": len(replies), "failed": sum(failed for _, _, failed in replies)}
    mass = n_valid / len(replies) if replies else math.nan
    return _probability_row(model, item_id, cell, meta, counts, method, p, mass, False, n_valid)


def _probability_row(model: str, item_id: str, cell: str, meta: Mapping[str, Any], g: Mapping[str, Any],
                     method: str, p: float, mass: float, missing: bool, n_valid: int) -> dict[str, Any]:
    return {
        "model": model,
        "domain": meta["domain"],
        "item_id": item_id,
        "answer": meta["answer"],
        "cell": cell,
        "framing": meta["framing"],
        "condition": meta["condition"],
        "k": int(meta.get("k") or 0),
        "n_biased": int(meta.get("n_biased") or 0),
        "position": meta.get("position"),
        "method": method,
        "p_yes": p,
        "yes_no_mass": mass,
        "probe_missing": bool(missing),
        "n_requests": g["n"],
        "n_valid": n_valid,
        "n_failed": g["failed"],
        "tokens_in": g["tokens_in"],
        "history_repeats": int(meta.get("history_repeats") or 0),
        "saturation_share": _float(meta.get("saturation_share")),
        "prevailing_share": _float(meta.get("prevailing_share")),
        # Every version that answered the cell's requests (more than one if an
        # alias moved to a new snapshot mid-run).
        "served_model": "; ".join(sorted({m for m, _ in g["served"]})) or None,
        "system_fingerprint": "; ".join(sorted({f for _, f in g["served"] if f})) or None,
    }


def _float(x: Any) -> float:
    return math.nan if x is None else float(x)


def binary_entropy(p: Any) -> np.ndarray:
    """Entropy in bits of a Bernoulli(p); 0 at p in {0, 1}."""
    p = np.asarray(p, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -(p * np.log2(p) + (1 - p) * np.log2(1 - p))
    return np.where((p == 0) | (p == 1), 0.0, h)


def baseline_uncertainty(probs: pd.DataFrame, entropy_threshold_bits: float) -> pd.DataFrame:
    """Per model x item x framing, the baseline's entropy (bits) and stratum as the
    single-call rows take them: from the first-token P(Yes) where the model has it
    (deterministic below ``entropy_threshold_bits``), else from every sampled reply of the
    baseline (deterministic when they all agree; no stratum from fewer than 2 verdicts)."""
    keys = ["model", "item_id", "framing"]
    base = probs[probs["condition"] == "baseline"]
    first = base[(base["method"] == "first_token") & base["p_yes"].notna()][keys + ["p_yes"]]
    sampled = base[base["method"] == BASELINE_SAMPLES][keys + ["p_yes", "n_valid"]]
    sampled = sampled[sampled["n_valid"] >= 2]
    with_first = set(first["model"])
    # A model measured by first-token probabilities takes them for every item (one source
    # per model); its items without a probability have no stratum.
    sampled = sampled[~sampled["model"].isin(with_first)]
    h_first = binary_entropy(first["p_yes"])
    out = pd.concat([
        first.assign(baseline_entropy=h_first,
                     stratum=np.where(h_first < entropy_threshold_bits, "deterministic", "uncertain")),
        sampled.assign(baseline_entropy=binary_entropy(sampled["p_yes"]),
                       stratum=np.where(sampled["p_yes"].isin([0.0, 1.0]), "deterministic", "uncertain")),
    ], ignore_index=True)
    return out[keys + ["baseline_entropy", "stratum"]]


def bias_scores(
    probs: pd.DataFrame,
    models_cfg: Mapping[str, Mapping[str, Any]],
    *,
    entropy_threshold_bits: float,
) -> pd.DataFrame:
    """One row per model x item x treatment cell: BS, its baseline, entropy stratum, congruence."""
    keys = ["model", "method", "item_id", "framing"]
    base = probs[probs["condition"] == "baseline"][keys + ["p_yes"]]
    base = base.rename(columns={"p_yes": "p_yes_baseline"})
    treat = probs[probs["condition"] != "baseline"].merge(base, on=keys, how="left")
    against_is_yes = treat["condition"] == "no_saturated"
    saturated = treat["condition"].isin(["yes_saturated", "no_saturated"])
    treat["r_star"] = np.where(saturated, np.where(against_is_yes, "Yes", "No"), None)
    treat["p_rstar"] = np.where(saturated, np.where(against_is_yes, treat["p_yes"], 1 - treat["p_yes"]), np.nan)
    treat["p_rstar_baseline"] = np.where(
        saturated, np.where(against_is_yes, treat["p_yes_baseline"], 1 - treat["p_yes_baseline"]), np.nan
    )
    treat["bs"] = treat["p_rstar"] - treat["p_rstar_baseline"]
    treat["shift"] = treat["p_yes"] - treat["p_yes_baseline"]
    treat["baseline_entropy"] = binary_entropy(treat["p_yes_baseline"])
    treat.loc[treat["p_yes_baseline"].isna(), "baseline_entropy"] = np.nan
    # Sampled answers: deterministic means every sample agreed (H = 0). The bit threshold
    # was chosen for first-token probabilities; with n samples it would call 2 dissenters
    # in 20 (H = 0.47 bits) deterministic.
    sampled = (treat["method"] == "samples").to_numpy()
    deterministic = np.where(
        sampled, treat["p_yes_baseline"].isin([0.0, 1.0]), treat["baseline_entropy"] < entropy_threshold_bits
    )
    treat["stratum"] = np.where(
        treat["baseline_entropy"].isna(), None, np.where(deterministic, "deterministic", "uncertain")
    )
    # One call cannot measure how uncertain a baseline is: a single_call row takes its
    # item's baseline entropy and stratum from the model's first-token probabilities of
    # that baseline where they were measured, else from the baseline's sampled replies.
    single = (treat["method"] == "single_call").to_numpy()
    if single.any():
        got = treat.loc[single, ["model", "item_id", "framing"]].merge(
            baseline_uncertainty(probs, entropy_threshold_bits), on=["model", "item_id", "framing"],
            how="left", validate="many_to_one")
        treat.loc[single, "baseline_entropy"] = got["baseline_entropy"].to_numpy()
        treat.loc[single, "stratum"] = got["stratum"].to_numpy()
    prevailing = np.where(treat["condition"] == "yes_saturated", "Yes", "No")
    # Congruent: the history's prevailing verdict is the correct one for this item
    # (balanced histories have none: never congruent).
    treat["congruent"] = saturated.to_numpy() & (treat["answer"].to_numpy() == prevailing)
    treat["baseline_verdict"] = np.where(treat["p_yes_baseline"] >= 0.5, "Yes", "No")
    treat["baseline_congruent"] = saturated.to_numpy() & (treat["baseline_verdict"].to_numpy() == prevailing)
    treat["polarity"] = np.where(
        treat["condition"] == "yes_saturated", "yes", np.where(treat["condition"] == "no_saturated", "no", "balanced")
    )

    def info(name: str, field: str) -> Any:
        cfg = models_cfg[name]
        if field == "provider":
            return cfg["family"] or cfg["backend"]
        if field == "display":
            return cfg["display_name"] or name
        if field == "extra_model":
            return bool(cfg.get("extra_model", False))
        if field == "stands_in_for":
            return cfg.get("stands_in_for")
        if field == "list_rank":
            return int(cfg.get("list_rank", list(models_cfg).index(name)))
        return cfg[field]

    names = treat["model"].unique()
    treat["provider"] = treat["model"].map({m: info(m, "provider") for m in names})
    treat["display_name"] = treat["model"].map({m: info(m, "display") for m in names})
    treat["params_b"] = treat["model"].map({m: info(m, "params_b") for m in names}).astype(float)
    treat["backend"] = treat["model"].map({m: info(m, "backend") for m in names})
    treat["extra_model"] = treat["model"].map({m: info(m, "extra_model") for m in names}).astype(bool)
    treat["list_rank"] = treat["model"].map({m: info(m, "list_rank") for m in names}).astype(int)
    treat["stands_in_for"] = treat["model"].map({m: info(m, "stands_in_for") for m in names})
    return treat.sort_values(["model", "method", "domain", "item_id", "cell"], kind="stable").reset_index(drop=True)
