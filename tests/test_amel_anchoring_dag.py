"""Studies A and H: the DAG helpers (paths, targets, per-rule settings) and registries,
as plain functions of small validated configs, and the rule files' use of them."""

from __future__ import annotations

import copy
import re

import pytest

from conftest import REPO
from context_effects.amel import dag as amel_dag
from context_effects.amel import outputs as amel_outputs
from context_effects.anchoring import dag as anchoring_dag
from context_effects.anchoring import outputs as anchoring_outputs
from context_effects.config import load_config, validate_config
from context_effects.outputs import FigureSpec, TableSpec, registry

AMEL_NAMES = ["effects", "scaling", "balanced", "entropy", "asymmetry", "length", "position", "framing", "congruence",
              "probabilities"]


@pytest.fixture(scope="module")
def demo():
    return validate_config(load_config(REPO / "config" / "demo.yaml"))


def changed(cfg, section, key, value):
    out = copy.deepcopy(cfg)
    out[section][key] = value
    return out


# ------------------------------------------------------------------ Study A


def test_amel_domains_models_and_sources(demo):
    assert amel_dag.models(demo) == ["smollm2-135m"]
    assert amel_dag.domains(demo) == ["truthfulqa", "mmlu_pro", "arc_challenge", "code_review"]
    assert amel_dag.domain_source(demo, "code_review") == {"item_file": "data/amel/code_review.jsonl"}
    assert amel_dag.domain_source(demo, "mmlu_pro") == {"item_table": "results/items/mmlu_pro.parquet"}
    assert amel_dag.domain_items("mmlu_pro") == "results/amel/items/mmlu_pro.parquet"
    # One shard per model holds every domain: one model load per model for the study.
    assert amel_dag.response_shards(demo) == ["results/responses/amel/judge/smollm2-135m/domains.parquet"]
    # The scores rule checks response shard i against request shard i.
    assert amel_dag.request_shards(demo) == [
        p.replace("results/responses/", "results/requests/", 1) for p in amel_dag.response_shards(demo)
    ]
    assert amel_dag.request_shard("m") == "results/requests/amel/judge/m/domains.parquet"
    assert amel_dag.domain_item_tables(demo) == [amel_dag.domain_items(d) for d in amel_dag.domains(demo)]
    clash = changed(demo, "amel", "item_files", {"truthfulqa": "x.jsonl"})
    with pytest.raises(ValueError, match=r"benchmark name\(s\) \['truthfulqa'\]"):
        amel_dag.domains(clash)


def test_amel_rule_settings_are_exactly_what_each_job_reads(demo):
    a = demo["amel"]
    assert amel_dag.item_settings(demo) == {k: a[k] for k in ("items_per_domain", "answers_per_question", "seed")}
    assert set(amel_dag.design_settings(demo)) == set(amel_dag.DESIGN_KEYS)
    assert amel_dag.score_settings(demo) == {"entropy_threshold_bits": a["entropy_threshold_bits"]}
    # A setting no rule reads moves nothing; a design setting moves only the request settings.
    other = changed(demo, "amel", "entropy_threshold_bits", 0.25)
    assert amel_dag.design_settings(other) == amel_dag.design_settings(demo)
    assert amel_dag.item_settings(other) == amel_dag.item_settings(demo)
    assert amel_dag.score_settings(other) != amel_dag.score_settings(demo)
    more = changed(demo, "amel", "n_samples", a["n_samples"] + 1)
    assert amel_dag.item_settings(more) == amel_dag.item_settings(demo)
    assert amel_dag.design_settings(more) != amel_dag.design_settings(demo)
    models = amel_dag.score_models(demo)
    assert list(models) == ["smollm2-135m"]
    assert models["smollm2-135m"] == {
        **{k: demo["models"]["smollm2-135m"][k] for k in amel_dag.MODEL_INFO_KEYS},
        "extra_model": False,
        "list_rank": 0,
    }


def test_amel_targets_are_the_registry_files(demo):
    files = amel_outputs.targets(demo)
    assert files == [f"results/tables/amel/{n}.{e}" for n in AMEL_NAMES for e in ("csv", "tex")] + [
        f"figures/amel/{n}.{e}" for n in AMEL_NAMES for e in ("pdf", "png")
    ]
    assert amel_outputs.targets(changed(demo, "amel", "enabled", False)) == []
    assert amel_outputs.targets(changed(demo, "amel", "models", [])) == []


