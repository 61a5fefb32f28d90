"""What a config's model calls will cost, and ``run.budget_usd`` at a run's start (docs/costs.md).

The top of the DAG helpers, like ``context_effects.targets`` (docs/architecture.md, "DAG
helpers"): it asks each enabled study through its face (``context_effects.studies``)
for its item tables, its requests, counted exactly with the functions the study's
request rules call, from the item tables the DAG builds without calling any model
(:func:`design_counts`), and its sizes beside the seed paper's (:func:`seed_sizes`). What the counts cost, from prices, a pilot's ledgers and a GPU
throughput, and how the estimate is printed, are the LLM layer's
(``context_effects.llm.estimate``, whose docstring says how each number is made).

``snakemake estimate`` (rule ``estimate``) prints the estimate; so does
``python -m context_effects.costs --configfile FILE`` once the item tables exist. The
Snakefile's ``onstart`` refuses a run over its budget (:func:`require_within_budget`);
answering jobs stop at it while running (``llm.ledger.RunBudget``).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from context_effects.llm.estimate import (
    LEDGERS,
    BudgetExceeded,
    Estimate,
    SizeRow,
    StageCount,
    estimate_counts,
    format_estimate,
)
from context_effects.studies import faces

Config = Mapping[str, Any]


# --------------------------------------------------------------------------- the design's requests


def estimate_inputs(config: Config) -> list[str]:
    """The item tables the estimate builds requests from (built by the DAG, no model call)."""
    return [path for face in faces(config) for path in face.item_inputs(config)]


def design_counts(config: Config, workdir: str | Path = ".") -> list[StageCount]:
    """Every (study, stage, model) of the config with its requests, built from the item tables."""
    root = Path(workdir)
    missing = [f for f in estimate_inputs(config) if not (root / f).exists()]
    if missing:
        raise FileNotFoundError(
            f"the estimate builds its requests from the item tables, and {len(missing)} of them are not built yet "
            f"({', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}): run `snakemake estimate` "
            "(with your --configfile), which builds them without calling any model"
        )
    return [count for face in faces(config) for count in face.design_counts(config, root)]


# --------------------------------------------------------------------------- the estimate


def estimate(config: Config, workdir: str | Path = ".", pilot: str | Path | None = None,
             tokens_per_s: float | None = None) -> Estimate:
    """The estimate of ``config``'s model calls (``llm.estimate.estimate_counts`` on the
    design's counts). ``pilot``: a ledgers directory (a pilot run's ``results/ledgers``);
    ``tokens_per_s``: a GPU throughput that replaces both the pilot's and the assumption's."""
    counts = design_counts(config, workdir)
    est = estimate_counts(config, counts, pilot, tokens_per_s)
    est.sizes = seed_sizes(config, counts, est, workdir)
    return est


def seed_sizes(config: Config, counts: Sequence[StageCount], est: Estimate,
               workdir: str | Path = ".") -> list[SizeRow]:
    """The config's sizes beside every size the seed papers print, study by study (each
    study's face; docs/costs.md, "The paper's size")."""
    return [row for face in faces(config) for row in face.seed_sizes(config, counts, est, Path(workdir))]


# --------------------------------------------------------------------------- the run's budget


