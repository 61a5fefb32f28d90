"""What a config's model calls will cost, and ``run.budget_usd`` at a run's start (docs/costs.md).

The top of the DAG helpers, like ``context_effects.targets`` (docs/architecture.md, "DAG
helpers"): to count every stage's requests exactly it builds them with the functions
each study's request rules call (``conformity.requests``, ``amel.requests``,
``anchoring.requests``), from the item tables the DAG builds without calling any model
(:func:`design_counts`). What the counts cost, from prices, a pilot's ledgers and a GPU
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
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from context_effects.llm.estimate import (
    LEDGERS,
    STAND_IN,
    BudgetExceeded,
    Estimate,
    SizeRow,
    StageCount,
    estimate_counts,
    format_estimate,
)

Config = Mapping[str, Any]


# --------------------------------------------------------------------------- the design's requests


def estimate_inputs(config: Config) -> list[str]:
    """The item tables the estimate builds requests from (built by the DAG, no model call)."""
    from context_effects import dag
    from context_effects.amel import dag as amel_dag
    from context_effects.anchoring import dag as anchoring_dag

    files: list[str] = []
    if config["conformity"]["enabled"]:
        files += dag.items_for(config["conformity"]["datasets"])
    if amel_dag.enabled(config):
        files += amel_dag.domain_item_tables(config)
    if anchoring_dag.enabled(config):
        files.append(anchoring_dag.TASKS)
    return files


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
    counts: list[StageCount] = []
    if config["conformity"]["enabled"]:
        counts += _conformity(config, root)
    from context_effects.amel import dag as amel_dag
    from context_effects.anchoring import dag as anchoring_dag

    if amel_dag.enabled(config):
        counts += _amel(config, root)
    if anchoring_dag.enabled(config):
        counts += _anchoring(config, root)
    return counts


def _conformity(config: Config, root: Path) -> list[StageCount]:
    """Study C: Round 1 and Round 2 of every execution and generator (the ledger stages
    ``<corpus>-round<n>-s<seed>``), a synthetic run's anchors, and judging."""
    import pandas as pd

    from context_effects import dag
    from context_effects.conformity import dag as cdag
    from context_effects.conformity.requests import (
        DEFAULT_PANEL_SEED,
        anchor_requests,
        anchor_texts,
        answers_frame,
        round1_requests,
        round2_requests,
    )
    from context_effects.conformity.stages import item_block
    from context_effects.datasets import read_items

    c = config["conformity"]
    generation = c["generation"]
    peers = c["peers"]
    counts: dict[tuple[str, str], StageCount] = {}

    def stage(name: str, model: str) -> StageCount:
        return counts.setdefault((name, model), StageCount("conformity", name, model))

    # Items as the generation shards cut them (the same blocks at every stage).
    gen_blocks: dict[str, list[int]] = defaultdict(list)
    for blocks in cdag.generation_shards(config).values():
        for d, i in blocks:
            gen_blocks[d].append(i)
    synthetic_anchors = cdag.synthetic_anchors(config)
    for dataset in cdag.datasets(config):
        table = read_items(root / dag.items_path(dataset))
        attrs = dict(table.attrs)
        # pandas deep-copies a frame's attrs (here every released peer block) at each
        # column access; the builders get plain records and Round 2's two attrs explicitly,
        # read as round2_requests reads them from the item table.
        table.attrs = {}
        items = pd.concat([item_block(table, i, generation["shard_size"]) for i in sorted(gen_blocks[dataset])])
        records = items.to_dict("records")
        panel_seed = attrs.get("panel_seed", DEFAULT_PANEL_SEED)
        release = None
        if (attrs.get("peer_source") or {}).get("used") in ("release", "release design"):
            release = attrs.get("release_blocks")
        generated = []
        for corpus, seed in cdag.executions(config):
            long = "decomposition" if corpus == "decomp" else "main"
            r1_stage, r2_stage = f"{corpus}-round1-s{seed}", f"{corpus}-round2-s{seed}"
            for gen in cdag.generators(config):
                cfg = dag.model_settings(config, gen)
                r1 = round1_requests(records, gen, cfg, generation, seed, corpus=long)
                r2 = round2_requests(
                    records, {str(r["item_id"]): STAND_IN for r in records}, gen, cfg, generation, seed, corpus=long,
                    authority_variants=tuple(peers["authority_variants"]), n_speakers=int(peers["n_speakers"]),
                    panel_seed=panel_seed, release_blocks=release or {},
                )
                stage(r1_stage, gen).add(r1)
                stage(r2_stage, gen).add(r2, {("conformity", r1_stage, gen): len(r2)})
                generated += r1 + r2
        if synthetic_anchors:
            gen = cdag.anchor_generator(config)[0]
            stage("anchors", gen).add(anchor_requests(records, gen, dag.model_settings(config, gen), generation,
                                                      config["sampling"]["seed"]))
        # Object columns both: the answers' and the anchors' all-None columns stay None.
        answers = pd.concat([answers_frame(generated, [STAND_IN] * len(generated)).astype(object),
                             anchor_texts(records).astype(object)], ignore_index=True)
        _judging(config, dataset, table, answers, stage)
    return list(counts.values())


