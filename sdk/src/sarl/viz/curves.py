"""Training curves over seeds, drawn alike by the Study report and by ``sarl compare``.

Called by :mod:`sarl.study.plot` (the report's ``curves.png``) and :mod:`sarl.tracking.compare`
(``sarl compare``'s PNG). What both share:

* **Smoothing.** Per-step training metrics of a small batch are noisy enough to hide the trend
  (training accuracy of 16 responses moves by 1/16 per response). Each seed's curve is replaced by
  its trailing mean over :func:`smoothing_window` logged points — a value never depends on later
  steps, so a curve does not anticipate a change — and the figure states the window
  (:func:`smoothing_text`). Held-out evaluations (a few points, each already a mean over many
  problems) are drawn as logged.
* **Seeds.** An arm is drawn as its mean over seeds (thick) and, with fewer than
  :data:`MIN_BAND_SEEDS` seeds, each seed as a thin line: two seeds give a Student-t interval
  twelve standard errors wide, which says less than the two curves themselves. From three seeds on
  the Study report draws the interval band instead (:mod:`sarl.study.plot`).
* **Axes.** y labels in words with units (:func:`sarl.tracking.metrics.metric_info`), x label
  ``training step``.

Pure Python for the numbers; matplotlib only through the ``Axes`` passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from matplotlib.axes import Axes

Points = Sequence[tuple[int, float]]

#: Seeds from which an arm's spread is drawn as an interval band rather than as one line a seed.
MIN_BAND_SEEDS: Final = 3
#: The smoothing window is this fraction of the logged steps: 64 steps -> 8.
_WINDOW_SHARE: Final = 8
_MAX_WINDOW: Final = 50  # past this a trailing mean lags the curve more than it calms it
STEP_LABEL: Final = "training step"
# Line widths: one seed (thin, faded), an arm's mean over seeds (thick), a run on its own.
THIN_LW: Final = 0.9
THIN_ALPHA: Final = 0.55
THICK_LW: Final = 2.4
SINGLE_LW: Final = 1.8


def smoothing_window(steps: int) -> int:
    """The trailing window for curves of ``steps`` logged points: an eighth of them, at most
    :data:`_MAX_WINDOW`; 1 (no smoothing) below 16 points, where an average would swallow the
    curve."""
    return max(1, min(_MAX_WINDOW, steps // _WINDOW_SHARE))


def smoothing_text(window: int) -> str:
    """How a figure states its smoothing, e.g. ``training curves: trailing mean over 8 steps``."""
    if window <= 1:
        return "training curves: per-step values"
    return f"training curves: trailing mean over {window} steps"


def trailing_mean(points: Points, window: int) -> list[tuple[int, float]]:
    """Each ``(step, value)`` with the value replaced by the mean of it and the ``window − 1``
    points before it (fewer at the start, where fewer exist). ``points`` sorted by step;
    non-finite values are dropped first (one NaN would otherwise spoil every later mean)."""
    points = [(step, value) for step, value in points if math.isfinite(value)]
    if window <= 1:
        return points
    out: list[tuple[int, float]] = []
    total = 0.0
    for i, (step, value) in enumerate(points):
        total += value
        if i >= window:
            total -= points[i - window][1]
        out.append((step, total / min(i + 1, window)))
    return out


def by_step(curves: Sequence[Points]) -> dict[int, list[float]]:
    """Step -> the values of the curves that logged it, steps ascending."""
    out: dict[int, list[float]] = {}
    for curve in curves:
        for step, value in curve:
            out.setdefault(step, []).append(value)
    return dict(sorted(out.items()))


def mean_curve(curves: Sequence[Points]) -> list[tuple[int, float]]:
    """The mean over ``curves`` at every step any of them logged (over those that did)."""
    return [(step, sum(values) / len(values)) for step, values in by_step(curves).items()]


def draw_seeds(
    ax: Axes, curves: Sequence[Points], color: Any, *, markers: bool, ls: str = "-"
) -> None:
    """Each curve as a thin line, then their mean as a thick one (one curve: a single line);
    ``ls`` the line style (the Study report's validity panels tell rewards apart by it)."""
    marker = "o" if markers else ""
    if len(curves) == 1:
        steps, values = zip(*curves[0], strict=True)
        ax.plot(steps, values, color=color, marker=marker, ms=3, lw=SINGLE_LW, ls=ls)
        return
    for curve in curves:
        if curve:
            steps, values = zip(*curve, strict=True)
            ax.plot(steps, values, color=color, lw=THIN_LW, alpha=THIN_ALPHA, ls=ls)
    mean = mean_curve(curves)
    if mean:
        steps, values = zip(*mean, strict=True)
        ax.plot(steps, values, color=color, marker=marker, ms=3, lw=THICK_LW, ls=ls)


def finish_axes(ax: Axes, label: str, *, xlabel: str = STEP_LABEL) -> None:
    """Axis labels (``label``: the metric in words with its unit), integer steps, a grid."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel(xlabel)
    ax.set_ylabel(label, fontsize=9)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.grid(alpha=0.3)


__all__ = [
    "MIN_BAND_SEEDS",
    "SINGLE_LW",
    "STEP_LABEL",
    "THICK_LW",
    "THIN_ALPHA",
    "THIN_LW",
    "by_step",
    "draw_seeds",
    "finish_axes",
    "mean_curve",
    "smoothing_text",
    "smoothing_window",
    "trailing_mean",
]
