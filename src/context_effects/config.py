"""Configuration: JSON-schema validation with defaults, and cross-field checks.

The Snakefile calls :func:`validate_config` while it is parsed, so a bad key or
value stops the run before any job is scheduled. Messages name the offending key
by its dotted path and, for closed sets, the values that are allowed, because a
researcher fixing a config at 2 a.m. should not have to read the schema.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "workflow" / "schemas" / "config.schema.yaml"


class ConfigError(ValueError):
    """The configuration is invalid; the message lists every problem and its fix."""


def load_schema(path: str | Path = SCHEMA_PATH) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def load_config(path: str | Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config file must be a YAML mapping, got {type(data).__name__}")
    return data


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
    if error.validator == "required":
        return f"`{where}`: {error.message}"
    if "propertyNames" in error.schema_path:
        return (
            f"`{where}`: key {error.instance!r} must match {error.validator_value} "
            "(letters, digits, '_', '.', '-': it is used in file paths)"
        )
    return f"`{where}`: {error.message}"


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

    for section, keys in {
        "conformity": ("generators", "judges", "hosted_judges"),
        "amel": ("models",),
        "anchoring": ("judges",),
    }.items():
        for key in keys:
            need_models(section, key)

    conf = cfg.get("conformity", {})
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
    return problems


def validate_config(config: Mapping[str, Any], schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Validate ``config`` and return it with defaults filled; raise ConfigError otherwise."""
    schema = load_schema() if schema is None else schema
    filled = fill_defaults(copy.deepcopy(dict(config)), schema)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(filled), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    problems = [_describe(e, schema) for e in errors]
    if not problems:
        problems = _cross_checks(filled)
    if problems:
        listing = "\n".join(f"  - {p}" for p in problems)
        raise ConfigError(f"invalid configuration ({len(problems)} problem(s)):\n{listing}")
    return filled
