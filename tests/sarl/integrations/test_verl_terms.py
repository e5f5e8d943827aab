"""Several weighted reward terms as one reward for verl (``sarl.integrations.verl.terms``): the
sum it trains on, the terms it reports, and that it reports them under the names the TRL path
logs (``sarl.integrations.trl`` + ``sarl.runner.callbacks.rename_logs``), so a Study's curves and
``sarl compare`` find them on either backend. Pure: runs without verl (the verl side is
``test_verl_terms_loop.py``)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import ClassVar

import pytest
from pydantic import BaseModel

from sarl.integrations.trl import TRLRewardFunc
from sarl.integrations.verl.terms import WeightedRewards, term_keys
from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.runner.callbacks import rename_logs


class _NoSettings(BaseModel):
    pass


class Length(Reward):
    """Per-sample: score = len(response) / 10, component ``chars``; counts its batches."""

    name = "terms_test_length"
    Settings = _NoSettings
    components = ("chars",)
    calls: ClassVar[int] = 0

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        Length.calls += 1
        return [
            [RewardOutput(len(s.response) / 10, {"chars": float(len(s.response))}) for s in g]
            for g in groups
        ]


class Answer(Reward):
    """Per-sample: 1.0 when the response ends with the ground truth; NaN (undefined) without
    one, as a reward that does not apply to a sample says so."""

    name = "terms_test_answer"
    Settings = _NoSettings
    components = ("answered",)

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        return [[self._one(s) for s in g] for g in groups]

    @staticmethod
    def _one(sample: Sample) -> RewardOutput:
        if sample.ground_truth is None:
            return RewardOutput(math.nan, {"answered": math.nan})
        right = sample.response.endswith(sample.ground_truth)
        return RewardOutput(float(right), {"answered": 1.0})


class Majority(Reward):
    """Group reward (needs the siblings)."""

    name = "terms_test_majority"
    Settings = _NoSettings
    needs_group = True

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        return [[RewardOutput(1.0) for _ in g] for g in groups]


def combined(*terms: tuple[Reward, float]) -> WeightedRewards:
    return WeightedRewards(list(terms))


GROUPS = [
    [Sample("abc 7", ground_truth="7"), Sample("abcdef 8", ground_truth="7")],
    [Sample("x", ground_truth="1")],
]


@pytest.mark.parametrize(("w_length", "w_answer"), [(1.0, 0.0), (0.7, 0.3), (0.0, 1.0)])
def test_score_is_the_weighted_sum_and_every_term_is_reported(
    w_length: float, w_answer: float
) -> None:
    reward = combined((Length(_NoSettings()), w_length), (Answer(_NoSettings()), w_answer))

    out = reward.score_groups(GROUPS)

    assert reward.component_keys == (
        "reward/terms_test_length",
        "terms_test_length/chars",
        "reward/terms_test_answer",
        "terms_test_answer/answered",
    )
    flat = [o for g in out for o in g]
    samples = [s for g in GROUPS for s in g]
    assert [len(g) for g in out] == [2, 1]
    for o, s in zip(flat, samples, strict=True):
        length, answer = len(s.response) / 10, float(s.response.endswith(str(s.ground_truth)))
        assert o.score == pytest.approx(w_length * length + w_answer * answer)
        assert dict(o.components) == {
            "reward/terms_test_length": length,
            "terms_test_length/chars": float(len(s.response)),
            "reward/terms_test_answer": answer,
            "terms_test_answer/answered": 1.0,
        }


def test_the_async_path_scores_each_term_once_per_batch() -> None:
    reward = combined((Length(_NoSettings()), 0.5), (Answer(_NoSettings()), 0.5))
    Length.calls = 0
    got = asyncio.run(reward.ascore_groups(GROUPS))
    assert got == reward.score_groups(GROUPS)
    assert Length.calls == 2  # one call per path, every group in it


def test_a_weight_0_term_never_reaches_the_sum_even_when_undefined() -> None:
    no_truth = [[Sample("abc")]]
    logged = combined((Length(_NoSettings()), 1.0), (Answer(_NoSettings()), 0.0))
    [[out]] = logged.score_groups(no_truth)
    assert out.score == pytest.approx(0.3)
    assert math.isnan(out.components["reward/terms_test_answer"])
    # Weighted, the undefined term makes the sum undefined: the adapter refuses it.
    trained = combined((Length(_NoSettings()), 1.0), (Answer(_NoSettings()), 0.5))
    [[out]] = trained.score_groups(no_truth)
    assert math.isnan(out.score)


def test_only_weight_0_terms_score_0() -> None:
    [[out]] = combined((Length(_NoSettings()), 0.0)).score_groups([[Sample("abcd")]])
    assert out.score == 0.0 and out.components["reward/terms_test_length"] == 0.4


def test_a_reward_appearing_twice_is_refused() -> None:
    with pytest.raises(ValueError, match=r"terms\[1\]: reward 'terms_test_length' is already"):
        combined((Length(_NoSettings()), 1.0), (Length(_NoSettings()), 0.0))


def test_non_finite_weights_are_refused() -> None:
    with pytest.raises(ValueError, match=r"terms\[0\]\.weight=nan"):
        combined((Length(_NoSettings()), math.nan))


def test_needs_groups_when_any_term_does() -> None:
    assert not combined((Length(_NoSettings()), 1.0)).needs_group
    assert combined((Length(_NoSettings()), 1.0), (Majority(_NoSettings()), 0.0)).needs_group
    assert combined((Length(_NoSettings()), 1.0)).label == "1*terms_test_length"


def test_a_term_returning_the_wrong_shape_names_it() -> None:
    class Short(Length):
        name = "terms_test_short"

        def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
            return super().score_groups(groups)[:-1]

    with pytest.raises(RuntimeError, match="'terms_test_short': score_groups returned groups"):
        combined((Length(_NoSettings()), 1.0), (Short(_NoSettings()), 0.0)).score_groups(GROUPS)


def test_terms_are_reported_under_the_names_the_trl_path_logs() -> None:
    """TRL 1.16 logs each reward function's mean as ``rewards/<__name__>/mean`` (the local
    runner's ``rename_logs`` turns it into ``reward/<name>``), and the adapter's ``log_metric``
    calls give the components: together, the keys a verl term reports."""
    reward = Length(_NoSettings())
    logged: dict[str, float] = {}
    func = TRLRewardFunc(reward)
    func(["q"], ["abc"], log_metric=logged.__setitem__)
    trl_logs = {f"rewards/{func.__name__}/mean": 0.3, **logged}
    assert set(rename_logs(trl_logs)) == set(term_keys(reward))
    assert set(term_keys(reward)) == {"reward/terms_test_length", "terms_test_length/chars"}