def require_within_budget(config: Config, workflow: Any = None, workdir: str | Path = ".") -> Estimate | None:
    """Refuse to start a run whose estimate exceeds ``run.budget_usd`` (or cannot be known).

    Called from the Snakefile's ``onstart``: a real run only, with the DAG built, before any
    job. Nothing to check without a budget, on replay, or when no answering job of a billed
    model is about to run. The estimate needs the item tables: when they are still to be
    built (or rebuilt) by this run, the run is refused too, saying to run ``snakemake
    estimate`` first, which builds them without calling any model. The run's own ledgers
    (``results/ledgers``), where a pilot or an earlier attempt left them, give measured
    output lengths.
    """
    from context_effects.llm.pricing import BILLED

    budget = config["run"].get("budget_usd")
    if budget is None or config["run"]["replay"]:
        return None
    if workflow is not None:
        jobs = list(workflow.dag.needrun_jobs())
        billed = {str(j.wildcards_dict["model"]) for j in jobs
                  if j.rule.name.startswith("answer_requests") and "model" in j.wildcards_dict}
        billed = {m for m in billed if m in config["models"] and config["models"][m]["backend"] in BILLED}
        if not billed:
            return None
        inputs = set(estimate_inputs(config))
        stale = sorted({str(f) for j in jobs for f in j.output if str(f) in inputs})
        if stale:
            raise BudgetExceeded(
                f"run.budget_usd = {budget:,.2f} is set, and the cost estimate it is checked against needs item "
                f"tables this run has yet to build ({', '.join(stale[:3])}{' ...' if len(stale) > 3 else ''}). "
                "Nothing has been started. Run `snakemake estimate` (with the same --configfile) first: it builds "
                "them without calling any model and prints the estimate; then start the run again."
            )
    est = estimate(config, workdir, pilot=Path(workdir) / LEDGERS)
    if est.unpriced:
        raise BudgetExceeded(
            f"run.budget_usd = {budget:,.2f} cannot be checked: hosted model(s) {', '.join(est.unpriced)} have no "
            "known price (llm/costs.yaml lists none for their model id). Nothing has been started. Set "
            "models.<name>.price (USD per million tokens) for each, or set run.budget_usd: null.\n\n"
            + format_estimate(est)
        )
    if est.cost_usd > budget:
        raise BudgetExceeded(
            f"the run's cost estimate, ${est.cost_usd:,.2f}, exceeds run.budget_usd = ${budget:,.2f}. Nothing has been "
            "started or paid. Raise run.budget_usd, or shrink the design (fewer items per dataset, fewer hosted "
            "models, seeds or samples); a pilot's ledgers in results/ledgers replace the max_tokens bounds by "
            "measured output lengths (docs/costs.md).\n\n" + format_estimate(est)
        )
    import logging

    # Formatted here: Snakemake's handlers print ``record.msg`` without its args.
    logging.getLogger("snakemake.logging").info(
        f"Cost estimate ${est.cost_usd:,.2f} is within run.budget_usd = ${budget:,.2f}; answering jobs stop "
        "sending if the run's spending reaches it."
    )
    return est


# --------------------------------------------------------------------------- command line


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m context_effects.costs --configfile FILE``: print a config's cost estimate."""
    from context_effects.config import ConfigError, check_files

    ap = argparse.ArgumentParser(prog="python -m context_effects.costs",
                                 description="Print what a config's model calls will cost, before any is paid.")
    ap.add_argument("--configfile", nargs="+", default=["config/config.yaml"],
                    help="config file(s), as given to snakemake (default: the paper config)")
    ap.add_argument("--directory", default=".", help="the run's working directory (where results/ is)")
    ap.add_argument("--pilot", help="a pilot run's ledgers directory (e.g. pilot/results/ledgers): measured "
                                    "output lengths and GPU throughput; default: the run's own results/ledgers, "
                                    "where an earlier run left any")
    ap.add_argument("--no-pilot", action="store_true", help="ignore every ledger: max_tokens bounds only")
    ap.add_argument("--tokens-per-s", type=float, help="GPU throughput (prompt + output tokens/s) to use instead")
    ap.add_argument("--json", help="also write the estimate as JSON to this file")
    args = ap.parse_args(argv)
    try:
        config = check_files(args.configfile, workdir=args.directory)
        pilot = None if args.no_pilot else args.pilot or Path(args.directory) / LEDGERS
        est = estimate(config, args.directory, pilot=pilot, tokens_per_s=args.tokens_per_s)
    except (ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    sys.stdout.write(format_estimate(est))
    if args.json:
        Path(args.json).write_text(json.dumps(est.to_dict(), indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
