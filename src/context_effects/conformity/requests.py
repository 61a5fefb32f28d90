"""LLM requests for every Study C stage (generation, anchors, judging): pure functions, no I/O.

The caller writes the returned requests to shards (``llm.shards.write_request_shard``)
and turns answered generation shards back into an answers table
(``answers_frame``) for the judge stage.

Stages
------
``round1_requests``   one Round-1 answer per item (seed 002 App. A.1 "Round 1").
``round2_requests``   Round 2 branched from the *realised* Round-1 answer, which stays
                      in the chat history: messages = (user: Round-1 prompt,
                      assistant: the Round-1 answer, user: the Round-2 prompt).
                      ``corpus="main"``: no_peer + peer_{correct,wrong,mixed} × every
                      authority variant (7 requests; with Round 1 the paper's 8 answers
                      per question–generator pair). ``corpus="decomposition"``: no_peer +
                      content_{correct,wrong,mixed} + peer_{correct,wrong,mixed} in one
                      authority variant (7 requests; 8 with Round 1, App. A.2).
                      Peer blocks come from the item table: the seeded panel of
                      ``peers`` drawn from the table's panel seed (never from the
                      execution label, so executions 42/43/44 send byte-identical
                      prompts), or the predecessor release's blocks where the table
                      records them (``conformity.release``).
``anchor_texts``      the fixed anchor answers: gold answer (anchor_correct) and the
                      item's wrong attractor (anchor_incorrect).
``anchor_requests``   synthetic-backend only: "generates" anchors so the simulated judge
                      finds the planted ±θ_a tag (real runs use ``anchor_texts``).
``judge_requests``    blind pass for every answer; informed pass (the generator's exact
                      peer block visible) for every peer-arm answer, d = +1/0/−1; anchors
                      twice, reference-augmented and reference-free.

Decomposition authority variant
-------------------------------
The decomposition corpus has one peer answer per polarity (App. A.2: 2,000 × 8
answers), so it needs one authority variant per trial. It is chosen per item, not
per condition — all three peer arms of an item share it, so polarity contrasts
within the corpus never mix in an authority contrast — by the seeded rule::

    variants[int.from_bytes(sha256(f"{seed}:{item_id}:decomposition-authority").digest()[:8], "big") % len(variants)]

(``variants`` = the configured authority variants in the order present, absent).
It is independent of the generator, so all generators see the same prompt, and
of which other items are requested, so sharding items cannot change it. Over many
items it balances present/absent about 50/50, like the main corpus's pooled arms.

The decomposition corpus is its own run (App. A.2: the corpora are "generated and
judged separately"): its generation and judge requests carry
``namespace=DECOMPOSITION_NAMESPACE``, which enters the request key, so a
decomposition prompt byte-identical to a main-corpus one (Round 1, no-peer, the
peer arm of the same seed and variant, and the judge prompts of identical answer
texts) is a call of its own, never served the main corpus's answer or rating.

Meta
----
Every request's ``meta`` carries the synthetic backend's Study C contract
(``study``, ``role``, ``item_id``, ``condition``, ``generator`` / ``judge``, ``pass``,
``d``, ``reference``) plus bookkeeping (``dataset``, ``seed`` = the execution label,
``corpus``, ``authority``, ``answer_id``, ``template`` …). Meta is not part of the
request key, so none of this changes what is asked or what is cached.

Sampling
--------
Generation: ``temperature``/``top_p``/``max_tokens`` from ``settings``
(``conformity.generation``), sampling seed = the execution seed label (42/43/44).
Judging: ``temperature``/``top_p``/``max_tokens`` from ``conformity.judging``, the
``seed`` argument as sampling seed. ``judging.decoding`` decides how the rating is
decoded: ``free`` (default, as in seed 002 App. B: the prompt asks for the JSON and
the judge writes free text, which ``replies.parse_rating`` checks and re-asks) or
``constrained`` (``output_schema=RATING_SCHEMA``: vLLM guided decoding, OpenAI
strict mode), which can move the rating distribution and so is recorded per rating.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

import pandas as pd

from context_effects.conformity import prompts
from context_effects.conformity.conditions import (
    ANCHOR_CONDITIONS,
    AUTHORITY_VARIANTS,
    CONTENT_CONDITIONS,
    D_BY_CONDITION,
    D_BY_POLARITY,
    PEER_CONDITIONS,
    POLARITIES,
)
from context_effects.conformity.peers import content_block, peer_block
from context_effects.llm.capabilities import conform_sampling
from context_effects.llm.factory import model_ref
from context_effects.conformity.replies import RATING_SCHEMA
from context_effects.llm.types import LLMRequest, Sampling

STUDY = "conformity"
CORPORA = ("main", "decomposition")
ANCHOR_CORPUS = "anchor"
#: Key component of every decomposition-corpus request (generation and judging).
DECOMPOSITION_NAMESPACE = "conformity/decomposition"


def corpus_namespace(corpus: str | None) -> str | None:
    """The request-key namespace of a corpus: the decomposition corpus is a separate run."""
    return DECOMPOSITION_NAMESPACE if corpus == "decomposition" else None


#: The answers table that ``judge_requests`` consumes, one row per answer:
ANSWER_COLUMNS: dict[str, str] = {
    "answer_id": "unique id: dataset|corpus|seed|generator|item_id|condition[|authority]; "
                 "anchors dataset|anchor|item_id|condition",
    "dataset": "truthfulqa | mmlu_pro | arc_challenge",
    "corpus": "main | decomposition | anchor",
    "seed": "execution label (42/43/44; the decomposition seed); None for anchors",
    "item_id": "item table id",
    "generator": "model name that wrote the answer; None for anchors (never a self-rating)",
    "condition": "round1, no_peer, content_*, peer_*, anchor_correct, anchor_incorrect",
    "authority": "present | absent for peer_* rows, else None",
    "question": "the question as shown to generator and judge",
    "text": "the answer, verbatim as returned (must be a non-empty str to be judged)",
    "peer_block": "peer_* rows: the exact block the generator saw (the informed judge shows it); else None",
    "content_block": "content_* rows: the exact content block the generator saw; else None",
    "reference_answer": "anchor rows: the gold answer shown in the reference-augmented pass; else None",
    "round1_answer_id": "Round-2 rows: answer_id of the Round-1 answer they branch from; else None",
    "d": "peer_* rows: +1 correct, 0 mixed, -1 wrong; else None",
    "rendered_hash": "rendered_hash(messages) of the generation prompt; None for fixed-text anchors",
}
#: Columns ``judge_requests`` cannot do without (the others default to None).
REQUIRED_ANSWER_COLUMNS = ("answer_id", "item_id", "condition", "question", "text")


# ----------------------------------------------------------------------- helpers


def _records(items: Any) -> list[dict[str, Any]]:
    if isinstance(items, pd.DataFrame):
        return items.to_dict("records")
    return [dict(r) for r in items]


def _missing(v: Any) -> bool:
    # Parquet round trips turn None into NaN / pd.NA in object and nullable columns.
    if v is None or v is pd.NA:
        return True
    return isinstance(v, float) and math.isnan(v)


def _opt(v: Any) -> Any:
    return None if _missing(v) else v


def _int_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not float(seed).is_integer():
        raise TypeError(f"seed must be an integer, got {seed!r}")
    return int(seed)


def _sampling(settings: Mapping[str, Any], seed: int, model_cfg: Mapping[str, Any]) -> Sampling:
    """Sampling of a generation or judge request as sent to the model: every value comes
    from the validated config section (``conformity.generation`` or
    ``conformity.judging``), whose schema holds the defaults, conformed to the model's
    capability profile (``llm.capabilities``)."""
    return conform_sampling(
        Sampling(
            temperature=float(settings["temperature"]),
            top_p=float(settings["top_p"]),
            max_tokens=int(settings["max_tokens"]),
            seed=_int_seed(seed),
        ),
        model_cfg,
    )


def answer_id(dataset: str, corpus: str, seed: int | None, generator: str | None, item_id: str,
              condition: str, authority: str | None = None) -> str:
    if condition in ANCHOR_CONDITIONS:
        return f"{dataset}|{ANCHOR_CORPUS}|{item_id}|{condition}"
    parts = [dataset, corpus, str(seed), str(generator), item_id, condition]
    if authority is not None:
        parts.append(authority)
    return "|".join(parts)


def decomposition_authority(item_id: str, seed: int, variants: Sequence[str] = AUTHORITY_VARIANTS) -> str:
    """The one authority variant of an item's decomposition peer arms (module docstring)."""
    ordered = [v for v in AUTHORITY_VARIANTS if v in set(variants)]
    if not ordered:
        raise ValueError(f"no authority variant among {list(variants)}; allowed {AUTHORITY_VARIANTS}")
    digest = hashlib.sha256(f"{_int_seed(seed)}:{item_id}:decomposition-authority".encode()).digest()
    return ordered[int.from_bytes(digest[:8], "big") % len(ordered)]


