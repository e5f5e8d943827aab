"""Reference implementation of the group bootstrap of reward-validity figures: the direct
definition (resample whole groups, recompute every figure with ``sarl.evaluation.validity``),
slow but obviously right. The product's vectorised bootstrap
(``sarl.evaluation.validity_bootstrap``) is checked against it; nothing in ``sarl`` imports this.
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence

from sarl.evaluation.validity import group_indices, validity

Interval = tuple[float, float]


def bootstrap_intervals(
    scores: Sequence[float],
    correct: Sequence[bool],
    groups: Sequence[Hashable],
    *,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Interval]:
    """Percentile intervals of :func:`validity`'s figures under a bootstrap over groups.

    Groups (prompts) are resampled with replacement, whole: samples of one prompt are not
    independent (same question, same difficulty), so resampling single responses would give
    intervals that are too narrow. A resampled group drawn twice counts as two groups. A figure
    undefined in some resamples gets its interval from the resamples where it is defined; one
    defined in fewer than half of them gets none.
    """
    if resamples < 1:
        raise ValueError(f"resamples: must be >= 1, got {resamples}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: must be between 0 and 1, got {confidence}")
    members = group_indices(groups)
    rng = random.Random(seed)
    draws: dict[str, list[float]] = {
        "auroc": [],
        "pair_agreement": [],
        "pair_ties": [],
        "pair_auroc": [],
    }
    for _ in range(resamples):
        picked = [rng.randrange(len(members)) for _ in members] if members else []
        idx = [(g, i) for g in picked for i in members[g]]
        keys = _resample_keys(picked, members)
        v = validity([scores[i] for _, i in idx], [correct[i] for _, i in idx], keys)
        figures = v.as_metrics() | ({} if v.pair_auroc is None else {"pair_auroc": v.pair_auroc})
        for name, value in figures.items():
            draws[name].append(value)
    return {
        name: _percentiles(values, confidence)
        for name, values in draws.items()
        if len(values) * 2 >= resamples
    }


def _resample_keys(picked: Sequence[int], members: Sequence[Sequence[int]]) -> list[int]:
    """A fresh key per drawn group, repeated for its samples (a group drawn twice is two)."""
    return [draw for draw, g in enumerate(picked) for _ in members[g]]


def _percentiles(values: Sequence[float], confidence: float) -> Interval:
    ordered = sorted(values)
    tail = (1 - confidence) / 2
    return _quantile(ordered, tail), _quantile(ordered, 1 - tail)


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile of sorted values (numpy's default method)."""
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
