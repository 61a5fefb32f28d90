"""DAG helpers and study registries as plain library functions, the rule files' shape, and
a table added through the registry alone being built by the workflow."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO, run_snakemake
from context_effects import dag, targets
from context_effects.config import load_config, validate_config
from context_effects.conformity import dag as conformity_dag
from context_effects.conformity import outputs as conformity_outputs
from context_effects.outputs import Built, Registry, TableSpec, registry


@pytest.fixture(scope="module")
def paper():
    return validate_config(load_config(REPO / "config" / "config.yaml"))


@pytest.fixture(scope="module")
def demo():
    return validate_config(load_config(REPO / "config" / "demo.yaml"))


# ------------------------------------------------------------------ shared helpers


def test_rule_resources_override_and_memory_growth(demo):
    cfg = {**demo, "resources": {"conformity_fit": {"mem_mb": 3000}}}
    r = dag.rule_resources(cfg, "conformity_fit", runtime=1440, mem_mb=8000)
    assert r["runtime"] == 1440
    assert [r["mem_mb"](None, attempt) for attempt in (1, 2, 3)] == [3000, 6000, 9000]
    other = dag.rule_resources(cfg, "build_items", runtime=15, mem_mb=4000)
    assert other["runtime"] == 15 and other["mem_mb"](None, 1) == 4000


def test_memory_growth_stops_at_the_largest_partition(demo, tmp_path, monkeypatch):
    """A retry never asks for more memory than any partition has: that request could not run."""
    parts = tmp_path / "partitions.yaml"
    parts.write_text("partitions:\n  cpu: {max_mem_mb: 64000}\n  big: {max_mem_mb: 80000}\n  gpu: {max_gpu: 4}\n")
    assert dag.partition_mem_cap(parts) == 80000
    assert dag.partition_mem_cap(dag.PARTITIONS_FILE) == 256000  # the shipped profile's CPU partition
    monkeypatch.setattr(dag, "partition_mem_cap", lambda path=None: 80000)
    r = dag.rule_resources(demo, "answer_requests_vllm", runtime=240, mem_mb=32000)
    assert [r["mem_mb"](None, a) for a in (1, 2, 3)] == [32000, 64000, 80000]
    huge = dag.rule_resources(demo, "x", runtime=1, mem_mb=90000)  # above every partition: asked as set
    assert [huge["mem_mb"](None, a) for a in (1, 2)] == [90000, 90000]
    monkeypatch.setattr(dag, "partition_mem_cap", lambda path=None: None)
    r = dag.rule_resources(demo, "answer_requests_vllm", runtime=240, mem_mb=32000)
    assert r["mem_mb"](None, 3) == 96000  # no limit known: grows as before


def test_speed_settings_stay_out_of_params_and_come_back_in_the_job(paper):
    """A model's params hold what changes an answer; the answering job gets the speed
    settings back from the config; the manifest's record holds no speed setting."""
    name = dag.vllm_models(paper)[0]
    full = paper["models"][name]
    params = dag.model_settings(paper, name)
    for key in ("gpu", "concurrency", "use_batch_api"):
        assert key in full and key not in params
    assert set(params["engine"]) == set(full["engine"]) - {"gpu_memory_utilization", "tensor_parallel_size",
                                                           "enforce_eager"}
    assert params["model_id"] == full["model_id"] and params["engine"]["max_model_len"] == full["engine"]["max_model_len"]
    assert dag.with_speed_settings(params, paper, name) == full
    faster = copy.deepcopy(paper)
    faster["run"]["threads_per_job"] += 3
    faster["models"][name]["concurrency"] += 5
    faster["models"][name]["engine"]["gpu_memory_utilization"] = 0.5
    faster["resources"] = {"conformity_fit": {"mem_mb": 1}}
    assert dag.model_settings(faster, name) == params
    assert dag.result_settings(faster) == dag.result_settings(paper)
    assert "threads_per_job" not in dag.result_settings(paper)["run"]
    slower_answers = copy.deepcopy(paper)
    slower_answers["models"][name]["engine"]["max_model_len"] = 2048
    assert dag.model_settings(slower_answers, name) != params
    # a corrected price reruns no answering job, and the job still charges it
    hosted = next(m for m, e in paper["models"].items() if e["backend"] in ("openai", "anthropic"))
    priced = copy.deepcopy(paper)
    priced["models"][hosted]["price"] = {"input_per_mtok": 1.25, "output_per_mtok": 10.0}
    assert dag.model_settings(priced, hosted) == dag.model_settings(paper, hosted)
    assert dag.with_speed_settings(dag.model_settings(priced, hosted), priced, hosted)["price"] == \
        priced["models"][hosted]["price"]


