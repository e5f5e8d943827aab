"""Registry entry ``"ttrl"``: TTRL's majority-vote pseudo-label reward (a group reward).

Zuo et al., "TTRL: Test-Time Reinforcement Learning" (2025, arXiv:2504.16084): sample N
responses to a prompt, take the most frequent extracted answer as the pseudo-label ŷ and reward
``R(ŷ_i, ŷ) = 1 if ŷ_i = ŷ else 0``. Imported lazily by ``sarl.rewards.registry``; called by the
adapters with whole groups (``needs_group``).

By default this gives the reference's rewards: ``test_time_train_metrics`` of PRIME-RL/TTRL at
3e2cc93 (``verl/verl/utils/reward_score/ttrl/ttt_metrics.py``), checked against that function run
unchanged (``tests/sarl/rewards/baselines/fixtures/ttrl_reference.json``, 103 groups, G = 1-16):

* each response's answer is the reference parser's string (:mod:`.ttrl_extract`: last box,
  ``\\boxed 5``, an unclosed last box, "the answer is", "final answer is", the last number,
  normalised); the label is the most frequent *string*, a tie going to the first seen
  (``Counter.most_common``); ``""`` (an empty ``\\boxed{}``, or no answer at all) votes and can
  win, and then every ``""`` scores 1;
* each response scores 1 when the reference grader (:mod:`.ttrl_grade`) equates its answer with
  the label (``x=5`` = ``5``, ``\\frac34`` = ``\\dfrac{3}{4}``, ``Yes`` = ``yes``, not ``2/4`` =
  ``1/2``), so a response outside the winning string can be rewarded;
* ``majority_ratio`` is the winning string's votes over the whole group.

sarl's own rules are named settings (docs/baselines.md): ``voting: value_clusters`` (answers
grouped by value with ``answers_equal``, reward = in the winning cluster), ``extraction:
boxed_only`` (the last complete ``\\boxed{}`` only; no box, no answer), ``tie_break: none`` (a tie
gives no label; all score 0), ``unanswered: abstain`` (an empty answer does not vote, scores 0).
With ``value_clusters`` a group of one answered sample agrees with itself (score 1).

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
vote set, as the reference's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sarl.rewards.base import PerGroupReward, RewardOutput, Sample
from sarl.rewards.baselines.answer_clusters import Equal, cluster_answers, cluster_sizes
from sarl.rewards.baselines.ttrl_extract import extract_ttrl_answer, finish_answer
from sarl.rewards.baselines.ttrl_grade import grade_answer
from sarl.rewards.math_answer import answers_equal, extract_answer
from sarl.rewards.registry import register_reward

COMPONENT_KEYS = ("has_answer", "agrees", "has_label", "majority_ratio")
TieBreak = Literal["none", "first"]
Voting = Literal["answer_strings", "value_clusters"]
Extraction = Literal["reference", "boxed_only"]
Unanswered = Literal["vote", "abstain"]


class TTRLRewardSettings(BaseModel):
    """How a tie for the most votes is resolved and how many responses vote (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    voting: Voting = Field(
        default="answer_strings",
        description="'answer_strings' (the reference): vote over normalised answer strings, then "
        "grade each answer against the label with the reference grader; 'value_clusters': "
        "cluster answers by value (answers_equal: 0.5 = 1/2) and reward the winning cluster.",
    )
    extraction: Extraction = Field(
        default="reference",
        description="'reference': Qwen's parser (last box, '\\boxed 5', an unclosed last box, "
        "'the answer is', 'final answer is', the last number); 'boxed_only': the last complete "
        "\\boxed{} only, else no answer.",
    )
    tie_break: TieBreak = Field(
        default="first",
        description="'first' (the reference's Counter.most_common): the tied answer that "
        "appeared first wins; 'none': a tie gives no pseudo-label (all score 0).",
    )
    unanswered: Unanswered = Field(
        default="vote",
        description="'vote' (the reference): an empty answer ('' from an empty \\boxed{} or a "
        "text without any answer) votes like any other and can win; 'abstain': it does not "
        "vote and scores 0.",
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
    answers: Sequence[str | None], tie_break: TieBreak = "first", equal: Equal = answers_equal
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


def string_vote(answers: Sequence[str | None], tie_break: TieBreak = "first") -> MajorityVote:
    """The reference's vote: the most frequent answer *string* (``None`` does not vote); a tie
    goes to the first seen (``Counter.most_common``) or, with ``tie_break="none"``, to nobody.
    ``agrees`` marks identical strings; the reward grades each answer against the label."""
    counts = Counter(a for a in answers if a is not None)
    ranked = counts.most_common(2)
    if not ranked or (tie_break == "none" and len(ranked) > 1 and ranked[1][1] == ranked[0][1]):
        return MajorityVote(None, 0, tuple(False for _ in answers))
    label, votes = ranked[0]
    return MajorityVote(label, votes, tuple(a == label for a in answers))


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
        s = self._settings
        answers = [self._answer(sample.response) for sample in group]
        if s.voting == "value_clusters":
            vote = majority_vote(answers, s.tie_break)
            rewards = [float(a) for a in vote.agrees]
        else:
            vote = string_vote(answers, s.tie_break)
            label = vote.label
            rewards = [
                float(a is not None and label is not None and grade_answer(a, label))
                for a in answers
            ]
        has_label = float(vote.label is not None)
        ratio = vote.votes / len(group) if group else 0.0
        return [
            RewardOutput(
                reward,
                {
                    "has_answer": float(bool(answer)),
                    "agrees": reward,
                    "has_label": has_label,
                    "majority_ratio": ratio,
                },
            )
            for answer, reward in zip(answers, rewards, strict=True)
        ]

    def _answer(self, response: str) -> str | None:
        """The response's vote (None: it does not vote), per ``extraction`` and ``unanswered``."""
        s = self._settings
        if s.extraction == "reference":
            answer: str | None = extract_ttrl_answer(response)
        else:
            answer = extract_answer(response)
            if answer is not None and s.voting == "answer_strings":
                answer = finish_answer(answer)
        if answer == "" and s.unanswered == "abstain":
            return None
        return answer