def _generation_request(ref, messages, sampling, meta) -> LLMRequest:
    messages = tuple(messages)
    meta["rendered_hash"] = prompts.rendered_hash(messages)
    return LLMRequest(model=ref, messages=messages, sampling=sampling, namespace=corpus_namespace(meta["corpus"]),
                      meta=meta)


def _gen_meta(item: Mapping[str, Any], generator: str, condition: str, seed: int, corpus: str,
              template: str, authority: str | None = None) -> dict[str, Any]:
    dataset = str(item["dataset"])
    item_id = str(item["item_id"])
    return {
        "study": STUDY,
        "role": "generator",
        "item_id": item_id,
        "generator": generator,
        "condition": condition,
        "dataset": dataset,
        "seed": seed,
        "corpus": corpus,
        "authority": authority,
        "answer_id": answer_id(dataset, corpus, seed, generator, item_id, condition, authority),
        "question": str(item["question"]),
        "template": template,
        "peer_block": None,
        "content_block": None,
        "round1_answer_id": None,
        "d": None,
    }


def _check_corpus(corpus: str) -> None:
    if corpus not in CORPORA:
        raise ValueError(f"corpus must be one of {CORPORA}, got {corpus!r}")


# ----------------------------------------------------------------------- generation


def round1_requests(items: Any, model_name: str, model_cfg: Mapping[str, Any], settings: Mapping[str, Any],
                    seed: int, corpus: Literal["main", "decomposition"] = "main") -> list[LLMRequest]:
    """One Round-1 request per item: a single user turn with the Round-1 template."""
    _check_corpus(corpus)
    seed = _int_seed(seed)
    ref = model_ref(model_name, model_cfg)
    sampling = _sampling(settings, seed, model_cfg)
    out = []
    for item in _records(items):
        meta = _gen_meta(item, model_name, "round1", seed, corpus, "round1")
        out.append(_generation_request(ref, [("user", prompts.render_round1(meta["question"]))], sampling, meta))
    return out


