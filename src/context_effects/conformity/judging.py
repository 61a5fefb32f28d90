"""Study C judging as file-to-file steps: judge request shards and the ratings table.

Shards are blocks of items, so one judge job rates every answer (all generators,
executions, corpora, both anchors) of its items and a rerun of one block touches
nothing else. The block size is chosen from ``judging.shard_size`` (requests per
job), counting exactly how many requests one item produces under the config; the
small last blocks of several datasets share one shard (``stages.packed_shards``).

Hosted judges (seed 002 §3.3, Table 4's API rows) are an audit, paid per call: they
rate only what the five-judge refits use — the main corpus at the primary seed plus
the anchors — and only on ``hosted_judge_datasets``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects.conformity.conditions import ANCHOR_CONDITIONS, D_BY_CONDITION
from context_effects.conformity.replies import judge_policy_params, parse_rating
from context_effects.conformity.requests import ANCHOR_CORPUS, judge_decoding, judge_requests
from context_effects.datasets import read_items
from context_effects.llm.capabilities import served_model
from context_effects.llm.shards import read_response_shard, write_request_shard

#: Blind and informed requests per trial: main = Round 1, no-peer and three peer
#: arms per authority variant (informed: the peer arms); decomposition = Round 1,
#: no-peer, three content and three peer arms (informed: the three peer arms).
#: Anchors: two answers, each scored reference-augmented and reference-free.
ANCHOR_REQUESTS_PER_ITEM = 4

RATING_COLUMNS: dict[str, str] = {
    "answer_id": "the rated answer (answers table)",
    "trial_id": "dataset|corpus|seed|generator|item_id; None for anchors",
    "dataset": "dataset name",
    "corpus": "main | decomposition | anchor",
    "seed": "execution label; None for anchors",
    "generator": "model that wrote the answer; None for anchors",
    "item_id": "item table id",
    "condition": "round1, no_peer, content_*, peer_*, anchor_correct, anchor_incorrect",
    "authority": "present | absent for peer arms, else None",
    "judge": "rating model",
    "hosted": "judge is a hosted API judge (conformity.hosted_judges)",
    "pass": "blind | informed",
    "reference": "anchors: augmented (gold shown) | free; else None",
    "d": "informed rows: +1 all-correct, 0 mixed, -1 all-wrong; 0 otherwise",
    "rating": "1-5; NaN when the judge never gave a parseable rating",
    "status": "ok | missing",
    "error": "why the rating is missing (parse-failure reason or call error)",
    "attempts": "calls made for this rating (1 + re-asks)",
    "decoding": "free (JSON asked for in the prompt, seed 002 App. B) | constrained (decoded under the rating schema)",
    "served_model": "model version that answered: the provider's snapshot name, or model id[@revision] of local weights",
    "system_fingerprint": "the provider's system_fingerprint where it returns one, else None",
    "injection_flag": "the rated answer addresses the judge (conformity.injection rules); NA if not checked",
}


def requests_per_item(conformity: Mapping[str, Any], hosted: bool = False) -> int:
    """Judge requests one item yields under the config (sizing judge shards)."""
    n_auth = len(conformity["peers"]["authority_variants"])
    main = (2 + 3 * n_auth) + 3 * n_auth  # blind + informed per trial
    decomp = 8 + 3
    n_seeds = 1 if hosted else len(conformity["seeds"])
    per_generator = n_seeds * main + (0 if hosted or not conformity["decomposition"]["enabled"] else decomp)
    return len(conformity["generators"]) * per_generator + ANCHOR_REQUESTS_PER_ITEM


def items_per_judge_shard(conformity: Mapping[str, Any], hosted: bool = False) -> int:
    return max(1, conformity["judging"]["shard_size"] // requests_per_item(conformity, hosted))


def judged_answers(answers: pd.DataFrame, item_ids: Sequence[str], hosted: bool, primary_seed: int) -> pd.DataFrame:
    """The answers one judge shard rates: its items, with text; hosted judges see the audit subset."""
    sel = answers[answers["item_id"].astype(str).isin(set(map(str, item_ids)))]
    # A generation that failed every retry has no text; it stays visible in the
    # answers table (and its missing count in the log) but cannot be rated.
    sel = sel[sel["text"].map(lambda t: isinstance(t, str) and bool(t.strip()))]
    if hosted:
        keep = (sel["corpus"] == ANCHOR_CORPUS) | ((sel["corpus"] == "main") & (sel["seed"] == primary_seed))
        sel = sel[keep]
    return sel


def write_judge_shard(
    items_paths: Mapping[str, str | Path],
    answers_paths: Mapping[str, str | Path],
    out_path: str | Path,
    *,
    blocks: Sequence[tuple[str, int]],
    judge: str,
    judge_cfg: Mapping[str, Any],
    items_per_shard: int,
    hosted: bool,
    primary_seed: int,
    judging: Mapping[str, Any],
    seed: int,
) -> int:
    """Write the judge shard of ``blocks`` ((dataset, block index); block i holds items
    ``i * items_per_shard`` onward of its dataset) for one judge. ``items_paths`` and
    ``answers_paths`` map each dataset to its item and answers tables.

    ``judging`` is ``conformity.judging`` (sampling, the retry loop); a ``hosted`` judge rates
    only the main corpus at ``primary_seed`` and the anchors.
    """
    k = items_per_shard
    selected = []
    for dataset, index in blocks:
        block = read_items(items_paths[dataset]).iloc[index * k : (index + 1) * k]
        answers = pd.read_parquet(answers_paths[dataset])
        selected.append(judged_answers(answers, block["item_id"].tolist(), hosted, primary_seed))
    sel = pd.concat(selected, ignore_index=True)
    settings = judging
    requests = judge_requests(sel, judge, judge_cfg, settings, seed)
    # Re-asked by the judging settings' retry loop (seed 002 App. A.6 by default).
    write_request_shard(
        out_path, requests, reply_policy="conformity.rating", policy_params=judge_policy_params(settings),
        max_attempts=int(settings["max_attempts"]),
    )
    return len(requests)


def _trial_id(meta: Mapping[str, Any]) -> str | None:
    if meta["condition"] in ANCHOR_CONDITIONS:
        return None
    return "|".join(str(meta[k]) for k in ("dataset", "corpus", "seed", "generator", "item_id"))


def ratings_frame(
    response_paths: Sequence[str | Path],
    hosted_judges: Sequence[str] = (),
    request_paths: Sequence[str | Path] | None = None,
    injection_flags: Mapping[str, bool] | None = None,
    dataset: str | None = None,
) -> pd.DataFrame:
    """The ratings table (``RATING_COLUMNS``): one row per judge request, misses included;
    with ``dataset``, the rows of that dataset only (a shard can hold several datasets).

    A rating comes only from a reply that passed validation; a reply that stayed
    unparseable after every re-ask, or a call that failed, is a row with
    ``rating = NaN`` and its reason, so parse-failure rates can be reported and
    the measurement model simply drops the row.

    ``request_paths`` (parallel to ``response_paths``) are the judge request shards
    the files answer; each response shard must cover its requests one to one
    (``llm.shards.check_response_coverage``), so a lost judge request fails the job
    instead of vanishing from the table. ``injection_flags`` (answer_id -> flagged,
    ``conformity.injection``) fills ``injection_flag``; without it the column is
    missing (NA), and an answer id the mapping lacks is an error.
    """
    hosted_judges = set(hosted_judges)
    if request_paths is not None and len(request_paths) != len(response_paths):
        raise ValueError(f"{len(response_paths)} judge response shards but {len(request_paths)} request shards")
    rows = []
    for i, path in enumerate(response_paths):
        requests, table = read_response_shard(
            path,
            ["text", "ok", "error", "invalid_reason", "attempt", "notes"],
            requests_path=None if request_paths is None else request_paths[i],
        )
        for req, text, ok, error, invalid, attempt, notes in zip(
            requests, table["text"], table["ok"], table["error"], table["invalid_reason"], table["attempt"],
            table["notes"],
        ):
            m = req.meta
            if dataset is not None and m["dataset"] != dataset:
                continue
            value, reason = parse_rating(text) if ok and text is not None else (None, None)
            missing = value is None
            anchor = m["condition"] in ANCHOR_CONDITIONS
            rows.append({
                "answer_id": m["answer_id"],
                "trial_id": _trial_id(m),
                "dataset": m["dataset"],
                "corpus": m["corpus"],
                "seed": None if anchor else m.get("seed"),
                "generator": None if anchor else m.get("generator"),
                "item_id": m["item_id"],
                "condition": m["condition"],
                "authority": m.get("authority"),
                "judge": m["judge"],
                "hosted": m["judge"] in hosted_judges,
                "pass": m["pass"],
                "reference": m.get("reference"),
                "d": int(m.get("d") or 0) if m["pass"] == "informed" else 0,
                "rating": float("nan") if missing else float(value),
                "status": "missing" if missing else "ok",
                "error": (invalid or reason or error or "no_reply") if missing else None,
                "attempts": int(attempt or 0) + 1,
                "decoding": judge_decoding(req),
                **dict(zip(("served_model", "system_fingerprint"), served_model(req, notes))),
            })
    out = pd.DataFrame(rows, columns=list(RATING_COLUMNS))
    out["seed"] = out["seed"].astype("Int64")
    out["d"] = out["d"].astype(int)
    out["injection_flag"] = _injection_column(out["answer_id"], injection_flags)
    key = ["answer_id", "judge", "pass", "reference"]
    dup = out.duplicated(key)
    if dup.any():
        raise ValueError(f"duplicate ratings for {out.loc[dup, key].head().to_dict('records')}")
    return out


def _injection_column(answer_ids: pd.Series, flags: Mapping[str, bool] | None) -> pd.Series:
    if flags is None:
        return pd.Series(pd.NA, index=answer_ids.index, dtype="boolean")
    unknown = sorted(set(answer_ids) - set(flags))
    if unknown:
        raise ValueError(f"rated answers without an injection check (answers and flags out of step): {unknown[:5]}")
    return answer_ids.map(flags).astype(bool)


def check_d(ratings: pd.DataFrame) -> None:
    """Informed rows carry the d of their peer arm (Eq. 7); anything else is a wiring bug."""
    informed = ratings[ratings["pass"] == "informed"]
    expected = informed["condition"].map(D_BY_CONDITION)
    if expected.isna().any() or (expected.astype(int) != informed["d"]).any():
        raise ValueError("informed ratings with a d that does not match their peer arm")
