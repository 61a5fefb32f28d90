"""The configuration schema: both shipped configs validate, bad ones fail with useful messages."""

from __future__ import annotations

import copy
import json

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
        (lambda c: c["datasets"]["truthfulqa"].update(sorce="hub"), "unknown key `datasets.truthfulqa.sorce`; allowed keys here: balance_by, hub, local_path, n_items, sample, source"),
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


# ------------------------------------------------------------ strict YAML loading
#
# PyYAML (and so Snakemake) reads YAML 1.1: a duplicate key silently keeps the last
# value, and plain scalars such as `no`, `012`, `1:20` or `2026-01-01` become booleans,
# octal or base-60 integers and dates. load_config refuses both, naming file, line,
# column and the fix; a plain YAML 1.2 value still loads.


def _write(tmp_path, text, name="cfg.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_strict_loader_keeps_plain_yaml_12_values(tmp_path):
    path = _write(tmp_path, (
        "a: true\nb: false\nc: 0.5\nd: 42\ne: ~\nf: null\ng: -3\nh: .5\ni: 1.0e+3\nj: 0x1F\n"
        "k: text\nl: 'yes'\nm: \"012\"\nn: '2026-01-01'\no: [1, 2]\np: {q: 0}\nr: 0\ns: 1.5e+3\n"
        "t: !!str no\nu: hello world\n"
    ))
    assert load_config(path) == {
        "a": True, "b": False, "c": 0.5, "d": 42, "e": None, "f": None, "g": -3, "h": 0.5, "i": 1000.0,
        "j": 31, "k": "text", "l": "yes", "m": "012", "n": "2026-01-01", "o": [1, 2], "p": {"q": 0},
        "r": 0, "s": 1500.0, "t": "no", "u": "hello world",
    }


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("enabled: yes", "`yes` is the boolean true in YAML 1.1"),
        ("enabled: no", "`no` is the boolean false in YAML 1.1"),
        ("enabled: on", "`on` is the boolean true in YAML 1.1"),
        ("label: off", "`off` is the boolean false in YAML 1.1"),
        ("seed: 012", "`012` is the integer 10 (octal) in YAML 1.1"),
        ("seed: 09", "`09`"),
        ("max_tokens: 1:20", "`1:20` is the integer 80 (base 60) in YAML 1.1"),
        ("label: 2026-01-01", "`2026-01-01` is a date in YAML 1.1"),
        ("seed: 0b101", "`0b101`"),
        ("seed: 1_000", "`1_000`"),
        ("temperature: 1e-3", "`1e-3`"),
        ("yes: 1", "`yes` is the boolean true in YAML 1.1"),
    ],
)
def test_strict_loader_rejects_ambiguous_plain_scalars(tmp_path, line, expected):
    path = _write(tmp_path, f"# header\nrun:\n  {line}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert f"{path}:3:" in msg, msg  # file, line (and column)
    assert expected in msg, msg
    assert "quote it" in msg, msg


def test_strict_loader_sees_a_date_after_a_library_patched_pyyaml(tmp_path, monkeypatch):
    """lm-format-enforcer (loaded with vLLM's structured output) makes every SafeLoader in
    the process read timestamps as text; the strict loader still reads them as YAML 1.1 does."""
    import yaml

    monkeypatch.setitem(yaml.SafeLoader.yaml_constructors, "tag:yaml.org,2002:timestamp",
                        yaml.SafeLoader.yaml_constructors["tag:yaml.org,2002:str"])
    assert yaml.safe_load("d: 2026-01-01") == {"d": "2026-01-01"}  # the patch is in place
    path = _write(tmp_path, "# header\nrun:\n  label: 2026-01-01\n")
    with pytest.raises(ConfigError, match="`2026-01-01` is a date in YAML 1.1"):
        load_config(path)


def test_strict_loader_rejects_duplicate_keys(tmp_path):
    path = _write(tmp_path, "run:\n  label: a\nsampling:\n  seed: 1\n  seed: 2\nrun:\n  kind: demo\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert f"{path}:5:3: duplicate key `seed` (first at line 4)" in msg, msg
    assert f"{path}:6:1: duplicate key `run` (first at line 1)" in msg, msg
    assert "YAML keeps only the last one" in msg and "delete one" in msg


def test_strict_loader_reads_json_like_snakemake(tmp_path):
    assert load_config(_write(tmp_path, '{"a": 1e3, "b": "yes"}', "c.json")) == {"a": 1000.0, "b": "yes"}
    with pytest.raises(ConfigError, match=r'c\.json:1:10: duplicate key `a`'):
        load_config(_write(tmp_path, '{"a": 1, "a": 2}', "c.json"))


def test_shipped_configs_load_strictly():
    for name in ("config.yaml", "demo.yaml", "replay.yaml"):
        assert isinstance(load_config(REPO / "config" / name), dict)


# ------------------------------------------------- designs the config cannot run


def _validated_demo():
    return copy.deepcopy(load_config(REPO / "config" / "demo.yaml"))


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda c: c["conformity"].update(datasets=[]),
         "`conformity.datasets` is empty but Study C is enabled"),
        (lambda c: c["conformity"].update(generators=[]),
         "`conformity.generators` is empty but Study C is enabled"),
        (lambda c: c["conformity"].update(judges=[]),
         "`conformity.judges` is empty but Study C is enabled"),
        (lambda c: c["anchoring"].update(tasks_per_dataset=5),
         "`anchoring.tasks_per_dataset` = 5 but `datasets.truthfulqa.n_items` = 4"),
        (lambda c: c["datasets"]["mmlu_pro"].update(n_items=1),
         "AMEL domain 'mmlu_pro': a history needs items of another question"),
    ],
)
def test_design_the_data_cannot_support_fails(mutate, expected):
    cfg = _validated_demo()
    mutate(cfg)
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert expected in str(err.value), str(err.value)


