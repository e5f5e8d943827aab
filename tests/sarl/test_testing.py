"""``sarl.testing.check_reward``: passes a reward that keeps its contract and names the rule a
broken one breaks (issue 40 item 2). The rewards are real classes scored on the example traces."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
from pydantic import BaseModel

from sarl.rewards.base import PerGroupReward, PerSampleReward, RewardOutput, Sample
from sarl.rewards.ground_truth import GroundTruthReward
from sarl.testing import RewardContractError, check_reward, groups_from_jsonl

TRACES = Path(__file__).resolve().parents[2] / "examples" / "traces" / "grouped_math.jsonl"


class Length(PerSampleReward):
    name = "length_for_test"
    components = ("chars",)

    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        return RewardOutput(1.0 / (1 + len(sample.response)), {"chars": len(sample.response)})


class NotFinite(Length):
    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        return RewardOutput(math.inf, {"chars": 0.0})


class MissingComponent(Length):
    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        return RewardOutput(0.0)


_calls = itertools.count()


class Drifting(Length):
    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        return RewardOutput(float(next(_calls)), {"chars": 0.0})


class ReadsSiblings(PerGroupReward):
    """Scores by group size but does not say needs_group."""

    name = "reads_siblings_for_test"

    def score_group(self, group: list[Sample], index: int) -> list[RewardOutput]:  # type: ignore[override]
        return [RewardOutput(float(len(group))) for _ in group]


class Loose(BaseModel):
    target: int = 1


class LooseLength(Length):
    Settings = Loose


def test_groups_from_the_example_traces() -> None:
    groups = groups_from_jsonl(TRACES)
    assert len(groups) > 1 and all(len(g) > 1 for g in groups)
    assert len({g[0].prompt for g in groups}) == len(groups)


def test_a_reward_that_keeps_the_contract_passes() -> None:
    groups = groups_from_jsonl(TRACES)
    out = check_reward(Length, groups)
    assert [len(g) for g in out] == [len(g) for g in groups]
    assert check_reward(GroundTruthReward, groups, {"wrong_score": -1.0})  # a built-in too


@pytest.mark.parametrize(
    ("cls", "settings", "rule"),
    [
        (NotFinite, {}, "score=inf is not a finite number"),
        (MissingComponent, {}, r"components \[\] differ from the declared \['chars'\]"),
        (Drifting, {}, "a second call on the same groups scored otherwise"),
        (ReadsSiblings, {}, "set needs_group = True"),
        (LooseLength, {"targte": 2}, "settings: .*'targte'.*did you mean 'target'"),
        (Length, {"target": 2}, "settings: .*takes no settings"),
    ],
)
def test_a_broken_contract_names_the_rule(
    cls: type[PerSampleReward], settings: dict[str, object], rule: str
) -> None:
    with pytest.raises(RewardContractError, match=rule):
        check_reward(cls, groups_from_jsonl(TRACES), settings)