def test_a_ledger_beside_every_answered_shard(paper, demo):
    from context_effects.amel import dag as amel_dag

    for cfg in (paper, demo):
        ledgers = targets.ledger_files(cfg)
        assert len(ledgers) == len(set(ledgers)) == len(targets.response_shards(cfg))
        assert all(p.startswith("results/ledgers/") and p.endswith(".json") for p in ledgers)
    assert f"results/ledgers/amel/judge/{amel_dag.models(paper)[0]}/domains.json" in targets.ledger_files(paper)


def test_name_regex_matches_exactly_the_names():
    rx = dag.name_regex(["gpt-4o", "qwen2.5-7b"])
    assert re.fullmatch(rx, "qwen2.5-7b") and not re.fullmatch(rx, "qwen2x5-7b")
    assert not re.fullmatch(dag.name_regex([]), "")


def test_model_lists_and_gpus(paper, demo):
    assert dag.vllm_models(demo) == ["gemma3-270m-base", "smollm2-135m"]
    assert dag.gguf_models(demo) == dag.vllm_models(demo) and dag.remote_models(demo) == []
    assert dag.model_files(demo, "smollm2-135m") == "resources/models/smollm2-135m"
    assert dag.model_gpu_type(demo, "smollm2-135m") == ""
    hosted = dag.remote_models(paper)
    assert "gpt-4o" in hosted and not set(hosted) & set(dag.vllm_models(paper))
    local = dag.vllm_models(paper)[0]
    assert dag.model_gpus(paper, local) == paper["models"][local]["gpu"]["count"] >= 1
    assert dag.model_files(paper, local) == []


def test_raw_dataset_input_local_or_fetched(paper, demo):
    assert dag.raw_dataset_input(demo, "mmlu_pro") == "data/demo/mmlu_pro.jsonl"
    assert dag.raw_dataset_input(paper, "mmlu_pro") == "resources/datasets/mmlu_pro.parquet"


def test_used_models_follow_enabled_studies(demo):
    assert dag.used_models(demo) == ["smollm2-135m"]
    off = {**demo, "conformity": {**demo["conformity"], "enabled": False},
           "amel": {**demo["amel"], "enabled": False}, "anchoring": {**demo["anchoring"], "enabled": False}}
    assert dag.used_models(off) == []
    assert conformity_outputs.targets(off) == []


# ------------------------------------------------------------------ Study C paths


def test_conformity_shards_and_judges_of_the_paper_design(paper):
    # 500 items per dataset in blocks of shard_size/8 items.
    shards = conformity_dag.shards(paper, "truthfulqa")
    assert shards == ["truthfulqa-000", "truthfulqa-001"]
    r = conformity_dag.response_shards(paper, "truthfulqa")
    # (3 seed labels + the decomposition corpus) x 2 rounds x 4 generators x 2 blocks
    assert len(r) == len(set(r)) == 4 * 2 * 4 * 2
    assert "results/responses/conformity/decomp-round2-s42/" in "".join(r)
    assert "gpt-4o" in conformity_dag.judges(paper, "truthfulqa")
    assert "gpt-4o" not in conformity_dag.judges(paper, "mmlu_pro")
    assert conformity_dag.anchor_response_shards(paper, "truthfulqa") == []  # real runs judge fixed anchor texts


def _as_requests(paths):
    return [p.replace("results/responses/", "results/requests/", 1) for p in paths]


