# Configuration and the library's DAG helpers, shared by every rule file.
#
# Rule files hold rules only. Paths, targets and per-rule settings are plain,
# unit-tested functions of the config in the library (context_effects.dag and each
# study's `dag` module), reached through these module names, so no helper of one
# file can silently shadow another's (tests/test_workflow_shape.py checks that no
# rule file defines functions or rebinds these names).

from pathlib import Path

from context_effects import dag
from context_effects.amel import dag as amel_dag
from context_effects.anchoring import dag as anchoring_dag
from context_effects.conformity import dag as conformity_dag
from context_effects.config import load_config, validate_config
from context_effects.datasets import DATASETS
from context_effects.outputs import FigureSpec, TableSpec, registry, report_caption

if not config:
    config.update(load_config(Path(workflow.basedir) / "config" / "config.yaml"))

# Validate (and fill defaults) while the workflow is parsed: a bad key or value
# stops the run here, before any job is scheduled.
_validated = validate_config(config)
config.clear()
config.update(_validated)


wildcard_constraints:
    dataset="|".join(DATASETS),
