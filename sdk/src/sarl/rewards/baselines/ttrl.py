"""Registry entry ``"ttrl"``: TTRL's majority-vote pseudo-label reward (a group reward).

Zuo et al., "TTRL: Test-Time Reinforcement Learning" (2025, arXiv:2504.16084): sample N
responses to a prompt, take the most frequent extracted answer as the pseudo-label ŷ and reward
``R(ŷ_i, ŷ) = 1 if ŷ_i = ŷ else 0``. Imported lazily by ``sarl.rewards.registry``; called by the
adapters with whole groups (``needs_group``). Answers are the last ``\\boxed{}`` of each response
(``math_answer.extract_answer``), grouped by ``answers_equal`` (``answer_clusters``).

Edge cases (TTRL's reference pseudo-code, ``Counter(answers).most_common(1)``, leaves them open):

* No answer (no complete ``\\boxed{}``): the sample does not vote and scores 0. Counting ``None``
  as an answer, as the pseudo-code would, lets a group of mostly unanswered responses make "no
  answer" the label and reward not answering.
* No sample has an answer, or the group is empty: no label, every sample scores 0.
* A tie for the most votes: ``tie_break="none"`` (default) means no consensus, so no label and
  every sample scores 0 (rewarding one of the tied answers would be arbitrary, and GRPO would
  amplify the arbitrary choice); ``"first"`` takes the tied answer that appeared first in the
  group, which is what ``Counter.most_common`` does in TTRL's pseudo-code.
* A group of one answered sample agrees with itself (score 1): majority voting needs groups of
  more than one response to carry information.

Vote set (``votes_per_prompt``). TTRL's reference (PRIME-RL/TTRL at 3e2cc93,
``verl/verl/workers/reward_manager/ttrl.py`` and ``verl/verl/trainer/ppo/ray_trainer.py``) samples
``n_votes_per_prompt`` responses per prompt, takes the label from all of them and trains on
``n_samples_per_prompt`` of them (the first of each prompt, ``_select_top_k_per_prompt``); its
AIME and AMC scripts (``verl/examples/ttrl/{aime,amc}.sh``) use 64 votes and 32 trained responses.
Here ``votes_per_prompt`` (default None: vote within the trained group) makes the adapters draw
``votes_per_prompt - rollouts_per_prompt`` extra responses per prompt from the policy, with its
sampling settings, for the vote alone: the group this reward scores is the vote set, trained
responses first, and the adapters keep only the trained responses' scores, so advantages are
computed over the trained group, as in the reference (TRL: :mod:`sarl.integrations.trl_votes`;
verl: :mod:`sarl.integrations.verl.votes`). ``majority_ratio`` is the winner's share of the whole
vote set, as the reference's. The reference differs on the edge cases above: its extractor turns
a response without an answer into ``""``, which votes (three unanswered responses out of four
make ``""`` the label and score 1), and a tie goes to the first-seen answer (``tie_break:
first``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sarl.rewards.base import PerGroupReward, RewardOutput, Sample
from sarl.rewards.baselines.answer_clusters import Equal, cluster_answers, cluster_sizes
from sarl.rewards.math_answer import answers_equal, extract_answer
from sarl.rewards.registry import register_reward

COMPONENT_KEYS = ("has_answer", "agrees", "has_label", "majority_ratio")
TieBreak = Literal["none", "first"]


class TTRLRewardSettings(BaseModel):
    """How a tie for the most votes is resolved and how many responses vote (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tie_break: TieBreak = Field(
        default="none",
        description="'none': a tie gives no pseudo-label (all score 0); 'first': the tied answer "
        "that appeared first wins (TTRL's Counter.most_common).",
    )
    votes_per_prompt: int | None = Field(
        default=None,
        ge=2,
        description="Responses per prompt that vote for the pseudo-label (TTRL's "
        "n_votes_per_prompt): at least spec.algorithm.rollouts_per_prompt, the responses "
        "trained on; the others are extra rollouts drawn for the vote alone, so generation "
        "costs votes_per_prompt / rollouts_per_prompt times as much. None: vote within the "
        "trained group. TTRL's recipe (AIME, AMC): 64, with rollouts_per_prompt 32.",
    )


@dataclass(frozen=True, slots=True)
class MajorityVote:
    """The pseudo-label of one group and each sample's agreement with it."""

    label: str | None  # the winning answer as first written in the group; None: no label
    votes: int  # samples in the winning cluster (0 without a label)
    agrees: tuple[bool, ...]  # per sample


def majority_vote(
    answers: Sequence[str | None], tie_break: TieBreak = "none", equal: Equal = answers_equal
) -> MajorityVote:
    """TTRL's majority vote over one group's extracted answers (``None``: no answer)."""
    labels = cluster_answers(answers, equal)
    sizes = cluster_sizes(labels)
    top = max(sizes, default=0)
    winners = [c for c, n in enumerate(sizes) if n == top] if top else []
    if not winners or (len(winners) > 1 and tie_break == "none"):
        return MajorityVote(None, 0, tuple(False for _ in answers))
    winner = winners[0]  # cluster ids follow first appearance, so this is the first-seen answer
    first = labels.index(winner)
    return MajorityVote(answers[first], top, tuple(c == winner for c in labels))


@register_reward
class TTRLReward(PerGroupReward):
    """1 for a response whose boxed answer equals its group's majority answer, else 0."""

    name = "ttrl"
    Settings = TTRLRewardSettings
    components = COMPONENT_KEYS
    needs_group = True

    def __init__(self, settings: TTRLRewardSettings) -> None:
        super().__init__(settings)
        self._settings = settings

    @classmethod
    def vote_set_size(cls, settings: BaseModel) -> int | None:
        return settings.votes_per_prompt if isinstance(settings, TTRLRewardSettings) else None

    def score_group(self, group: Sequence[Sample], index: int) -> list[RewardOutput]:
        answers = [extract_answer(s.response) for s in group]
        vote = majority_vote(answers, self._settings.tie_break)
        has_label = float(vote.label is not None)
        ratio = vote.votes / len(group) if group else 0.0
        return [
            RewardOutput(
                float(agrees),
                {
                    "has_answer": float(answer is not None),
                    "agrees": float(agrees),
                    "has_label": has_label,
                    "majority_ratio": ratio,
                },
            )
            for answer, agrees in zip(answers, vote.agrees, strict=True)
        ]