def test_request_shards_pair_with_response_shards(paper, demo):
    """Each collector checks response shard i against request shard i (tests/test_shard_completeness.py)."""
    synthetic = copy.deepcopy(demo)
    for name in synthetic["conformity"]["generators"]:
        synthetic["models"][name]["backend"] = "synthetic"
    for cfg in (paper, demo, synthetic):
        for ds in conformity_dag.datasets(cfg):
            assert conformity_dag.request_shards(cfg, ds) == _as_requests(conformity_dag.response_shards(cfg, ds))
            assert conformity_dag.judge_request_shards(cfg, ds) == _as_requests(
                conformity_dag.judge_response_shards(cfg, ds))
            assert conformity_dag.anchor_request_shards(cfg, ds) == _as_requests(
                conformity_dag.anchor_response_shards(cfg, ds))
    assert conformity_dag.anchor_request_shards(synthetic, "truthfulqa")  # synthetic anchors are answered too
    assert conformity_dag.injection_tables(paper) == [
        f"results/conformity/injection/{d}.parquet" for d in paper["conformity"]["datasets"]]
    off = copy.deepcopy(paper)
    off["conformity"]["enabled"] = False
    assert conformity_dag.injection_tables(off) == []


def test_judge_block_sizes_hosted_and_open_judges(paper):
    open_judge = paper["conformity"]["judges"][0]
    s = conformity_dag.judge_block(paper, open_judge)
    hosted = conformity_dag.judge_block(paper, "gpt-4o")
    assert hosted["hosted"] and not s["hosted"]
    # A hosted judge rates one execution only: more items fit one shard.
    assert hosted["items_per_shard"] > s["items_per_shard"]
    assert len(conformity_dag.judge_shards(paper, "truthfulqa", "gpt-4o")) < len(
        conformity_dag.judge_shards(paper, "truthfulqa", open_judge))


def test_fit_settings_leave_out_plan_and_threshold_keys(paper):
    s = conformity_dag.fit_settings(paper)
    assert {"chains", "warmup", "samples", "target_accept"} <= set(s)
    assert not {"max_rhat", "min_ess_bulk", "theta_anchor_sensitivity"} & set(s)
    assert conformity_dag.fit_threads(paper) in (1, paper["conformity"]["fit"]["chains"])
    # the NUTS start enters a fit's params only when it is not the default
    assert paper["conformity"]["fit"]["init"] == "svi" and s["init"] == "svi"
    median = {**paper, "conformity": {**paper["conformity"], "fit": {**paper["conformity"]["fit"], "init": "median"}}}
    assert "init" not in conformity_dag.fit_settings(median)
    # so does the basis of the baselines: the paper config's, and none (the default) leaves no trace
    assert paper["conformity"]["fit"]["split_means"] == ["z_b"] and s["split_means"] == ["z_b"]
    plain = {**paper, "conformity": {**paper["conformity"], "fit": {**paper["conformity"]["fit"], "split_means": []}}}
    assert "split_means" not in conformity_dag.fit_settings(plain)


# ------------------------------------------------------------------ registries


def test_registry_rejects_duplicate_and_unknown_names():
    spec = TableSpec("t", "s", "c", "tab:t", inputs=lambda c: {}, build=lambda i, s: Built(pd.DataFrame()))
    with pytest.raises(ValueError, match="two registry entries are named 't'"):
        Registry("x", [spec, spec])
    with pytest.raises(KeyError, match="no table 'u'; known: \\['t'\\]"):
        Registry("x", [spec]).table("u")


@pytest.mark.parametrize("study", ["conformity", "amel", "anchoring"])
def test_every_entry_gives_inputs_and_json_settings_on_both_configs(study, paper, demo):
    reg = registry(study)
    assert reg.tables(), study
    for cfg in (paper, demo):
        for entry in reg.entries.values():
            inputs = entry.inputs(cfg)
            assert all(isinstance(v, (str, list)) for v in inputs.values()), entry.name
            settings = entry.settings(cfg)
            json.dumps(settings)  # params must be plain data: Snakemake compares them to rerun
            if isinstance(entry, TableSpec):
                entry.caption_for(settings)  # every {field} of the caption is a setting


def test_study_outputs_hold_every_registered_file(paper):
    out = set(targets.study_outputs(paper))
    for study in ("conformity", "amel", "anchoring"):
        reg = registry(study)
        assert set(reg.files(paper)) <= out, study
    assert "results/tables/conformity/table3.tex" in out
    assert "figures/conformity/rating_distributions.png" in out
    assert "results/figures/conformity/rating_distributions.csv" in out  # the numbers it plots
    assert {"figures/conformity/eta_forest.pdf", "figures/conformity/gamma_forest.png"} <= out
    assert all(f.startswith("figures/") for f in targets.report_figures(paper))
    assert all(f.endswith(".csv") for f in targets.report_tables(paper))


