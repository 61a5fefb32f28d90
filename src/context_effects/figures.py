"""Figures: one save path for all studies, with byte-stable output.

Matplotlib embeds a creation date in PDFs (and software version in PNGs) by default;
dropping them makes a rerun's figure byte-identical, so Snakemake's checksums and a
reviewer's diff see only real changes.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # jobs run headless on clusters

import matplotlib.pyplot as plt  # noqa: E402

_STABLE_METADATA = {
    ".pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
    ".png": {"Software": None},
    ".svg": {"Date": None, "Creator": None},
}


def add_note(fig: "plt.Figure", notes: Sequence[str], fontsize: float = 6.0, pad_in: float = 0.06):
    """Print ``notes`` (a run's caveat, a legend remark) under everything already drawn.

    The text goes below the lowest drawn element (tick labels, axis labels, a legend
    below the axes), measured after a draw, so it never overlaps them, and it is wrapped
    to the figure's width. ``save_figure``'s tight bounding box keeps it in the file.
    Call it last, after the layout is final. Returns the text artist (None: no notes).
    """
    text = " ".join(n for n in notes if n)
    if not text:
        return None
    fig.canvas.draw()
    box = fig.get_tightbbox(fig.canvas.get_renderer())  # inches
    width_in = max(box.width, fig.get_figwidth() * 0.6)
    chars = max(40, int(width_in * 72 / (0.52 * fontsize)))
    return fig.text(box.x0 / fig.get_figwidth(), (box.y0 - pad_in) / fig.get_figheight(),
                    textwrap.fill(text, chars), fontsize=fontsize, ha="left", va="top")


def save_figure(fig: "plt.Figure", path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata=_STABLE_METADATA.get(path.suffix, {}), bbox_inches="tight", dpi=150)
    plt.close(fig)
