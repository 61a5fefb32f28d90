"""Study A's face (``context_effects.studies``): its item tables, every model's requests,
and its sizes beside seed 000's (the abstract's calls and the asymmetry test's pairs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from context_effects.llm.estimate import Estimate, SizeRow, StageCount
from context_effects.studies import Headline, StudyFace

Config = Mapping[str, Any]


def enabled(config: Config) -> bool:
    from context_effects.amel import dag as amel_dag

    return amel_dag.enabled(config)


def item_inputs(config: Config) -> list[str]:
    from context_effects.amel import dag as amel_dag

    return amel_dag.domain_item_tables(config)


def design_counts(config: Config, root: Path) -> list[StageCount]:
    from context_effects import dag
    from context_effects.amel import dag as amel_dag
    from context_effects.amel.items import read_domain_items
    from context_effects.amel.requests import domain_requests

    tables = [read_domain_items(root / p) for p in amel_dag.domain_item_tables(config)]
    out = []
    for model in amel_dag.models(config):
        row = StageCount("amel", "judge", model)
        cfg = dag.model_settings(config, model)
        logprobs = amel_dag.logprobs_available(config, model)
        for items in tables:
            row.add(domain_requests(items, model, cfg, amel_dag.design_settings(config), logprobs=logprobs))
        out.append(row)
    return out


def seed_sizes(config: Config, counts: Sequence[StageCount], est: Estimate, root: Path) -> list[SizeRow]:
    """Seed 000's calls to its 11 models and its asymmetry test's item-model pairs (the
    extra models' calls shown apart)."""
    from context_effects.amel import dag as amel_dag
    from context_effects.amel.items import read_domain_items

    roster = set(amel_dag.roster(config))
    calls = sum(c.requests for c in counts if c.study == "amel" and c.model in roster)
    extra = {c.model: c.requests for c in counts if c.study == "amel" and c.model not in roster}
    items = sum(int(read_domain_items(root / p)["is_test"].sum())
                for p in amel_dag.domain_item_tables(config))
    rows = [SizeRow(f"Study A calls to the {len(roster)} roster models"
                    + (f" (extra models apart: {', '.join(f'{m} {n:,}' for m, n in sorted(extra.items()))})"
                       if extra else ""),
                    "75,898", 75898, calls, "seed 000, abstract", "amel-calls-per-cell"),
            SizeRow("Study A item-model pairs (the asymmetry test's n)", "2,481", 2481,
                    items * len(roster), "seed 000, abstract", "amel-test-items")]
    return rows


def headlines(config: Config, model: str) -> list[Headline]:
    """The model as the answering model, in the primary analysis (one call per cell):
    its overall bias (Cohen's d), the negativity asymmetry, and d in each baseline-entropy
    stratum. The seed prints d for several of its models, the others over its roster."""
    from context_effects.amel.design import PRIMARY

    if not (enabled(config) and model in config["amel"]["models"]):
        return []
    fixed = (("method", PRIMARY), ("scope", "model"))
    pooled = (("scope", "overall"), ("group", "all"))
    d = "d @ d_ci_low, d_ci_high"
    bias = ("Cohen's d of the bias score, the change in P(the verdict against the history's): < 0 = the "
            "model moves toward the verdicts of the history (the seed's models do)")
    out = [
        Headline("amel", "d", "bias, all items, Cohen's d", "answering model", "amel/effects", fixed, "group", model,
                 d, bias, pooled),
        Headline("amel", "asymmetry", "negativity asymmetry |BS(no)| / |BS(yes)|", "answering model",
                 "amel/asymmetry", fixed, "group", model, "ratio_abs @ ratio_abs_ci_low, ratio_abs_ci_high",
                 "> 1: a history of No verdicts moves the model more than one of Yes verdicts", pooled),
    ]
    for stratum in ("uncertain", "deterministic"):
        out.append(Headline("amel", f"d_{stratum}", f"bias, {stratum} baseline answer, Cohen's d", "answering model",
                            "amel/entropy", (*fixed, ("stratum", stratum)), "group", model, d, bias, pooled))
    return out


FACE = StudyFace("amel", enabled, item_inputs, design_counts, seed_sizes, headlines)
