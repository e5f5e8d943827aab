"""The picture of ``sarl reward diagnose --plot``: each reward figure's validity with its interval.

Called by :mod:`sarl.cli.reward_diagnose` with the rows of
:func:`sarl.evaluation.diagnosis.diagnose`. Two panels side by side, AUROC against correctness
over all responses and the share of (correct, incorrect) pairs of one prompt the figure orders
correctly, one row per (reward, figure) in the table's order, the rewards told apart by colour:
the point estimate and its bootstrap interval as a bar, 0.5 (chance) dotted. A figure undefined
on the input (no correct or no incorrect response; no prompt with both) reads "undefined" on its
row. A lower-is-better component (the structure reward's ``L``) says so in its row label.
matplotlib through :func:`sarl.display.figure` (a bare ``Figure``, Agg, no pyplot state).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sarl import display
from sarl.evaluation.diagnosis import LOWER_IS_BETTER, FigureDiagnosis

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# A tab10-like palette, spelled out so colours do not depend on matplotlib's style settings.
_COLORS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
_PANELS = (
    ("auroc", "AUROC vs correctness", "P(a correct response scores above an incorrect one)"),
    ("pair_agreement", "pairs within a prompt", "(correct, incorrect) pairs ordered right"),
)
_CHANCE_NOTE = "; dotted: 0.5, chance"
_ROW_INCHES = 0.36
# Value labels on a white box, so the chance line does not cross their digits.
_LABEL_BOX = {"facecolor": "white", "edgecolor": "none", "pad": 0.3, "alpha": 0.85}


def validity_figure(rows: Sequence[FigureDiagnosis], title: str) -> Figure:
    """The two-panel figure of ``rows`` (see the module docstring); ``title`` on top.

    Raises ``ValueError`` when ``rows`` is empty.
    """
    if not rows:
        raise ValueError("no reward figures to plot")
    rewards = list(dict.fromkeys(row.reward for row in rows))
    colors = {reward: _COLORS[i % len(_COLORS)] for i, reward in enumerate(rewards)}
    height = 1.9 + _ROW_INCHES * len(rows)
    fig = display.figure(figsize=(12, height), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (figure, name, xlabel) in zip(axes, _PANELS, strict=True):
        _draw_panel(ax, rows, figure, colors)
        ax.set_title(name, fontweight="bold")
        ax.set_xlabel(xlabel + _CHANCE_NOTE, fontsize=9)
    axes[0].set_yticks(range(len(rows)), [_row_label(row) for row in rows])
    fig.suptitle(title, fontweight="bold")
    return fig


def plot_validity(rows: Sequence[FigureDiagnosis], title: str, out_path: Path) -> Path:
    """Write :func:`validity_figure` as a PNG to ``out_path`` (its folder is created)."""
    fig = validity_figure(rows, title)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, format="png", dpi=100)
    return out_path


def _row_label(row: FigureDiagnosis) -> str:
    lower = "  (lower = better)" if (row.reward, row.figure) in LOWER_IS_BETTER else ""
    return f"{row.reward}: {row.label}{lower}"


def _value_text(row: FigureDiagnosis, figure: str) -> str:
    """The value; on the pairs panel with the tied share when some pairs tie (a reward that
    ties every pair reads 0 agreement, not a reversed order)."""
    value = getattr(row.validity, figure)
    ties = row.validity.pair_ties
    if figure == "pair_agreement" and ties:
        return f"{value:.3f} ({ties:.3f} tied)"
    return f"{value:.3f}"


def _draw_panel(
    ax: Axes, rows: Sequence[FigureDiagnosis], figure: str, colors: dict[str, str]
) -> None:
    ax.axvline(0.5, color="#555555", ls=":", lw=1.2, zorder=0)
    for y, row in enumerate(rows[1:], start=1):
        if row.reward != rows[y - 1].reward:  # a rule between rewards
            ax.axhline(y - 0.5, color="#bbbbbb", lw=0.8, zorder=0)
    for y, row in enumerate(rows):
        value = getattr(row.validity, figure)
        color = colors[row.reward]
        if value is None:
            ax.text(0.5, y, "undefined", color="#888888", ha="center", va="center", fontsize=9)
            continue
        interval = row.intervals.get(figure)
        if interval is not None:
            ax.plot(interval, (y, y), color=color, lw=2.2, alpha=0.6, solid_capstyle="butt")
            for end in interval:
                ax.plot((end, end), (y - 0.18, y + 0.18), color=color, lw=1.4, alpha=0.8)
        ax.plot([value], [y], "o", color=color, ms=7)
        # Near an edge the label grows inwards, so it stays inside the panel.
        align = "left" if value < 0.15 else "right" if value > 0.85 else "center"
        ax.text(value, y - 0.28, _value_text(row, figure), color=color, ha=align,
                va="bottom", fontsize=8, bbox=_LABEL_BOX)  # fmt: skip
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(len(rows) - 0.5, -0.7)  # inverted: the table's first row on top
    ax.grid(axis="x", alpha=0.3)


__all__ = ["plot_validity", "validity_figure"]