def test_amel_registry_inputs_and_settings(demo):
    reg = registry("amel")
    assert reg.names(TableSpec, "analysis") == reg.names(FigureSpec, "analysis") == AMEL_NAMES
    kind = {"run_kind": "demo"}
    for name in AMEL_NAMES:
        table, figure = reg.table(name), reg.figure(name)
        assert table.label == f"tab:amel-{name}" and figure.formats == ("pdf", "png")
        data = "probabilities" if name == "probabilities" else "bias_scores"
        assert table.inputs(demo) == {data: f"results/amel/{data}.parquet"}
        assert figure.inputs(demo) == {"table": f"results/tables/amel/{name}.csv", data: f"results/amel/{data}.parquet"}
        table_extra = {"framing_history_lengths": [2]} if name == "framing" else {}
        figure_extra = {"entropy_threshold_bits": 0.5} if name == "entropy" else {}
        assert table.settings(demo) == {**kind, **table_extra}, name
        assert figure.settings(demo) == {**kind, **figure_extra}, name
        assert table.caption_for(table.settings(demo)) == table.caption


# ------------------------------------------------------------------ Study H


def test_anchoring_paths_inputs_and_settings(demo):
    h = demo["anchoring"]
    assert anchoring_dag.judges(demo) == ["smollm2-135m"]
    assert anchoring_dag.task_inputs(demo) == {
        "item_tables": [f"results/items/{d}.parquet" for d in ("truthfulqa", "mmlu_pro", "arc_challenge")],
        "task_files": ["data/anchoring/tasks.jsonl"],
    }
    assert anchoring_dag.results(demo) == ["results/anchoring/runs/smollm2-135m.json"]
    assert anchoring_dag.request_shard("j") == "results/requests/anchoring/judge/j/tasks.parquet"
    assert anchoring_dag.response_shard("j") == "results/responses/anchoring/judge/j/tasks.parquet"
    assert anchoring_dag.run_info(demo) == {"label": demo["run"]["label"], "kind": "demo"}
    assert anchoring_dag.task_settings(demo) == {
        k: h[k] for k in ("tasks_per_dataset", "answer_kinds", "seed", "verdict_threshold")
    }
    req = anchoring_dag.request_settings(demo)
    assert set(req) == {"temperature", "top_p", "max_tokens", "repetitions", "max_attempts", "seed"}
    score = anchoring_dag.score_settings(demo)
    assert set(score) == set(req) | {"verdict_threshold", "bootstrap_resamples", "bootstrap_method", "confidence_level"}
    # The scorer's bootstrap does not rerun the tasks or the model run.
    other = changed(demo, "anchoring", "bootstrap_resamples", 5000)
    assert anchoring_dag.task_settings(other) == anchoring_dag.task_settings(demo)
    assert anchoring_dag.request_settings(other) == req and anchoring_dag.score_settings(other) != score


def test_anchoring_targets_and_registry(demo):
    tables = ["pull", "conditions", "checks"]
    assert anchoring_outputs.targets(demo) == (
        ["results/anchoring/runs/smollm2-135m.json"]
        + [f"results/tables/anchoring/{n}.{e}" for n in tables for e in ("csv", "tex")]
        + [f"figures/anchoring/pull_distribution.{e}" for e in ("pdf", "png")]
    )
    assert anchoring_outputs.targets(changed(demo, "anchoring", "enabled", False)) == []
    assert anchoring_outputs.targets(changed(demo, "anchoring", "judges", [])) == []
    reg = registry("anchoring")
    assert reg.names(TableSpec, "report") == tables and reg.names(FigureSpec, "report") == ["pull_distribution"]
    for entry in [*(reg.table(n) for n in tables), reg.figure("pull_distribution")]:
        assert entry.inputs(demo) == {"results": ["results/anchoring/runs/smollm2-135m.json"]}
        assert entry.settings(demo) == {"run_kind": "demo"}
    assert reg.table("pull").label == "tab:anchoring-pull"


# ------------------------------------------------------------------ rule files


@pytest.mark.parametrize("study, module", [("amel", amel_dag), ("anchoring", anchoring_dag)])
def test_rule_files_use_existing_helpers_only(study, module):
    """Every `<study>_dag.<name>` the rule file calls exists, and no helper is defined there."""
    text = (REPO / "workflow" / "rules" / f"{study}.smk").read_text()
    used = set(re.findall(rf"\b{study}_dag\.(\w+)", text))
    assert used and all(hasattr(module, n) for n in used), used - set(dir(module))
    assert not re.search(r"^\s*def \w+", text, re.M)
    assert not (REPO / "workflow" / "rules" / f"common_{study}.smk").exists()
