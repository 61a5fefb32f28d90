"""What every job script imports first (``context_effects.jobs``) does to the process."""

from __future__ import annotations

import json
import subprocess
import sys


def test_the_jobs_module_keeps_the_first_of_each_repeated_path_entry():
    """Snakemake's script preamble adds its own sys.path to the job's (site-packages three
    times); importing the module keeps one of each, in their order."""
    code = (
        "import json, sys\n"
        "site = [p for p in sys.path if p.endswith('site-packages')][0]\n"
        "sys.path[:] = ['/first', site] + sys.path + ['/first', site, '/last', site]\n"
        "before = list(dict.fromkeys(sys.path))\n"
        "import context_effects.jobs\n"
        "print(json.dumps([before, sys.path]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = json.loads(out.stdout)
    assert after == before and after[0] == "/first" and after[-1] == "/last"
    assert len(after) == len(set(after))
