"""Smoothing of per-step curves: the trailing mean, its window and how a figure states it."""

from __future__ import annotations

import pytest

from sarl.viz.curves import mean_curve, smoothing_text, smoothing_window, trailing_mean


def test_trailing_mean_uses_only_earlier_points() -> None:
    points = [(1, 1.0), (2, 2.0), (3, 3.0), (4, 10.0)]
    got = trailing_mean(points, 2)
    assert [step for step, _ in got] == [1, 2, 3, 4]
    assert [v for _, v in got] == pytest.approx([1.0, 1.5, 2.5, 6.5])  # the jump shows at 4 only
    assert [v for _, v in trailing_mean(points, 3)] == pytest.approx([1.0, 1.5, 2.0, 5.0])


def test_window_one_is_the_curve_and_non_finite_values_are_dropped() -> None:
    points = [(1, 1.0), (2, float("nan")), (3, 3.0), (4, float("inf")), (5, 5.0)]
    assert trailing_mean(points, 1) == [(1, 1.0), (3, 3.0), (5, 5.0)]
    assert trailing_mean(points, 2) == [(1, 1.0), (3, 2.0), (5, 4.0)]


@pytest.mark.parametrize(
    ("steps", "window"), [(0, 1), (8, 1), (15, 1), (16, 2), (64, 8), (10_000, 50)]
)
def test_window_is_an_eighth_of_the_steps_within_limits(steps: int, window: int) -> None:
    assert smoothing_window(steps) == window


def test_the_window_is_stated() -> None:
    assert smoothing_text(8) == "training curves: trailing mean over 8 steps"
    assert smoothing_text(1) == "training curves: per-step values"


def test_mean_curve_averages_the_curves_that_logged_a_step() -> None:
    assert mean_curve([[(1, 1.0), (2, 3.0)], [(1, 3.0)]]) == [(1, 2.0), (2, 3.0)]
