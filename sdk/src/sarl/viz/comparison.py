"""The picture of ``sarl compare``: six panels of training curves, one colour per group of runs.

Called by :meth:`sarl.tracking.compare.Comparison.figure` (and so by ``sarl compare``'s PNG and a
notebook's inline figure). A group is a Study arm — its seeds as thin lines, their mean thick —
or a run on its own (:attr:`~sarl.tracking.compare.Comparison.groups`); per-step curves are
smoothed and axes labelled as in the Study report (:mod:`sarl.viz.curves`). The panels are
:data:`sarl.tracking.metrics.CURVES`. matplotlib is imported inside the functions, through
:func:`sarl.display.figure` (a bare ``Figure``, no pyplot state). The comparison comes in as a
:class:`ComparisonView` (what the figure reads of it): the comparison draws itself through this
module, so this module does not import it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from sarl import display
from sarl.tracking.metrics import CURVES, metric_info
from sarl.viz.curves import (
    SINGLE_LW,
    THICK_LW,
    THIN_ALPHA,
    THIN_LW,
    Points,
    draw_seeds,
    finish_axes,
    smoothing_text,
    smoothing_window,
    trailing_mean,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


class ComparedRun(Protocol):
    """What the legend reads of a run (a :class:`~sarl.tracking.compare.RunSummary`)."""

    @property
    def run_id(self) -> str: ...

    @property
    def arm(self) -> str | None: ...

    @property
    def seed(self) -> int | None: ...


class ComparisonView(Protocol):
    """What the figure reads of a :class:`~sarl.tracking.compare.Comparison` (see there for
    what each holds); read-only, so the frozen comparison is one."""

    @property
    def runs(self) -> Sequence[ComparedRun]: ...

    @property
    def histories(self) -> Mapping[str, Mapping[str, Points]]: ...

    @property
    def groups(self) -> Mapping[str, tuple[str, ...]]: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


# A tab10-like palette, spelled out so colours do not depend on matplotlib's style settings.
_COLORS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
)  # fmt: skip
_MARKERS_UP_TO = 30  # points per line; markers make short runs visible, long ones stay clean


def comparison_figure(comparison: ComparisonView) -> Figure:
    """What :meth:`Comparison.figure` returns (see there)."""
    from matplotlib.lines import Line2D

    groups = comparison.groups
    points = [len(p) for history in comparison.histories.values() for p in history.values()]
    window = smoothing_window(max(points, default=0))
    fig = display.figure(figsize=(13, 7.8), layout="constrained")
    for ax, curve in zip(fig.subplots(2, 3).flat, CURVES, strict=True):
        _draw_panel(ax, comparison, curve.title, curve.metrics, window)
    handles = [
        Line2D([], [], color=_color(i), label=_legend(comparison, label, ids), lw=_width(len(ids)))
        for i, (label, ids) in enumerate(groups.items())
    ]
    if any(len(ids) > 1 for ids in groups.values()):
        handles.append(
            Line2D([], [], color="#555555", label="one seed", lw=THIN_LW, alpha=THIN_ALPHA)
        )
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4))
    count, arms = len(comparison.runs), sum(len(ids) > 1 for ids in groups.values())
    what = f"{count} run{'s' if count != 1 else ''}"
    if arms:
        what += f" ({arms} arm{'s' if arms != 1 else ''}: mean over seeds thick, each seed thin)"
    fig.suptitle(f"sarl compare: {what}\n{smoothing_text(window)}", fontweight="bold")
    return fig


def _width(runs: int) -> float:
    """A group's legend line as drawn: thick for an arm's mean over seeds, else a lone run's."""
    return THICK_LW if runs > 1 else SINGLE_LW


def _legend(comparison: ComparisonView, label: str, ids: tuple[str, ...]) -> str:
    """``arm (2 seeds)``; a Study arm drawn from one run: ``arm (seed 1)``; else the run."""
    if len(ids) > 1:
        return f"{label} ({len(ids)} seeds)"
    run = next(r for r in comparison.runs if r.run_id == ids[0])
    return f"{label} (seed {run.seed})" if run.arm is not None and run.seed is not None else label


def _draw_panel(
    ax: Axes, comparison: ComparisonView, title: str, metrics: tuple[str, ...], window: int
) -> None:
    labels = comparison.labels
    used: list[str] = []
    missing: list[str] = []
    for i, ids in enumerate(comparison.groups.values()):
        curves = []
        for run_id in ids:
            history = comparison.histories.get(run_id, {})
            metric = next((m for m in metrics if history.get(m)), None)
            if metric is None:
                missing.append(labels[run_id])
                continue
            curves.append(trailing_mean(history[metric], window))
            used.append(metric)
        if curves:
            markers = max(len(c) for c in curves) <= _MARKERS_UP_TO
            draw_seeds(ax, curves, _color(i), markers=markers)
    ax.set_title(title, fontweight="bold")
    if not used:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", color="#888888", fontsize=14,
                transform=ax.transAxes)  # fmt: skip
        ax.set_xticks([])
        ax.set_yticks([])
        return
    # Name the runs with no line here, so an absent line is not mistaken for a hidden one; under
    # the axis rather than inside it, where it would cover data.
    label = " | ".join(dict.fromkeys(metric_info(m).label for m in used))
    xlabel = "training step" + (f"\n(no data: {', '.join(missing)})" if missing else "")
    finish_axes(ax, label, xlabel=xlabel)


def _color(index: int) -> str:
    return _COLORS[index % len(_COLORS)]


__all__ = ["ComparedRun", "ComparisonView", "comparison_figure"]
