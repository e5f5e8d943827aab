"""A group reward's vote set (TTRL's votes_per_prompt) holds the trained group: the spec refuses a
smaller one, a second voter, and another group reward beside it, naming the field and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from sarl.spec import SpecError, load_experiment


def doc(reward: list[dict[str, Any]], group: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": "votes"},
        "spec": {"algorithm": {"rollouts_per_prompt": group}, "reward": reward},
    }


def ttrl(votes: int | None = None) -> dict[str, Any]:
    return {"name": "ttrl", "settings": {} if votes is None else {"votes_per_prompt": votes}}


@pytest.mark.parametrize(
    ("reward", "expected"),
    [
        ([ttrl()], None),  # the trained group votes alone
        ([ttrl(8)], None),  # a vote set of the group's size is the group
        ([ttrl(64)], 64),
        ([ttrl(16), {"name": "ground_truth", "weight": 0.0}], 16),  # per-sample terms are fine
    ],
)
def test_votes_per_prompt_of_the_run(reward: list[dict[str, Any]], expected: int | None) -> None:
    assert load_experiment(doc(reward)).spec.votes_per_prompt == expected


@pytest.mark.parametrize(
    ("reward", "message"),
    [
        (
            [ttrl(4)],
            "spec.reward[0].settings.votes_per_prompt=4: must be at least "
            "spec.algorithm.rollouts_per_prompt (8): the vote set holds the 8 trained responses "
            "plus extra ones drawn for the vote; set votes_per_prompt >= 8",
        ),
        ([ttrl(1)], "spec.reward[0].settings.votes_per_prompt=1: Input should be greater than"),
        (
            [ttrl(16), {"name": "empo"}],
            "spec.reward[1].name='empo': spec.reward[0] votes over 16 responses per prompt "
            "(votes_per_prompt > rollouts_per_prompt 8); another group reward in the same run "
            "would score the trained group on TRL but the vote set on verl",
        ),
        ([{"name": "tag_lcs"}, ttrl(16)], "spec.reward[0].name='tag_lcs': spec.reward[1] votes"),
        ([ttrl(16), ttrl(32)], "spec.reward[1].name='ttrl': spec.reward[0] votes over 16"),
    ],
)
def test_refused_vote_sets_name_the_field_and_the_fix(
    reward: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(SpecError) as info:
        load_experiment(doc(reward))
    assert message in str(info.value)
    assert "\n" not in str(info.value)