#: Panel seed of an item list that records none (a plain list of items): the paper's sampling seed.
DEFAULT_PANEL_SEED = 42


def round2_requests(
    items: Any,
    round1_answers: Mapping[str, str | None],
    model_name: str,
    model_cfg: Mapping[str, Any],
    settings: Mapping[str, Any],
    seed: int,
    corpus: Literal["main", "decomposition"] = "main",
    *,
    authority_variants: Sequence[str] = AUTHORITY_VARIANTS,
    n_speakers: int = 6,
    on_missing: Literal["error", "skip"] = "error",
    panel_seed: int | None = None,
    release_blocks: Mapping[str, Any] | None = None,
) -> list[LLMRequest]:
    """Round-2 requests branched from each item's realised Round-1 answer.

    Peer and content blocks do not depend on ``seed`` (the execution label, which
    enters the request key through the sampling seed only): they are drawn from
    ``panel_seed``, by default the item table's recorded ``panel_seed`` (its sample
    seed), else ``DEFAULT_PANEL_SEED``. ``release_blocks`` (item_id -> released
    blocks), by default the item table's ``release_blocks`` when its ``peer_source``
    used the release or its design, replaces the generated panel of those items.

    ``round1_answers`` maps item_id -> the Round-1 text this generator returned in
    this execution, inserted verbatim as the assistant turn. Items without a usable
    Round-1 answer (missing, None or blank) raise unless ``on_missing="skip"``:
    silently dropping them would change which trials a corpus contains.
    Order: per item, no_peer, [content_correct, content_wrong, content_mixed],
    then peer_correct, peer_wrong, peer_mixed (each × its authority variant(s)).
    """
    _check_corpus(corpus)
    seed = _int_seed(seed)
    bad = [v for v in authority_variants if v not in AUTHORITY_VARIANTS]
    if bad or not authority_variants:
        raise ValueError(f"authority_variants must be a non-empty subset of {AUTHORITY_VARIANTS}, got "
                         f"{list(authority_variants)}")
    variants = [v for v in AUTHORITY_VARIANTS if v in set(authority_variants)]
    ref = model_ref(model_name, model_cfg)
    sampling = _sampling(settings, seed, model_cfg)
    attrs = items.attrs if isinstance(items, pd.DataFrame) else {}
    if panel_seed is None:
        panel_seed = attrs.get("panel_seed", DEFAULT_PANEL_SEED)
    panel_seed = _int_seed(panel_seed)
    # Released blocks, or blocks built with the release's design (conformity.release_design).
    if release_blocks is None and (attrs.get("peer_source") or {}).get("used") in ("release", "release design"):
        release_blocks = attrs.get("release_blocks")
    release_blocks = release_blocks or {}
    if release_blocks and n_speakers != 6:
        raise ValueError(f"released peer blocks have 6 speakers; n_speakers={n_speakers} cannot use them")
    records = _records(items)
    absent = [str(r["item_id"]) for r in records
              if _missing(round1_answers.get(str(r["item_id"]))) or not str(round1_answers[str(r["item_id"])]).strip()]
    if absent and on_missing == "error":
        shown = ", ".join(absent[:5]) + (f" ... ({len(absent)} in all)" if len(absent) > 5 else "")
        raise ValueError(f"no usable Round-1 answer of {model_name!r} (seed {seed}) for item(s) {shown}; "
                         "pass on_missing='skip' to leave those trials out")
    skip = set(absent)

    out: list[LLMRequest] = []
    for item in records:
        item_id = str(item["item_id"])
        if item_id in skip:
            continue
        question = str(item["question"])
        r1_text = str(round1_answers[item_id])
        history = [("user", prompts.render_round1(question)), ("assistant", r1_text)]
        r1_id = answer_id(str(item["dataset"]), corpus, seed, model_name, item_id, "round1")

        def add(condition: str, template: str, prompt: str, authority: str | None = None, **extra: Any) -> None:
            meta = _gen_meta(item, model_name, condition, seed, corpus, template, authority)
            meta.update(round1_answer_id=r1_id, **extra)
            out.append(_generation_request(ref, [*history, ("user", prompt)], sampling, meta))

        add("no_peer", "no_peer_round2", prompts.render_no_peer(question))
        if corpus == "decomposition":
            for pol in POLARITIES:
                # In the layout of this item's peer blocks (peers.content_block).
                block = content_block(item, pol, panel_seed, release=release_blocks.get(item_id)).text
                add(f"content_{pol}", "content_round2", prompts.render_content(question, block), content_block=block)
            arm_variants = [decomposition_authority(item_id, seed, variants)]
        else:
            arm_variants = variants
        for pol in POLARITIES:
            for authority in arm_variants:
                block = peer_block(item, pol, authority, panel_seed, n_speakers,
                                   release=release_blocks.get(item_id)).text
                add(f"peer_{pol}", "peer_round2", prompts.render_peer(question, block), authority,
                    peer_block=block, d=D_BY_POLARITY[pol])
    return out


