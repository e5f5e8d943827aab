"""Registry entry ``"ground_truth"``: reward the final ``\\boxed{}`` answer against the known one.

Imported lazily by ``sarl.rewards.registry``; used by the adapters (TRL: the dataset column
``ground_truth`` fills ``Sample.ground_truth``) next to the structure reward in local runs. A
per-sample reward; extraction and equivalence rules are in ``sarl.rewards.math_answer``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from sarl.rewards.base import PerSampleReward, RewardOutput, Sample
from sarl.rewards.math_answer import extract_answer, response_correct
from sarl.rewards.registry import register_reward

COMPONENT_KEYS = ("has_answer", "correct")


class GroundTruthRewardSettings(BaseModel):
    """Scores of the three outcomes: correct, wrong, and no ``\\boxed{}`` answer at all."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    correct_score: float = Field(default=1.0, description="Boxed answer equals the ground truth.")
    wrong_score: float = Field(default=0.0, description="Boxed answer differs from it.")
    missing_answer_score: float = Field(
        default=0.0, description="No complete \\boxed{...} in the response."
    )


@register_reward
class GroundTruthReward(PerSampleReward):
    """Correctness of the last ``\\boxed{}`` answer against ``Sample.ground_truth``.

    A ground truth that itself contains ``\\boxed{}`` (e.g. a full MATH solution) is reduced to
    its boxed answer first. A sample without a ground truth is an error, not a silent zero.
    """

    name = "ground_truth"
    Settings = GroundTruthRewardSettings
    components = COMPONENT_KEYS

    def __init__(self, settings: GroundTruthRewardSettings) -> None:
        super().__init__(settings)
        self._settings = settings

    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        if sample.ground_truth is None:
            raise ValueError(
                f"reward 'ground_truth': sample {where[1]} of group {where[0]} "
                f"(prompt {sample.prompt[:80]!r}) has no ground truth; give the dataset a "
                "'ground_truth' column"
            )
        s = self._settings
        if extract_answer(sample.response) is None:
            return RewardOutput(s.missing_answer_score, {"has_answer": 0.0, "correct": 0.0})
        if response_correct(sample.response, sample.ground_truth):
            return RewardOutput(s.correct_score, {"has_answer": 1.0, "correct": 1.0})
        return RewardOutput(s.wrong_score, {"has_answer": 1.0, "correct": 0.0})
