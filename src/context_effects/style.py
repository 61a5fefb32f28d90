"""The one look of every figure: seaborn theme at paper size, palette, figure widths,
and where a run's caveat goes.

Figures are drawn at the size they are printed (a single column ~3.4 in, the full text
width ~7 in), so the font sizes set here are the printed sizes: nothing is scaled down
by LaTeX, and no text is smaller than ``MIN_FONT_PT``.

Every drawing function calls ``figure()`` (or ``apply_theme()`` before its own
``plt.subplots``): the theme is global Matplotlib state, and a job may draw after
another library changed it.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")  # jobs run headless on clusters

import matplotlib.pyplot as plt  # noqa: E402

#: Printed widths (inches): one column of a two-column layout, and the full text width.
COLUMN_WIDTH = 3.4
FULL_WIDTH = 7.0
#: Height of one row of panels (inches) for bar and point plots.
PANEL_HEIGHT = 2.4
#: The smallest text on any figure (points); tick labels, legends and the caveat use it.
MIN_FONT_PT = 7.0
FONT_PT = 8.0
TITLE_PT = 8.5
DPI = 300

#: Qualitative palette (colour-blind safe, prints distinguishably in grey).
PALETTE = "colorblind"
#: Yes-/no-saturated histories and neutral bars, shared by the AMEL figures.
POLARITY_COLORS = {"yes": "#0173b2", "no": "#d55e00"}
NEUTRAL = "0.55"
REFERENCE_LINE = {"color": "0.3", "lw": 0.8, "zorder": 1}

_RC = {
    "font.size": FONT_PT,
    "axes.titlesize": TITLE_PT,
    "axes.labelsize": FONT_PT,
    "xtick.labelsize": MIN_FONT_PT,
    "ytick.labelsize": MIN_FONT_PT,
    "legend.fontsize": MIN_FONT_PT,
    "legend.title_fontsize": MIN_FONT_PT,
    "figure.titlesize": TITLE_PT,
    "figure.labelsize": FONT_PT,
    "axes.linewidth": 0.6,
    "grid.linewidth": 0.5,
    "lines.linewidth": 1.0,
    "lines.markersize": 4.0,
    "patch.linewidth": 0.5,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 3.0,
    "ytick.major.size": 3.0,
    "errorbar.capsize": 0,
    "legend.frameon": False,
    "savefig.dpi": DPI,
    # TrueType in PDFs: text stays text (searchable, editable by a copy editor).
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
}


def apply_theme() -> None:
    """Set the shared theme (seaborn ``ticks`` style, ``paper`` context at printed sizes)."""
    import seaborn as sns

    sns.set_theme(context="paper", style="ticks", palette=PALETTE, rc=_RC)


def palette(n: int | None = None) -> list:
    """The shared qualitative palette (``n`` colours; its natural length when None)."""
    import seaborn as sns

    return sns.color_palette(PALETTE, n)


def figure(width: float = FULL_WIDTH, height: float = PANEL_HEIGHT, nrows: int = 1, ncols: int = 1, **kwargs):
    """A themed figure with constrained layout: ``(fig, axes)`` as ``plt.subplots`` returns them."""
    apply_theme()
    kwargs.setdefault("layout", "constrained")
    return plt.subplots(nrows, ncols, figsize=(width, height), **kwargs)


def width_for(n_groups: int, per_group: float = 0.45, base: float = 1.2) -> float:
    """A single-column width unless ``n_groups`` categories need more room; then full width."""
    return COLUMN_WIDTH if base + per_group * n_groups <= COLUMN_WIDTH else FULL_WIDTH


def despine(fig) -> None:
    import seaborn as sns

    for ax in fig.axes:
        sns.despine(ax=ax)


def place_caveat(fig, notes: Sequence[str], fontsize: float = MIN_FONT_PT, pad_in: float = 0.06):
    """Print ``notes`` (a run's caveat, a legend remark) under everything already drawn.

    The text goes below the lowest drawn element (tick labels, axis labels, a legend
    below the axes), measured after a draw, so it never overlaps them, and it is wrapped
    to the figure's width; the tight bounding box ``figures.save_figure`` uses keeps it
    in the file. Call it last, once the layout is final: constrained layout ignores a
    figure-level text, so the axes do not move after it is placed. Returns the text
    artist (None: no notes).
    """
    text = " ".join(n for n in notes if n)
    if not text:
        return None
    fig.canvas.draw()
    box = fig.get_tightbbox(fig.canvas.get_renderer())  # inches
    width_in = max(box.width, fig.get_figwidth() * 0.6)
    # Average glyph width of the sans font is about half its size.
    chars = max(40, int(width_in * 72 / (0.52 * fontsize)))
    return fig.text(box.x0 / fig.get_figwidth(), (box.y0 - pad_in) / fig.get_figheight(),
                    textwrap.fill(text, chars), fontsize=fontsize, ha="left", va="top")
