"""Configuration: JSON-schema validation with defaults, and cross-field checks.

The Snakefile calls :func:`validate_config` while it is parsed, so a bad key or
value stops the run before any job is scheduled. Config files are read with a
strict YAML loader (:func:`load_config`): a repeated key or a plain value that
YAML 1.1 and 1.2 read differently (``no``, ``012``, ``1:20``, ``2026-01-01``) is an
error naming file, line and column. Messages name the offending key
by its dotted path and, for closed sets, the values that are allowed, because a
researcher fixing a config at 2 a.m. should not have to read the schema.
"""

from __future__ import annotations

import copy
import datetime
import difflib
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from context_effects import config_checks

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """The configuration is invalid; the message lists every problem and its fix."""


def load_schema(path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    # Strictly, like a config: a default written `no` or `012` would change type unseen.
    with open(path, encoding="utf-8") as fh:
        return load_yaml_strict(fh.read(), str(path))


# ------------------------------------------------------------------ strict loading
#
# PyYAML, which Snakemake uses too, reads YAML 1.1: a repeated key silently keeps the
# last value, and some plain (unquoted) scalars change type — `no` and `off` become
# false, `012` the octal 10, `1:20` the base-60 80, `2026-01-01` a date. A YAML 1.2
# reader (and a person) reads them otherwise. The strict loader refuses a repeated key
# and every plain scalar whose YAML 1.1 value differs from its YAML 1.2 (core schema)
# value, naming file, line and column; a value both read alike (true, 0.5, 42, ~, text)
# loads as usual.

_YAML12_NULL = re.compile(r"^(?:~|null|Null|NULL|)$")
_YAML12_BOOL = {"true": True, "True": True, "TRUE": True, "false": False, "False": False, "FALSE": False}
_YAML12_INT = re.compile(r"^[-+]?[0-9]+$")
_YAML12_OCT = re.compile(r"^0o[0-7]+$")
_YAML12_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
_YAML12_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_YAML12_INF = re.compile(r"^[-+]?\.(?:inf|Inf|INF)$")
_YAML12_NAN = re.compile(r"^\.(?:nan|NaN|NAN)$")


def _yaml12_value(text: str) -> Any:
    """A plain scalar as the YAML 1.2 core schema reads it."""
    if _YAML12_NULL.match(text):
        return None
    if text in _YAML12_BOOL:
        return _YAML12_BOOL[text]
    if _YAML12_INT.match(text):
        return int(text)
    if _YAML12_OCT.match(text):
        return int(text[2:], 8)
    if _YAML12_HEX.match(text):
        return int(text[2:], 16)
    if _YAML12_FLOAT.match(text):
        return float(text)
    if _YAML12_INF.match(text):
        return float("-inf") if text.startswith("-") else float("inf")
    if _YAML12_NAN.match(text):
        return float("nan")
    return text


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    return a == b


def _reading(text: str, value: Any, *, yaml11: bool) -> str:
    """How one YAML version reads a plain scalar, in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int):
        how = ""
        if yaml11 and re.match(r"^[-+]?0[0-7_]+$", text):
            how = " (octal)"
        elif yaml11 and ":" in text:
            how = " (base 60)"
        elif yaml11 and text.lstrip("+-").startswith("0b"):
            how = " (binary)"
        return f"the integer {value}{how}"
    if isinstance(value, float):
        return f"the number {_number(value)}" + (" (base 60)" if yaml11 and ":" in text else "")
    if isinstance(value, datetime.datetime):
        return "a timestamp"
    if isinstance(value, datetime.date):
        return "a date"
    return f"the text {value!r}"


def _number(value: float) -> str:
    """A float written so that YAML 1.1 and 1.2 both read it as that float."""
    text = repr(value)
    if "e" in text and "." not in text:
        text = text.replace("e", ".0e", 1)
    return re.sub(r"e(\d)", r"e+\1", text)


def _fix(text: str, value11: Any, value12: Any) -> str:
    quote = f'quote it ("{text}") if you mean text'
    if isinstance(value12, (int, float)) and not isinstance(value12, bool):
        plain = str(value12) if isinstance(value12, int) else _number(value12)
        return f"write {plain} if you mean the number, or {quote}"
    if isinstance(value11, bool):
        return f"{quote}, or write {str(value11).lower()} if you mean the boolean"
    if isinstance(value11, (int, float)):
        plain = str(value11) if isinstance(value11, int) else _number(value11)
        return f"{quote}, or write {plain} if you mean the number"
    return quote


_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that notes every plain scalar YAML 1.1 and 1.2 read differently,
    and (``check_keys``) every key repeated within one mapping."""

    def __init__(self, stream: str, source: str) -> None:
        super().__init__(stream)
        self.source = source
        self.problems: list[tuple[int, int, str]] = []

    def _where(self, node: yaml.Node) -> tuple[int, int, str]:
        line, column = node.start_mark.line + 1, node.start_mark.column + 1
        return line, column, f"{self.source}:{line}:{column}"

    def compose_scalar_node(self, anchor):  # noqa: ANN001 - PyYAML's signature
        event = self.peek_event()
        node = super().compose_scalar_node(anchor)
        # Plain, untagged scalars only: a quoted value or an explicit tag says what it is.
        if event.style is None and event.tag is None and node.tag != _MERGE_TAG:
            value11 = self.construct_object(node)
            value12 = _yaml12_value(node.value)
            if not _same(value11, value12):
                line, column, where = self._where(node)
                self.problems.append((line, column, (
                    f"{where}: plain value `{node.value}` is {_reading(node.value, value11, yaml11=True)} in "
                    f"YAML 1.1 (as PyYAML and Snakemake read it) but {_reading(node.value, value12, yaml11=False)} "
                    f"in YAML 1.2; {_fix(node.value, value11, value12)}"
                )))
        return node

    def check_keys(self, node: yaml.Node) -> None:
        if isinstance(node, yaml.SequenceNode):
            for item in node.value:
                self.check_keys(item)
        if not isinstance(node, yaml.MappingNode):
            return
        seen: dict[Any, int] = {}
        for key_node, value_node in node.value:
            self.check_keys(value_node)
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue  # `<<: *base` and then overriding a merged key is intended
            key = self.construct_object(key_node)
            line, column, where = self._where(key_node)
            if key in seen:
                self.problems.append((line, column, (
                    f"{where}: duplicate key `{key}` (first at line {seen[key]}) in the same mapping; YAML keeps "
                    "only the last one and silently drops the other: merge the two or delete one"
                )))
            else:
                seen[key] = line


# YAML 1.1's reading of a date, whatever another library did to PyYAML's SafeLoader:
# lm-format-enforcer (loaded with vLLM's structured output) makes every SafeLoader in the
# process read timestamps as text, which would let `2026-01-01` through unnoticed.
_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.constructor.SafeConstructor.construct_yaml_timestamp)


