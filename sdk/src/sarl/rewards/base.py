"""The reward interface every registered reward implements: groups of samples in, scores out.

Called by the adapters (TRL, verl, reward service) and the registry. Group rewards are first
class: TTRL, EMPO and LCS need every response to one prompt, so the unit of work is a *group*
(the responses sampled for one prompt) and per-sample rewards are the special case that ignores
the siblings. A batch of groups is scored in one call so rewards can batch remote work
(embedding, judge calls) across the whole training batch.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict


class NoSettings(BaseModel):
    """Settings of a reward that declares none: any key given is refused as unknown."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True, slots=True)
class Sample:
    """One response to score, with what a reward may need about it."""

    response: str
    prompt: str = ""
    ground_truth: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RewardOutput:
    """Score of one sample plus named numeric components (same keys for every sample)."""

    score: float
    components: Mapping[str, float] = field(default_factory=dict)


class Reward(ABC):
    """Base class of registered rewards. Subclasses set ``name`` and ``Settings``.

    ``Settings`` is a pydantic model; a key it does not declare is refused (the registry checks
    every model as if it set ``extra="forbid"``, unless it sets ``extra="allow"`` itself). A
    reward that declares none gets :class:`NoSettings`: it takes no settings."""

    name: ClassVar[str]
    Settings: ClassVar[type[BaseModel]] = NoSettings
    #: True when a sample's score depends on its siblings (the adapters must keep groups whole).
    needs_group: ClassVar[bool] = False
    #: True when the reward masks truncated completions (tagged-reasoning A.7): the adapters then
    #: set ``Sample.extra["truncated"]`` from the token ids, and trainers that can also leave
    #: those completions out of the loss (TRL's ``mask_truncated_completions``; verl cannot).
    masks_truncated: ClassVar[bool] = False
    #: Keys of ``RewardOutput.components``, fixed for this reward.
    components: ClassVar[tuple[str, ...]] = ()

    def __init__(self, settings: BaseModel) -> None:
        self.settings = settings

    @property
    def component_keys(self) -> tuple[str, ...]:
        """Keys of ``RewardOutput.components``, fixed for this reward (:attr:`components`)."""
        return self.components

    @classmethod
    def vote_set_size(cls, settings: BaseModel) -> int | None:
        """Responses per prompt this group reward wants in each group it scores (its *vote
        set*), of which only the first ``rollouts_per_prompt`` are trained on; None (the
        default): the trained group itself. The adapters draw the extra responses and drop
        their scores (TTRL's ``n_votes_per_prompt``, :mod:`sarl.rewards.baselines.ttrl`)."""
        return None

    @property
    def votes_per_prompt(self) -> int | None:
        """:meth:`vote_set_size` of this reward's settings."""
        return self.vote_set_size(self.settings)

    @abstractmethod
    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        """Score a batch of groups; output mirrors the input nesting and order."""

    async def ascore_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        """Async twin for async trainers; the default runs the sync path in a worker thread."""
        return await asyncio.to_thread(self.score_groups, groups)

    def score_samples(self, samples: Sequence[Sample]) -> list[RewardOutput]:
        """Per-sample convenience: each sample is its own group (invalid for group rewards)."""
        if self.needs_group:
            raise ValueError(f"reward {self.name!r} needs whole groups; call score_groups")
        return [out[0] for out in self.score_groups([[s] for s in samples])]

    def close(self) -> None:  # noqa: B027 - optional hook; most rewards hold no resources
        """Release pools and clients. Idempotent."""

    def __enter__(self) -> Self:
        """``with create_reward(...) as reward:`` closes the reward (:meth:`close`) at the end."""
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class PerGroupReward(Reward):
    """A reward that scores each group on its own: subclasses implement :meth:`score_group`."""

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        return [self.score_group(group, g) for g, group in enumerate(groups)]

    @abstractmethod
    def score_group(self, group: Sequence[Sample], index: int) -> list[RewardOutput]:
        """Scores of one group (``index``: its place in the batch, for error messages)."""


class PerSampleReward(Reward):
    """A reward that scores each sample on its own: subclasses implement :meth:`score_sample`."""

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        return [
            [self.score_sample(sample, (g, i)) for i, sample in enumerate(group)]
            for g, group in enumerate(groups)
        ]

    @abstractmethod
    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        """Score of one sample; ``where`` = (group, index in group), for error messages."""
