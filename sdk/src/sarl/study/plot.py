"""The Study's curves in one PNG: per arm, the mean over seeds with a 95% band, per metric.

Called by :func:`sarl.study.report.write_report` (``curves.png`` of ``sarl study report`` and of
the local Study runner) through :func:`plot_curves`, and by ``StudyResult.figure()`` (the same
picture inline in a notebook) through :func:`curves_figure`. Panels: held-out avg@k, SR,
response length, training accuracy, KL, entropy. Seeds are aligned by step: at each step an
arm's line is the mean over the seeds that logged that step, and its band the Student-t interval
of :func:`sarl.study.stats.mean_interval` — absent where a single seed logged the step (one seed
gives no interval). Uses a bare matplotlib
``Figure`` (Agg, no pyplot state), imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from sarl.study.history import HELDOUT, RunHistory, eval_metric, infer_benchmark, infer_k
from sarl.study.stats import DEFAULT_CONFIDENCE, mean_interval
from sarl.tracking.metrics import ACCURACY, ENTROPY, KL, RESPONSE_LENGTH, STRUCTURE_SCORE

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Without a held-out metric in any run the avg@k panel says "no data"; k only names it.
_DEFAULT_K = 4
_MARKERS_UP_TO = 30  # steps per line; markers make short runs visible, long ones stay clean


class Band(NamedTuple):
    """One arm's curve: steps, the mean over seeds, and the interval (``None``: no band)."""

    steps: list[int]
    mean: list[float]
    low: list[float | None]
    high: list[float | None]
    seeds: list[int]  # how many seeds logged each step


def panels(k: int, benchmark: str = HELDOUT) -> tuple[tuple[str, str], ...]:
    """``(title, metric key)`` of each panel, in drawing order."""
    title = f"held-out avg@{k}" if benchmark == HELDOUT else f"{benchmark} avg@{k}"
    return (
        (title, eval_metric("eval_accuracy", k, benchmark)),
        ("SR (structure/score)", STRUCTURE_SCORE),
        ("response length", RESPONSE_LENGTH),
        ("training accuracy", ACCURACY),
        ("KL", KL),
        ("entropy", ENTROPY),
    )


def seed_band(
    histories: Sequence[RunHistory], key: str, confidence: float = DEFAULT_CONFIDENCE
) -> Band:
    """Metric ``key`` of ``histories`` (one arm's seeds) aligned by step: mean and interval."""
    by_step: dict[int, list[float]] = {}
    for history in histories:
        for step, value in history.metrics.get(key, []):
            by_step.setdefault(step, []).append(value)
    band = Band([], [], [], [], [])
    for step in sorted(by_step):
        interval = mean_interval(by_step[step], confidence)
        if interval.mean is None:  # every value at this step was non-finite
            continue
        band.steps.append(step)
        band.mean.append(interval.mean)
        band.low.append(interval.low)
        band.high.append(interval.high)
        band.seeds.append(interval.n)
    return band


def plot_curves(
    histories: Sequence[RunHistory],
    arms: Sequence[str],
    out_path: Path,
    *,
    k: int | None = None,
    benchmark: str | None = None,
) -> Path:
    """Write :func:`curves_figure` as a PNG to ``out_path`` (its folder is created)."""
    fig = curves_figure(histories, arms, k=k, benchmark=benchmark)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_path, format="png", dpi=100)
    return out_path


def curves_figure(
    histories: Sequence[RunHistory],
    arms: Sequence[str],
    *,
    k: int | None = None,
    benchmark: str | None = None,
) -> Figure:
    """The 2x3 panel figure; one colour per arm, ``arms`` order first (arms only present in
    ``histories`` follow). ``benchmark`` and ``k`` of the evaluation panel default to the ones the
    runs logged (:func:`~sarl.study.history.infer_benchmark`). A bare ``Figure`` (no pyplot
    state).

    Raises ``ValueError`` when ``histories`` is empty (nothing to draw).
    """
    from matplotlib import colormaps
    from matplotlib.lines import Line2D

    from sarl.display import figure

    if not histories:
        raise ValueError("no runs to plot: the Study has no FINISHED runs")
    order = list(dict.fromkeys([*arms, *(h.arm for h in histories)]))
    by_arm = {arm: [h for h in histories if h.arm == arm] for arm in order}
    order = [arm for arm in order if by_arm[arm]]
    benchmark = benchmark or infer_benchmark(histories)
    k = k if k is not None else infer_k(histories, _DEFAULT_K, benchmark)
    palette = colormaps["tab10"]
    colors = {arm: palette(i % 10) for i, arm in enumerate(order)}

    fig = figure(figsize=(13, 7.8), layout="constrained")
    for ax, (title, key) in zip(fig.subplots(2, 3).flat, panels(k, benchmark), strict=True):
        bands = {arm: seed_band(by_arm[arm], key) for arm in order}
        _draw_panel(ax, title, key, bands, colors)
    handles = [
        Line2D([], [], color=colors[arm], lw=2, label=_legend(arm, len(by_arm[arm])))
        for arm in order
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 4))
    fig.suptitle("Study: mean over seeds, 95% interval band", fontweight="bold")
    return fig


def _legend(arm: str, seeds: int) -> str:
    return f"{arm} ({seeds} seed{'s' if seeds != 1 else ''})"


def _draw_panel(
    ax: Axes, title: str, key: str, bands: Mapping[str, Band], colors: Mapping[str, Any]
) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set_title(title, fontweight="bold")
    drawn = False
    for arm, band in bands.items():
        if not band.steps:
            continue
        drawn = True
        marker = "o" if len(band.steps) <= _MARKERS_UP_TO else ""
        ax.plot(band.steps, band.mean, color=colors[arm], lw=1.8, marker=marker, ms=3)
        nan = float("nan")
        low = [nan if v is None else v for v in band.low]  # NaN: a gap in the band
        high = [nan if v is None else v for v in band.high]
        ax.fill_between(band.steps, low, high, color=colors[arm], alpha=0.2, lw=0)
    if not drawn:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", color="#888888", fontsize=14,
                transform=ax.transAxes)  # fmt: skip
        ax.set_xticks([])
        ax.set_yticks([])
        return
    ax.set_xlabel("step")
    ax.set_ylabel(key, fontsize=9)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.grid(alpha=0.3)


__all__ = ["Band", "curves_figure", "panels", "plot_curves", "seed_band"]
