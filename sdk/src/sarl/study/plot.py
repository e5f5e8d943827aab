"""The Study's curves in one PNG: per arm and metric, the mean over seeds and their spread.

Called by :func:`sarl.study.report.write_report` (``curves.png`` of ``sarl study report`` and of
the local Study runner) through :func:`plot_curves`, and by ``StudyResult.figure()`` (the same
picture inline in a notebook) through :func:`curves_figure`. Panels: held-out avg@k, SR,
response length, training accuracy, KL, entropy; each y axis names its metric in words with the
unit (:func:`sarl.tracking.metrics.metric_info`). When the runs logged reward validity
(``validity/<reward>/...``, :mod:`sarl.evaluation.validity`), a third row shows, under SR and
accuracy, each arm's rewards' within-prompt AUROC (the headline: agreement + ties / 2, derived
per step by :func:`sarl.study.validity_summary.with_pair_auroc`) and pooled AUROC against
correctness (secondary; 0.5 dotted: chance) and the reward terms themselves, one colour per arm
and one line style per reward; the trivial predictor "has an answer"
(:mod:`sarl.evaluation.trivial`) dash-dot-dotted beside them, the floor a reward must beat ("answer
format is valid" nearly coincides with it and is left to the report's table). A reward
whose validity sinks to chance while its term keeps rising is being hacked (the
``validity_at_chance_reward_up`` flag of :mod:`sarl.study.flags`).

Seeds are aligned by step: at each step an arm's thick line is the mean over the seeds that
logged that step. Its spread is drawn as each seed's thin line when the arm has fewer than
:data:`~sarl.viz.curves.MIN_BAND_SEEDS` seeds, else as the Student-t interval band of
:func:`sarl.study.stats.mean_interval`, clipped to the metric's range (a share stays in [0, 1])
and absent at steps fewer seeds logged. Per-step training curves are each seed's trailing mean
(window stated in the figure; :mod:`sarl.viz.curves`); held-out evaluations are drawn as logged.
Uses a bare matplotlib ``Figure`` (Agg, no pyplot state), imported inside the functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from sarl.evaluation.trivial import HAS_ANSWER, is_trivial
from sarl.study.history import (
    HELDOUT,
    RunHistory,
    eval_metric,
    infer_benchmark,
    infer_k,
    validity_rewards,
)
from sarl.study.stats import DEFAULT_CONFIDENCE, mean_interval
from sarl.study.validity_summary import pair_auroc_key, with_pair_auroc
from sarl.tracking.metrics import (
    ACCURACY,
    ENTROPY,
    EVAL_PREFIX,
    KL,
    RESPONSE_LENGTH,
    STRUCTURE_SCORE,
    metric_info,
    reward_metric,
    validity_metric,
)
from sarl.viz.curves import (
    MIN_BAND_SEEDS,
    THICK_LW,
    THIN_ALPHA,
    THIN_LW,
    by_step,
    draw_seeds,
    finish_axes,
    smoothing_text,
    smoothing_window,
    trailing_mean,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Without a held-out metric in any run the avg@k panel says "no data"; k only names it.
_DEFAULT_K = 4
_MARKERS_UP_TO = 30  # steps per line; markers make short runs visible, long ones stay clean
_ROW_HEIGHT = 3.9  # inches per row of panels
#: The validity row: (title, figure of ``validity/<reward>/<figure>`` or ``reward`` for the term
#: ``reward/<reward>``, y label).
VALIDITY_PANELS: tuple[tuple[str, str, str], ...] = (
    (
        "reward validity: within-prompt AUROC",
        "pair_auroc",
        "pairs in a prompt ordered right (ties 1/2)",
    ),
    ("validity (secondary): pooled AUROC", "auroc", "AUROC vs correctness over the batch"),
    ("reward terms (unweighted)", "reward", "reward term value"),
)
_REWARD_STYLES = ("-", "--", ":", "-.")
#: The trivial predictor drawn beside the rewards (format_valid nearly coincides with it).
_TRIVIAL_DRAWN = HAS_ANSWER
_TRIVIAL_STYLE: Any = (0, (6, 1.5, 1, 1.5, 1, 1.5))  # dash-dot-dot: unlike the four above


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
        ("SR (structure reward)", STRUCTURE_SCORE),
        ("response length", RESPONSE_LENGTH),
        ("training accuracy", ACCURACY),
        ("KL", KL),
        ("entropy", ENTROPY),
    )


def seed_band(
    histories: Sequence[RunHistory],
    key: str,
    confidence: float = DEFAULT_CONFIDENCE,
    *,
    window: int = 1,
    min_seeds: int = MIN_BAND_SEEDS,
) -> Band:
    """Metric ``key`` of ``histories`` (one arm's seeds), each seed's trailing mean over
    ``window`` points, aligned by step: the mean, and the interval where at least ``min_seeds``
    seeds logged the step, clipped to the metric's range."""
    bounds = metric_info(key).range
    curves = [trailing_mean(h.metrics.get(key, []), window) for h in histories]
    band = Band([], [], [], [], [])
    for step, values in by_step(curves).items():
        interval = mean_interval(values, confidence, bounds)
        if interval.mean is None:  # every value at this step was non-finite
            continue
        wide_enough = interval.n >= min_seeds
        band.steps.append(step)
        band.mean.append(interval.mean)
        band.low.append(interval.low if wide_enough else None)
        band.high.append(interval.high if wide_enough else None)
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
    """The 2x3 panel figure (3x3 with the validity row, when the runs logged reward
    validity); one colour per arm, ``arms`` order first (arms only present in
    ``histories`` follow). ``benchmark`` and ``k`` of the evaluation panel default to the ones the
    runs logged (:func:`~sarl.study.history.infer_benchmark`). A bare ``Figure`` (no pyplot
    state).

    Raises ``ValueError`` when ``histories`` is empty (nothing to draw).
    """
    from sarl.display import figure
    from sarl.spec.study import arm_color

    if not histories:
        raise ValueError("no runs to plot: the Study has no FINISHED runs")
    order = list(dict.fromkeys([*arms, *(h.arm for h in histories)]))
    # The colours MLflow's chart view shows for these arms (tag mlflow.runColor, by the arm's
    # place in the Study, before arms without runs drop out).
    colors = {arm: arm_color(i) for i, arm in enumerate(order)}
    by_arm = {arm: [h for h in histories if h.arm == arm] for arm in order}
    order = [arm for arm in order if by_arm[arm]]
    benchmark = benchmark or infer_benchmark(histories)
    k = k if k is not None else infer_k(histories, _DEFAULT_K, benchmark)
    window = smoothing_window(_training_steps(histories))

    by_arm = {arm: [with_pair_auroc(h) for h in runs] for arm, runs in by_arm.items()}
    rewards = {arm: _drawn_rewards(by_arm[arm]) for arm in order}
    styles = _reward_styles(rewards)
    rows = 3 if styles else 2
    fig = figure(figsize=(13, _ROW_HEIGHT * rows), layout="constrained")
    grid = fig.subplots(rows, 3)
    for ax, (title, key) in zip(grid[:2].flat, panels(k, benchmark), strict=True):
        # Held-out evaluations are a few points, each a mean over many problems: as logged.
        smooth = 1 if key.startswith(EVAL_PREFIX) else window
        _draw_panel(ax, title, key, {arm: by_arm[arm] for arm in order}, colors, smooth)
    if styles:
        for ax, panel in zip(grid[2], VALIDITY_PANELS, strict=True):
            _draw_validity_panel(ax, panel, by_arm, rewards, colors, styles, window)
    seeds = {arm: len(by_arm[arm]) for arm in order}
    handles = _legend(seeds, colors) + _style_legend(styles)
    fig.legend(handles=handles, loc="outside lower center", ncols=4)
    fig.suptitle(_title(seeds, window), fontweight="bold")
    return fig


def _drawn_rewards(runs: Sequence[RunHistory]) -> list[str]:
    """The rewards whose validity the arm's runs logged, and "has an answer" last."""
    names = sorted({r for h in runs for r in validity_rewards(h)})
    return [r for r in names if not is_trivial(r)] + [r for r in names if r == _TRIVIAL_DRAWN]


def _reward_styles(rewards: Mapping[str, Sequence[str]]) -> dict[str, Any]:
    """One line style per reward any arm logged validity for (styles repeat past four), the
    trivial predictor dash-dot-dot."""
    names = sorted({r for names in rewards.values() for r in names if not is_trivial(r)})
    styles: dict[str, Any] = {
        r: _REWARD_STYLES[i % len(_REWARD_STYLES)] for i, r in enumerate(names)
    }
    if any(_TRIVIAL_DRAWN in names for names in rewards.values()):
        styles[_TRIVIAL_DRAWN] = _TRIVIAL_STYLE
    return styles


def _style_legend(styles: Mapping[str, Any]) -> list[Any]:
    from matplotlib.lines import Line2D

    return [
        Line2D(
            [],
            [],
            color="#333333",
            ls=ls,
            lw=THICK_LW * 0.7,
            label="trivial: has an answer" if is_trivial(reward) else f"reward {reward}",
        )
        for reward, ls in styles.items()
    ]


def _training_steps(histories: Sequence[RunHistory]) -> int:
    """The most points any run logged of any training metric (what the window is a share of)."""
    return max(
        (
            len(v)
            for h in histories
            for key, v in h.metrics.items()
            if not key.startswith(EVAL_PREFIX)
        ),
        default=0,
    )


def _title(seeds: Mapping[str, int], window: int) -> str:
    thin = any(n < MIN_BAND_SEEDS for n in seeds.values())
    band = any(n >= MIN_BAND_SEEDS for n in seeds.values())
    spread = {
        (True, False): f"each seed thin (a band needs {MIN_BAND_SEEDS}+ seeds)",
        (False, True): "95% interval band",
        (True, True): f"95% band from {MIN_BAND_SEEDS} seeds, else each seed thin",
    }[(thin, band)]
    return (
        f"Study: mean over seeds (thick), {spread}\n"
        f"{smoothing_text(window)}; held-out evaluations as logged"
    )


def _seeds(arm: str, n: int) -> str:
    return f"{arm} ({n} seed{'s' if n != 1 else ''})"


def _legend(seeds: Mapping[str, int], colors: Mapping[str, Any]) -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles: list[Any] = [
        Line2D([], [], color=colors[arm], label=_seeds(arm, n), lw=THICK_LW)
        for arm, n in seeds.items()
    ]
    if any(1 < n < MIN_BAND_SEEDS for n in seeds.values()):
        handles.append(
            Line2D([], [], color="#555555", label="one seed", lw=THIN_LW, alpha=THIN_ALPHA)
        )
    if any(n >= MIN_BAND_SEEDS for n in seeds.values()):
        handles.append(Patch(color="#555555", alpha=0.2, lw=0, label="95% interval"))
    return handles


def _draw_panel(
    ax: Axes,
    title: str,
    key: str,
    by_arm: Mapping[str, Sequence[RunHistory]],
    colors: Mapping[str, Any],
    window: int,
) -> None:
    ax.set_title(title, fontweight="bold")
    drawn = False
    for arm, runs in by_arm.items():
        drawn = _draw_arm(ax, runs, key, colors[arm], window) or drawn
    if not drawn:
        _no_data(ax)
        return
    finish_axes(ax, metric_info(key).label)


def _draw_validity_panel(
    ax: Axes,
    panel: tuple[str, str, str],
    by_arm: Mapping[str, Sequence[RunHistory]],
    rewards: Mapping[str, Sequence[str]],
    colors: Mapping[str, Any],
    styles: Mapping[str, str],
    window: int,
) -> None:
    """One panel of the validity row: for each arm, each of its rewards' ``figure``."""
    title, figure, label = panel
    ax.set_title(title, fontweight="bold")
    drawn = False
    for arm, names in rewards.items():
        for reward in names:
            key = _validity_key(reward, figure)
            drawn = _draw_arm(ax, by_arm[arm], key, colors[arm], window, styles[reward]) or drawn
    if not drawn:
        _no_data(ax)
        return
    if figure != "reward":
        ax.axhline(0.5, color="#555555", ls=":", lw=1.2, zorder=0)  # chance
        ax.text(0.01, 0.5, " chance", color="#555555", fontsize=8, va="bottom",
                transform=ax.get_yaxis_transform())  # fmt: skip
        ax.set_ylim(-0.02, 1.02)
    finish_axes(ax, label)


def _validity_key(reward: str, figure: str) -> str:
    if figure == "reward":
        return reward_metric(reward)
    return pair_auroc_key(reward) if figure == "pair_auroc" else validity_metric(reward, figure)


def _draw_arm(
    ax: Axes, runs: Sequence[RunHistory], key: str, color: Any, window: int, ls: str = "-"
) -> bool:
    """One arm's curve of ``key`` (seeds thin, or the mean in its band); False if none logged it."""
    band = seed_band(runs, key, window=window)
    if not band.steps:
        return False
    markers = len(band.steps) <= _MARKERS_UP_TO
    if len(runs) < MIN_BAND_SEEDS:
        curves = [trailing_mean(h.metrics.get(key, []), window) for h in runs]
        draw_seeds(ax, [c for c in curves if c], color, markers=markers, ls=ls)
        return True
    ax.plot(band.steps, band.mean, color=color, marker="o" if markers else "", ms=3,
            lw=THICK_LW, ls=ls)  # fmt: skip
    nan = float("nan")
    low = [nan if v is None else v for v in band.low]  # NaN: a gap in the band
    high = [nan if v is None else v for v in band.high]
    ax.fill_between(band.steps, low, high, color=color, alpha=0.2, lw=0)
    return True


def _no_data(ax: Axes) -> None:
    ax.text(0.5, 0.5, "no data", ha="center", va="center", color="#888888", fontsize=14,
            transform=ax.transAxes)  # fmt: skip
    ax.set_xticks([])
    ax.set_yticks([])


__all__ = ["VALIDITY_PANELS", "Band", "curves_figure", "panels", "plot_curves", "seed_band"]