def _judging(config: Config, dataset: str, table: Any, answers: Any, stage: Callable[[str, str], StageCount]) -> None:
    """Judge requests of one dataset (``answers``: its answers table), for every judge that rates it.

    The prompts do not depend on the judge (only its model and sampling do), so they are
    built once per set of judged answers and each judge's ``max_tokens`` is read from one
    request built for it: the paper config's judge stage is over a million requests.
    """
    from context_effects import dag
    from context_effects.conformity import dag as cdag
    from context_effects.conformity.judging import judged_answers
    from context_effects.conformity.requests import judge_requests

    c = config["conformity"]
    judging, seed = c["judging"], config["sampling"]["seed"]
    built: dict[tuple[bool, tuple[str, ...]], tuple[StageCount, Any]] = {}
    item_ids = [str(x) for x in table["item_id"]]
    for judge in cdag.judges(config, dataset):
        hosted = cdag.is_hosted_judge(config, judge)
        k = cdag.judge_block(config, judge)["items_per_shard"]
        # The items of this judge's shards, cut as conformity.judging.write_judge_shard cuts them.
        index = sorted(i for blocks in cdag.judge_shard_blocks(config, judge).values() for d, i in blocks
                       if d == dataset)
        ids = tuple(x for i in index for x in item_ids[i * k:(i + 1) * k])
        key = (hosted, ids)
        cfg = dag.model_settings(config, judge)
        if key not in built:
            sel = judged_answers(answers, list(ids), hosted, c["primary_seed"])
            template = StageCount("conformity", "judge", judge)
            for start in range(0, len(sel), 20_000):
                part = sel.iloc[start:start + 20_000]
                requests = judge_requests(part, judge, cfg, judging, seed)
                template.add(requests, _carried(requests))
            built[key] = (template, sel)
        template, sel = built[key]
        row = stage("judge", judge)
        row.requests += template.requests
        row.prompt_chars += template.prompt_chars
        row.carries.update(template.carries)
        if template.requests:
            one = judge_requests(sel.iloc[:1], judge, cfg, judging, seed)[0]
            row.max_tokens += template.requests * int(one.sampling.max_tokens)


def _carried(requests: Sequence[Any]) -> Counter:
    """Which generated answer each judge prompt carries: (study, stage, model) -> prompts."""
    out: Counter = Counter()
    for req in requests:
        m = req.meta
        gen = m.get("generator")
        if gen is None or m.get("corpus") == "anchor":
            continue  # an anchor is a fixed text, counted in the prompt's characters
        corpus = "decomp" if m["corpus"] == "decomposition" else "main"
        kind = "round1" if m["condition"] == "round1" else "round2"
        out[("conformity", f"{corpus}-{kind}-s{m['seed']}", gen)] += 1
    return out


def _amel(config: Config, root: Path) -> list[StageCount]:
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


def _anchoring(config: Config, root: Path) -> list[StageCount]:
    from context_effects import dag
    from context_effects.anchoring import dag as anchoring_dag
    from context_effects.anchoring.requests import judge_requests
    from context_effects.anchoring.tasks import read_tasks

    tasks = read_tasks(root / anchoring_dag.TASKS)
    out = []
    for judge in anchoring_dag.judges(config):
        row = StageCount("anchoring", "judge", judge)
        row.add(judge_requests(tasks, judge, dag.model_settings(config, judge), anchoring_dag.request_settings(config)))
        out.append(row)
    return out


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


