"""Registry entry ``"structure"``: the SARL structure reward behind the group-reward interface.

Imported lazily by ``sarl.rewards.registry``; used by the adapters (TRL, verl, reward service).
It is a per-sample reward (a score never depends on siblings), but it still takes whole batches so
all steps of the batch are embedded in one embedder call.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from sarl.embedding.base import Embedder
from sarl.embedding.factory import EmbedderConfig, make_embedder
from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.registry import register_reward
from sarl.rewards.structure.config import StructureRewardConfig
from sarl.rewards.structure.result import StructureResult
from sarl.rewards.structure.scorer import StructureScorer

COMPONENT_KEYS = ("clustering", "path_length", "num_steps", "num_nodes", "num_edges", "degenerate")


class StructureRewardSettings(StructureRewardConfig):
    """Structure reward settings plus the embedder that embeds the steps."""

    embedder: EmbedderConfig = Field(default_factory=EmbedderConfig)
    workers: int | None = Field(
        default=None, ge=1, description="Processes for clustering large batches (default: cores)."
    )

    def scoring_config(self) -> StructureRewardConfig:
        return StructureRewardConfig.model_validate(
            self.model_dump(exclude={"embedder", "workers"})
        )


@register_reward
class StructureReward(Reward):
    """SR = C/2 + 1/(1+L) of each response's reasoning map (SARL v2 eq. 6)."""

    name = "structure"
    Settings = StructureRewardSettings
    components = COMPONENT_KEYS

    def __init__(
        self, settings: StructureRewardSettings, *, embedder: Embedder | None = None
    ) -> None:
        super().__init__(settings)
        self._settings = settings
        self._scorer = StructureScorer(
            settings.scoring_config(),
            embedder if embedder is not None else make_embedder(settings.embedder),
            workers=settings.workers,
        )

    @property
    def scorer(self) -> StructureScorer:
        return self._scorer

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        flat = [s.response for g in groups for s in g]
        return _regroup(groups, self._scorer.score_batch(flat))

    async def ascore_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        flat = [s.response for g in groups for s in g]
        return _regroup(groups, await self._scorer.ascore_batch(flat))

    def close(self) -> None:
        self._scorer.close()


def to_output(result: StructureResult) -> RewardOutput:
    return RewardOutput(score=result.score, components=result.components())


def _regroup(
    groups: Sequence[Sequence[Sample]], results: list[StructureResult]
) -> list[list[RewardOutput]]:
    out: list[list[RewardOutput]] = []
    it = iter(results)
    for g in groups:
        out.append([to_output(next(it)) for _ in g])
    return out
