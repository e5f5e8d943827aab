"""A reward for answers of about ``target`` words: 1 at the target, falling linearly to 0 at
twice (or zero times) the target.

The worked example of docs/how-to/add-a-reward.md: a per-sample reward with one typed setting.
Registered by name through the package's ``sarl.rewards`` entry point (``answer_length``), or
named in a spec by its path ``answer_length_reward.reward:AnswerLengthReward``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from sarl.rewards.base import PerSampleReward, RewardOutput, Sample


class AnswerLengthSettings(BaseModel):
    """The reward's settings; sarl refuses any other key (``targte``: did you mean ``target``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    target: int = Field(default=40, ge=1, description="Words of the ideal response.")


class AnswerLengthReward(PerSampleReward):
    """Closeness of the response's length in words to a target number of words.

    1 at ``target`` words, 0 at none or at twice the target and beyond; per sample."""

    name = "answer_length"
    Settings = AnswerLengthSettings
    components = ("words",)

    def __init__(self, settings: AnswerLengthSettings) -> None:
        super().__init__(settings)
        self.target = settings.target

    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        words = len(sample.response.split())
        score = max(0.0, 1.0 - abs(words - self.target) / self.target)
        return RewardOutput(score, {"words": float(words)})
