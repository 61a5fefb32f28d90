"""API keys come from the environment only, never from a config file.

Config may name *which* variable holds a key (``api_key_env``), never the key
itself: a config file gets committed, copied to clusters and attached to bug
reports. ``check_env`` runs before any job starts so a missing key fails the
run up front, naming every variable, instead of failing hours in;
``read_api_key`` is what a hosted backend calls when it is built.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

ENV_VARS: dict[str, str] = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Config keys that would mean a literal secret sits in a config file.
_FORBIDDEN_CONFIG_KEYS = ("api_key", "apikey", "api_token", "secret")
# Shapes of common provider keys, redacted from error text even when the
# variable holding them is unknown to us (e.g. an SDK echoing a partial key).
_KEY_PATTERNS = re.compile(r"\b(sk-(?:ant-|proj-)?[A-Za-z0-9_\-*]{8,})")


class MissingSecretError(RuntimeError):
    """One or more API-key environment variables are unset or empty."""

    def __init__(self, missing: Mapping[str, list[str]]) -> None:
        self.missing = {var: list(models) for var, models in missing.items()}
        lines = ["Missing API key environment variable(s):"]
        for var, models in sorted(self.missing.items()):
            who = ", ".join(models) if models else "requested directly"
            lines.append(f"  {var}  (needed by: {who})")
        lines.append(
            "Set each in the environment of the process that runs snakemake, e.g. "
            + " ".join(f"`export {v}=...`" for v in sorted(self.missing))
            + " (on a cluster: in the job environment or your shell profile). "
            "Never put keys in config files: config may only name the variable via `api_key_env`."
        )
        super().__init__("\n".join(lines))


class SecretInConfigError(ValueError):
    """The config looks like it holds a key rather than the name of a variable."""


def _model_var(name: str, cfg: Mapping[str, Any]) -> str | None:
    for bad in _FORBIDDEN_CONFIG_KEYS:
        if bad in cfg:
            raise SecretInConfigError(
                f"model {name!r}: config key {bad!r} is not allowed; keys come from the "
                "environment only — name the variable with `api_key_env` instead"
            )
    backend = cfg.get("backend") or cfg.get("provider")
    var = cfg.get("api_key_env")
    if var is not None:
        var = str(var)
        if not _VAR_NAME.match(var):
            # Deliberately not echoing the value: it may be the key itself.
            raise SecretInConfigError(
                f"model {name!r}: api_key_env must be an environment variable name "
                "(letters, digits, underscore), not a key"
            )
        return var
    return ENV_VARS.get(str(backend)) if backend is not None else None


def _needs(models_config: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    needs: dict[str, list[str]] = {}
    for name, cfg in models_config.items():
        var = _model_var(name, cfg or {})
        if var:
            needs.setdefault(var, []).append(str(name))
    return needs


def required_env_vars(models_config: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Sorted, unique variables the configured models need."""
    return sorted(_needs(models_config))


def check_env(
    models_config: Mapping[str, Mapping[str, Any]],
    environ: Mapping[str, str] = os.environ,
) -> list[str]:
    """Raise ``MissingSecretError`` naming every missing variable; return the ones checked.

    A variable set to whitespace only counts as missing: no provider accepts it as a
    key, and the hosted backends strip the key they read (``read_api_key``).
    """
    missing = missing_env(models_config, environ)
    if missing:
        raise MissingSecretError(missing)
    return sorted(_needs(models_config))


def missing_env(
    models_config: Mapping[str, Mapping[str, Any]],
    environ: Mapping[str, str] = os.environ,
) -> dict[str, list[str]]:
    """The variables the configured models need that are unset or blank, each with its models."""
    return {var: models for var, models in _needs(models_config).items() if not (environ.get(var) or "").strip()}


def once_dag_is_built(workflow: Any, callback: Any) -> None:
    """Call ``callback()`` once Snakemake has built its DAG, in a dry run too.

    Snakemake calls ``onstart`` only for a real run, and nothing of a Snakefile runs
    between building the DAG and printing a dry run's jobs. The one event every run
    emits once the DAG is built is the job-statistics record (``LogEvent.RUN_INFO``)
    on Snakemake's logger, so a filter on that logger is the hook. The callback runs
    at most once; what it raises propagates like an error of the workflow itself.
    """
    import logging

    from snakemake_interface_logger_plugins.common import LogEvent

    class _AfterDag(logging.Filter):
        done = False

        def filter(self, record: logging.LogRecord) -> bool:
            if (
                not self.done
                and getattr(record, "event", None) == LogEvent.RUN_INFO
                and getattr(workflow, "dag", None) is not None
            ):
                self.done = True
                callback()
            return True

    logging.getLogger("snakemake.logging").addFilter(_AfterDag())


def get_key(var: str, environ: Mapping[str, str] = os.environ) -> str:
    value = environ.get(var)
    if not value:
        raise MissingSecretError({var: []})
    return value


class MissingAPIKeyError(RuntimeError):
    """The environment variable that should hold an API key is unset or empty."""


def read_api_key(env_var: str, backend: str) -> str:
    """The key in ``env_var`` for the ``backend`` being built (surrounding whitespace removed)."""
    value = os.environ.get(env_var, "").strip()
    if not value:
        raise MissingAPIKeyError(
            f"the {backend} backend needs an API key in the environment variable {env_var}, which is not set"
        )
    return value


def redact(text: str | None, environ: Mapping[str, str] = os.environ, extra_vars: Iterable[str] = ()) -> str | None:
    """Remove key values from ``text`` before it is logged or recorded anywhere.

    SDK error messages sometimes echo (parts of) the key; this is the last line
    of defence for anything that leaves the process.
    """
    if not text:
        return text
    names = {*ENV_VARS.values(), *extra_vars}
    names.update(v for v in environ if v.endswith(("_API_KEY", "_API_TOKEN")))
    for var in names:
        value = environ.get(var)
        if value and len(value) >= 8 and value in text:
            text = text.replace(value, f"<{var}>")
    return _KEY_PATTERNS.sub("<redacted-key>", text)
