"""One row of the recovery table: the columns every study's rows share.

Each study's recovery module (``context_effects.conformity.recovery``, ``.amel.recovery``,
``.anchoring.recovery``) builds its rows with :func:`row`; ``context_effects.recovery``
gathers them into the run's table. Kept apart from both so that the study modules and
the table that gathers them import it and not each other.
"""

from __future__ import annotations

import math
from typing import Any

COLUMNS = ("study", "source", "fit_model", "model", "parameter", "planted", "estimate", "ci_low", "ci_high",
           "covered", "comparable", "note")


def covered(planted: float, lo: float, hi: float) -> str:
    """``yes`` when ``planted`` lies in [lo, hi], ``no`` outside, ``n/a`` without an interval."""
    vals = (planted, lo, hi)
    if any(v is None or not math.isfinite(float(v)) for v in vals):
        return "n/a"
    return "yes" if float(lo) <= float(planted) <= float(hi) else "no"


def _number(v: Any) -> float:
    return math.nan if v is None else float(v)


def row(study: str, source: str, model: str, parameter: str, planted: float, estimate: float = math.nan,
        ci_low: float = math.nan, ci_high: float = math.nan, *, fit_model: str = "", comparable: bool = True,
        note: str = "") -> dict[str, Any]:
    """One row of the recovery table; ``covered`` follows from the values (``n/a`` if not comparable). A
    value of None (a result file's JSON null: no estimate or no interval) is NaN."""
    planted, estimate, ci_low, ci_high = (_number(v) for v in (planted, estimate, ci_low, ci_high))
    return {
        "study": study, "source": source, "fit_model": fit_model, "model": model, "parameter": parameter,
        "planted": planted, "estimate": estimate, "ci_low": ci_low, "ci_high": ci_high,
        "covered": covered(planted, ci_low, ci_high) if comparable else "n/a",
        "comparable": "yes" if comparable else "no", "note": note,
    }