class _JsonDuplicate(Exception):
    """A JSON object repeats a key (the YAML reader then says where)."""


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _JsonDuplicate(key)
        out[key] = value
    return out


def _non_finite(value: Any, path: tuple[str, ...] = ()) -> Iterator[str]:
    """Dotted key (list items by index) of every NaN or infinite number in a loaded config."""
    if isinstance(value, float) and not math.isfinite(value):
        yield f"`{_dotted(path)}` = {value}"
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _non_finite(item, (*path, str(key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _non_finite(item, (*path, str(i)))


def _refuse_non_finite(data: Any, source: str) -> Any:
    # `.nan`, `.inf` and `1e309` (which overflows to inf) are numbers to YAML and JSON,
    # and every comparison with NaN is false, so a range check in the schema lets it through.
    found = list(_non_finite(data))
    if found:
        raise ConfigError(
            f"{source}: {len(found)} non-finite number(s): {'; '.join(found)}. Settings must be finite numbers "
            "(NaN and infinity mean no setting at all, and a number beyond about 1.8e308 overflows to "
            "infinity): write a finite value, or leave the key out for its default"
        )
    return data


def load_yaml_strict(text: str, source: str = "<config>") -> Any:
    """Parse a config text as Snakemake does (JSON first, else YAML), refusing repeated
    keys, plain scalars YAML 1.1 and 1.2 read differently and non-finite numbers; the
    ConfigError lists every such problem as ``source:line:column: ...`` (non-finite
    numbers by dotted key) with its fix."""
    try:
        return _refuse_non_finite(json.loads(text, object_pairs_hook=_json_pairs), source)
    except _JsonDuplicate:
        pass  # json gives no position for a repeated key: the YAML reader finds it with one
    except ConfigError:
        raise
    except ValueError:
        pass  # not JSON: YAML, as Snakemake falls back to
    loader = _StrictLoader(text, source)
    try:
        node = loader.get_single_node()
        if node is not None:
            loader.check_keys(node)
        if loader.problems:
            found = [p for _, _, p in sorted(loader.problems)]
            if len(found) == 1:
                raise ConfigError(found[0])
            raise ConfigError(f"{source}: {len(found)} problem(s):\n" + "\n".join(f"  - {p}" for p in found))
        return None if node is None else _refuse_non_finite(loader.construct_document(node), source)
    except yaml.MarkedYAMLError as exc:
        # PyYAML's message names "<unicode string>"; say which file and where, as an editor counts.
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
        what = exc.problem or exc.context or "syntax error"
        if exc.context and exc.problem:
            opened = exc.context_mark
            at = f" (line {opened.line + 1}, column {opened.column + 1})" if opened is not None else ""
            what = f"{exc.context}{at}: {exc.problem}"
        raise ConfigError(f"{where}: not valid YAML: {what}; fix the syntax there (indentation, a missing "
                          "colon or closing bracket or quote)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def load_config(path: str | Path) -> dict[str, Any]:
    """Read one config file strictly (see ``load_yaml_strict``); it must be a mapping."""
    with open(path, encoding="utf-8") as fh:
        data = load_yaml_strict(fh.read(), str(path))
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file must be a YAML mapping, got {type(data).__name__}")
    return data


def check_config_files(paths: Iterable[str | Path]) -> None:
    """Read every config file strictly (:func:`load_config`); ConfigError on the first bad one.

    Snakemake parses the ``--configfile`` files itself (YAML 1.1, a repeated key silently
    last-wins) before the Snakefile runs; ``workflow/rules/common.smk`` reads them again
    with this."""
    for path in paths:
        load_config(path)


def check_resource_names(config: Mapping[str, Any], rule_names: Iterable[str]) -> None:
    """Every key of ``resources:`` must be a rule of the workflow; ConfigError listing the rules otherwise.

    The rule names are known only after every rule file is included, so the ``Snakefile``
    calls this last."""
    rules = sorted(set(rule_names))
    problems = []
    for name in sorted(config.get("resources") or {}):
        if name in rules:
            continue
        close = difflib.get_close_matches(name, rules, n=1)
        hint = f"did you mean `{close[0]}`? " if close else ""
        problems.append(f"`resources.{name}` names no rule of this workflow; {hint}rules: {', '.join(rules)}")
    if problems:
        listing = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"invalid configuration ({len(problems)} problem(s)):\n{listing}")


def _resolve(schema: Mapping[str, Any], root: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    if not ref.startswith("#/"):
        raise ValueError(f"only local $refs are supported in the config schema, got {ref!r}")
    node: Any = root
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def fill_defaults(instance: Any, schema: Mapping[str, Any], root: Mapping[str, Any] | None = None) -> Any:
    """Return a copy of ``instance`` with every schema default filled in, recursively.

    Objects that are absent but declare ``default: {}`` are created, so nested
    defaults (e.g. ``conformity.generation.max_tokens``) appear even when the
    user wrote no ``conformity:`` block at all.
    """
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if not isinstance(instance, dict):
        return instance
    out = dict(instance)
    props = schema.get("properties", {})
    for name, sub in props.items():
        sub_r = _resolve(sub, root)
        if name not in out and "default" in sub_r:
            out[name] = copy.deepcopy(sub_r["default"])
        if name in out:
            out[name] = fill_defaults(out[name], sub_r, root)
    extra = schema.get("additionalProperties")
    if isinstance(extra, Mapping):
        for name in out:
            if name not in props:
                out[name] = fill_defaults(out[name], extra, root)
    return out


def _dotted(path: Any) -> str:
    parts = [str(p) for p in path]
    return ".".join(parts) if parts else "<top level>"


def _is_finite_number(checker: Any, instance: Any) -> bool:
    return isinstance(instance, (int, float)) and not isinstance(instance, bool) and math.isfinite(instance)


# The schema's `number` is a finite one: settings given with `--config` bypass the
# strict file loader, and `minimum`/`maximum` never refuse NaN (every comparison is false).
_FiniteValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("number", _is_finite_number),
)


_BOUNDS = {"minimum": "of at least", "exclusiveMinimum": "above", "maximum": "of at most",
           "exclusiveMaximum": "below"}


def _describe(error: jsonschema.ValidationError, root: Mapping[str, Any]) -> str:
    where = _dotted(error.absolute_path)
    schema = _resolve(error.schema, root) if isinstance(error.schema, Mapping) else {}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(schema.get("properties", {}))
        unknown = sorted(k for k in error.instance if k not in allowed)
        keys = ", ".join(f"`{where + '.' if error.absolute_path else ''}{k}`" for k in unknown)
        return f"unknown key {keys}; allowed keys here: {', '.join(allowed)}"
    if error.validator == "enum":
        allowed = ", ".join(repr(v) for v in error.validator_value)
        return f"`{where}` = {error.instance!r} is not allowed; allowed values: {allowed}"
    if error.validator == "type" and isinstance(error.instance, float) and not math.isfinite(error.instance):
        return (f"`{where}` = {error.instance} is not a finite number; write a finite value "
                "(or leave the key out for its default)")
    if error.validator == "required":
        # One error per missing key, named only in the message ("'x' is a required property").
        key = next((k for k in error.validator_value if repr(k) in error.message), None)
        if key is None:
            return f"`{where}`: {error.message}"
        prefix = f"{where}." if error.absolute_path else ""
        return f"`{prefix}{key}` is missing: `{where}` needs {', '.join(error.validator_value)}; add it"
    if error.validator in _BOUNDS:
        return f"`{where}`: {error.message}; write a value {_BOUNDS[error.validator]} {error.validator_value}"
    if "propertyNames" in error.schema_path:
        return (
            f"`{where}`: key {error.instance!r} must match {error.validator_value} "
            "(letters, digits, '_', '.', '-': it is used in file paths)"
        )
    return f"`{where}`: {error.message}"


#: Where each study names the models it runs.
STUDY_MODEL_KEYS = {"conformity": ("generators", "judges", "hosted_judges"), "amel": ("models",),
                    "anchoring": ("judges",)}


def _cross_checks(cfg: Mapping[str, Any]) -> list[str]:
    """Constraints a JSON schema cannot express (references between sections)."""
    problems: list[str] = []
    models = cfg.get("models", {})
    datasets = cfg.get("datasets", {})

    def need_models(section: str, key: str) -> None:
        for name in cfg.get(section, {}).get(key, []):
            if name not in models:
                problems.append(
                    f"`{section}.{key}` names model {name!r}, which is not defined under `models`; "
                    f"defined models: {', '.join(sorted(models)) or '(none)'}"
                )

    for section, keys in STUDY_MODEL_KEYS.items():
        for key in keys:
            need_models(section, key)

    run_by = {name for section, keys in STUDY_MODEL_KEYS.items() if cfg.get(section, {}).get("enabled", True)
              for key in keys for name in cfg.get(section, {}).get(key, [])}
    for name in cfg.get("card", {}).get("models", []):
        if name not in models:
            problems.append(f"`card.models` names model {name!r}, which is not defined under `models`; "
                            f"defined models: {', '.join(sorted(models)) or '(none)'}")
        elif name not in run_by:
            problems.append(f"`card.models` names model {name!r}, which no enabled study runs: a card reads the "
                            f"run's own numbers, so add it to `conformity.judges` (and `conformity.generators` "
                            f"where it can generate), `amel.models` or `anchoring.judges`, or remove it from "
                            f"`card.models`")

    conf = cfg.get("conformity", {})
    if conf.get("enabled", True):
        for key, what in (("datasets", "dataset"), ("generators", "generator model"), ("judges", "judge model")):
            if key in conf and not conf[key]:
                problems.append(
                    f"`conformity.{key}` is empty but Study C is enabled (`conformity.enabled` is true, the "
                    f"default); list at least one {what} under `conformity.{key}` or set `conformity.enabled: false`"
                )
    if conf and conf.get("primary_seed") not in conf.get("seeds", []):
        problems.append(
            f"`conformity.primary_seed` = {conf.get('primary_seed')} must be one of `conformity.seeds` {conf.get('seeds')}"
        )

    used: set[str] = set()
    if conf.get("enabled", True):
        used |= set(conf.get("datasets", []))
    for section in ("amel", "anchoring"):
        sec = cfg.get(section, {})
        if sec.get("enabled", True):
            used |= set(sec.get("benchmark_datasets", []))
    for name in sorted(used):
        if name not in datasets:
            problems.append(f"dataset {name!r} is used by a study but `datasets.{name}` is not configured")
            continue
        ds = datasets[name]
        if ds.get("source") == "local" and not ds.get("local_path"):
            problems.append(f"`datasets.{name}.source` is 'local' but `datasets.{name}.local_path` is not set")
        if ds.get("source") == "hub" and "hub" not in ds:
            problems.append(
                f"`datasets.{name}.source` is 'hub' but `datasets.{name}.hub` (id, split, revision) is not set"
            )

    for name, model in models.items():
        if model.get("backend") == "openai_compatible" and not model.get("base_url"):
            problems.append(f"`models.{name}.base_url` is required for backend 'openai_compatible'")
        if model.get("source", {}).get("kind") == "gguf_package":
            if not model["source"].get("package"):
                problems.append(f"`models.{name}.source.package` is required when source.kind is 'gguf_package'")
            if model.get("model_id") != f"resources/models/{name}":
                # The conversion rule writes resources/models/<name>; vLLM must load that.
                problems.append(
                    f"`models.{name}.model_id` must be 'resources/models/{name}' for a gguf_package model "
                    f"(the converted model's directory), got {model.get('model_id')!r}"
                )
    return problems + config_checks.budget_problems(cfg)


def card_studies(cfg: dict[str, Any]) -> dict[str, Any]:
    """``card.run_studies``: every study runs the card's models (the schema's description).
    Without ``card.models`` nothing is set, and the cross-checks say what is missing."""
    card = cfg.get("card") or {}
    models = list(card.get("models") or [])
    if not card.get("run_studies") or not models:
        return cfg
    defined = cfg.get("models", {})
    if isinstance(cfg.get("amel"), dict):
        cfg["amel"]["models"] = models
    if isinstance(cfg.get("anchoring"), dict):
        cfg["anchoring"]["judges"] = models
    if isinstance(cfg.get("conformity"), dict):
        cfg["conformity"]["judges"] = models
        cfg["conformity"]["generators"] = [m for m in models if (defined.get(m) or {}).get("mode", "chat") == "chat"]
    return cfg


def validate_config(
    config: Mapping[str, Any], schema: Mapping[str, Any] | None = None, *, workdir: str | Path | None = None
) -> dict[str, Any]:
    """Validate ``config`` and return it with defaults filled; raise ConfigError otherwise.

    Besides the schema and the references between sections, designs the data cannot
    support are errors (``context_effects.config_checks.design_problems``). With
    ``workdir`` (the workflow passes its working directory) the data files the config
    names, such as AMEL item files, are read too.
    """
    schema = load_schema() if schema is None else schema
    filled = card_studies(fill_defaults(copy.deepcopy(dict(config)), schema))
    validator = _FiniteValidator(schema)
    errors = sorted(validator.iter_errors(filled), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    problems = [_describe(e, schema) for e in errors]
    card = filled.get("card") or {}
    if card.get("run_studies") and not card.get("models"):
        # Said first: a card design file alone (config/card.yaml) names no model at all.
        problems.insert(0, "`card.run_studies` is true but `card.models` is empty: define the model(s) to card "
                           "under `models` and name them under `card.models`, e.g. in a second --configfile "
                           "(docs/card.md, \"Your model\")")
    if not problems:
        problems = _cross_checks(filled)
    if not problems:
        problems = config_checks.design_problems(filled, workdir)
    if not problems:
        config_checks.warn_history_shortfalls(filled, workdir)
        config_checks.warn_saturation_shares(filled)
    if problems:
        listing = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"invalid configuration ({len(problems)} problem(s)):\n{listing}")
    return _sorted_keys(filled)


def _sorted_keys(value: Any) -> Any:
    """Every mapping with its keys in sorted order (lists keep theirs).

    Snakemake compares a job's params with the last run's in their serialised form,
    where a dict's key order counts: reordering the keys of a config file, or a default
    filled in after them, must not rerun anything. Order that matters is held in lists.
    """
    if isinstance(value, Mapping):
        return {k: _sorted_keys(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(v) for v in value]
    return value


def check_files(paths: Iterable[str | Path], workdir: str | Path = ".") -> dict[str, Any]:
    """What the workflow does with ``--configfile`` files before any job: read each strictly,
    merge them in order as Snakemake does (nested mappings merged, later files win), and
    validate the result. Returns the validated config; ConfigError otherwise."""
    from snakemake.utils import update_config

    merged: dict[str, Any] = {}
    for path in paths:
        update_config(merged, load_config(path))
    return validate_config(merged, workdir=workdir)


def main(argv: Iterable[str] | None = None) -> int:
    """``python -m context_effects.config FILE...``: check config files without Snakemake.

    Snakemake reads ``--configfile`` files itself before the workflow starts and, for a
    YAML syntax error, says only "not valid JSON or YAML"; this names file, line and column.
    """
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m context_effects.config", description=main.__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="config files, in the order given to --configfile")
    args = ap.parse_args(None if argv is None else list(argv))
    try:
        check_files(args.files)
    except (ConfigError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"ok: {' + '.join(args.files)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