def anchor_texts(items: Any) -> pd.DataFrame:
    """The fixed anchor answers as rows of the answers table (``ANSWER_COLUMNS``).

    anchor_correct = the gold answer text, anchor_incorrect = the item's wrong
    attractor (the same text every wrong-endorsing condition shows). Both carry the
    gold answer as ``reference_answer`` for the reference-augmented pass.
    """
    rows = []
    for item in _records(items):
        dataset, item_id = str(item["dataset"]), str(item["item_id"])
        for condition, text in (("anchor_correct", item["gold_answer"]), ("anchor_incorrect", item["wrong_attractor"])):
            rows.append(_answer_row(
                answer_id=answer_id(dataset, ANCHOR_CORPUS, None, None, item_id, condition),
                dataset=dataset, corpus=ANCHOR_CORPUS, item_id=item_id, condition=condition,
                question=str(item["question"]), text=str(text), reference_answer=str(item["gold_answer"]),
            ))
    return pd.DataFrame(rows, columns=list(ANSWER_COLUMNS))


def anchor_requests(items: Any, model_name: str, model_cfg: Mapping[str, Any], settings: Mapping[str, Any],
                    seed: int) -> list[LLMRequest]:
    """Anchor "generation" for the synthetic validation pipeline only.

    The synthetic judge reads an answer's latent quality from a ``[synthetic q=…]``
    tag, which the fixed anchor texts lack; the synthetic generator answers
    ``anchor_correct``/``anchor_incorrect`` with exactly ±θ_a. Feed the replies
    through ``answers_frame`` and judge them like ``anchor_texts`` rows. A real
    model must never write anchors (they are the gold and attractor texts), hence
    the guard.
    """
    if model_cfg.get("backend") != "synthetic":
        raise ValueError(f"anchor_requests is for the synthetic backend only ({model_name!r} is "
                         f"{model_cfg.get('backend')!r}); real runs judge anchor_texts(items)")
    seed = _int_seed(seed)
    ref = model_ref(model_name, model_cfg)
    sampling = _sampling(settings, seed, model_cfg)
    out = []
    for item in _records(items):
        for condition in ANCHOR_CONDITIONS:
            meta = _gen_meta(item, model_name, condition, seed, ANCHOR_CORPUS, "round1")
            meta.update(seed=None, reference_answer=str(item["gold_answer"]))
            # Not the Round-1 prompt: the store is keyed on the request, and an
            # anchor request identical to Round 1 would be served Round 1's answer.
            prompt = f"Write the {condition.replace('_', ' ')} answer to this question.\n\n{meta['question']}"
            out.append(_generation_request(ref, [("user", prompt)], sampling, meta))
    return out


