"""The vectorised bootstrap gives the pure-Python bootstrap's intervals (same draws, same
percentiles), including ties, NaN scores, groups of one kind and twice-drawn groups."""

from __future__ import annotations

import math
import random

import pytest

from sarl.evaluation.validity_bootstrap import bootstrap_intervals, draw_counts
from tests.sarl.evaluation import reference_bootstrap


def _data(seed: int, n: int, n_groups: int) -> tuple[list[float], list[bool], list[int]]:
    rng = random.Random(seed)
    # Few distinct values (many ties) plus continuous ones and some NaN (undefined scores).
    pool = [0.0, 0.25, 0.5]
    scores = [
        rng.choice([*pool, rng.random(), math.nan]) if rng.random() < 0.9 else 1.0 for _ in range(n)
    ]
    correct = [rng.random() < 0.4 for _ in range(n)]
    groups = [rng.randrange(n_groups) for _ in range(n)]
    return scores, correct, groups


@pytest.mark.parametrize(("seed", "n", "n_groups"), [(0, 12, 3), (1, 60, 10), (2, 400, 50)])
@pytest.mark.parametrize("confidence", [0.95, 0.8])
def test_same_intervals_as_the_pure_bootstrap(
    seed: int, n: int, n_groups: int, confidence: float
) -> None:
    scores, correct, groups = _data(seed, n, n_groups)
    expected = reference_bootstrap.bootstrap_intervals(
        scores, correct, groups, resamples=200, confidence=confidence, seed=seed
    )
    draws = draw_counts(groups, resamples=200, seed=seed)
    got = bootstrap_intervals(scores, correct, draws, confidence=confidence)
    assert set(got) == set(expected)
    for name, (low, high) in expected.items():
        assert got[name] == pytest.approx((low, high), abs=1e-12), name


def test_figures_undefined_in_most_resamples_get_no_interval() -> None:
    # One group holds the only incorrect response: most resamples miss it.
    scores = [0.1 * i for i in range(20)]
    correct = [i != 0 for i in range(20)]
    groups = list(range(20))
    expected = reference_bootstrap.bootstrap_intervals(
        scores, correct, groups, resamples=300, seed=4
    )
    got = bootstrap_intervals(scores, correct, draw_counts(groups, resamples=300, seed=4))
    assert set(got) == set(expected)
    assert "pair_agreement" not in got  # no group has both kinds


def test_no_samples_and_bad_arguments() -> None:
    assert bootstrap_intervals([], [], draw_counts([], resamples=5)) == {}
    with pytest.raises(ValueError, match="resamples"):
        draw_counts([1], resamples=0)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_intervals([1.0], [True], draw_counts([1]), confidence=1.0)
    with pytest.raises(ValueError, match="group keys"):
        bootstrap_intervals([1.0, 2.0], [True, False], draw_counts([1]))


def test_draws_count_each_group_drawn() -> None:
    draws = draw_counts(["a", "b", "a", "c"], resamples=50, seed=1)
    assert draws.counts.shape == (50, 3)
    assert (draws.counts.sum(axis=1) == 3).all()  # as many draws as groups
    assert draws.group_of.tolist() == [0, 1, 0, 2]


# -- intervals of known cases ----------------------------------------------------------------------

# Four prompts, one correct and two incorrect responses each.
GROUPS = [g for g in range(4) for _ in range(3)]
CORRECT = [True, False, False] * 4


def test_a_constant_reward_has_point_intervals_at_no_signal() -> None:
    got = bootstrap_intervals([0.3] * 12, CORRECT, draw_counts(GROUPS, resamples=200, seed=1))
    assert got == {
        "auroc": (0.5, 0.5),  # every pair tied: one half each
        "pair_agreement": (0.0, 0.0),
        "pair_ties": (1.0, 1.0),
        "pair_auroc": (0.5, 0.5),
    }


def test_a_perfect_reward_has_point_intervals_at_one() -> None:
    scores = [1.0 if c else 0.0 for c in CORRECT]
    got = bootstrap_intervals(scores, CORRECT, draw_counts(GROUPS, resamples=200, seed=1))
    assert got == {
        "auroc": (1.0, 1.0),
        "pair_agreement": (1.0, 1.0),
        "pair_ties": (0.0, 0.0),
        "pair_auroc": (1.0, 1.0),
    }


def test_identical_groups_give_a_zero_width_interval_at_the_point() -> None:
    """Every prompt's group is the same three scores (the correct one between the two wrong):
    any resample of whole prompts has the figures of one prompt, so the interval is that point.
    A bootstrap over responses would draw groups with two or no correct responses, or without
    the lower wrong one, and give an interval of positive width: this test fails on it."""
    scores = [0.5, 0.9, 0.1] * 4  # pair agreement 1/2 in every group
    got = bootstrap_intervals(scores, CORRECT, draw_counts(GROUPS, resamples=300, seed=2))
    assert got == {
        "auroc": (0.5, 0.5),
        "pair_agreement": (0.5, 0.5),
        "pair_ties": (0.0, 0.0),
        "pair_auroc": (0.5, 0.5),
    }


def test_resamples_are_of_whole_prompts_with_their_own_mix() -> None:
    """Prompt A: 1 correct above 3 wrong (3 pairs agree); prompt B: 2 correct below 2 wrong (4
    pairs disagree). Resampling prompts, a resample's agreement is 3a / (3a + 4b) for a draws of
    A and b of B (a + b = 2): 0, 3/7 or 1, nothing else. Resampling responses (within prompts or
    across them) gives other shares, such as 1/2 or 2/3; this test fails on it."""
    from sarl.evaluation.validity_bootstrap import resample_figures

    scores = [0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.9, 0.9]
    correct = [True, False, False, False, True, True, False, False]
    groups = ["A"] * 4 + ["B"] * 4
    draws = draw_counts(groups, resamples=400, seed=3)
    agreement = resample_figures(scores, correct, draws)["pair_agreement"]
    seen = {round(float(v), 9) for v in agreement}
    assert seen == {0.0, round(3 / 7, 9), 1.0}
