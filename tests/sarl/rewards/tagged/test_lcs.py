"""The LCS reward (§3.2, eqs. 4–5): hand-computed LCS, suppression factor, cases, group edges."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sarl.rewards.base import Sample
from sarl.rewards.registry import create_reward, get_reward_class
from sarl.rewards.tagged import lcs as lcs_module
from sarl.rewards.tagged.lcs import (
    DEFAULT_MAX_STEPS,
    TagLcsReward,
    batched_weighted_lcs,
    group_lcs_scores,
    lcs_length,
    overlap,
    pair_score,
    suppression_ratio,
    weighted_lcs,
)


@pytest.mark.parametrize(
    ("a", "b", "length"),
    [
        ("ABCBDAB", "BDCABA", 4),  # the textbook example (CLRS 15.4)
        ("ABCD", "BD", 2),
        ("ABC", "ABC", 3),
        ("ABC", "", 0),
        ("", "", 0),
        ("AAA", "BBB", 0),
    ],
)
def test_lcs_length(a: str, b: str, length: int) -> None:
    assert lcs_length(list(a), list(b)) == length
    assert lcs_length(list(b), list(a)) == length
    assert weighted_lcs([(t, 1.0) for t in a], [(t, 1.0) for t in b]).length == length


@pytest.mark.parametrize(
    ("len_i", "len_j", "ratio"),
    [
        (10, 10, 0.5),  # equal: both branches give 1/2
        (10, 5, 0.25),  # l_i > l_j: l_j / (2 l_i)
        (5, 10, 0.75),  # otherwise: 1 - l_i / (2 l_j)
        (0, 4, 1.0),
        (4, 0, 0.0),
        (0, 0, 0.5),  # convention for 0/0
    ],
)
def test_suppression_ratio(len_i: float, len_j: float, ratio: float) -> None:
    assert suppression_ratio(len_i, len_j) == pytest.approx(ratio)


def test_padding_a_step_beyond_its_match_gains_nothing() -> None:
    weights = [suppression_ratio(li, 10) * li for li in (10, 20, 40)]
    assert weights == pytest.approx([5.0, 5.0, 5.0])


STEPS_I = [("verify", 10.0), ("summarize", 4.0), ("verify", 6.0)]
STEPS_J = [("verify", 5.0), ("verify", 12.0)]


def test_weighted_lcs_by_hand() -> None:
    # matches (0,0): 10 > 5 -> 5/20 * 10 = 2.5; (2,1): 6 <= 12 -> (1 - 6/24) * 6 = 4.5
    match = weighted_lcs(STEPS_I, STEPS_J)
    assert (match.length, match.pairs) == (2, ((0, 0), (2, 1)))
    assert match.weighted == pytest.approx(7.0)
    assert overlap(STEPS_I, STEPS_J) == pytest.approx(7.0 / 20.0)


def test_weighted_lcs_takes_the_heaviest_alignment() -> None:
    # one verify against two: matching the 8-long one weighs (1 - 4/16) * 4 = 3 > 1/8 * 4 = 0.5
    match = weighted_lcs([("verify", 4.0)], [("verify", 1.0), ("verify", 8.0)])
    assert match.pairs == ((0, 1),)
    assert match.weighted == pytest.approx(3.0)


@pytest.mark.parametrize(
    ("correct_i", "correct_j", "score"),
    [(True, True, 0.35), (False, False, -0.35), (True, False, 0.65), (False, True, -0.65)],
)
def test_the_four_cases_of_eq_4(correct_i: bool, correct_j: bool, score: float) -> None:
    assert pair_score(overlap(STEPS_I, STEPS_J), correct_i, correct_j) == pytest.approx(score)


def test_overlap_without_steps_is_zero() -> None:
    assert overlap([], STEPS_J) == 0.0
    assert overlap([("verify", 0.0)], STEPS_J) == 0.0


def test_group_edge_cases() -> None:
    assert group_lcs_scores([], []) == []
    [single] = group_lcs_scores([STEPS_I], [True])
    assert single.score == 0.0 and math.isnan(single.overlap_correct)
    with pytest.raises(ValueError, match="2 step sequences for 1"):
        group_lcs_scores([STEPS_I, STEPS_J], [True])


def _group(*responses: str, truth: str = "4") -> list[Sample]:
    return [Sample(r, prompt="p", ground_truth=truth) for r in responses]


def test_registered_as_a_group_reward() -> None:
    assert get_reward_class("tag_lcs") is TagLcsReward
    reward = create_reward("tag_lcs")
    assert reward.needs_group
    with pytest.raises(ValueError, match="needs whole groups"):
        reward.score_samples(_group("\\boxed{4}"))


def test_group_by_hand() -> None:
    r1 = "<verify>abcd</verify><summarize>ab</think>\\boxed{4}"  # correct, lengths 4, 2
    r2 = "<verify>abcd</think>\\boxed{4}"  # correct, length 4
    r3 = "<summarize>abcdefgh</think>\\boxed{5}"  # incorrect, length 8
    reward = create_reward("tag_lcs")
    [out] = reward.score_groups([_group(r1, r2, r3)])
    # r1: vs r2 (2/6, both correct), vs r3 (1 - 1.75/6) -> mean
    # r2: vs r1 (2/4), vs r3 (1 - 0) ; r3: vs r1 (-1 + 1/8), vs r2 (-1 + 0)
    expected = [(1 / 3 + (1 - 1.75 / 6)) / 2, (0.5 + 1.0) / 2, (-0.875 - 1.0) / 2]
    assert [o.score for o in out] == pytest.approx(expected)
    assert [tuple(o.components) for o in out] == [reward.component_keys] * 3
    assert [o.components["correct"] for o in out] == [1.0, 1.0, 0.0]
    assert [o.components["num_steps"] for o in out] == [2.0, 1.0, 1.0]
    assert out[0].components["overlap_correct"] == pytest.approx(1 / 3)
    assert out[0].components["overlap_incorrect"] == pytest.approx(1.75 / 6)
    assert out[2].components["overlap_correct"] == pytest.approx((0.125 + 0.0) / 2)
    assert math.isnan(out[2].components["overlap_incorrect"])


def test_empty_groups_and_single_completion() -> None:
    reward = create_reward("tag_lcs")
    assert reward.score_groups([]) == []
    assert reward.score_groups([[]]) == [[]]
    [[single]] = reward.score_groups([_group("<verify>x</think>\\boxed{4}")])
    assert single.score == 0.0


def test_completions_without_tags() -> None:
    # nothing shared: a correct untagged one gets 1 against a wrong sibling, 0 against a right one
    reward = create_reward("tag_lcs")
    [out] = reward.score_groups([_group("\\boxed{4}", "\\boxed{4}", "<verify>x</think>\\boxed{3}")])
    assert [o.score for o in out] == pytest.approx([0.5, 0.5, -1.0])


def test_all_answers_different() -> None:
    same = "<verify>ab</think>\\boxed{{{}}}"
    reward = create_reward("tag_lcs")
    # all wrong: identical tagging is penalised (-overlap = -1/2 against each sibling)
    [wrong] = reward.score_groups([_group(same.format(1), same.format(2), same.format(3))])
    assert [o.score for o in wrong] == pytest.approx([-0.5, -0.5, -0.5])
    # one right: it gains 1 - 1/2 from each wrong sibling; they get -1 + 1/2 and -1/2
    [mixed] = reward.score_groups([_group(same.format(4), same.format(2), same.format(3))])
    assert [o.score for o in mixed] == pytest.approx([0.5, -0.5, -0.5])


def test_length_in_words() -> None:
    reward = create_reward("tag_lcs", {"length_unit": "words"})
    a = "<verify>one two</think>\\boxed{4}"
    b = "<verify>a much longer step of words</think>\\boxed{4}"
    [out] = reward.score_groups([_group(a, b)])
    # a: 2 <= 6 words -> 1 - 2/12; b: 6 > 2 -> 2/12
    assert [o.score for o in out] == pytest.approx([1 - 2 / 12, 2 / 12])


def test_missing_ground_truth_is_an_error() -> None:
    reward = create_reward("tag_lcs")
    with pytest.raises(ValueError, match="sample 1 of group 0 .* has no ground truth"):
        reward.score_groups([[Sample("\\boxed{1}", ground_truth="1"), Sample("\\boxed{1}")]])


# --- bounded work (issue 12): a batched table fill, and a cap on the steps compared ---

tagged_steps = st.lists(
    st.tuples(st.sampled_from("abc"), st.sampled_from([0.0, 1.0, 2.0, 3.5, 7.0, 1e-9, 1e9])),
    max_size=9,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(tagged_steps, tagged_steps), max_size=6))
def test_batched_table_fill_equals_the_scalar_dp_exactly(
    pairs: list[tuple[list[tuple[str, float]], list[tuple[str, float]]]],
) -> None:
    expected = [weighted_lcs(a, b).weighted for a, b in pairs]
    assert batched_weighted_lcs(pairs).tolist() == expected


def _tagged(
    n: int, answer: int, tags: tuple[str, ...] = ("verify", "summarize", "inference")
) -> str:
    body = "".join(f"<{tags[k % len(tags)]}> step {k} </{tags[k % len(tags)]}>" for k in range(n))
    return f"<think>{body}</think>\\boxed{{{answer}}}"


@pytest.mark.timeout(120)  # hang guard: uncapped, this group is 12 tables of 1e8 Python cells
def test_only_the_first_max_steps_steps_are_compared(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    def counting(pairs: list[tuple[Any, Any]]) -> Any:
        seen.extend(max(len(a), len(b)) for a, b in pairs)
        return batched_weighted_lcs(pairs)

    monkeypatch.setattr(lcs_module, "batched_weighted_lcs", counting)
    reward = create_reward("tag_lcs")
    big = [_tagged(10_000, 4), _tagged(10_000, 5), _tagged(10_000, 4), _tagged(3, 4)]
    [out] = reward.score_groups([_group(*big)])
    assert seen and max(seen) <= DEFAULT_MAX_STEPS == 128
    assert [o.components["num_steps"] for o in out] == [10_000.0, 10_000.0, 10_000.0, 3.0]
    # past the cap, a completion scores as its first max_steps steps would
    capped = [_tagged(128, 4), _tagged(128, 5), _tagged(128, 4), _tagged(3, 4)]
    [same] = reward.score_groups([_group(*capped)])
    assert [o.score for o in out] == [o.score for o in same]


def test_max_steps_is_a_setting() -> None:
    reward = create_reward("tag_lcs", {"max_steps": 1})
    [out] = reward.score_groups([_group(_tagged(2, 4), _tagged(2, 4, ("verify", "analogy")))])
    assert [o.score for o in out] == pytest.approx([0.5, 0.5])  # only <verify> compared
