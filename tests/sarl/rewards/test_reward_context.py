"""A reward is a context manager: ``with sarl.create_reward(...) as reward:`` closes it (its
pools and clients) at the end of the block, also when the block raises."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from pydantic import BaseModel

from sarl.rewards.base import PerSampleReward, RewardOutput, Sample
from sarl.rewards.structure.reward import StructureReward, StructureRewardSettings


class _NoSettings(BaseModel):
    pass


class _Counting(PerSampleReward):
    name = "counting-test"
    Settings = _NoSettings

    def __init__(self) -> None:
        super().__init__(_NoSettings())
        self.closed = 0

    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        return RewardOutput(float(len(sample.response)))

    def close(self) -> None:
        self.closed += 1


def _score(reward: _Counting, texts: Sequence[str]) -> list[float]:
    return [out.score for out in reward.score_samples([Sample(t) for t in texts])]


def test_with_returns_the_reward_and_closes_it() -> None:
    with _Counting() as reward:
        assert _score(reward, ["ab", "c"]) == [2.0, 1.0]
        assert reward.closed == 0
    assert reward.closed == 1


def test_closed_when_the_block_raises() -> None:
    reward = _Counting()
    with pytest.raises(RuntimeError, match="boom"), reward:
        raise RuntimeError("boom")
    assert reward.closed == 1


class _Pool:
    """Stands for the scorer's process pool: records that it was shut down."""

    shut = False

    def shutdown(self, wait: bool, cancel_futures: bool) -> None:
        self.shut = True


class _OneHot:
    def embed(self, texts: list[str]) -> np.ndarray:
        return np.eye(max(len(texts), 1), dtype=np.float32)[: len(texts)]


def test_the_structure_reward_stops_its_scorers_pool() -> None:
    pool = _Pool()
    with StructureReward(StructureRewardSettings(workers=2), embedder=_OneHot()) as reward:
        reward.scorer._pool = pool  # type: ignore[assignment]
    assert pool.shut and reward.scorer._pool is None
