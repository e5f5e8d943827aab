"""Percentile intervals of the reward-validity figures (:mod:`sarl.evaluation.validity`) under a
bootstrap over groups, vectorised with numpy.

Groups (prompts) are resampled with replacement, whole: samples of one prompt are not independent
(same question, same difficulty), so resampling single responses would give intervals that are
too narrow; a group drawn twice counts as two groups. A figure undefined in some resamples gets
its interval from the resamples where it is defined; one defined in fewer than half of them gets
none. Recomputing every figure from the resampled samples (the direct definition, kept as the
tests' reference in ``tests/sarl/evaluation/reference_bootstrap.py``) costs about 40 ms per
resample at 8,000 samples, so 1,000 resamples of each of a reward's seven figures (the structure
reward's SR and components) would take minutes. Here a resample is a vector of *counts*, how many
times each group (prompt) was drawn, and each figure is a weighted sum over the original
samples, so one resample costs a few array operations:

* within-group pairs: a group's (agree, disagree, tied) counts do not depend on the resample, so
  a resample's pooled counts are ``counts @ per_group_counts``;
* AUROC over the batch: every sample weighs as many times as its group was drawn; with the
  samples sorted by score once, the weighted Mann-Whitney count is, per distinct score, the
  positive weight there times (the negative weight below it + half the negative weight equal to
  it).

The draws are the reference's (the same ``random.Random(seed)`` calls in the same order) and so
are the percentiles (linear interpolation), so both give the same intervals up to float rounding;
the tests check it. ``pair_auroc`` (agreement + ties / 2, the headline) has an interval too;
:func:`resample_figures` gives every figure per resample, so :mod:`sarl.evaluation.diagnosis`
takes paired differences (a reward minus a trivial predictor over the same prompts).
:func:`draw_counts` is shared by every figure of one input, so a table's
intervals come from one set of resamples. Called by ``sarl reward diagnose``
(:mod:`sarl.cli.reward_diagnose`, through :mod:`sarl.evaluation.diagnosis`).
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from sarl.evaluation.validity import Interval, group_indices, pair_counts

#: Resamples per block of the AUROC computation: bounds memory at ``block x samples`` floats.
_BLOCK = 64

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Draws:
    """The resamples of one input: ``counts[r, g]``, how often resample ``r`` drew group ``g``
    (groups in order of first appearance, as :func:`~sarl.evaluation.validity.group_indices`),
    and each sample's group index."""

    counts: FloatArray  # (resamples, groups)
    group_of: npt.NDArray[np.intp]  # (samples,)

    @property
    def resamples(self) -> int:
        return int(self.counts.shape[0])


def draw_counts(groups: Sequence[Hashable], *, resamples: int = 1000, seed: int = 0) -> Draws:
    """``resamples`` draws of as many groups as there are, with replacement (seeded: the same
    ``seed`` gives the same draws)."""
    if resamples < 1:
        raise ValueError(f"resamples: must be >= 1, got {resamples}")
    members = group_indices(groups)
    n_groups = len(members)
    group_of = np.empty(len(groups), dtype=np.intp)
    for g, idx in enumerate(members):
        group_of[idx] = g
    counts = np.zeros((resamples, n_groups), dtype=np.float64)
    rng = random.Random(seed)
    for r in range(resamples):
        picked = [rng.randrange(n_groups) for _ in range(n_groups)] if n_groups else []
        counts[r] = np.bincount(np.asarray(picked, dtype=np.intp), minlength=n_groups)
    return Draws(counts, group_of)


def resample_figures(
    scores: Sequence[float], correct: Sequence[bool], draws: Draws
) -> dict[str, FloatArray]:
    """Every figure per resample of ``draws`` (NaN where a resample leaves it undefined):
    ``auroc``, ``pair_agreement``, ``pair_ties`` and the headline ``pair_auroc``
    (agreement + ties / 2). Paired across columns: the same ``draws`` give the same prompts."""
    if len(scores) != len(correct) or len(scores) != len(draws.group_of):
        raise ValueError(
            f"got {len(scores)} scores, {len(correct)} correctness flags and "
            f"{len(draws.group_of)} group keys"
        )
    values = np.asarray(scores, dtype=np.float64)  # (n,)
    flags = np.asarray(correct, dtype=bool)  # (n,)
    kept = ~np.isnan(values)
    figures = _pair_figures(values, flags, draws)
    figures["pair_auroc"] = figures["pair_agreement"] + figures["pair_ties"] / 2
    figures["auroc"] = _auroc(values[kept], flags[kept], draws.group_of[kept], draws.counts)
    return figures


