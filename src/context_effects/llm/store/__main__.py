"""``python -m context_effects.llm.store ...``: the command line (``cli.main``)."""

import sys

from context_effects.llm.store.cli import main

sys.exit(main())