def test_disabled_study_may_leave_its_lists_empty():
    cfg = _validated_demo()
    cfg["conformity"] = {"enabled": False, "generators": [], "judges": [], "datasets": []}
    validate_config(cfg)


def test_amel_item_file_histories_checked_in_the_workdir(tmp_path):
    cfg = _validated_demo()
    items = tmp_path / "one_group.jsonl"
    rec = {"content": "c", "question": "q?", "question_swapped": "not q?", "group": "g"}
    items.write_text("".join(json.dumps({**rec, "id": f"i{i}", "answer": "Yes" if i % 2 else "No"}) + "\n"
                             for i in range(4)))
    cfg["amel"]["item_files"] = {"one_group": "one_group.jsonl"}
    validate_config(cfg)  # without a workdir no file is read
    with pytest.raises(ConfigError) as err:
        validate_config(cfg, workdir=tmp_path)
    msg = str(err.value)
    assert "`amel.item_files.one_group`" in msg and "all items share one group" in msg, msg
    cfg["amel"]["item_files"] = {"gone": "missing.jsonl"}
    with pytest.raises(ConfigError, match=r"`amel.item_files.gone`.*does not exist"):
        validate_config(cfg, workdir=tmp_path)
    # The shipped item file supports the demo design.
    validate_config(_validated_demo(), workdir=REPO)


def test_amel_history_longer_than_the_domain_is_reported(caplog):
    """Histories longer than a domain's other items cycle (docs/deviations.yaml,
    amel-history-construction): allowed, recorded per request, and said once at parse time."""
    from context_effects.config_checks import history_shortfalls

    cfg = validate_config(_validated_demo(), workdir=REPO)
    assert history_shortfalls(cfg, REPO) == []
    cfg["amel"]["history_lengths"] = [2, 7]
    short = history_shortfalls(cfg, REPO)
    # Demo benchmarks: 4 questions x 2 answers, a test item's own question excluded: 6 others.
    assert ("truthfulqa", 7, 6) in short and ("code_review", 7, 22) not in short
    paper = validate_config(load_config(REPO / "config" / "config.yaml"), workdir=REPO)
    # The paper design asks 50 turns (balanced histories included) of the 56-item code-review
    # domain: enough items that none repeats; cut it to 24 items and they would.
    assert not [s for s in history_shortfalls(paper, REPO) if s[0] == "code_review"]
    paper["amel"]["balanced_history_lengths"] = [60]
    assert ("code_review", 60, 54) in history_shortfalls(paper, REPO)


def test_resource_override_for_an_unknown_rule_fails():
    from context_effects.config import check_resource_names

    cfg = validate_config({**_validated_demo(), "resources": {"build_itemz": {"runtime": 5}}})
    with pytest.raises(ConfigError) as err:
        check_resource_names(cfg, ["all", "build_items", "fetch_dataset"])
    msg = str(err.value)
    assert "`resources.build_itemz` names no rule of this workflow" in msg
    assert "rules: all, build_items, fetch_dataset" in msg
    check_resource_names({**cfg, "resources": {"build_items": {"runtime": 5}}}, ["build_items"])


def test_config_files_given_to_snakemake_are_read_strictly(tmp_path):
    from context_effects.config import check_config_files

    good = _write(tmp_path, "run: {label: x}\n", "good.yaml")
    bad = _write(tmp_path, "run: {label: x}\nrun: {label: y}\n", "bad.yaml")
    check_config_files([good])
    with pytest.raises(ConfigError, match=r"bad\.yaml:2:1: duplicate key `run`"):
        check_config_files([good, bad])