def percentile_interval(per_resample: FloatArray, confidence: float) -> Interval | None:
    """The percentile interval of one figure's resamples (linear interpolation, as the
    reference); None when it is defined in fewer than half of them."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: must be between 0 and 1, got {confidence}")
    defined = per_resample[~np.isnan(per_resample)]
    if not defined.size or defined.size * 2 < per_resample.size:
        return None
    tail = (1 - confidence) / 2
    low, high = np.quantile(defined, [tail, 1 - tail])
    return float(low), float(high)


def bootstrap_intervals(
    scores: Sequence[float], correct: Sequence[bool], draws: Draws, *, confidence: float = 0.95
) -> dict[str, Interval]:
    """Percentile intervals of the validity figures over ``draws``: a figure undefined in some
    resamples gets its interval from the others, one defined in fewer than half none."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: must be between 0 and 1, got {confidence}")
    figures = resample_figures(scores, correct, draws)
    out: dict[str, Interval] = {}
    for name in ("auroc", "pair_agreement", "pair_ties", "pair_auroc"):
        if (interval := percentile_interval(figures[name], confidence)) is not None:
            out[name] = interval
    return out


def _pair_figures(
    values: FloatArray, flags: npt.NDArray[np.bool_], draws: Draws
) -> dict[str, FloatArray]:
    """Per resample: within-group agreement and ties (NaN where no pair was drawn)."""
    n_groups = draws.counts.shape[1]
    per_group = np.zeros((n_groups, 3), dtype=np.float64)  # (groups, [agree, tied, pairs])
    for g in range(n_groups):
        idx = np.flatnonzero(draws.group_of == g)
        c = pair_counts(values[idx].tolist(), flags[idx].tolist())
        per_group[g] = (c.agree, c.tied, c.pairs)
    pooled = draws.counts @ per_group  # (resamples, 3)
    with np.errstate(invalid="ignore", divide="ignore"):
        agreement = np.where(pooled[:, 2] > 0, pooled[:, 0] / pooled[:, 2], np.nan)
        ties = np.where(pooled[:, 2] > 0, pooled[:, 1] / pooled[:, 2], np.nan)
    return {"pair_agreement": agreement, "pair_ties": ties}


def _auroc(
    values: FloatArray,
    flags: npt.NDArray[np.bool_],
    group_of: npt.NDArray[np.intp],
    counts: FloatArray,
) -> FloatArray:
    """Per resample: the weighted Mann-Whitney AUROC over the batch (NaN without both kinds)."""
    resamples = counts.shape[0]
    if values.size == 0:
        return np.full(resamples, np.nan)
    order = np.argsort(values, kind="stable")
    values, flags, group_of = values[order], flags[order], group_of[order]
    # Equal scores are contiguous once sorted: one column per distinct score.
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    out = np.empty(resamples, dtype=np.float64)
    for a in range(0, resamples, _BLOCK):
        weights = counts[a : a + _BLOCK][:, group_of]  # (block, n): times each sample was drawn
        pos = np.add.reduceat(weights * flags, starts, axis=1)  # (block, distinct)
        neg = np.add.reduceat(weights * ~flags, starts, axis=1)
        below = np.cumsum(neg, axis=1) - neg  # negative weight strictly below each score
        wins = (pos * (below + 0.5 * neg)).sum(axis=1)
        pairs = pos.sum(axis=1) * neg.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[a : a + _BLOCK] = np.where(pairs > 0, wins / pairs, np.nan)
    return out


__all__ = [
    "Draws",
    "bootstrap_intervals",
    "draw_counts",
    "percentile_interval",
    "resample_figures",
]