def _answer_row(**values: Any) -> dict[str, Any]:
    return {col: values.get(col) for col in ANSWER_COLUMNS}


def answers_frame(requests: Iterable[LLMRequest], texts: Iterable[str | None]) -> pd.DataFrame:
    """The answers table (``ANSWER_COLUMNS``) from generation requests and their reply texts.

    Texts are kept verbatim; failed generations keep ``text=None`` so they stay
    visible (drop them before ``judge_requests``). Anchor rows get
    ``generator=None``: an anchor is a fixed reference point, never a judge's own
    answer, so self-rating exclusion must not remove it (seed 002 Table 17 keeps
    anchors).
    """
    rows = []
    for req, text in zip(requests, texts, strict=True):
        m = req.meta
        if m.get("study") != STUDY or m.get("role") != "generator":
            raise ValueError(f"not a Study C generation request: meta {m!r}")
        anchor = m["condition"] in ANCHOR_CONDITIONS
        values = {k: m.get(k) for k in ANSWER_COLUMNS if k in m}
        values.update(
            generator=None if anchor else m["generator"],
            seed=None if anchor else m.get("seed"),
            text=None if _missing(text) else text,
        )
        rows.append(_answer_row(**values))
    return pd.DataFrame(rows, columns=list(ANSWER_COLUMNS))


# -------------------------------------------------------------------------- judging


#: ``conformity.judging.decoding`` values.
JUDGE_DECODINGS = ("free", "constrained")


def _rating_schema(decoding: str) -> dict[str, Any] | None:
    if decoding not in JUDGE_DECODINGS:
        raise ValueError(f"judging.decoding must be one of {JUDGE_DECODINGS}, got {decoding!r}")
    return RATING_SCHEMA if decoding == "constrained" else None


