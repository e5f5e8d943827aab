"""A Study's parallel runs train in fresh processes, which find rewards by name: a reward defined in
``__main__`` (a notebook cell) is refused up front with a message saying what to do; one from an
importable module is imported by the run processes first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from sarl.rewards import registry
from sarl.rewards.base import PerSampleReward, RewardOutput, Sample
from sarl.runner.preflight import PreflightError
from sarl.spec.loader import validate_study
from sarl.study.runner import StudyOptions, check_importable_rewards, run_study


class _Settings(BaseModel):
    pass


class ModuleReward(PerSampleReward):
    """A user reward in an importable module (this one)."""

    name = "test_module_reward"
    Settings = _Settings

    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        return RewardOutput(1.0)


def _notebook_reward() -> type[PerSampleReward]:
    """A reward class as a notebook cell defines it: its module is ``__main__``."""

    class NotebookReward(PerSampleReward):
        name = "test_notebook_reward"
        Settings = _Settings

        def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
            return RewardOutput(0.0)

    NotebookReward.__module__ = "__main__"
    return NotebookReward


def _study(reward: str) -> Any:
    return validate_study(
        {
            "apiVersion": "sarl.dev/v1alpha1",
            "kind": "Study",
            "metadata": {"name": "importable"},
            "spec": {
                "base": {"preset": "local-grpo-arithmetic"},
                "arms": [
                    {"name": "a", "override": {"reward": [{"name": "ground_truth"}]}},
                    {"name": "b", "override": {"reward": [{"name": reward}]}},
                ],
                "seeds": [0],
            },
        }
    )


@pytest.fixture(autouse=True)
def _registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry._REGISTRY, ModuleReward.name, ModuleReward)
    monkeypatch.setitem(registry._REGISTRY, "test_notebook_reward", _notebook_reward())


def test_a_notebook_reward_is_refused_for_parallel_runs() -> None:
    with pytest.raises(PreflightError) as info:
        check_importable_rewards(_study("test_notebook_reward"), jobs=2)
    message = str(info.value)
    assert message.startswith("reward 'test_notebook_reward' is defined in __main__")
    assert "jobs=1" in message and "move it into a module" in message


def test_a_notebook_reward_is_fine_in_this_process() -> None:
    assert check_importable_rewards(_study("test_notebook_reward"), jobs=1) == []


def test_modules_of_user_rewards_are_imported_by_the_run_processes() -> None:
    assert check_importable_rewards(_study(ModuleReward.name), jobs=2) == [__name__]
    assert check_importable_rewards(_study("structure"), jobs=2) == []  # built-ins: by name


def test_run_study_refuses_before_anything_runs(tmp_path: Path) -> None:
    opts = StudyOptions(
        workdir=tmp_path / ".sarl",
        tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        jobs=2,
        progress=False,
    )
    with pytest.raises(PreflightError, match="test_notebook_reward"):
        run_study(_study("test_notebook_reward"), opts)
    assert not (tmp_path / ".sarl").exists()  # no parent run, no checkpoints, no warm start
