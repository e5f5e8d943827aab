"""Intervals over seeds checked against scipy, and their invariants as properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps  # type: ignore[import-untyped]

from sarl.study.stats import Interval, mean_interval, paired_difference
from sarl.tracking.metrics import SHARE, Range


@pytest.mark.parametrize(
    "values",
    [[0.1, 0.3], [0.2, 0.25, 0.31], [1.0, 2.0, 4.0, 8.0, 16.0], [-3.0, 0.5, 0.5, 7.25]],
)
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_mean_interval_is_scipy_t_interval(values: list[float], confidence: float) -> None:
    got = mean_interval(values, confidence)
    low, high = sps.t.interval(
        confidence, len(values) - 1, loc=np.mean(values), scale=sps.sem(values)
    )
    assert got.n == len(values)
    assert got.mean == pytest.approx(np.mean(values))
    assert (got.low, got.high) == (pytest.approx(low), pytest.approx(high))


def test_one_seed_gives_no_interval_and_none_gives_no_mean() -> None:
    assert mean_interval([0.4]) == Interval(0.4, None, None, 1)
    assert mean_interval([]) == Interval(None, None, None, 0)
    assert mean_interval([None, math.nan]) == Interval(None, None, None, 0)


def test_none_nan_and_inf_are_dropped() -> None:
    assert mean_interval([0.1, None, math.nan, 0.3, math.inf]) == mean_interval([0.1, 0.3])


def test_equal_values_give_a_zero_width_interval() -> None:
    assert mean_interval([0.5, 0.5, 0.5]) == Interval(0.5, 0.5, 0.5, 3)


@pytest.mark.parametrize("confidence", [0.0, 1.0, 1.5, -0.1])
def test_confidence_outside_zero_one_is_refused(confidence: float) -> None:
    with pytest.raises(ValueError, match="confidence must be in"):
        mean_interval([1.0, 2.0], confidence)


@pytest.mark.parametrize(
    ("arm", "ref"),
    [
        ([0.30, 0.28, 0.35, 0.31], [0.25, 0.27, 0.26, 0.22]),  # clearly better
        ([0.30, 0.20, 0.35], [0.25, 0.27, 0.26]),  # undecided
        ([0.1, 0.2], [0.3, 0.35]),  # worse
    ],
)
def test_paired_difference_matches_ttest_rel(arm: list[float], ref: list[float]) -> None:
    got = paired_difference(dict(enumerate(arm)), dict(enumerate(ref)))
    test = sps.ttest_rel(arm, ref)
    ci = test.confidence_interval(0.95)
    assert got.n == len(arm)
    assert got.mean == pytest.approx(np.mean(np.subtract(arm, ref)))
    assert (got.low, got.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert got.low is not None and got.high is not None
    # 0 lies outside the 95% interval exactly when the paired t-test rejects at 5%.
    assert (got.low > 0 or got.high < 0) == (test.pvalue < 0.05)


def test_paired_difference_uses_shared_seeds_only() -> None:
    got = paired_difference({0: 0.5, 1: 0.7, 2: 0.9, 3: None}, {0: 0.4, 1: 0.4, 3: 0.1, 4: 0.0})
    assert got == mean_interval([0.5 - 0.4, 0.7 - 0.4])  # seeds 0 and 1
    assert paired_difference({0: 1.0}, {1: 1.0}) == Interval(None, None, None, 0)


finite = st.floats(min_value=-1e3, max_value=1e3, allow_nan=False)
samples = st.lists(finite, min_size=2, max_size=12)


@settings(max_examples=60, deadline=None)
@given(samples)
def test_interval_contains_the_mean(values: list[float]) -> None:
    got = mean_interval(values)
    assert got.low is not None and got.high is not None and got.mean is not None
    assert got.low <= got.mean <= got.high


@settings(max_examples=60, deadline=None)
@given(samples.filter(lambda v: np.ptp(v) > 1e-6), st.integers(min_value=2, max_value=6))
def test_interval_shrinks_with_more_seeds_of_the_same_spread(
    values: list[float], copies: int
) -> None:
    few, many = mean_interval(values), mean_interval(values * copies)
    assert few.low is not None and few.high is not None
    assert many.low is not None and many.high is not None
    assert many.mean == pytest.approx(few.mean)
    assert many.high - many.low < few.high - few.low


@settings(max_examples=60, deadline=None)
@given(samples, finite)
def test_interval_is_translation_equivariant(values: list[float], shift: float) -> None:
    base, moved = mean_interval(values), mean_interval([v + shift for v in values])
    for a, b in ((base.mean, moved.mean), (base.low, moved.low), (base.high, moved.high)):
        assert a is not None and b is not None
        assert b == pytest.approx(a + shift, abs=1e-6)


@settings(max_examples=60, deadline=None)
@given(samples, finite)
def test_paired_difference_of_a_shifted_copy_is_the_shift(
    values: list[float], shift: float
) -> None:
    ref = dict(enumerate(values))
    got = paired_difference({s: v + shift for s, v in ref.items()}, ref)
    assert got.mean == pytest.approx(shift, abs=1e-6)
    assert got.low == pytest.approx(shift, abs=1e-6)
    assert got.high == pytest.approx(shift, abs=1e-6)


# -- clipped to the metric's range -----------------------------------------------------------------


def test_an_interval_beyond_the_range_is_clipped_and_says_so() -> None:
    raw = mean_interval([0.0, 0.02])  # two seeds: 0.01 ± 12.7 * 0.01
    assert raw.low is not None and raw.low < 0
    got = mean_interval([0.0, 0.02], bounds=SHARE)
    assert (got.mean, got.low, got.high) == (pytest.approx(0.01), 0.0, pytest.approx(raw.high))
    assert got.clipped_to == SHARE
    assert got.to_dict()["clipped_to"] == [0.0, 1.0]


def test_an_interval_inside_the_range_is_left_alone() -> None:
    got = mean_interval([0.4, 0.5, 0.45], bounds=SHARE)
    assert got == mean_interval([0.4, 0.5, 0.45])
    assert got.clipped_to is None and got.to_dict()["clipped_to"] is None


def test_paired_differences_clip_to_the_range_of_a_difference() -> None:
    got = paired_difference({0: 0.0, 1: 0.9}, {0: 0.9, 1: 0.0}, bounds=SHARE.difference())
    assert (got.low, got.high, got.clipped_to) == (-1.0, 1.0, Range(-1.0, 1.0))


def test_open_ends_clip_nothing() -> None:
    got = mean_interval([0.0, 0.02], bounds=Range(0.0, None))  # KL: >= 0, no top
    assert got.low == 0.0
    assert got.high == pytest.approx(mean_interval([0.0, 0.02]).high)
