"""Registry entry ``"empo"``: EMPO's semantic-entropy reward (a group reward).

Zhang et al., "Right Question is Already Half the Answer: Fully Unsupervised LLM Reasoning
Incentivization" (EMPO, 2025, arXiv:2504.05812). The G responses to a prompt are clustered by
meaning, ``p(c_j | q) ≈ |c_j| / G``, the semantic entropy is
``H = -Σ_j p(c_j | q) log p(c_j | q)``, and minimising it is done by rewarding each response with
the probability of its cluster: ``r_i = p(c_j | q)`` for ``o_i ∈ c_j``. For math, the meaning of
a response is its final answer: the last ``\\boxed{}`` (``math_answer.extract_answer``), clustered
by ``answers_equal`` (``answer_clusters``). Imported lazily by ``sarl.rewards.registry``; called
by the adapters with whole groups (``needs_group``).

Conventions:

* A response without an answer forms no cluster and scores 0; it still counts in G, so
  ``Σ_j p(c_j | q) < 1`` when some responses have no answer (one answer among eight responses
  is worth 1/8, not a unanimous 1). ``H`` sums over the answer clusters only, so it equals the
  usual entropy when every response has an answer; it is 0 for a group without answers.
* EMPO trains only on prompts with ``δ_low < H < δ_high`` (too-confident and too-uncertain
  prompts are filtered out). ``entropy_min``/``entropy_max`` (natural log units; unset by
  default, i.e. no filter) give the same gate: a group outside it scores 0 for every sample
  (component ``gated`` = 1), so its group-relative advantage is zero and it adds no gradient.
* An empty group scores nothing (no outputs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sarl.rewards.base import PerGroupReward, RewardOutput, Sample
from sarl.rewards.baselines.answer_clusters import Equal, cluster_answers, cluster_sizes
from sarl.rewards.math_answer import answers_equal, extract_answer
from sarl.rewards.registry import register_reward

COMPONENT_KEYS = ("has_answer", "cluster_frequency", "semantic_entropy", "num_clusters", "gated")


class EMPORewardSettings(BaseModel):
    """EMPO's entropy gate ``entropy_min < H < entropy_max`` (either bound optional)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    entropy_min: float | None = Field(
        default=None, ge=0, description="δ_low: groups with H <= this score 0 (nats)."
    )
    entropy_max: float | None = Field(
        default=None, gt=0, description="δ_high: groups with H >= this score 0 (nats)."
    )

    @model_validator(mode="after")
    def _ordered(self) -> EMPORewardSettings:
        lo, hi = self.entropy_min, self.entropy_max
        if lo is not None and hi is not None and lo >= hi:
            raise ValueError(f"entropy_min ({lo}) must be below entropy_max ({hi})")
        return self


@dataclass(frozen=True, slots=True)
class SemanticClusters:
    """Cluster frequency of each response and the group's semantic entropy."""

    frequencies: tuple[float, ...]  # p(c_j | q) of each response's cluster; 0 without answer
    entropy: float  # H in nats
    num_clusters: int


def semantic_clusters(
    answers: Sequence[str | None], equal: Equal = answers_equal
) -> SemanticClusters:
    """EMPO's ``r_i = p(c_j | q)`` and ``H`` for one group (conventions in the docstring)."""
    labels = cluster_answers(answers, equal)
    sizes = cluster_sizes(labels)
    g = len(answers)
    probs = [n / g for n in sizes]
    # EMPO: H = -Σ_j p(c_j|q) log p(c_j|q), p(c_j|q) = |c_j| / G; r_i = p(c_j|q), o_i ∈ c_j.
    entropy = -math.fsum(p * math.log(p) for p in probs if p > 0)
    frequencies = tuple(0.0 if c is None else probs[c] for c in labels)
    return SemanticClusters(frequencies, entropy, len(sizes))


@register_reward
class EMPOReward(PerGroupReward):
    """Each response scores the frequency of its answer's cluster in the group."""

    name = "empo"
    Settings = EMPORewardSettings
    components = COMPONENT_KEYS
    needs_group = True

    def __init__(self, settings: EMPORewardSettings) -> None:
        super().__init__(settings)
        self._settings = settings

    def _gated(self, entropy: float) -> bool:
        lo, hi = self._settings.entropy_min, self._settings.entropy_max
        return (lo is not None and entropy <= lo) or (hi is not None and entropy >= hi)

    def score_group(self, group: Sequence[Sample], index: int) -> list[RewardOutput]:
        if not group:
            return []
        answers = [extract_answer(s.response) for s in group]
        clusters = semantic_clusters(answers)
        gated = self._gated(clusters.entropy)
        return [
            RewardOutput(
                0.0 if gated else freq,
                {
                    "has_answer": float(answer is not None),
                    "cluster_frequency": freq,
                    "semantic_entropy": clusters.entropy,
                    "num_clusters": float(clusters.num_clusters),
                    "gated": float(gated),
                },
            )
            for answer, freq in zip(answers, clusters.frequencies, strict=True)
        ]
