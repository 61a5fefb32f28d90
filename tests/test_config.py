"""The configuration schema: both shipped configs validate, bad ones fail with useful messages."""

from __future__ import annotations

import copy

import pytest
import yaml

from context_effects.config import ConfigError, fill_defaults, load_config, load_schema, validate_config
from conftest import REPO


@pytest.fixture(scope="module")
def paper():
    return load_config(REPO / "config" / "config.yaml")


@pytest.fixture(scope="module")
def demo():
    return load_config(REPO / "config" / "demo.yaml")


def test_paper_config_has_the_paper_settings(paper):
    cfg = validate_config(paper)
    conf = cfg["conformity"]
    assert conf["seeds"] == [42, 43, 44] and conf["primary_seed"] == 42
    # seed 002 App. A.4 / A.6 / Table 8
    assert conf["generation"] == {
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 300,
        "max_attempts": 6,
        "retry_temperature_step": 0.1,
        "retry_temperature_cap": 1.0,
        "shard_size": 2000,
    }
    assert conf["judging"]["max_tokens"] == 16
    # App. A.7 / C.1
    fit = conf["fit"]
    assert (fit["chains"], fit["warmup"], fit["samples"]) == (4, 1500, 1500)
    assert (fit["target_accept"], fit["max_tree_depth"], fit["seed"], fit["precision"]) == (0.95, 10, 42, "float64")
    assert fit["theta_anchor"] == 1.5 and fit["theta_anchor_sensitivity"] == [1.0, 1.5, 2.0]
    assert all(cfg["models"][m]["engine"]["max_model_len"] == 4096 for m in conf["generators"])
    assert cfg["models"]["gemma-2-9b"]["system_role"] is False
    assert {d: cfg["datasets"][d]["n_items"] for d in cfg["datasets"]} == {
        "truthfulqa": 500,
        "mmlu_pro": 500,
        "arc_challenge": 500,
    }
    assert cfg["datasets"]["mmlu_pro"]["balance_by"] == "category"
    assert all(len(cfg["datasets"][d]["hub"]["revision"]) == 40 for d in cfg["datasets"])


def test_demo_config_is_small_and_local(demo):
    cfg = validate_config(demo)
    assert cfg["run"]["kind"] == "demo"
    for ds in cfg["datasets"].values():
        assert ds["source"] == "local" and ds["local_path"].startswith("data/demo/")
        assert ds["n_items"] <= 10
    assert all(m["backend"] == "vllm" and m["gpu"]["count"] == 0 for m in cfg["models"].values())


def test_defaults_fill_nested_blocks():
    schema = load_schema()
    filled = fill_defaults({"models": {}, "datasets": {}}, schema)
    assert filled["conformity"]["generation"]["max_tokens"] == 300
    assert filled["amel"]["history_lengths"] == [5, 10, 20, 50]
    assert filled["anchoring"]["repetitions"] == 3


def test_schema_defaults_are_valid_values():
    """Every default must itself pass the schema, or a user relying on it gets an error."""
    cfg = validate_config({"models": {"m": {"backend": "synthetic", "model_id": "m"}}, "datasets": {}, "conformity": {"enabled": False}, "amel": {"enabled": False}, "anchoring": {"enabled": False}})
    assert cfg["models"]["m"]["engine"]["max_model_len"] == 4096


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c["datasets"]["truthfulqa"].update(sorce="hub"), "unknown key `datasets.truthfulqa.sorce`; allowed keys here: balance_by, hub, local_path, n_items, source"),
        (lambda c: c["datasets"]["mmlu_pro"].update(source="hubb"), "`datasets.mmlu_pro.source` = 'hubb' is not allowed; allowed values: 'hub', 'local'"),
        (lambda c: c["models"]["smollm2-135m"].update(backend="llamacpp"), "allowed values: 'vllm', 'openai_compatible', 'openai', 'anthropic', 'synthetic', 'replay'"),
        (lambda c: c["conformity"]["generation"].update(temperature=-1), "`conformity.generation.temperature`: -1 is less than the minimum of 0"),
        (lambda c: c.update(extra_section={}), "unknown key `extra_section`"),
        (lambda c: c["conformity"].update(judges=["nope"]), "`conformity.judges` names model 'nope', which is not defined under `models`"),
        (lambda c: c["conformity"].update(primary_seed=7), "`conformity.primary_seed` = 7 must be one of `conformity.seeds` [42]"),
        (lambda c: c["datasets"]["arc_challenge"].update(local_path=None), "`datasets.arc_challenge.source` is 'local' but `datasets.arc_challenge.local_path` is not set"),
        (lambda c: c["datasets"]["truthfulqa"].update(n_items=0), "`datasets.truthfulqa.n_items`: 0 is less than the minimum of 1"),
        (lambda c: c["models"].update({"bad name!": {"backend": "openai", "model_id": "x"}}), "key 'bad name!' must match"),
    ],
)
def test_bad_config_names_key_and_fix(demo, mutate, expected):
    cfg = copy.deepcopy(demo)
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert expected in str(err.value)


def test_every_schema_object_is_closed():
    """additionalProperties must be false (or a schema for maps) on every object."""
    schema = load_schema()

    def walk(node, path):
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                assert node.get("additionalProperties") is False, f"open object at {path}"
            for k, v in node.items():
                walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    walk(schema, "$")


def test_config_files_are_plain_yaml():
    for name in ("config.yaml", "demo.yaml"):
        assert isinstance(yaml.safe_load((REPO / "config" / name).read_text()), dict)


def test_replay_overlay_switches_replay_on_and_keeps_the_rest(paper):
    from snakemake.utils import update_config

    merged = copy.deepcopy(paper)
    update_config(merged, load_config(REPO / "config" / "replay.yaml"))  # how Snakemake merges config files
    cfg = validate_config(merged)
    assert cfg["run"]["replay"] is True and cfg["run"]["label"] == "paper"
    assert cfg["conformity"]["generators"] == paper["conformity"]["generators"]