# --------------------------------------------------------------------------- beside the seeds' sizes


def seed_sizes(config: Config, counts: Sequence[StageCount], est: Estimate,
               workdir: str | Path = ".") -> list[SizeRow]:
    """The config's sizes beside every size the seed papers print: Study A's calls to its
    11 models and its asymmetry test's item-model pairs (seed 000, abstract), Study C's
    answer collection and rating tasks (seed 002, App. A.5: the four-judge blind and
    informed pass over every execution's main corpus and the anchors) and Table 7's GPU-hours.
    Each row that differs names the ledger entry saying why (docs/costs.md, "The paper's size")."""
    from context_effects.amel import dag as amel_dag

    rows: list[SizeRow] = []
    if amel_dag.enabled(config):
        from context_effects.amel.items import read_domain_items

        roster = set(amel_dag.roster(config))
        calls = sum(c.requests for c in counts if c.study == "amel" and c.model in roster)
        extra = {c.model: c.requests for c in counts if c.study == "amel" and c.model not in roster}
        items = sum(int(read_domain_items(Path(workdir) / p)["is_test"].sum())
                    for p in amel_dag.domain_item_tables(config))
        rows.append(SizeRow(f"Study A calls to the {len(roster)} roster models"
                            + (f" (extra models apart: {', '.join(f'{m} {n:,}' for m, n in sorted(extra.items()))})"
                               if extra else ""),
                            "75,898", 75898, calls, "seed 000, abstract", "amel-calls-per-cell"))
        rows.append(SizeRow("Study A item-model pairs (the asymmetry test's n)", "2,481", 2481,
                            items * len(roster), "seed 000, abstract", "amel-test-items"))
    if config["conformity"]["enabled"]:
        open_judges = list(config["conformity"]["judges"])
        main = {(c.stage, c.model): c.requests for c in counts
                if c.study == "conformity" and c.stage.startswith("main-") and c.kind in ("round1", "round2")}
        judge = next((c for c in counts if c.study == "conformity" and c.stage == "judge"
                      and c.model in open_judges), None)
        if judge is not None:
            # A judge prompt carries one generated answer (counted by the stage that wrote it)
            # or an anchor (a fixed text, carried by none), which is rated twice: with the
            # reference and without (docs/deviations.yaml#anchor-judge-prompts).
            anchor_prompts = judge.requests - sum(judge.carries.values())
            decomp = sum(n for (study, stage, _), n in judge.carries.items() if stage.startswith("decomp-"))
            rows.append(SizeRow("Study C answers: every execution's main corpus and the anchors", "147,000",
                                147000, sum(main.values()) + anchor_prompts // 2, "seed 002, App. A.5"))
            rows.append(SizeRow("Study C rating tasks per open judge (blind and informed; main corpus, anchors)",
                                "255,000", 255000, judge.requests - decomp, "seed 002, App. A.5",
                                "anchor-judge-prompts"))
    gpu = [r for r in est.rows if r.gpu_hours is not None]
    if gpu and config["conformity"]["enabled"]:
        generation = sum(r.gpu_hours or 0.0 for r in gpu if r.study == "conformity" and r.stage in ("round1", "round2"))
        judging = sum(r.gpu_hours or 0.0 for r in gpu if r.study == "conformity" and r.stage == "judge")
        rows.append(SizeRow("GPU-hours, Round 1/2 generation (every corpus)", "~12", 12, generation,
                            "seed 002, Table 7", "gpu-hours-estimate", 1))
        rows.append(SizeRow("GPU-hours, Study C judging (every corpus, open judges)", "1.2 (main pass)", 1.2,
                            judging, "seed 002, Table 7", "gpu-hours-estimate", 1))
        rows.append(SizeRow("GPU-hours in total (every study)", "25-30", 27.5, est.gpu_hours,
                            "seed 002, Table 7", "gpu-hours-estimate", 1))
    return rows


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
