"""Study C's face (``context_effects.studies``): its item tables, the requests of Round 1,
Round 2, a synthetic run's anchors and judging, and its sizes beside seed 002's (App. A.5
and Table 7)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from context_effects.llm.estimate import STAND_IN, Estimate, SizeRow, StageCount
from context_effects.studies import Headline, StudyFace

Config = Mapping[str, Any]


def enabled(config: Config) -> bool:
    return bool(config["conformity"]["enabled"])


def item_inputs(config: Config) -> list[str]:
    from context_effects import dag

    return dag.items_for(config["conformity"]["datasets"])


def design_counts(config: Config, root: Path) -> list[StageCount]:
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


def seed_sizes(config: Config, counts: Sequence[StageCount], est: Estimate, root: Path) -> list[SizeRow]:
    """Seed 002's answer collection and rating tasks (App. A.5: the four-judge blind and
    informed pass over every execution's main corpus and the anchors) and Table 7's GPU-hours."""
    rows: list[SizeRow] = []
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
    if gpu:
        generation = sum(r.gpu_hours or 0.0 for r in gpu if r.study == "conformity" and r.stage in ("round1", "round2"))
        judging = sum(r.gpu_hours or 0.0 for r in gpu if r.study == "conformity" and r.stage == "judge")
        rows.append(SizeRow("GPU-hours, Round 1/2 generation (every corpus)", "~12", 12, generation,
                            "seed 002, Table 7", "gpu-hours-estimate", 1))
        rows.append(SizeRow("GPU-hours, Study C judging (every corpus, open judges)", "1.2 (main pass)", 1.2,
                            judging, "seed 002, Table 7", "gpu-hours-estimate", 1))
        rows.append(SizeRow("GPU-hours in total (every study)", "25-30", 27.5, est.gpu_hours,
                            "seed 002, Table 7", "gpu-hours-estimate", 1))
    return rows


def headlines(config: Config, model: str) -> list[Headline]:
    """The model as a judge in the panel: its peer-context loading γ_j (Table 4). As a
    generator, on each dataset: its total Round-2 shifts η per peer condition and
    Asym_total, beside the seed's Table 3. With two or more generators the shifts come from
    the generator-mean refit where the run fits it: the paper's model has no generator mean,
    so generators of different mean quality leak it into their shifts (docs/card.md)."""
    from context_effects.conformity.conditions import DATASET_LABELS
    from context_effects.measurement.pipeline import GENERATOR_MEAN_VARIANTS, display_name, fit_plan

    if not enabled(config):
        return []
    c = config["conformity"]
    name = display_name(config, model)
    out = []
    if model in c["judges"] or model in c["hosted_judges"]:
        out.append(Headline("conformity", "gamma", "peer-context loading of its ratings, gamma_j", "judge",
                            "conformity/table4", (), "Judge", name, "gamma_j @ 95% CrI",
                            "latent-quality units a visible peer discussion adds to its informed ratings of "
                            "the same answer (0 = its ratings ignore the peers)"))
    if model not in c["generators"]:
        return out
    refit = GENERATOR_MEAN_VARIANTS["main"]
    refitted = {s.dataset for s in fit_plan(config) if s.kind == refit} if len(c["generators"]) > 1 else set()
    for dataset in c["datasets"]:
        label = DATASET_LABELS.get(dataset, dataset)
        fixed = (("Dataset", label),)
        for column, words in (("All-Correct", "all-correct"), ("Mixed", "mixed"), ("All-Wrong", "all-wrong"),
                              ("Asym_total", None)):
            key = f"eta_{words}_{dataset}" if words else f"asym_total_{dataset}"
            what = f"{label}: Round-2 shift, {words} peers" if words else f"{label}: Asym_total"
            reading = ("latent quality its revision gains (< 0: loses) after seeing the peers" if words else
                       "-(all-wrong shift) - (all-correct shift): > 0 when wrong peers harm more than correct "
                       "peers help")
            if dataset in refitted:
                out.append(Headline("conformity", key, f"{what} (generator-mean refit)", "generator",
                                    "conformity/table3_generator_mean",
                                    (*fixed, ("Fit", "main corpus"), ("Quantity", column)), "Model", name,
                                    "Generator-mean variant", reading, seed_table="conformity/table3",
                                    seed_fixed=fixed, seed_column=column))
            else:
                out.append(Headline("conformity", key, what, "generator", "conformity/table3", fixed, "Model", name,
                                    column, reading))
    return out


FACE = StudyFace("conformity", enabled, item_inputs, design_counts, seed_sizes, headlines)
