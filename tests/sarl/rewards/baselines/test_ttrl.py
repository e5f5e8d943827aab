"""TTRL with sarl's rules (SARL_RULES: value clusters of strict boxed answers; non-answers and
ties never rewarded), and vote sets. The reference's defaults: test_ttrl_reference.py."""

from __future__ import annotations

import pytest

from sarl.rewards.base import Sample
from sarl.rewards.baselines.answer_clusters import cluster_answers, cluster_sizes
from sarl.rewards.baselines.ttrl import TTRLReward, majority_vote
from sarl.rewards.registry import RewardConfigError, create_reward, get_reward_class


def boxed(*answers: str | None) -> list[Sample]:
    return [Sample("no answer" if a is None else f"so \\boxed{{{a}}}") for a in answers]


#: sarl's deliberate differences from the reference, all at once (docs/rewards.md).
SARL_RULES = {
    "voting": "value_clusters",
    "extraction": "boxed_only",
    "tie_break": "none",
    "unanswered": "abstain",
}


def scores(group: list[Sample], **settings: str) -> list[float]:
    reward = create_reward("ttrl", SARL_RULES | settings)
    return [o.score for o in reward.score_groups([group])[0]]


def test_registered_as_a_group_reward() -> None:
    assert get_reward_class("ttrl") is TTRLReward and TTRLReward.needs_group
    with pytest.raises(ValueError, match="needs whole groups"):
        create_reward("ttrl").score_samples(boxed("1"))
    with pytest.raises(RewardConfigError, match="tie_break"):
        create_reward("ttrl", {"tie_break": "random"})


def test_clusters_use_answer_equivalence() -> None:
    labels = cluster_answers(["1/2", "0.5", None, "\\frac{1}{2}", "7", "3+4", "4+3"])
    # equal values are one cluster; expressions equal expressions of the same numbers and value,
    # never a bare number (math_answer's rule)
    assert labels == [0, 0, None, 0, 1, 2, 2]
    assert cluster_sizes(labels) == [3, 1, 2]
    assert cluster_sizes([None]) == [] and cluster_answers([]) == []


@pytest.mark.parametrize(
    ("answers", "expected"),
    [
        (["3", "3", "5", None], [1.0, 1.0, 0.0, 0.0]),  # hand computed: label 3 (2 of 4 votes)
        (["0.5", "1/2", "\\frac{1}{2}", "7"], [1.0, 1.0, 1.0, 0.0]),  # equivalent forms agree
        ([None, None, None, "4"], [0.0, 0.0, 0.0, 1.0]),  # non-answers do not vote
        ([None, None], [0.0, 0.0]),  # no answer at all: no label
        (["1", "2", "3", "4"], [0.0] * 4),  # all different: a 4-way tie
        (["1", "2", "2", "1"], [0.0] * 4),  # 2-2 tie: no consensus
        (["8"], [1.0]),  # a group of one agrees with itself
    ],
)
def test_hand_computed_groups(answers: list[str | None], expected: list[float]) -> None:
    assert scores(boxed(*answers)) == expected


def test_tie_break_first_is_ttrl_counter_order() -> None:
    assert scores(boxed("2", "1", "1", "2", None), tie_break="first") == [1, 0, 0, 1, 0]
    assert scores(boxed("1", "2", "3"), tie_break="first") == [1, 0, 0]
    assert scores(boxed(None, None), tie_break="first") == [0, 0]


def test_empty_group_and_batches_keep_their_shape() -> None:
    out = create_reward("ttrl").score_groups([[], boxed("1", "1"), boxed("2")])
    assert [len(g) for g in out] == [0, 2, 1]
    assert majority_vote([]).label is None


def test_components_report_the_vote() -> None:
    out = create_reward("ttrl", SARL_RULES).score_groups([boxed("3", "3", "5", None)])[0]
    assert [o.components["agrees"] for o in out] == [1, 1, 0, 0]
    assert [o.components["has_answer"] for o in out] == [1, 1, 1, 0]
    assert {o.components["majority_ratio"] for o in out} == {0.5}
    assert {o.components["has_label"] for o in out} == {1.0}
    vote = majority_vote(["0.5", "1/2", "9"])
    assert vote.label == "0.5" and vote.votes == 2 and vote.agrees == (True, True, False)


# --- vote sets larger than the trained group -----------------------------------------------------

# TTRL's reference at PRIME-RL/TTRL 3e2cc9376dc7486256f6021b37c4353d0e1abe2b: the outputs of
# `test_time_train_metrics(solutions, ...)` (verl/verl/utils/reward_score/ttrl/ttt_metrics.py, run
# on responses "Let us compute. The answer is \boxed{<answer>}." of these answers): the reward of
# every vote and `majority_ratio`. Its trainer keeps the first n_samples_per_prompt = 4 of the
# n_votes_per_prompt = 8 (`_select_top_k_per_prompt`, verl/verl/trainer/ppo/ray_trainer.py).
# Inputs and outputs only.
REFERENCE_VOTE_SETS = {
    # the vote set overrules the trained group's own majority (12, two of four)
    "overruled": (["12", "7", "12", "5", "7", "7", "7", "12"], [0, 1, 0, 0, 1, 1, 1, 0], 0.5),
    "agrees": (["3", "3", "8", "3", "8", "1", "3", "8"], [1, 1, 0, 1, 0, 0, 1, 0], 0.5),
    # 4 and 9 tie with three votes: Counter.most_common takes the first seen (tie_break first)
    "tie": (["4", "9", "9", "4", "2", "4", "9", "2"], [1, 0, 0, 1, 0, 1, 0, 0], 0.375),
}
TRAINED = 4


@pytest.mark.parametrize("case", sorted(REFERENCE_VOTE_SETS))
def test_vote_set_label_matches_ttrl_reference(case: str) -> None:
    answers, rewards, ratio = REFERENCE_VOTE_SETS[case]
    settings = {"votes_per_prompt": len(answers), "tie_break": "first"}
    out = create_reward("ttrl", settings).score_groups([boxed(*answers)])[0]
    assert [o.score for o in out] == rewards
    assert [o.score for o in out[:TRAINED]] == rewards[:TRAINED]  # what is trained on
    assert {o.components["majority_ratio"] for o in out} == {ratio}  # share of the vote set


def test_the_trained_group_alone_would_vote_otherwise() -> None:
    answers, rewards, _ = REFERENCE_VOTE_SETS["overruled"]
    alone = [o.score for o in create_reward("ttrl").score_groups([boxed(*answers[:TRAINED])])[0]]
    assert alone == [1, 0, 1, 0] != rewards[:TRAINED]


def test_vote_set_size_comes_from_the_settings() -> None:
    assert create_reward("ttrl").votes_per_prompt is None
    assert create_reward("ttrl", {"votes_per_prompt": 64}).votes_per_prompt == 64
    assert TTRLReward.vote_set_size(TTRLReward.Settings(votes_per_prompt=16)) == 16
    with pytest.raises(RewardConfigError, match="votes_per_prompt"):
        create_reward("ttrl", {"votes_per_prompt": 1})
    assert create_reward("empo").votes_per_prompt is None  # other rewards vote in the group
