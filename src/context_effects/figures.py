"""Figures: one save path for all studies, with byte-stable output.

Matplotlib embeds a creation date in PDFs (and software version in PNGs) by default;
dropping them makes a rerun's figure byte-identical, so Snakemake's checksums and a
reviewer's diff see only real changes.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # jobs run headless on clusters

import matplotlib.pyplot as plt  # noqa: E402

_STABLE_METADATA = {
    ".pdf": {"CreationDate": None, "ModDate": None, "Producer": None, "Creator": None},
    ".png": {"Software": None},
    ".svg": {"Date": None, "Creator": None},
}


def save_figure(fig: "plt.Figure", path: str | Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, metadata=_STABLE_METADATA.get(path.suffix, {}), bbox_inches="tight", dpi=150)
    plt.close(fig)
