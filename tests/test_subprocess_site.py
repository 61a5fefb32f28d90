"""The processes a test starts run ``tests/subprocess_site/sitecustomize.py`` first
(``tests/conftest.py`` hands its folder down on ``PYTHONPATH``)."""

from __future__ import annotations

import os
import subprocess
import sys


def test_a_process_a_test_starts_runs_without_the_cyclic_collector_and_still_runs_another_sitecustomize(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITECUSTOMIZE'] = 'ran'\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(other)])}
    code = "import gc, os; print(gc.isenabled(), os.environ.get('OTHER_SITECUSTOMIZE'))"
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert res.stdout.split() == ["False", "ran"]
