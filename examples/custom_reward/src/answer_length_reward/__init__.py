"""Example sarl reward package (docs/how-to/add-a-reward.md): :class:`AnswerLengthReward`."""

from answer_length_reward.reward import AnswerLengthReward, AnswerLengthSettings

__all__ = ["AnswerLengthReward", "AnswerLengthSettings"]
