"""The reward registry: names, typed settings, dotted-path escape hatch, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from sarl.rewards.base import Sample
from sarl.rewards.registry import RewardConfigError, create_reward, get_reward_class, reward_names
from sarl.rewards.structure.reward import StructureReward, StructureRewardSettings


class OneHot:
    def embed(self, texts: list[str]) -> np.ndarray:
        return np.eye(max(len(texts), 1), dtype=np.float32)[: len(texts)]


def test_structure_is_registered() -> None:
    assert "structure" in reward_names()
    assert get_reward_class("structure") is StructureReward


def test_unknown_name_lists_known_ones() -> None:
    with pytest.raises(RewardConfigError, match="unknown name 'nope'.*structure"):
        get_reward_class("nope")


def test_dotted_path_must_be_a_reward() -> None:
    assert get_reward_class("sarl.rewards.structure.reward:StructureReward") is StructureReward
    with pytest.raises(RewardConfigError, match="not a subclass"):
        get_reward_class("sarl.rewards.structure.config:StructureRewardConfig")
    with pytest.raises(RewardConfigError, match="cannot import"):
        get_reward_class("no.such.module:X")


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"clustering": "dbscan"}, "clustering"),
        ({"max_steps": -1}, "max_steps"),
        ({"embedder": {"kind": "grpc"}}, "embedder.kind"),
        ({"typo": 1}, "typo"),
    ],
)
def test_bad_settings_name_field_and_value(settings: dict[str, object], field: str) -> None:
    with pytest.raises(RewardConfigError, match=field):
        create_reward("structure", settings)


def test_structure_reward_scores_groups_with_fixed_component_keys() -> None:
    reward = StructureReward(StructureRewardSettings(workers=1), embedder=OneHot())
    groups = [[Sample("<think>a\n\nb\n\nc</think>"), Sample("<think>a</think>")], [Sample("x")]]
    out = reward.score_groups(groups)
    assert [len(g) for g in out] == [2, 1]
    assert all(set(o.components) == set(reward.component_keys) for g in out for o in g)
    assert out[0][1].score == 0.0 and out[0][1].components["degenerate"] == 1.0


def _define_reward(name: str, value: float, qualname: str = "NotebookReward") -> type:
    """A reward class as a notebook cell defines it (module ``__main__``)."""
    from pydantic import BaseModel

    from sarl.rewards.base import Reward, RewardOutput

    class Settings(BaseModel):
        pass

    def score_groups(self: Reward, groups: object) -> list[list[RewardOutput]]:
        return [[RewardOutput(value) for _ in group] for group in groups]  # type: ignore[attr-defined]

    cls = type(
        qualname,
        (Reward,),
        {
            "name": name,
            "Settings": Settings,
            "score_groups": score_groups,
            "__module__": "__main__",
        },
    )
    cls.__qualname__ = qualname
    return cls


def test_redefining_a_reward_replaces_it() -> None:
    """Re-running the notebook cell that defines a reward registers the new definition."""
    from sarl.rewards.registry import register_reward

    register_reward(_define_reward("rerun_cell_reward", 1.0))
    register_reward(_define_reward("rerun_cell_reward", 2.0))
    reward = create_reward("rerun_cell_reward")
    assert [o.score for o in reward.score_samples([Sample(prompt="p", response="r")])] == [2.0]


def test_another_class_cannot_take_a_registered_name() -> None:
    from sarl.rewards.registry import register_reward

    register_reward(_define_reward("taken_reward", 1.0, qualname="First"))
    with pytest.raises(RewardConfigError, match="'taken_reward' is already registered"):
        register_reward(_define_reward("taken_reward", 1.0, qualname="Second"))
    get_reward_class("structure")  # loads the built-in
    with pytest.raises(RewardConfigError, match="'structure' is already registered"):
        register_reward(_define_reward("structure", 1.0, qualname="StructureReward"))
