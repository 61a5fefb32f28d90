"""Every reader of a fit's files checks that they were made with the settings the config
gives now, and stops when they were not.

A fit's folder (``results/conformity/fits/<dataset>/<variant>/``) is written by one
``conformity_fit`` job from three params: the fit's spec, the sampler settings and the
model families (``measurement.pipeline.made_with``). Snakemake reruns a fit whose params
changed only when it holds the fit's metadata. A job that finished on a cluster node but
was not yet polled when the run was interrupted leaves its files without that metadata;
the next run keeps them whatever the settings are now (no rerun trigger sees a file
without metadata), and a table built from them prints the old settings' numbers.
So each file of a fit carries the record of what it was made with
(``measurement.pipeline.RECORD_KEY``), and each reader compares that record with the
config's (``check_fit_folder``, ``check_summary``, ``check_quality``) and raises
``StaleFitError`` naming the file, every setting that differs (recorded against config)
and the fix.

Only settings that change a fit's numbers count (``numbers_key``): a thread count or
where the chains run changes no number, so changing it refuses nothing (and reruns no
table: the tables' params hold this key, not the whole record).

Readers: the model-based tables and figures (``measurement.report``,
``measurement.figures``), the per-answer quality table and Table 15 (quality.parquet),
the synthetic recovery table (``context_effects.recovery``). The paper's numbers and the
run and reproduction reports read those tables, which are rebuilt whenever the key of a
fit they read changes, so they never see a fit the tables refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from context_effects.measurement.pipeline import (
    RECORD_KEY,
    RECORD_SHA256_COLUMN,
    SAMPLER_ADDED_DEFAULTS,
    SPEC_ADDED_DEFAULTS,
    FitSpec,
    made_with,
    record_sha256,
)

#: Sampler settings that change no number of a fit, and so never refuse one:
#: ``chain_method`` — sequential and parallel chains run the same kernel from the same
#: per-chain keys (numpyro splits the seed's key into one per chain either way, and
#: ``fit_nuts`` falls back to sequential chains where it lacks devices); only where the
#: chains run differs. ``theta_anchor`` — the anchor scale a fit uses is its spec's
#: (``FitSpec.theta_anchor``, compared with the spec): a ``theta-<θ>`` refit keeps its own
#: scale when ``fit.theta_anchor`` changes, and a main fit's spec changes with it.
#: Thread counts are no setting of a fit at all (the rule's ``threads``).
NOT_NUMBERS = ("chain_method", "theta_anchor")
#: Sampler settings only one method reads (``pipeline.run_fit``): NUTS never reads the SVI
#: keys (its SVI start runs ``fit_nuts``'s own step count), SVI never the NUTS ones (nor
#: which sampler runs NUTS).
METHOD_ONLY = {"chains": "nuts", "warmup": "nuts", "target_accept": "nuts", "max_tree_depth": "nuts",
               "init": "nuts", "sampler": "nuts", "warmup_windows": "nuts", "svi_steps": "svi", "svi_guide": "svi"}
#: Where each part of a record comes from, as a differing setting is named.
_SOURCES = {"spec": "fit plan ({})", "settings": "conformity.fit.{}", "families": "models.{}.family"}


class StaleFitError(RuntimeError):
    """A fit's file was made with other settings than the config gives now (or records none)."""


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, sort_keys=True))