def test_settings_of_a_table_are_only_what_it_uses(paper):
    reg = registry("conformity")
    changed = json.loads(json.dumps(paper))
    changed["conformity"]["generation"]["max_tokens"] += 1
    changed["run"]["threads_per_job"] += 1
    for name in ("table2", "table3", "table13", "table19"):
        assert reg.table(name).settings(paper) == reg.table(name).settings(changed), name
    changed["conformity"]["validation"]["bootstrap_resamples"] += 1
    assert reg.table("table19").settings(paper) != reg.table("table19").settings(changed)


# ------------------------------------------------------------------ rule files


def _smk_files() -> list[Path]:
    return [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]


def test_rule_files_hold_rules_only_and_bind_each_name_once():
    """Every rule file shares one namespace: a function or a name bound in two files
    would silently shadow the other. Helpers live in the library; names are bound once."""
    bound: dict[str, Path] = {}
    for path in _smk_files():
        text = path.read_text()
        assert not re.search(r"^\s*def \w+", text, re.M), f"{path.name} defines a function: move it to the library"
        names = re.findall(r"^(\w+)\s*=(?!=)", text, re.M)
        for m in re.finditer(r"^from [\w.]+ import (.+)$|^import ([\w.]+)(?: as (\w+))?$", text, re.M):
            if m[1]:
                names += [n.split(" as ")[-1].strip() for n in m[1].split(",")]
            else:
                names.append(m[3] or m[2].split(".")[0])
        for name in names:
            assert name not in bound, f"{name!r} is bound in {bound[name].name} and again in {path.name}"
            bound[name] = path
    assert {"dag", "conformity_dag", "amel_dag", "anchoring_dag", "registry"} <= set(bound)


