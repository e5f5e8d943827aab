"""What a metric's values are: the label (words and unit) and the range intervals are clipped to."""

from __future__ import annotations

import pytest

from sarl.rewards.structure.score import structure_reward
from sarl.tracking.metrics import (
    NON_NEGATIVE,
    SHARE,
    SR_RANGE,
    Range,
    curve_metrics,
    metric_info,
)


@pytest.mark.parametrize(
    ("key", "label", "bounds"),
    [
        ("accuracy", "training accuracy (share correct)", Range(0.0, 1.0)),
        ("response_length", "response length (tokens)", Range(0.0, None)),
        ("kl", "KL to reference (nats/token)", Range(0.0, None)),
        ("entropy", "entropy (nats/token)", Range(0.0, None)),
        ("structure/score", "SR = C/2 + 1/(1+L)", Range(0.0, 1.0)),
        ("structure/path_length", "L, mean path length (hops)", Range(1.0, None)),
        ("eval/heldout/avg_at_4", "accuracy, mean of 4 samples (share)", Range(0.0, 1.0)),
        ("eval/math500/pass_at_16", "solved by any of 16 samples (share)", Range(0.0, 1.0)),
        ("eval/heldout/answer_rate", "answer rate (share answered)", Range(0.0, 1.0)),
        ("reward/mean", "reward (weighted sum of the terms)", Range()),  # weights decide
        ("my/custom", "my/custom", Range()),  # unknown: reads as itself, nothing clipped
    ],
)
def test_label_and_range(key: str, label: str, bounds: Range) -> None:
    assert metric_info(key).label == label
    assert metric_info(key).range == bounds


def test_every_curve_is_labelled_in_words() -> None:
    for key in curve_metrics():
        assert metric_info(key).label != key


def test_sr_range_holds_the_formula_s_extremes() -> None:
    # A complete graph (C = 1, every pair one hop apart: L = 1) scores the maximum, 1.0; a map
    # with no clustering and long paths tends to 0; a degenerate map scores degenerate_score.
    top = structure_reward(1.0, 1.0, num_nodes=3)
    assert top == SR_RANGE.high == 1.0
    assert structure_reward(0.0, 1e9, num_nodes=3) == pytest.approx(SR_RANGE.low, abs=1e-8)
    assert structure_reward(0.0, None, num_nodes=1, degenerate_score=1.0) <= SR_RANGE.high


@pytest.mark.parametrize(
    ("bounds", "value", "clipped"),
    [(SHARE, -0.2, 0.0), (SHARE, 1.3, 1.0), (SHARE, 0.4, 0.4), (NON_NEGATIVE, 9.0, 9.0)],
)
def test_clip(bounds: Range, value: float, clipped: float) -> None:
    assert bounds.clip(value) == clipped


def test_difference_and_text() -> None:
    assert SHARE.difference() == Range(-1.0, 1.0)
    assert NON_NEGATIVE.difference() == Range()  # a KL can fall by any amount it had
    assert (str(SHARE), str(NON_NEGATIVE), str(Range(-1.0, 1.0))) == ("[0, 1]", "[0, ∞)", "[-1, 1]")
    assert not Range().bounded and NON_NEGATIVE.bounded
