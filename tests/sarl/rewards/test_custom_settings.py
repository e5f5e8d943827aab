"""A user's reward class has its settings checked like a built-in's (issue 40 item 2).

Before: a user's Settings model left at pydantic's default ``extra="ignore"`` let a typo
(``targte``) through ``sarl validate`` and the run, and a reward class without a Settings model
failed with an AttributeError. The classes below are named in specs by their dotted path, as a
user names theirs; nothing is faked.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ConfigDict

from sarl.rewards.base import PerSampleReward, RewardOutput, Sample
from sarl.rewards.registry import RewardConfigError, create_reward
from sarl.spec.loader import SpecError, validate_document

HERE = __name__


class LooseSettings(BaseModel):
    """pydantic's default config: unknown keys would be ignored without the registry's check."""

    target: int = 10


class LooseReward(PerSampleReward):
    name = "loose"
    Settings = LooseSettings

    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        return RewardOutput(float(len(sample.response) == self.settings.target))  # type: ignore[attr-defined]


class BareReward(PerSampleReward):
    """A reward that declares no Settings model."""

    name = "bare"

    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        return RewardOutput(1.0)


class OpenSettings(BaseModel):
    model_config = ConfigDict(extra="allow")


class OpenReward(BareReward):
    """Its author chose to take any key (``extra="allow"``)."""

    name = "open"
    Settings = OpenSettings


def _spec(name: str, settings: dict[str, object]) -> dict[str, object]:
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "custom"},
        "spec": {
            "preset": "local-grpo-arithmetic",
            "reward": [{"name": "ground_truth"}, {"name": name, "settings": settings}],
        },
    }


def test_a_typo_in_a_user_rewards_settings_names_the_field_and_the_fix() -> None:
    with pytest.raises(SpecError) as e:
        validate_document(_spec(f"{HERE}:LooseReward", {"targte": 3}), "x.yaml")
    assert str(e.value) == (
        "x.yaml: spec.reward[1].settings.targte: unknown setting; did you mean 'target'?"
    )


def test_a_user_rewards_settings_are_typed() -> None:
    with pytest.raises(SpecError, match=r"spec.reward\[1\].settings.target"):
        validate_document(_spec(f"{HERE}:LooseReward", {"target": "many"}), "x.yaml")
    reward = create_reward(f"{HERE}:LooseReward", {"target": 3})
    assert type(reward.settings) is LooseSettings  # the reward gets its own model
    assert reward.score_samples([Sample("abc"), Sample("ab")])[0].score == 1.0


@pytest.mark.parametrize("settings", [{}, None])
def test_a_reward_without_settings_model_takes_none(settings: dict[str, object] | None) -> None:
    assert create_reward(f"{HERE}:BareReward", settings).score_samples([Sample("x")])[0].score == 1


def test_a_reward_without_settings_model_refuses_any() -> None:
    with pytest.raises(RewardConfigError) as e:
        create_reward(f"{HERE}:BareReward", {"target": 3})
    assert e.value.field == ("settings", "target")
    assert "this reward takes no settings" in str(e.value)


def test_a_model_that_allows_any_key_keeps_them() -> None:
    reward = create_reward(f"{HERE}:OpenReward", {"anything": 1})
    assert reward.settings.model_dump() == {"anything": 1}
