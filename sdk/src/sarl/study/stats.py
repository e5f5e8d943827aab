"""Intervals over seeds: the mean of a metric across a Study arm's seeds, and paired differences.

Used by :mod:`sarl.study.aggregate` (aggregates per arm, arm vs reference) and
:mod:`sarl.study.plot` (bands around the mean curves). Pure numpy/scipy.

Both intervals are Student-t intervals over seeds, the textbook choice for a handful of
independent runs (seeds are few, the spread is unknown)::

    mean ± t_{(1+c)/2, n-1} · s / √n        s: sample standard deviation (ddof=1)

:func:`paired_difference` applies it to the per-seed differences arm − reference over the seeds
both arms ran, i.e. the paired t-interval (the interval that goes with ``scipy.stats.ttest_rel``):
pairing by seed removes what the seed alone decides (data order, initial sampling), so it is
tighter than comparing the two means when the seed matters.

Conventions: ``None`` and non-finite values (NaN, ±inf; JSON cannot hold them) are dropped before
anything is computed; no value left → ``mean`` is ``None``; one value → the mean only, ``low``
and ``high`` are ``None`` (one seed gives no spread, hence no interval); values all equal → a
zero-width interval at the mean.

Bounded metrics: given the metric's ``bounds`` (:class:`sarl.tracking.metrics.Range`), an end of
the interval beyond them is moved onto them and the interval records the range in
``clipped_to``. With two seeds ``t_{0.975, 1}`` = 12.7, so a share of 0.01 ± 0.06 would
otherwise read [−0.05, 0.07]; the clipped interval is no longer symmetric about the mean, and its
coverage is at least that of the unclipped one (only impossible values were cut).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from sarl.tracking.metrics import Range

DEFAULT_CONFIDENCE = 0.95


@dataclass(frozen=True)
class Interval:
    """A mean over ``n`` seeds and its confidence interval (``None`` where undefined).

    ``clipped_to``: the metric's range when an end of the interval lay beyond it and was moved
    onto it (see the module docstring), else ``None``.
    """

    mean: float | None
    low: float | None
    high: float | None
    n: int
    clipped_to: Range | None = None

    def to_dict(self) -> dict[str, float | int | list[float | None] | None]:
        """``{"mean", "low", "high", "n", "clipped_to"}``, the form in ``summary.json``;
        ``clipped_to`` is ``[low, high]`` of the range (``null`` for an open end) or ``null``."""
        clipped = None if self.clipped_to is None else [self.clipped_to.low, self.clipped_to.high]
        return {
            "mean": self.mean,
            "low": self.low,
            "high": self.high,
            "n": self.n,
            "clipped_to": clipped,
        }


def finite(values: Iterable[float | None]) -> list[float]:
    """The values that are numbers and finite, as floats (``None``, NaN and ±inf dropped)."""
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def mean_interval(
    values: Iterable[float | None],
    confidence: float = DEFAULT_CONFIDENCE,
    bounds: Range | None = None,
) -> Interval:
    """Mean of ``values`` with its Student-t ``confidence`` interval, clipped to ``bounds`` (see
    the module docstring)."""
    from scipy import stats  # type: ignore[import-untyped]

    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    kept = np.asarray(finite(values), dtype=np.float64)  # (n,)
    n = int(kept.size)
    if n == 0:
        return Interval(None, None, None, 0)
    mean = float(kept.mean())
    if n == 1:
        return Interval(mean, None, None, 1)
    sem = float(kept.std(ddof=1)) / math.sqrt(n)
    half = float(stats.t.ppf((1.0 + confidence) / 2.0, n - 1)) * sem
    return clip(Interval(mean, mean - half, mean + half, n), bounds)


def clip(interval: Interval, bounds: Range | None) -> Interval:
    """``interval`` with each end moved into ``bounds``; ``clipped_to`` set when one moved."""
    if bounds is None or interval.low is None or interval.high is None:
        return interval
    low, high = bounds.clip(interval.low), bounds.clip(interval.high)
    if (low, high) == (interval.low, interval.high):
        return interval
    return Interval(interval.mean, low, high, interval.n, clipped_to=bounds)


def paired_difference(
    arm_values: Mapping[int, float | None],
    ref_values: Mapping[int, float | None],
    confidence: float = DEFAULT_CONFIDENCE,
    bounds: Range | None = None,
) -> Interval:
    """Mean of ``arm − reference`` over the seeds both have a finite value for, with the paired
    t-interval clipped to ``bounds`` (the range of a difference,
    :meth:`~sarl.tracking.metrics.Range.difference`); ``n`` is the number of such seeds."""
    diffs = [
        float(a) - float(r)
        for seed, a in arm_values.items()
        if (r := ref_values.get(seed)) is not None
        and a is not None
        and math.isfinite(a)
        and math.isfinite(r)
    ]
    return mean_interval(diffs, confidence, bounds)


__all__ = [
    "DEFAULT_CONFIDENCE",
    "Interval",
    "clip",
    "finite",
    "mean_interval",
    "paired_difference",
]
