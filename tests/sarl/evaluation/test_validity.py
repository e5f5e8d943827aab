"""Reward validity figures (sarl.evaluation.validity): hand-computed cases, sklearn's AUROC as an
independent reference, and the group bootstrap."""

from __future__ import annotations

import math
import random

import pytest
from sklearn.metrics import roc_auc_score

from sarl.evaluation.validity import (
    PairCounts,
    auroc,
    correctness_flags,
    pair_counts,
    validity,
)
from sarl.evaluation.validity_bootstrap import bootstrap_intervals, draw_counts
from sarl.rewards.math_answer import response_correct


def test_pair_counts_by_hand() -> None:
    # correct: 0.9, 0.5; incorrect: 0.5, 0.1, 0.7
    # 0.9 beats all three (3 agree); 0.5 beats 0.1 (agree), ties 0.5, loses to 0.7.
    counts = pair_counts([0.9, 0.5, 0.5, 0.1, 0.7], [True, True, False, False, False])
    assert counts == PairCounts(agree=4, disagree=1, tied=1)
    assert counts.pairs == 6


def test_auroc_counts_a_tie_as_half() -> None:
    assert auroc([0.9, 0.5, 0.5, 0.1, 0.7], [True, True, False, False, False]) == pytest.approx(
        (4 + 0.5) / 6
    )
    assert auroc([1, 1, 1, 1], [True, False, True, False]) == 0.5
    assert auroc([0.0, 1.0], [True, False]) == 0.0


@pytest.mark.parametrize("seed", range(5))
def test_auroc_matches_sklearn(seed: int) -> None:
    rng = random.Random(seed)
    correct = [rng.random() < 0.4 for _ in range(200)]
    correct[:2] = [True, False]
    # Discrete scores so that ties happen (sklearn also counts a tie as one half).
    scores = [rng.randint(0, 6) / 6 + (0.2 if c else 0.0) for c in correct]
    assert auroc(scores, correct) == pytest.approx(roc_auc_score(correct, scores), abs=1e-12)


def test_undefined_without_both_kinds() -> None:
    assert auroc([0.3, 0.4], [True, True]) is None
    v = validity([0.3, 0.4], [False, False], ["p", "p"])
    assert (v.auroc, v.pair_agreement, v.pair_ties, v.pairs) == (None, None, None, 0)
    assert v.as_metrics() == {}


def test_pairs_only_within_groups() -> None:
    # Prompt a: correct 1.0 vs incorrect 0.0 (agree). Prompt b: correct 0.2 vs incorrect 0.8
    # (disagree) and 0.2 (tie). Across prompts the batch AUROC compares everything.
    scores = [1.0, 0.0, 0.2, 0.8, 0.2]
    correct = [True, False, True, False, False]
    groups = ["a", "a", "b", "b", "b"]
    v = validity(scores, correct, groups)
    assert v.pairs == 3
    assert v.pair_agreement == pytest.approx(1 / 3)
    assert v.pair_ties == pytest.approx(1 / 3)
    # batch: correct {1.0, 0.2} vs incorrect {0.0, 0.8, 0.2}: 1.0 beats 3; 0.2 beats 0.0, ties 0.2
    assert v.auroc == pytest.approx((4 + 0.5) / 6)
    assert (v.samples, v.correct) == (5, 2)


def test_groups_need_not_be_contiguous() -> None:
    scores = [1.0, 0.2, 0.0, 0.8]
    a = validity(scores, [True, True, False, False], ["x", "y", "x", "y"])
    assert a.pairs == 2 and a.pair_agreement == 0.5


def test_a_reward_that_ties_everything_is_not_chance_in_pairs() -> None:
    v = validity([0.5] * 4, [True, False, True, False], ["g"] * 4)
    assert v.auroc == 0.5
    assert v.pair_agreement == 0.0 and v.pair_ties == 1.0


def test_nan_scores_are_left_out() -> None:
    v = validity([math.nan, 0.9, 0.1], [True, True, False], ["g"] * 3)
    assert v.pairs == 1 and v.pair_agreement == 1.0 and v.samples == 2


def test_mismatched_lengths_are_errors() -> None:
    with pytest.raises(ValueError, match="2 scores for 3"):
        auroc([0.1, 0.2], [True, False, True])
    with pytest.raises(ValueError, match="1 group keys for 2 scores"):
        validity([0.1, 0.2], [True, False], ["g"])


def _batch(seed: int, prompts: int = 30, per: int = 8) -> tuple[list[float], list[bool], list[int]]:
    rng = random.Random(seed)
    scores, correct, groups = [], [], []
    for p in range(prompts):
        difficulty = rng.random()
        for _ in range(per):
            c = rng.random() > difficulty
            scores.append(rng.gauss(0.6 if c else 0.4, 0.2))
            correct.append(c)
            groups.append(p)
    return scores, correct, groups


def test_bootstrap_is_deterministic_and_brackets_the_estimate() -> None:
    scores, correct, groups = _batch(1)
    point = validity(scores, correct, groups)
    a = bootstrap_intervals(scores, correct, draw_counts(groups, resamples=300, seed=7))
    b = bootstrap_intervals(scores, correct, draw_counts(groups, resamples=300, seed=7))
    assert a == b
    assert set(a) == {"auroc", "pair_agreement", "pair_ties", "pair_auroc"}
    for name, value in point.as_metrics().items():
        lo, hi = a[name]
        assert lo <= value <= hi, (name, lo, value, hi)
    assert a["auroc"][1] - a["auroc"][0] > 0.01  # real sampling spread, not a point


def test_bootstrap_resamples_whole_groups() -> None:
    # Every group is internally perfect (agreement 1) but groups differ in AUROC terms: with
    # whole-group resampling the within-group agreement can never drop below 1.
    scores = [1.0, 0.0, 3.0, 2.0, 5.0, 4.0]
    correct = [True, False, True, False, True, False]
    groups = [0, 0, 1, 1, 2, 2]
    intervals = bootstrap_intervals(scores, correct, draw_counts(groups, resamples=200, seed=0))
    assert intervals["pair_agreement"] == (1.0, 1.0)
    assert intervals["auroc"][0] < 1.0


def test_bootstrap_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="resamples"):
        draw_counts([0], resamples=0)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_intervals([1.0], [True], draw_counts([0]), confidence=1.0)


def test_correctness_flags_from_boxed_answers() -> None:
    flags = correctness_flags(
        ["so \\boxed{4}", "\\boxed{5}", "no answer"], ["4", "\\boxed{4}", "4"], response_correct
    )
    assert flags == [True, False, False]
    assert correctness_flags(["\\boxed{4}"], [None], response_correct) is None
