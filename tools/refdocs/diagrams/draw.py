"""Paint a :class:`~tools.refdocs.diagrams.layout.Drawing` into an SVG file with matplotlib
(called by tools.refdocs.diagrams.__main__ and the tests).

Text stays text (``svg.fonttype: none``: searchable, selectable, small); no date in the
metadata and a fixed ``svg.hashsalt`` so that a re-run with the same matplotlib writes the same
bytes. A white background so the picture reads on the site's dark scheme too.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: make generate runs headless (CI, a container)

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.patches import FancyBboxPatch

from tools.refdocs.diagrams.layout import FONT, LINE, SIZE, Drawing

INK = "#263238"
BOX_FACE, BOX_EDGE = "#e8eaf6", "#3f51b5"
LIFELINE = "#90a4ae"


def _boxes(ax: Axes, drawing: Drawing) -> None:
    for box in drawing.boxes:
        corner = (box.x - box.w / 2, box.y - box.h / 2)
        style = "round,pad=0,rounding_size=4"
        patch = FancyBboxPatch(corner, box.w, box.h, boxstyle=style, fc=BOX_FACE, ec=BOX_EDGE)
        ax.add_patch(patch)
        ax.text(
            box.x,
            box.y,
            "\n".join(box.lines),
            ha="center",
            va="center",
            fontsize=box.size,
            color=INK,
            linespacing=LINE / box.size,
        )


def _arrows(ax: Axes, drawing: Drawing) -> None:
    for start, end in drawing.lifelines:
        ax.plot([start[0], end[0]], [start[1], end[1]], color=LIFELINE, lw=0.8, ls=(0, (4, 3)))
    for arrow in drawing.arrows:
        props = {
            "arrowstyle": "-|>",
            "color": INK,
            "lw": 1.0,
            "shrinkA": 0,
            "shrinkB": 0,
            "mutation_scale": 9,
            "linestyle": "--" if arrow.dashed else "-",
        }
        ax.annotate("", xy=arrow.end, xytext=arrow.start, arrowprops=props)
        if arrow.label:
            ax.text(
                *arrow.label_at,
                arrow.label,
                ha="center",
                va="center",
                fontsize=SIZE,
                color=INK,
                bbox={"fc": "white", "ec": "none", "pad": 0.6},
            )


def save_svg(drawing: Drawing, path: Path) -> None:
    """Write ``drawing`` to ``path`` at 1 pt per layout unit."""
    # A fixed salt: the SVG's ids are hashes of it, so a re-run writes the same bytes.
    with plt.rc_context(
        {
            "svg.fonttype": "none",
            "svg.hashsalt": "sarl-diagrams",
            "font.family": [FONT, "sans-serif"],
        }
    ):
        fig = plt.figure(figsize=(drawing.width / 72, drawing.height / 72), facecolor="white")
        try:
            ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
            ax.set_xlim(0, drawing.width)
            ax.set_ylim(drawing.height, 0)  # layout's y grows downwards
            ax.set_axis_off()
            _boxes(ax, drawing)
            _arrows(ax, drawing)
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, format="svg", metadata={"Date": None})
        finally:
            plt.close(fig)
