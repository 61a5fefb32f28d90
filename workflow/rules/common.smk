# Configuration and the library's DAG helpers, shared by every rule file.
#
# Rule files hold rules only. Paths, targets and per-rule settings are plain,
# unit-tested functions of the config in the library (context_effects.dag, each
# study's `dag` module, and context_effects.targets for the run's files across every
# study), reached through these module names, so no helper of one file can silently
# shadow another's (tests/test_dag.py checks that no rule file defines functions or
# rebinds these names).

from pathlib import Path

from context_effects import card, costs, dag, targets
from context_effects.amel import dag as amel_dag
from context_effects.anchoring import dag as anchoring_dag
from context_effects.conformity import dag as conformity_dag

# Every rule passes `code=codeversion.of_...` as a param: a content hash of the library
# code its job runs, so that editing a prompt, a builder or a plotting function reruns
# exactly the jobs that run it (the `params` rerun trigger; docs/configuration.md, "Reruns").
from context_effects import codeversion
from context_effects.config import (
    check_config_files,
    check_resource_names,
    load_config,
    validate_config,
)
from context_effects.datasets import DATASETS
from context_effects.outputs import FigureSpec, TableSpec, registry, report_caption

# Snakemake has already read the --configfile files with PyYAML, where a repeated
# key silently keeps the last value and `no`, `012` or `1:20` change type; read them
# again with the strict loader (context_effects.config.load_config), as the default
# config below is read.
check_config_files(workflow.configfiles)

if not config:
    config.update(load_config(Path(workflow.basedir) / "config" / "config.yaml"))

# Validate (and fill defaults) while the workflow is parsed: a bad key or value, or a
# design the data cannot support, stops the run here, before any job is scheduled.
# Data files the config names (AMEL item files) are read relative to the working
# directory, as the jobs read them.
_validated = validate_config(config, workdir=Path.cwd())
config.clear()
config.update(_validated)


wildcard_constraints:
    dataset="|".join(DATASETS),
