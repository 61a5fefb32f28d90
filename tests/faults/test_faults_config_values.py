"""Config values that fail clearly while the workflow is parsed: non-finite numbers (every
numeric key of the schema, in files and in ``--config`` values), YAML syntax errors with
file, line and column, and design constraints between keys.

The file-level cases also run through Snakemake itself (``tests/faults/configs/``:
``non_finite_numbers.yaml``, ``amel_position_turns_beyond_history.yaml``).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from conftest import REPO
from context_effects import config as config_module
from context_effects.config import ConfigError, load_config, load_schema, load_yaml_strict, validate_config

DEMO = load_config(REPO / "config" / "demo.yaml")


def _numeric_paths(schema: Mapping[str, Any], root: Mapping[str, Any], path: tuple = ()) -> Iterator[tuple]:
    """Every key path (list items as index 0, a model's keys under a demo model) whose
    schema is a number or an integer, reached through properties, items and $ref."""
    if "$ref" in schema:
        schema = root["$defs"][schema["$ref"].rsplit("/", 1)[1]]
    types = schema.get("type")
    types = types if isinstance(types, list) else [types]
    if "number" in types or "integer" in types:
        yield path
    for key, sub in (schema.get("properties") or {}).items():
        yield from _numeric_paths(sub, root, (*path, key))
    if isinstance(schema.get("items"), Mapping):
        yield from _numeric_paths(schema["items"], root, (*path, 0))
    if path == ("models",) and isinstance(schema.get("additionalProperties"), Mapping):
        yield from _numeric_paths(schema["additionalProperties"], root, (*path, next(iter(DEMO["models"]))))


SCHEMA = load_schema()
NUMERIC = sorted(set(_numeric_paths(SCHEMA, SCHEMA)), key=str)


def _planted(path: tuple, value: float) -> dict[str, Any]:
    cfg = copy.deepcopy(DEMO)
    node: Any = cfg
    for key, nxt in zip(path, path[1:]):
        if isinstance(key, int):
            node = node[key]
            continue
        if not isinstance(node.get(key), (dict, list)):
            node[key] = [] if isinstance(nxt, int) else {}
        if isinstance(node[key], list) and not node[key]:
            node[key].append({} if not isinstance(nxt, int) else [])
        node = node[key]
    last = path[-1]
    if isinstance(last, int):
        node[:] = [value]
    else:
        node[last] = value
    return cfg


def test_the_schema_walk_reaches_the_numeric_keys():
    dotted = {".".join(map(str, p)) for p in NUMERIC}
    assert len(NUMERIC) >= 80
    for key in ("conformity.fit.theta_anchor", "amel.position_biased_turns", "amel.history_lengths.0",
                "datasets.truthfulqa.n_items", f"models.{next(iter(DEMO['models']))}.synthetic.gamma"):
        assert key in dotted, key


# NaN at every numeric key; the infinities (the same check) at a spread of them.
@pytest.mark.parametrize("value, paths", [(math.nan, NUMERIC), (math.inf, NUMERIC[::9]), (-math.inf, NUMERIC[4::9])],
                         ids=["nan", "inf", "-inf"])
def test_every_numeric_key_refuses_non_finite_values_given_as_settings(value, paths):
    """What `snakemake --config key=...` or a profile passes: no strict file loader on the way."""
    missed = []
    for path in paths:
        dotted = ".".join(map(str, path))
        try:
            validate_config(_planted(path, value))
        except ConfigError as exc:
            if f"`{dotted}` = {value} is not a finite number" not in str(exc):
                missed.append(f"{dotted}: {str(exc)[:300]}")
            continue
        missed.append(f"{dotted}: accepted {value}")
    assert not missed, "\n".join(missed)


@pytest.mark.parametrize("text, shown", [
    (".nan", "nan"), (".NaN", "nan"), (".inf", "inf"), ("-.Inf", "-inf"), ("+.inf", "inf"),
    ("1.0e+309", "inf"), ("-2.5e+400", "-inf"),
])
def test_the_strict_loader_names_each_non_finite_number(text, shown):
    doc = f"conformity:\n  fit: {{theta_anchor: {text}}}\namel:\n  history_lengths: [5, {text}]\n"
    with pytest.raises(ConfigError) as err:
        load_yaml_strict(doc, "my.yaml")
    msg = str(err.value)
    assert msg.startswith("my.yaml: 2 non-finite number(s)")
    assert f"`conformity.fit.theta_anchor` = {shown}" in msg and f"`amel.history_lengths.1` = {shown}" in msg


@pytest.mark.parametrize("text", ['{"conformity": {"fit": {"theta_anchor": NaN}}}',
                                  '{"conformity": {"fit": {"theta_anchor": -Infinity}}}',
                                  '{"conformity": {"fit": {"theta_anchor": 1e999}}}'])
def test_json_configs_refuse_non_finite_numbers_too(text):
    with pytest.raises(ConfigError, match=r"my\.json: 1 non-finite number\(s\): `conformity\.fit\.theta_anchor`"):
        load_yaml_strict(text, "my.json")


def test_finite_extremes_and_text_stay_allowed():
    data = load_yaml_strict('a: 1.0e+308\nb: -1.0e+308\nc: ".nan"\nd: 10000000000000000000000\n', "ok.yaml")
    assert data == {"a": 1e308, "b": -1e308, "c": ".nan", "d": 10**22}
    assert json.loads('{"x": 1}') == load_yaml_strict('{"x": 1}', "ok.json")


@pytest.mark.parametrize("doc, where, what", [
    ("conformity:\n  seeds: [42, 43\nfoo: 1\n", "bad.yaml:3:4:", "while parsing a flow sequence (line 2, column 10)"),
    ("a:\n\tb: 1\n", "bad.yaml:2:1:", "found character '\\t' that cannot start any token"),
    ("a: 1\n b: 2\n", "bad.yaml:2:3:", "mapping values are not allowed here"),
    ('a: "open\nb: 2\n', "bad.yaml:3:1:", "while scanning a quoted scalar (line 1, column 4)"),
])
def test_a_yaml_syntax_error_names_file_line_and_column(tmp_path, capsys, doc, where, what):
    with pytest.raises(ConfigError) as err:
        load_yaml_strict(doc, "bad.yaml")
    assert str(err.value).startswith(f"{where} not valid YAML: ") and what in str(err.value)
    # Snakemake reads --configfile files before the workflow and says only "not valid JSON
    # or YAML"; the config checker names the place.
    path = tmp_path / "bad.yaml"
    path.write_text(doc)
    assert config_module.main([str(path)]) == 1
    assert f"{path}:{where.split(':', 1)[1]}" in capsys.readouterr().err


def test_the_config_checker_merges_files_as_snakemake_does(tmp_path, capsys):
    override = tmp_path / "override.yaml"
    override.write_text("amel: {position_biased_turns: 60}\n")
    assert config_module.main([str(REPO / "config" / "demo.yaml")]) == 0
    assert config_module.main([str(REPO / "config" / "demo.yaml"), str(override)]) == 1
    err = capsys.readouterr().err
    assert "`amel.position_biased_turns` = 60 must not exceed `amel.position_history_length`" in err


def test_position_turns_beyond_the_history_fail_at_validation_not_in_a_job():
    cfg = copy.deepcopy(DEMO)
    cfg["amel"].update(positions=["start", "end"], position_history_length=6, position_biased_turns=7)
    with pytest.raises(ConfigError, match=r"`amel\.position_biased_turns` = 7 must not exceed "
                                          r"`amel\.position_history_length` = 6"):
        validate_config(cfg)
    cfg["amel"]["position_biased_turns"] = 6  # equal is allowed: every turn biased
    validate_config(cfg)
    cfg["amel"].update(positions=[], position_biased_turns=7)  # no position runs: nothing to check
    validate_config(cfg)


def test_more_generated_speakers_than_the_generator_has_fail_at_validation():
    from context_effects.conformity.peers import MAX_SPEAKERS, peer_panel

    cfg = copy.deepcopy(DEMO)
    cfg["conformity"]["peers"] = {"source": "generated", "n_speakers": MAX_SPEAKERS + 1}
    with pytest.raises(ConfigError, match=rf"`conformity\.peers\.n_speakers` = {MAX_SPEAKERS + 1}.*at most {MAX_SPEAKERS}"):
        validate_config(cfg)
    with pytest.raises(ValueError):  # what the first job would have said
        peer_panel("x", 1, MAX_SPEAKERS + 1)
    cfg["conformity"]["peers"]["n_speakers"] = MAX_SPEAKERS
    validate_config(cfg)
    assert len(peer_panel("x", 1, MAX_SPEAKERS).speakers) == MAX_SPEAKERS
