"""Reruns follow what changed, on a finished synthetic run: an edited plotting function,
table builder or prompt reruns exactly the jobs that run it and what depends on their
outputs; a speed setting, a comment or a touched script reruns nothing.

The run is the session's shared synthetic run, made in a copy of the repository
(Snakefile, rules, scripts, library, paper sources); each case edits that copy for the
length of a dry run and puts it back, never touching the repository itself.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from conftest import edit_definition, run_snakemake
from context_effects.config import validate_config
from context_effects.conformity import dag as conformity_dag

#: Study C's Table 2, Table 5 and rating figure and one AMEL table and figure: every
#: stage from items to ratings, on both studies, in a couple of minutes.
TARGETS = [
    "results/tables/conformity/table2.csv",
    "results/tables/conformity/table5.csv",
    "figures/conformity/rating_distributions.png",
    "results/tables/amel/effects.csv",
    "figures/amel/effects.png",
]
DESCRIPTIVE = "src/context_effects/conformity/descriptive.py"
PROMPTS = "src/context_effects/conformity/prompts.py"
#: The recommended triggers (docs/configuration.md, "Reruns"; the shipped profiles set them).
TRIGGERS = ["--rerun-triggers", "mtime", "params", "input", "software-env"]


def _snakemake(repo: Path, config: Path, *args: str, timeout: float = 1800):
    return run_snakemake("--snakefile", str(repo / "Snakefile"), "--directory", str(repo),
                         f"--configfile={config}", "--workflow-profile", "none", *TARGETS, *args,
                         cwd=repo, env={"OMP_NUM_THREADS": "1"}, timeout=timeout)


def _planned(repo: Path, config: Path, *extra: str) -> Counter:
    """The jobs ``snakemake -n`` lists, as 'rule' or 'rule[wildcards]'."""
    res = _snakemake(repo, config, "-n", *TRIGGERS, *extra, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    jobs: Counter = Counter()
    rule = None
    for line in (res.stdout + "\n" + res.stderr).splitlines():
        m = re.match(r"^(?:local)?rule (\w+):$", line.strip())
        if m:
            rule = m.group(1)
            jobs[rule] += 1
    return jobs


@pytest.fixture(scope="module")
def finished(synthetic_run) -> tuple[Path, Path]:
    """The session's synthetic run (made in a copy of the repository, every study through
    the paper): the targets above are part of it."""
    repo, config = synthetic_run.repo, synthetic_run.config
    assert _planned(repo, config) == Counter(), "a finished run plans nothing"
    return repo, config


class _Edited:
    """Edit one file of the copy for the length of a ``with`` block."""

    def __init__(self, path: Path, name: str | None = None):
        self.path, self.name = path, name
        self.original = path.read_text()

    def __enter__(self) -> Path:
        if self.name:
            # A string (a prompt) gets a real change of value; a function a `pass` more.
            edit_definition(self.path, self.name, "{name} = {name} + ' '")
        return self.path

    def __exit__(self, *exc) -> None:
        self.path.write_text(self.original)


def test_a_plotting_function_reruns_its_figure_only(finished):
    repo, config = finished
    with _Edited(repo / DESCRIPTIVE, "plot_rating_distribution"):
        assert _planned(repo, config) == Counter({"conformity_figure": 1})


def test_a_table_builder_reruns_its_table_only(finished):
    repo, config = finished
    with _Edited(repo / DESCRIPTIVE, "mean_blind_ratings"):
        assert _planned(repo, config) == Counter({"conformity_table": 1})


def test_the_blind_judge_prompt_reruns_judging_and_what_reads_ratings(finished):
    """Every blind-judge request shard and its answering job, each dataset's ratings,
    and the two tables and the figure built from ratings; no generation, no AMEL job."""
    repo, config = finished
    with _Edited(repo / PROMPTS, "BLIND_JUDGE"):
        cfg = validate_config(yaml.safe_load(config.read_text()))
        datasets, judges = cfg["conformity"]["datasets"], cfg["conformity"]["judges"]
        planned = _planned(repo, config)
        shards = planned["conformity_judge_requests"]
        # Every judge shard of every judge (blind and informed share shards).
        assert shards == sum(len(conformity_dag.judge_shard_blocks(cfg, j)) for j in judges) >= len(judges)
        assert planned == Counter({"conformity_judge_requests": shards, "answer_requests_synthetic": shards,
                                   "conformity_ratings": len(datasets), "conformity_table": 2,
                                   "conformity_figure": 1})


def test_speed_settings_comments_and_touched_scripts_rerun_nothing(finished, tmp_path):
    repo, config = finished
    cfg = yaml.safe_load(config.read_text())
    cfg["run"]["threads_per_job"] = 2
    for model in cfg["models"].values():
        model["concurrency"] = 3
    faster = tmp_path / "faster.yaml"
    faster.write_text(yaml.safe_dump(cfg))  # keys sorted: another order reruns nothing either
    assert _planned(repo, faster) == Counter()

    with _Edited(repo / PROMPTS) as path:
        path.write_text("# a comment changes no result\n" + path.read_text())
        for script in (repo / "workflow" / "scripts").glob("*.py"):
            script.touch()
        assert _planned(repo, config) == Counter()
