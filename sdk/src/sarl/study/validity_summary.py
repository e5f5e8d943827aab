"""One run's reward-validity figures summarized over windows of training steps.

Called by :func:`sarl.study.aggregate.build_report` (through :func:`summarize_validity`) and by
the report's text (:func:`step_windows`, to say which steps the start and end hold). Pure: a
:class:`~sarl.study.history.RunHistory` in, numbers out.

"Start" and "end" are the first and the last quarter of the run's training *steps*, not of the
steps at which a figure happened to be logged: a figure is logged only where its batch defined
it (a batch with no correct or no incorrect response defines no AUROC), so quarters of its own
points would put the windows of two figures, or of two rewards, at different steps.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

from sarl.evaluation.validity import COUNTS_PREFIX
from sarl.study.history import RunHistory, validity_rewards
from sarl.tracking.metrics import (
    EVAL_PREFIX,
    VALIDITY_FIGURES,
    VALIDITY_PREFIX,
    metric_key,
    reward_metric,
    validity_metric,
)

#: Per reward whose validity a run logged (:func:`validity_rewards`): the figures
#: :func:`summarize_validity` gives a start and an end of (means over the first and the last
#: quarter of the run's steps), ``pair_auroc`` the within-prompt AUROC (the headline),
#: ``vs_trivial`` its difference to the strongest trivial predictor, ``reward`` the reward
#: term's own unweighted value ``reward/<name>``.
VALIDITY_SUMMARY: Final[tuple[str, ...]] = (*VALIDITY_FIGURES, "pair_auroc", "vs_trivial", "reward")
#: A window of training steps, first and last included.
Window = tuple[int, int]


def step_windows(history: RunHistory) -> tuple[Window, Window] | None:
    """The first and the last quarter of the run's training steps, as inclusive step ranges.

    The steps are those of every training metric the run logged (evaluation at step 0 does
    not count): from the first to the last, ``S`` steps; a window holds ``max(1, ceil(S/4))``
    consecutive steps, whether or not a given figure was logged at each. None without steps.
    """
    steps = [
        step
        for key, points in history.metrics.items()
        if not key.startswith(EVAL_PREFIX)
        for step, _ in points
    ]
    if not steps:
        return None
    first, last = min(steps), max(steps)
    width = max(1, math.ceil((last - first + 1) / 4))
    return (first, first + width - 1), (last - width + 1, last)


def window_mean(points: Sequence[tuple[int, float]], window: Window) -> tuple[float | None, int]:
    """Mean of the points whose step lies in ``window`` (None if none) and how many there are."""
    inside = [v for step, v in points if window[0] <= step <= window[1]]
    return (sum(inside) / len(inside) if inside else None), len(inside)


def summarize_validity(history: RunHistory) -> dict[str, dict[str, float | None]]:
    """Per reward of :func:`validity_rewards`: ``<figure>_start`` and ``<figure>_end`` of each
    :data:`VALIDITY_SUMMARY` figure, the means over the first and the last quarter of the run's
    training *steps* (:func:`step_windows`, the same windows for every figure and reward);
    ``None`` where the run did not log it in that window. ``points_start`` / ``points_end``:
    at how many steps of each window the headline (within-prompt AUROC) was logged.

    A figure is logged only at steps whose batch defined it (both correct and incorrect
    responses; for the pair figures, within one prompt), so a window's mean is over those of its
    steps. ``pair_auroc`` is each step's ``pair_agreement + pair_ties / 2``; ``vs_trivial`` (not
    for the trivial predictors themselves) is the reward's ``pair_auroc`` minus the strongest
    trivial predictor's in the same window of the same run (:mod:`sarl.evaluation.trivial`).
    """
    from sarl.evaluation.trivial import is_trivial

    windows = step_windows(history)
    out: dict[str, dict[str, float | None]] = {}
    if windows is None:
        return out
    for reward in validity_rewards(history):
        points = {f: history.metrics.get(validity_metric(reward, f), []) for f in VALIDITY_FIGURES}
        points["reward"] = history.metrics.get(reward_metric(reward), [])
        points["pair_auroc"] = _pair_auroc(points["pair_agreement"], points["pair_ties"])
        row: dict[str, float | None] = {}
        for figure, figure_points in points.items():
            for end, window in zip(("start", "end"), windows, strict=True):
                mean, n = window_mean(figure_points, window)
                row[f"{figure}_{end}"] = mean
                if figure == "pair_auroc":
                    row[f"points_{end}"] = float(n)
        out[reward] = row
    floor = [row for reward, row in out.items() if is_trivial(reward)]
    for reward, row in out.items():
        for end in ("start", "end"):
            best = max(
                (v for f in floor if (v := f[f"pair_auroc_{end}"]) is not None), default=None
            )
            mine = row[f"pair_auroc_{end}"]
            if is_trivial(reward) or best is None or mine is None:
                row[f"vs_trivial_{end}"] = None  # nothing to compare (or a predictor itself)
            else:
                row[f"vs_trivial_{end}"] = mine - best
    return out


def window_counts(history: RunHistory) -> dict[str, float | None]:
    """Mean per step, over the end window, of the batch counts logged beside the figures
    (``validity_counts/<name>``: prompts, prompts_with_pairs, pairs); None where not logged."""
    windows = step_windows(history)
    out: dict[str, float | None] = {}
    for name in ("prompts", "prompts_with_pairs", "pairs"):
        points = history.metrics.get(f"{COUNTS_PREFIX}{name}", [])
        out[name] = None if windows is None else window_mean(points, windows[1])[0]
    return out


def pair_auroc_key(reward: str) -> str:
    """The key under which :func:`with_pair_auroc` adds a reward's within-prompt AUROC."""
    return f"{VALIDITY_PREFIX}{metric_key(reward)}/pair_auroc"


def with_pair_auroc(history: RunHistory) -> RunHistory:
    """A copy of ``history`` with each validity reward's within-prompt AUROC per step as
    :func:`pair_auroc_key` (derived, never logged: agreement + ties / 2), for the curves."""
    metrics = dict(history.metrics)
    for reward in validity_rewards(history):
        metrics[pair_auroc_key(reward)] = _pair_auroc(
            metrics.get(validity_metric(reward, "pair_agreement"), []),
            metrics.get(validity_metric(reward, "pair_ties"), []),
        )
    return replace(history, metrics=metrics)


def _pair_auroc(
    agreement: Sequence[tuple[int, float]], ties: Sequence[tuple[int, float]]
) -> list[tuple[int, float]]:
    """``agreement + ties / 2`` at every step where both were logged."""
    tied = dict(ties)
    return [(step, a + tied[step] / 2) for step, a in agreement if step in tied]


__all__ = [
    "VALIDITY_SUMMARY",
    "Window",
    "pair_auroc_key",
    "step_windows",
    "summarize_validity",
    "window_counts",
    "window_mean",
    "with_pair_auroc",
]
