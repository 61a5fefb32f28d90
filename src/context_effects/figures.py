"""Figures: one save path for all studies, with byte-stable output.

Matplotlib embeds a creation date in PDFs (and software version in PNGs) by default;
dropping them makes a rerun's figure byte-identical, so Snakemake's checksums and a
reviewer's diff see only real changes. The look of the figures (theme, sizes, where
the run's caveat goes) lives in ``context_effects.style``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # jobs run headless on clusters

import matplotlib.pyplot as plt  # noqa: E402

from context_effects import style  # noqa: E402

_STABLE_METADATA = {
    ".pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
    ".png": {"Software": None},
    ".svg": {"Date": None, "Creator": None},
}


def add_note(fig: "plt.Figure", notes: Sequence[str], fontsize: float = style.MIN_FONT_PT, pad_in: float = 0.06):
    """Print ``notes`` under everything already drawn (``style.place_caveat``)."""
    return style.place_caveat(fig, notes, fontsize=fontsize, pad_in=pad_in)


def save_figure(fig: "plt.Figure", path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata=_STABLE_METADATA.get(path.suffix, {}), bbox_inches="tight", pad_inches=0.03,
                dpi=style.DPI)
    plt.close(fig)
