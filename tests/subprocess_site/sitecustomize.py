"""Run at the start of every Python process a test starts (``tests/conftest.py`` puts this
folder first on the ``PYTHONPATH`` the tests hand down): the cyclic garbage collector off.

The suite's worlds start some 800 short Python processes (Snakemake runs and their jobs).
The collector's passes over what they import and build were 14% of the suite's CPU samples,
most of them in these processes; with it off, the shared synthetic run takes about 10% less
CPU (docs/benchmarks.md, "The test suite"). Reference counting still frees every object that is not in a cycle, an explicit
``gc.collect()`` still collects, and the processes are short. Users' runs keep Python's
default.

A ``sitecustomize`` further on the path (a distribution's, or the recorder of
``bench/test_suite_processes.py``) still runs after this one.
"""

import gc
import importlib.machinery
import importlib.util
import os
import sys

gc.disable()

# By real path: the folder may be on the path twice, once through a link.
_here = os.path.dirname(os.path.realpath(__file__))
_rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != _here]
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:
    _module = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_module)