def test_every_rule_passes_the_version_of_its_code():
    """A rule without a `code` param would not rerun when the library code its job runs
    changes (context_effects.codeversion); the script it names must be the one hashed."""
    for path in _smk_files():
        for m in re.finditer(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", path.read_text(), re.M | re.S):
            name, body = m[1], m[2]
            if not re.search(r"^    (script|shell|run|notebook|wrapper):", body, re.M):
                continue  # a target rule (all, card) runs nothing
            assert re.search(r"\n        code=(lambda wildcards: )?codeversion\.of_", body), f"{path.name}: rule {name}"
            script = re.search(r'script:\n\s+"\.\./scripts/(\w+\.py)"', body)
            if script and "of_script(" in body:
                assert f'of_script("{script[1]}")' in body, f"rule {name} hashes another script than it runs"
            if script and "of_entry(" in body:
                kind = "table" if script[1] == "write_table.py" else "figure"
                assert f'"{kind}", wildcards.name' in body, name


# ------------------------------------------------------------------ a toy table


TOY = '''

# --- added by tests/test_dag.py: a toy table, through the registry alone ---
def _toy_build(inputs, s):
    from context_effects.datasets import read_items

    rows = [{"dataset": d, "items": len(read_items(p))} for d, p in zip(s["datasets"], inputs["item_tables"], strict=True)]
    return Built(pd.DataFrame(rows), [f"{len(rows)} datasets"])


REGISTRY = Registry("conformity", [*REGISTRY.entries.values(), TableSpec(
    "toy_items", "descriptive", "Items per dataset ({datasets[0]} first).", "tab:toy",
    inputs=lambda config: {"item_tables": [f"results/items/{d}.parquet" for d in config["conformity"]["datasets"]]},
    settings=lambda config: {"datasets": list(config["conformity"]["datasets"])},
    build=_toy_build,
)])
'''


def test_a_table_added_to_the_registry_alone_is_built(tmp_path):
    """One entry + one builder in the study's registry, no rule edited: the workflow builds it."""
    copy = tmp_path / "repo"
    copy.mkdir()
    for name in ("Snakefile", "workflow", "src", "config", "data", "envs"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, copy / name)
    outputs = copy / "src" / "context_effects" / "conformity" / "outputs.py"
    outputs.write_text(outputs.read_text() + TOY)
    work = tmp_path / "work"
    work.mkdir()
    (work / "data").symlink_to(REPO / "data")
    res = run_snakemake(
        "--cores", "1", "--snakefile", str(copy / "Snakefile"), "--directory", str(work),
        "--configfile=" + str(REPO / "config" / "demo.yaml"), "results/tables/conformity/toy_items.csv",
        env={"OMP_NUM_THREADS": "1"},
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "conformity_table" in res.stdout + res.stderr  # the stage's one wildcard rule built it
    table = pd.read_csv(work / "results" / "tables" / "conformity" / "toy_items.csv")
    assert table.to_dict("records") == [{"dataset": d, "items": 4} for d in ("truthfulqa", "mmlu_pro", "arc_challenge")]
    tex = (work / "results" / "tables" / "conformity" / "toy_items.tex").read_text()
    assert r"\caption{Items per dataset (truthfulqa first).}" in tex and "3 datasets" in tex
    # And the run's targets (rule all, the run report) include it without any edit to the rule files.
    probe = subprocess.run(
        [sys.executable, "-c", "from context_effects import targets; from context_effects.config import load_config, "
         "validate_config; import sys; print('\\n'.join(targets.study_outputs(validate_config(load_config(sys.argv[1])))))",
         str(REPO / "config" / "demo.yaml")],
        env={**os.environ, "PYTHONPATH": str(copy / "src")}, capture_output=True, text=True,
    )
    assert probe.returncode == 0, probe.stderr
    assert "results/tables/conformity/toy_items.tex" in probe.stdout.split()


def test_metric_jobs_per_kind_resources_and_overrides(paper, demo):
    from types import SimpleNamespace

    w = {k: SimpleNamespace(kind=k, dataset="truthfulqa") for k in conformity_dag.METRIC_KINDS}
    res = {name: conformity_dag.metric_resource(paper, name) for name in ("runtime", "mem_mb", "gpu", "gpu_model")}
    n_gpu = paper["conformity"]["validation"]["gpu"]["count"]
    assert n_gpu >= 1
    assert [res["gpu"](w[k]) for k in ("text", "neural", "classifiers")] == [0, n_gpu, n_gpu]
    assert res["gpu_model"](w["text"]) == "" and res["gpu_model"](w["neural"]) == (
        paper["conformity"]["validation"]["gpu"]["model"] or "")
    assert res["mem_mb"](w["classifiers"], 2) == 2 * 32000 and res["runtime"](w["text"]) == 120
    cfg = {**paper, "resources": {"conformity_classifier_metrics": {"mem_mb": 1000, "runtime": 5}}}
    assert conformity_dag.metric_resource(cfg, "mem_mb")(w["classifiers"], 1) == 1000
    assert conformity_dag.metric_resource(cfg, "runtime")(w["classifiers"]) == 5
    assert conformity_dag.metric_resource(cfg, "mem_mb")(w["neural"], 1) == 8000
    # The rule's own name sets every kind; a kind's key wins over it.
    cfg = {**paper, "resources": {"conformity_answer_metrics": {"runtime": 77, "mem_mb": 5000},
                                  "conformity_neural_metrics": {"mem_mb": 6000}}}
    assert [conformity_dag.metric_resource(cfg, "runtime")(w[k]) for k in ("text", "neural", "classifiers")] == [77] * 3
    assert [conformity_dag.metric_resource(cfg, "mem_mb")(w[k], 1) for k in ("text", "neural", "classifiers")] == [
        5000, 6000, 5000]
    # A classifier job loads a classifier only where one is configured for its dataset;
    # otherwise it is sized like a text-metric job and holds no GPU.
    arc = SimpleNamespace(kind="classifiers", dataset="arc_challenge")
    assert conformity_dag.metric_resource(paper, "mem_mb")(arc, 1) == 4000
    assert conformity_dag.metric_resource(paper, "gpu")(arc) == 0
    none = {**paper, "conformity": {**paper["conformity"], "validation": {
        **paper["conformity"]["validation"], "truth_judge": None, "info_judge": None}}}
    assert conformity_dag.metric_resource(none, "mem_mb")(w["classifiers"], 3) == 3 * 4000
    assert "nltk_data" in conformity_dag.metric_inputs(demo, "text", "arc_challenge")
    assert "nltk_data" not in conformity_dag.metric_inputs(demo, "neural", "arc_challenge")
    assert conformity_dag.metric_threads(demo, "text") == 1
    assert conformity_dag.metric_threads(demo, "neural") == demo["run"]["threads_per_job"]
