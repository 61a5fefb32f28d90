"""Configuration checks that need the data the config names, not just the config.

``validate_config`` (``context_effects.config``) checks the schema and the references
between sections, then calls the checks here, which the workflow thereby runs while it
is parsed, before any job. They return problems (or warn) instead of raising, so this
module needs nothing from ``context_effects.config``, which imports it. The checks of
the config files themselves and of ``resources:`` against the rule names
(``check_config_files``, ``check_resource_names``) live in ``context_effects.config``.

- ``design_problems``: designs the data cannot support (Study H tasks beyond a
  dataset's items, AMEL domains in which no history can be built) and settings that
  would be silently ignored (NumPyro's SVI start or warm-up windows with the nutpie
  sampler). Called by ``validate_config``; item files are read only when it is given
  the working directory, which the workflow does.
- ``history_shortfalls``: AMEL histories longer than a domain's other items. Those
  are allowed — the history cycles and every request records ``history_repeats``
  (``docs/deviations.yaml``, amel-history-construction; the paper's 50-turn histories
  of the 24-item code-review domain do so) — and ``validate_config`` logs a warning.
- ``pinned_problems`` (called by ``design_problems``): dataset files with a pinned
  checksum whose bytes differ from it (``context_effects.pinned``).
- ``synthetic_problems`` (called by ``design_problems``): every synthetic model's planted
  values resolve (what the schema cannot say: increasing cutpoints, ``[lo, hi]`` order),
  and the anchor scale the synthetic generators plant equals ``conformity.fit.theta_anchor``,
  the scale the fit pins the anchors at.
- ``budget_problems`` (called by ``validate_config`` with the references between
  sections): ``run.budget_usd: 0`` means no paid calls, so a run that calls a billed
  model is refused; it needs the config only.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from context_effects import pinned

log = logging.getLogger(__name__)

Config = Mapping[str, Any]


# --------------------------------------------------------------------------- budget


def budget_problems(cfg: Config) -> list[str]:
    """``run.budget_usd: 0`` with a billed model (``llm.pricing.BILLED``) that the enabled
    studies call, off replay.

    Zero is "no paid calls" (docs/costs.md): caught here, while the workflow is parsed,
    rather than by the start's cost estimate, which a dry run skips and which would first
    have the item tables built, or by the first answering job."""
    run = cfg["run"]
    if run.get("budget_usd") != 0 or run.get("replay"):
        return []
    from context_effects.dag import used_models
    from context_effects.llm.pricing import BILLED

    models = cfg["models"]
    billed = [m for m in used_models(cfg) if m in models and models[m]["backend"] in BILLED]
    if not billed:
        return []
    named = ", ".join(f"{m} ({models[m]['backend']})" for m in billed)
    return [
        f"`run.budget_usd` is 0, which allows no paid calls, but the run calls billed model(s) {named}; "
        "set `run.budget_usd` to a positive limit in USD, or to null for no budget (or leave those models "
        "out of the studies, or set `run.replay: true` to serve their answers from the response store)"
    ]


# --------------------------------------------------------------------------- designs


def _amel_on(cfg: Config) -> bool:
    # The study runs only with models (context_effects.amel.dag.enabled).
    return bool(cfg["amel"]["enabled"] and cfg["amel"]["models"])


def _anchoring_on(cfg: Config) -> bool:
    # The study runs only with judges (context_effects.anchoring.dag.enabled).
    return bool(cfg["anchoring"]["enabled"] and cfg["anchoring"]["judges"])


def history_lengths(amel: Config) -> list[int]:
    """Every history length k the AMEL design asks (the k's of ``context_effects.amel.design.design_cells``)."""
    ks = set(amel["history_lengths"])
    if amel["positions"]:
        ks.add(amel["position_history_length"])
    if amel["framing_swap"]:
        ks |= set(amel["framing_history_lengths"])
    ks |= set(amel.get("balanced_history_lengths") or ())
    return sorted(int(k) for k in ks)


def _item_file_others(cfg: Config, domain: str, path: Path) -> int:
    """Fewest items outside a test item's group in an item-file domain: the most one history can hold
    without repeating (``DomainItems.history`` in ``context_effects.amel.design``).

    Raises AmelItemError when the file is missing or broken, or no history can be built."""
    from context_effects.amel.items import load_item_file, select_items

    amel = cfg["amel"]
    items = select_items(load_item_file(path, domain), amel["items_per_domain"], amel["seed"])
    sizes = items["group"].map(items["group"].value_counts())
    return int((len(items) - sizes[items["is_test"]]).min())


def _benchmark_others(cfg: Config, dataset: str) -> int:
    # Each sampled question gives `answers_per_question` verification items sharing one
    # group (context_effects.amel.items.verification_items), so a test item's history
    # can draw on the other questions' items only.
    per_question = int(cfg["amel"]["answers_per_question"])
    return (int(cfg["datasets"][dataset]["n_items"]) - 1) * per_question


def _synthetic_models(cfg: Config) -> list[str]:
    return sorted(name for name, m in cfg["models"].items() if m.get("backend") == "synthetic")


def synthetic_problems(cfg: Config) -> list[str]:
    """Synthetic models whose planted values cannot be resolved, and a planted anchor scale
    that differs from the one the Study C fit assumes."""
    names = _synthetic_models(cfg)
    if not names:
        return []
    from context_effects.llm.backends.synthetic import effective_params

    problems: list[str] = []
    planted: dict[str, dict[str, Any]] = {}
    for name in names:
        try:
            planted[name] = effective_params(name, cfg["models"][name].get("synthetic") or {})[0]
        except ValueError as exc:
            problems.append(f"`models.{name}.synthetic`: {exc}")
    conf = cfg["conformity"]
    if conf["enabled"]:
        fit_theta = float(conf["fit"]["theta_anchor"])
        for gen in conf["generators"]:
            if gen not in planted:
                continue
            theta = planted[gen]["theta_anchor"]
            if theta == fit_theta:
                continue
            given = "theta_anchor" in (cfg["models"][gen].get("synthetic") or {})
            problems.append(
                f"`models.{gen}.synthetic.theta_anchor` = {theta:g}{'' if given else ' (the default)'} but "
                f"`conformity.fit.theta_anchor` = {fit_theta:g}: the synthetic anchors are planted at ±{theta:g} "
                f"while the fit pins them at ±{fit_theta:g}, so every fitted value would be read on another scale "
                f"than the planted one; set both to the same value (`conformity.fit.theta_anchor: {theta:g}` or "
                f"`models.{gen}.synthetic.theta_anchor: {fit_theta:g}`)"
            )
    return problems


def release_problems(cfg: Config, workdir: str | Path | None = None) -> list[str]:
    """Release-sampled datasets and released peer blocks (``conformity.release``): a release
    path must be set and, unless the fetch_release rule makes it, exist (checked only with
    ``workdir``); released blocks need six speakers. A dataset not sampled from a release
    is no error: its peer blocks fall back to the generator, and its item table says so."""
    from context_effects.conformity.release import FETCH_DIR, RELEASE_FILES

    problems: list[str] = []
    for name, ds in cfg["datasets"].items():
        sample = ds.get("sample") or {}
        if sample.get("source") != "release":
            continue
        path = sample.get("path")
        if not path:
            problems.append(f"`datasets.{name}.sample.source` is 'release' but `datasets.{name}.sample.path` is "
                            f"not set; name the release file, e.g. {FETCH_DIR}/<file> (files: {sorted(RELEASE_FILES)})")
            continue
        fetched = Path(path).parent.as_posix() == FETCH_DIR
        if fetched and Path(path).name not in RELEASE_FILES:
            problems.append(f"`datasets.{name}.sample.path` = {path!r}: the fetch_release rule knows only "
                            f"{sorted(RELEASE_FILES)}; use one of them or a file in the repository")
        elif not fetched and workdir is not None and not (Path(workdir) / path).is_file():
            problems.append(f"`datasets.{name}.sample.path` = {path!r} does not exist; copy the release file "
                            f"there or use {FETCH_DIR}/<file> so that the fetch_release rule downloads it")
    conf = cfg.get("conformity", {})
    peers = conf.get("peers", {})
    if conf.get("enabled", True) and peers.get("source") == "release":
        if peers.get("n_speakers", 6) != 6:
            problems.append(f"`conformity.peers.source` is 'release' but `conformity.peers.n_speakers` = "
                            f"{peers['n_speakers']}; released blocks have 6 speakers: set it to 6")
    elif conf.get("enabled", True):
        from context_effects.conformity.peers import MAX_SPEAKERS

        if peers.get("n_speakers", 6) > MAX_SPEAKERS:
            problems.append(f"`conformity.peers.n_speakers` = {peers['n_speakers']}, but the generator has "
                            f"distinct names, roles and phrasings for at most {MAX_SPEAKERS} speakers: lower it")
    return problems


def pinned_problems(cfg: Config, workdir: str | Path) -> list[str]:
    """Dataset files with a pinned checksum (``context_effects.pinned``) whose bytes differ.
    Every read checks them too (build_items); here a changed file stops the run before any job."""
    problems: list[str] = []
    for name, ds in cfg["datasets"].items():
        for key, path in (("local_path", ds.get("local_path")), ("sample.path", (ds.get("sample") or {}).get("path"))):
            if path and (Path(workdir) / path).is_file():
                try:
                    pinned.verify(Path(workdir) / path, shown=path)
                except pinned.PinnedFileError as exc:
                    problems.append(f"`datasets.{name}.{key}`: {exc}")
    return problems


def design_problems(cfg: Config, workdir: str | Path | None = None) -> list[str]:
    """Designs the data cannot support; item files are read (relative to ``workdir``) only when it is given.
    Includes ``synthetic_problems``, ``release_problems`` and, with ``workdir``, ``pinned_problems``."""
    problems: list[str] = synthetic_problems(cfg) + release_problems(cfg, workdir)
    if workdir is not None:
        problems += pinned_problems(cfg, workdir)
    fit = cfg["conformity"]["fit"]
    nutpie = fit["method"] == "nuts" and fit.get("sampler") == "nutpie"
    if cfg["conformity"]["enabled"] and nutpie and fit.get("init", "median") != "median":
        problems.append(
            f"`conformity.fit.init` = {fit['init']!r} but `conformity.fit.sampler` = 'nutpie': that start is "
            f"NumPyro's (nutpie starts each chain at a jitter of the origin and adapts its own mass matrix); "
            f"set `conformity.fit.init: median` or `conformity.fit.sampler: numpyro`"
        )
    if cfg["conformity"]["enabled"] and nutpie and fit.get("warmup_windows") is not None:
        problems.append(
            f"`conformity.fit.warmup_windows` = {fit['warmup_windows']} but `conformity.fit.sampler` = 'nutpie': "
            f"that schedule is NumPyro's (nutpie adapts its own mass matrix); set `conformity.fit.warmup_windows: "
            f"null` or `conformity.fit.sampler: numpyro`"
        )
    datasets = cfg["datasets"]
    if _anchoring_on(cfg):
        n_tasks = cfg["anchoring"]["tasks_per_dataset"]
        for d in cfg["anchoring"]["benchmark_datasets"]:
            if d in datasets and n_tasks > datasets[d]["n_items"]:
                problems.append(
                    f"`anchoring.tasks_per_dataset` = {n_tasks} but `datasets.{d}.n_items` = {datasets[d]['n_items']}: "
                    f"each Study H task takes one sampled item of {d}; lower `anchoring.tasks_per_dataset` to at most "
                    f"{datasets[d]['n_items']} or raise `datasets.{d}.n_items`"
                )
    if _amel_on(cfg):
        from context_effects.amel.design import design_cells

        try:
            # The design's own checks (e.g. position_biased_turns <= position_history_length),
            # here before any job rather than in the first job that builds requests.
            design_cells(cfg["amel"])
        except ValueError as exc:
            problems.append(f"AMEL design: {exc}")
        for d in cfg["amel"]["benchmark_datasets"]:
            if d in datasets and _benchmark_others(cfg, d) < 1:
                problems.append(
                    f"AMEL domain {d!r}: a history needs items of another question, but `datasets.{d}.n_items` = "
                    f"{datasets[d]['n_items']} gives one question (its verification items share a group); raise "
                    f"`datasets.{d}.n_items` to at least 2 or remove {d} from `amel.benchmark_datasets`"
                )
        if workdir is not None:
            from context_effects.amel.items import AmelItemError

            for domain, rel in cfg["amel"]["item_files"].items():
                try:
                    _item_file_others(cfg, domain, Path(workdir) / rel)
                except AmelItemError as exc:
                    problems.append(f"`amel.item_files.{domain}` = {rel!r}: {exc}")
    return problems


def history_shortfalls(cfg: Config, workdir: str | Path | None = None) -> list[tuple[str, int, int]]:
    """(domain, k, items available) for every AMEL history length k longer than a domain's
    other items, so that its history repeats items; item files only with ``workdir``."""
    if not _amel_on(cfg):
        return []
    available: dict[str, int] = {
        d: _benchmark_others(cfg, d) for d in cfg["amel"]["benchmark_datasets"] if d in cfg["datasets"]
    }
    if workdir is not None:
        from context_effects.amel.items import AmelItemError

        for domain, rel in cfg["amel"]["item_files"].items():
            try:
                available[domain] = _item_file_others(cfg, domain, Path(workdir) / rel)
            except AmelItemError:
                continue  # reported by design_problems
    ks = history_lengths(cfg["amel"])
    return [(domain, k, n) for domain, n in available.items() for k in ks if n >= 1 and k > n]


def warn_history_shortfalls(cfg: Config, workdir: str | Path | None = None) -> None:
    for domain, k, n in history_shortfalls(cfg, workdir):
        log.warning(
            "AMEL domain %r: a history of %d turns is longer than the %d items outside a test item's group, so "
            "items repeat in it (each request records history_repeats); add items or lower the history length "
            "if that is not intended",
            domain, k, n,
        )


def saturation_shares(amel: Config) -> dict[int, float]:
    """Realised share of prevailing turns at each saturated history length k."""
    from context_effects.amel.design import n_prevailing

    ks = set(amel["history_lengths"]) | (set(amel["framing_history_lengths"]) if amel["framing_swap"] else set())
    share = float(amel["saturation_share"])
    return {int(k): n_prevailing(int(k), share) / int(k) for k in sorted(ks) if int(k) > 0}


def warn_saturation_shares(cfg: Config) -> None:
    """A saturation share that is not a whole number of turns at every k is rounded, so the
    realised share differs between lengths and confounds share with length."""
    if not _amel_on(cfg):
        return
    shares = saturation_shares(cfg["amel"])
    if len({round(s, 9) for s in shares.values()}) > 1:
        log.warning(
            "AMEL: `amel.saturation_share` = %g is not a whole number of turns at every history length, so the "
            "realised share differs between lengths (%s), which confounds share with length; choose a share "
            "exact at every k (0.8 for k = 5, 10, 20, 50). The tables print the realised share per k.",
            cfg["amel"]["saturation_share"], ", ".join(f"k = {k}: {s:.2f}" for k, s in shares.items()),
        )