def test_history_check_mirrors_how_histories_are_built():
    """history_shortfalls says "repeats" exactly when DomainItems.history repeats an item."""
    from context_effects.amel.design import DomainItems
    from context_effects.amel.items import build_domain_items
    from context_effects.config_checks import history_shortfalls

    cfg = validate_config(_validated_demo(), workdir=REPO)
    items = build_domain_items("code_review", item_file=REPO / "data/amel/code_review.jsonl",
                               items_per_domain=cfg["amel"]["items_per_domain"], seed=cfg["amel"]["seed"])
    domain = DomainItems(items)
    tests = items.loc[items["is_test"], "item_id"]
    for k in (21, 22, 23, 30):
        cfg["amel"]["history_lengths"] = [k]
        flagged = ("code_review", k, 22) in history_shortfalls(cfg, REPO)
        assert flagged == any(domain.history(i, k, seed=cfg["amel"]["seed"])[1] > 0 for i in tests), k


# ----------------------------------------------------- mistakes that used to reach a job


def _study_h(*judges: str, **models: dict) -> dict:
    """A small Study H config judged by ``judges`` (``sim``, synthetic, is always defined)."""
    return {
        "run": {"label": "t", "kind": "paper"},
        "datasets": {"truthfulqa": {"source": "local", "local_path": "data/demo/truthfulqa.jsonl", "n_items": 4}},
        "models": {"sim": {"backend": "synthetic", "model_id": "sim"}, **models},
        "conformity": {"enabled": False},
        "amel": {"enabled": False},
        "anchoring": {"judges": list(judges), "benchmark_datasets": ["truthfulqa"], "tasks_per_dataset": 4},
    }


@pytest.mark.parametrize("path", [("sampling", "seed"), ("sampling", "synthetic_seed"), ("anchoring", "seed"),
                                  ("conformity", "validation", "bootstrap_seed")], ids=".".join)
def test_a_negative_seed_numpy_cannot_take_fails_while_parsed(path):
    """Each seed reaches numpy's default_rng, which refuses a negative one ("expected non-negative
    integer") in the first job that draws with it: the item sample, the task draw, a bootstrap."""
    cfg = _study_h("sim")
    node = cfg
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = -1
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    assert f"`{'.'.join(path)}`: -1 is less than the minimum of 0; write a value of at least 0" in str(err.value)


@pytest.mark.parametrize("price", [{"input_per_mtok": 2.5}, {"output_per_mtok": 10.0}, {}])
def test_a_price_needs_both_fields(price):
    """The start's cost estimate read `output_per_mtok` of a half price: KeyError, after the DAG was built."""
    cfg = _study_h("sim", "gpt", gpt={"backend": "openai", "model_id": "gpt-4o", "price": price})
    with pytest.raises(ConfigError) as err:
        validate_config(cfg)
    for field in ("input_per_mtok", "output_per_mtok"):
        if field not in price:
            assert (f"`models.gpt.price.{field}` is missing: `models.gpt.price` needs input_per_mtok, "
                    "output_per_mtok; add it") in str(err.value)
    cfg["models"]["gpt"]["price"] = {"input_per_mtok": 2.5, "output_per_mtok": 10.0}
    validate_config(cfg)


def test_a_zero_budget_refuses_a_billed_model_and_allows_free_ones():
    """`run.budget_usd: 0` means no paid calls (docs/costs.md)."""
    billed = _study_h("sim", "gpt", "claude", gpt={"backend": "openai", "model_id": "gpt-4o"},
                      claude={"backend": "anthropic", "model_id": "claude-haiku-4-5"})
    billed["run"]["budget_usd"] = 0
    with pytest.raises(ConfigError) as err:
        validate_config(billed)
    text = str(err.value)
    assert ("`run.budget_usd` is 0, which allows no paid calls, but the run calls billed model(s) "
            "claude (anthropic), gpt (openai); set `run.budget_usd` to a positive limit in USD, or to null "
            "for no budget") in text, text
    for fix in ({"budget_usd": 0.5}, {"budget_usd": None}, {"budget_usd": 0, "replay": True}):
        validate_config({**billed, "run": {**billed["run"], **fix}})
    # Free models only, or a billed model defined but called by no enabled study: nothing is paid.
    free = _study_h("sim", qwen={"backend": "vllm", "model_id": "Qwen/Qwen2.5-0.5B-Instruct"})
    free["anchoring"]["judges"].append("qwen")
    free["run"]["budget_usd"] = 0.0
    assert validate_config(free)["run"]["budget_usd"] == 0
    unused = {**billed, "anchoring": {**billed["anchoring"], "judges": ["sim"]}}
    validate_config(unused)
    with pytest.raises(ConfigError, match=r"`run.budget_usd`: -0.01 is less than the minimum of 0"):
        validate_config({**free, "run": {**free["run"], "budget_usd": -0.01}})