def numbers_key(record: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a fit's record that decides its numbers: the whole spec; the sampler
    settings its method reads, less ``NOT_NUMBERS``; the model families only where the fit
    drops self-ratings (the only use ``prepare_data`` makes of them). Defaults of keys added
    after fits existed are filled in, so a record without one equals a record with it.
    ``numbers_key(numbers_key(r)) == numbers_key(r)``."""
    spec = {**SPEC_ADDED_DEFAULTS, **record["spec"]}
    settings = {**SAMPLER_ADDED_DEFAULTS, **record["settings"]}
    method = settings.get("method", "nuts")
    kept = {k: v for k, v in settings.items() if k not in NOT_NUMBERS and METHOD_ONLY.get(k, method) == method}
    families = dict(record.get("families") or {}) if spec.get("exclude_self") else {}
    return _json({"spec": spec, "settings": kept, "families": families})


def fit_name(spec: FitSpec | Mapping[str, Any]) -> str:
    """``<dataset>/<variant>``: how tables' settings key their fits."""
    d = spec.as_dict() if isinstance(spec, FitSpec) else spec
    return f"{d['dataset']}/{d['variant']}"


def fit_keys(config: Mapping[str, Any], specs: Sequence[FitSpec]) -> dict[str, dict[str, Any]]:
    """``fit_name`` → ``numbers_key`` of the record each fit must carry under ``config``:
    what a reader's rule takes as a param (and compares with the files it reads)."""
    return {fit_name(s): numbers_key(made_with(config, s)) for s in specs}


_MISSING = object()


def differences(recorded: Mapping[str, Any], expected: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(setting, recorded value, config value) of every setting that changes the numbers and
    differs; a value one side lacks is ``None`` there."""
    r, e = numbers_key(recorded), numbers_key(expected)
    out = []
    for part, source in _SOURCES.items():
        for key in sorted(set(r[part]) | set(e[part])):
            rv, ev = r[part].get(key, _MISSING), e[part].get(key, _MISSING)
            if rv != ev:
                out.append((source.format(key), None if rv is _MISSING else rv, None if ev is _MISSING else ev))
    return out


def _fix(name: str) -> str:
    folder = f"results/conformity/fits/{name}"
    return (f"Fix: delete {folder}/ and run again, or rerun it with `--forcerun {folder}/summary.csv` "
            "(every fit: `--forcerun conformity_fit`). Snakemake's rerun triggers do not catch this: a fit "
            "whose job ended after the run that started it had stopped (a cluster job finishing unpolled "
            "after Ctrl-C) has files without Snakemake's metadata, and --rerun-triggers compares only "
            "what that metadata records.")


def check_record(recorded: Mapping[str, Any] | None, expected: Mapping[str, Any], path: str | Path) -> None:
    """Raise ``StaleFitError`` when ``recorded`` (the record ``path`` carries, None where it
    carries none) differs from ``expected`` in a setting that changes the numbers."""
    name = fit_name(expected["spec"])
    if recorded is None:
        raise StaleFitError(
            f"{path} carries no record of the settings fit {name} was made with (written before fits "
            f"recorded them, or not by the conformity_fit rule), so nothing shows it matches this config. "
            + _fix(name))
    diffs = differences(recorded, expected)
    if diffs:
        lines = "\n".join(f"  {what}: recorded {json.dumps(rv)}, config {json.dumps(ev)}" for what, rv, ev in diffs)
        raise StaleFitError(
            f"{path} was made with other settings than this config gives fit {name}; its numbers are not "
            f"this config's:\n{lines}\n" + _fix(name))


def summary_record_sha256(summary: pd.DataFrame) -> str | None:
    """The record hash a summary.csv carries (``RECORD_SHA256_COLUMN``), None where none."""
    if RECORD_SHA256_COLUMN not in summary.columns or summary.empty:
        return None
    values = set(summary[RECORD_SHA256_COLUMN].dropna().astype(str))
    return values.pop() if len(values) == 1 else None


def check_fit_folder(folder: str | Path, expected: Mapping[str, Any], *, summary: pd.DataFrame | None = None,
                     diag: Mapping[str, Any] | None = None) -> None:
    """summary.csv and diagnostics.json of one fit (read here unless given) against the
    config's key: the diagnostics' record must match it, and the summary must carry that
    same record's hash (else the two files come from different jobs)."""
    folder = Path(folder)
    if diag is None:
        diag = json.loads((folder / "diagnostics.json").read_text(encoding="utf-8"))
    record = diag.get(RECORD_KEY)
    check_record(record, expected, folder / "diagnostics.json")
    if summary is None:
        summary = pd.read_csv(folder / "summary.csv")
    sha = summary_record_sha256(summary)
    if sha != record_sha256(record):
        name = fit_name(expected["spec"])
        what = ("carries no record hash" if sha is None
                else f"carries record hash {sha[:12]}..., diagnostics.json's record hashes to "
                     f"{record_sha256(record)[:12]}...")
        raise StaleFitError(f"{folder / 'summary.csv'} {what}: the fit's summary and diagnostics come from "
                            f"different runs of fit {name}. " + _fix(name))


def check_summary(path: str | Path, expected: Mapping[str, Any], summary: pd.DataFrame | None = None) -> None:
    """One fit's summary.csv against the config's key, through the diagnostics.json beside
    it (written by the same job, which holds the full record)."""
    check_fit_folder(Path(path).parent, expected, summary=summary)


def quality_record(path: str | Path) -> dict[str, Any] | None:
    """The record a quality.parquet carries in its schema metadata, None where none."""
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(RECORD_KEY.encode())
    return None if raw is None else json.loads(raw)


def check_quality(path: str | Path, expected: Mapping[str, Any]) -> dict[str, Any]:
    """A quality table (a fit's quality.parquet, or the copy the quality rule writes) against
    the config's key; returns the record it carries."""
    record = quality_record(path)
    check_record(record, expected, path)
    return record


def expected_for(keys: Mapping[str, Mapping[str, Any]], spec: FitSpec | Mapping[str, Any]) -> Mapping[str, Any]:
    """The key of ``spec``'s fit among a reader's ``keys`` (``fit_keys``)."""
    name = fit_name(spec)
    try:
        return keys[name]
    except KeyError as exc:
        raise KeyError(f"no recorded settings of fit {name} among the reader's settings (fit_keys)") from exc

