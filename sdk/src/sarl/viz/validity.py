"""The picture of ``sarl reward diagnose --plot``: each reward figure's validity with its interval.

Called by :mod:`sarl.cli.reward_diagnose` with the rows of
:func:`sarl.evaluation.diagnosis.diagnose`. Two panels side by side: the headline, the
within-prompt AUROC (the (correct, incorrect) pairs of one prompt the figure orders right, ties
one half), and, secondary, the AUROC against correctness pooled over all responses (it also
credits telling easy prompts from hard ones). One row per (reward, figure) in the table's order,
the rewards told apart by colour, the trivial predictors ("has an answer", "answer format is
valid") in grey at the bottom and the strongest one's value dashed across every row, so each
reward is read beside the floor it must beat; a figure that does not beat it is marked
``NOT ABOVE TRIVIAL`` in red in its row label. The point estimate and its bootstrap interval as a
bar, 0.5 (chance) dotted; the headline's value reads with its counts (prompts with pairs,
pairs) and the title warns when they are fewer than
:data:`~sarl.evaluation.validity.MIN_PROMPTS`. A figure undefined on the input reads
"undefined" on its row. A lower-is-better component (the structure reward's ``L``) says so in
its row label.
matplotlib through :func:`sarl.display.figure` (a bare ``Figure``, Agg, no pyplot state).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sarl import display
from sarl.evaluation.diagnosis import LOWER_IS_BETTER, FigureDiagnosis
from sarl.evaluation.trivial import strongest
from sarl.evaluation.validity import MIN_PROMPTS, few_prompts_warning

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# A tab10-like palette, spelled out so colours do not depend on matplotlib's style settings.
_COLORS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
_PANELS = (
    (
        "pair_auroc",
        "within-prompt AUROC (headline)",
        "(correct, incorrect) pairs of one prompt ordered right, ties 1/2",
    ),
    (
        "auroc",
        "pooled AUROC (secondary: mixes prompts)",
        "P(correct scores above incorrect), over all prompts",
    ),
)
_TRIVIAL_COLOR = "#7f7f7f"
_FLAG_COLOR = "#c00000"
_CHANCE_NOTE = "\ndotted: 0.5, chance; dashed: the strongest trivial predictor"
_ROW_INCHES = 0.36
# Value labels on a white box, so the chance line does not cross their digits.
_LABEL_BOX = {"facecolor": "white", "edgecolor": "none", "pad": 0.3, "alpha": 0.85}


def validity_figure(rows: Sequence[FigureDiagnosis], title: str) -> Figure:
    """The two-panel figure of ``rows`` (see the module docstring); ``title`` on top.

    Raises ``ValueError`` when ``rows`` is empty.
    """
    if not rows:
        raise ValueError("no reward figures to plot")
    rows = [r for r in rows if not r.trivial] + [r for r in rows if r.trivial]
    rewards = list(dict.fromkeys(row.reward for row in rows if not row.trivial))
    colors = {reward: _COLORS[i % len(_COLORS)] for i, reward in enumerate(rewards)}
    colors |= {row.reward: _TRIVIAL_COLOR for row in rows if row.trivial}
    height = 1.9 + _ROW_INCHES * len(rows)
    fig = display.figure(figsize=(12, height), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (figure, name, xlabel) in zip(axes, _PANELS, strict=True):
        _draw_panel(ax, rows, figure, colors)
        ax.set_title(name, fontweight="bold")
        ax.set_xlabel(xlabel + _CHANCE_NOTE, fontsize=9)
    axes[0].set_yticks(range(len(rows)), [_row_label(row) for row in rows])
    for tick, row in zip(axes[0].get_yticklabels(), rows, strict=True):
        if row.flagged:
            tick.set_color(_FLAG_COLOR)
    fig.suptitle(title + _warning(rows), fontweight="bold")
    return fig


def _warning(rows: Sequence[FigureDiagnosis]) -> str:
    """The few-prompts warning of the input (its trivial rows count every response)."""
    counted = [r for r in rows if r.trivial] or list(rows)
    widest = max(counted, key=lambda r: r.validity.mixed_prompts)
    if few_prompts_warning(widest.validity) is None:
        return ""
    return (
        f"\nwarning: {widest.validity.mixed_prompts} prompts with pairs (< {MIN_PROMPTS}): "
        "the intervals are too narrow"
    )


def plot_validity(rows: Sequence[FigureDiagnosis], title: str, out_path: Path) -> Path:
    """Write :func:`validity_figure` as a PNG to ``out_path`` (its folder is created)."""
    fig = validity_figure(rows, title)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, format="png", dpi=100)
    return out_path


def _row_label(row: FigureDiagnosis) -> str:
    lower = "  (lower = better)" if (row.reward, row.figure) in LOWER_IS_BETTER else ""
    flag = "  NOT ABOVE TRIVIAL" if row.flagged else ""
    return f"{row.reward}: {row.label}{lower}{flag}"


def _value_text(row: FigureDiagnosis, figure: str) -> str:
    """The value; on the headline panel with its counts and the tied share when some pairs
    tie (a reward that ties every pair reads 0.5, no signal)."""
    value = getattr(row.validity, figure)
    v = row.validity
    if figure != "pair_auroc":
        return f"{value:.3f}"
    tied = f", {v.pair_ties:.2f} tied" if v.pair_ties else ""
    return f"{value:.3f} ({v.mixed_prompts} prompts, {v.pairs} pairs{tied})"


def _draw_panel(
    ax: Axes, rows: Sequence[FigureDiagnosis], figure: str, colors: dict[str, str]
) -> None:
    ax.axvline(0.5, color="#555555", ls=":", lw=1.2, zorder=0)
    floor = strongest({r.reward: r.validity for r in rows if r.trivial}, figure)
    if floor is not None:  # the value every reward must beat
        ax.axvline(floor[1], color=_TRIVIAL_COLOR, ls="--", lw=1.2, zorder=0)
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