def judge_decoding(req: LLMRequest) -> str:
    """How a judge request was decoded, read from what was sent (not from the config)."""
    return "free" if req.output_schema is None else "constrained"


def judge_requests(answers_df: pd.DataFrame, judge_name: str, judge_cfg: Mapping[str, Any],
                   settings: Mapping[str, Any], seed: int) -> list[LLMRequest]:
    """Judge requests for every row of ``answers_df`` (columns: ``ANSWER_COLUMNS``).

    * every non-anchor answer: blind (``BLIND_JUDGE``);
    * peer_* answers additionally: informed (``INFORMED_JUDGE`` with the row's
      ``peer_block``, the exact block its generator saw), ``d`` from the condition;
    * anchors: reference-augmented (``ANCHOR_REFERENCE_JUDGE`` with
      ``reference_answer``) and reference-free (``BLIND_JUDGE`` unchanged), both
      ``pass="blind"``.

    ``seed`` is the judge's sampling seed for all requests. Rows must have a
    non-empty ``text`` (drop failed generations first). Order: per row, blind
    (or augmented, free) then informed.
    """
    missing_cols = [c for c in REQUIRED_ANSWER_COLUMNS if c not in answers_df.columns]
    if missing_cols:
        raise ValueError(f"answers_df lacks column(s) {missing_cols}; see ANSWER_COLUMNS")
    dup = answers_df.loc[answers_df["answer_id"].duplicated(), "answer_id"].tolist()
    if dup:
        raise ValueError(f"duplicate answer_id(s) {dup[:5]}: one row per answer")
    seed = _int_seed(seed)
    ref = model_ref(judge_name, judge_cfg)
    sampling = _sampling(settings, seed, judge_cfg)
    output_schema = _rating_schema(settings["decoding"])

    rows = [{c: _opt(r.get(c)) for c in ANSWER_COLUMNS} for r in answers_df.to_dict("records")]
    problems = []
    for r in rows:
        cond = r["condition"]
        if not isinstance(r["text"], str) or not r["text"].strip():
            problems.append(f"{r['answer_id']}: no answer text")
        elif cond in D_BY_CONDITION and not isinstance(r["peer_block"], str):
            problems.append(f"{r['answer_id']}: peer arm without its peer_block")
        elif cond in ANCHOR_CONDITIONS and not isinstance(r["reference_answer"], str):
            problems.append(f"{r['answer_id']}: anchor without reference_answer")
    if problems:
        raise ValueError(f"{len(problems)} answer row(s) cannot be judged:\n- " + "\n- ".join(problems[:10]))

    out: list[LLMRequest] = []
    for r in rows:
        cond = r["condition"]
        anchor = cond in ANCHOR_CONDITIONS
        base = {
            "study": STUDY,
            "role": "judge",
            "judge": judge_name,
            "item_id": r["item_id"],
            "condition": cond,
            "dataset": r["dataset"],
            "seed": None if r["seed"] is None else int(r["seed"]),
            "corpus": r["corpus"],
            "authority": r["authority"],
            "answer_id": r["answer_id"],
        }
        if not anchor and r["generator"] is not None:
            # Only real generators: a judge's "self-rating" of an anchor is not one.
            base["generator"] = r["generator"]

        def add(prompt: str, template: str, **extra: Any) -> None:
            out.append(LLMRequest(model=ref, messages=(("user", prompt),), sampling=sampling,
                                  output_schema=output_schema, namespace=corpus_namespace(r["corpus"]),
                                  meta={**base, "template": template, **extra}))

        q, text = r["question"], r["text"]
        if anchor:
            add(prompts.render_anchor_reference_judge(q, r["reference_answer"], text), "anchor_reference_judge",
                **{"pass": "blind", "reference": "augmented"})
            add(prompts.render_blind_judge(q, text), "blind_judge", **{"pass": "blind", "reference": "free"})
            continue
        add(prompts.render_blind_judge(q, text), "blind_judge", **{"pass": "blind"})
        if cond in D_BY_CONDITION:
            add(prompts.render_informed_judge(q, r["peer_block"], text), "informed_judge",
                **{"pass": "informed", "d": D_BY_CONDITION[cond]})
    return out
