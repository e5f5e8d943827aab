"""Registry entry ``"empo"``: EMPO's semantic-entropy reward (a group reward).

Zhang et al., "Right Question is Already Half the Answer: Fully Unsupervised LLM Reasoning
Incentivization" (EMPO, 2025, arXiv:2504.05812). The G responses to a prompt are clustered by
meaning, ``p(c_j | q) ≈ |c_j| / G``, the semantic entropy is
``H = -Σ_j p(c_j | q) log p(c_j | q)``, and minimising it is done by rewarding each response with
the probability of its cluster: ``r_i = p(c_j | q)`` for ``o_i ∈ c_j``. For math, the meaning of
a response is its final answer: the last ``\\boxed{}`` (``math_answer.extract_answer``), clustered
by ``answers_equal`` (``answer_clusters``). Imported lazily by ``sarl.rewards.registry``; called
by the adapters with whole groups (``needs_group``).

Conventions. The defaults are the authors' math trainer: ``get_empo_math_reward`` in
``trl/src/open_r1/rewards.py`` of github.com/QingyangZhang/EMPO at commit ``c5eccd4``
(c5eccd400ba7a7a1685dedf25eab03780aad855f), with ``get_semantic_ids_by_rule`` of
``trl/src/open_r1/semantic_uncertainty.py`` there and math-verify 0.5.2/0.6.0, whose ``verify``
never equates empty strings.

* A response without an answer scores 0 and still counts in G (one answer among eight responses
  is worth 1/8, not a unanimous 1). ``unanswered: singleton`` (default, the reference): in ``H``
  each unanswered response is a cluster of its own, so a group of distinct or missing answers has
  the maximal ``H = log G``. ``unanswered: excluded``: ``H`` sums over the answer clusters only
  (``Σ_j p(c_j | q) < 1`` then; ``H`` is 0 for a group without answers). ``num_clusters`` counts
  the clusters in ``H``.
* The reference zeroes every reward of a group with ``H >= log G`` (it keeps ``H < log G``,
  "entropy thresholding to filter out highly unreliable answers"); ``H`` reaches ``log G`` only
  when every response is in a cluster of its own (all answers distinct or missing).
  ``entropy_max_fraction_of_log_g`` (default 1.0) is that gate: a group with
  ``H >= fraction · log G`` scores 0 for every sample (component ``gated`` = 1), so its
  group-relative advantage is zero and it adds no gradient; null turns it off. We compare with a
  1e-9 nats tolerance: the reference sums ``p log p`` in floating point, which for G = 7 (its math
  config's ``num_generations``) gives 1.945910149055313 for seven distinct answers, one ulp below
  ``log 7``, so its gate never fires at that G; here it fires for every G, as the reference means
  and as it does at G = 4 or 8. A group of one response is always gated (``H = log 1 = 0``), as
  in the reference.
* The paper trains only on prompts with ``δ_low < H < δ_high``; ``entropy_min``/``entropy_max``
  (nats, unset by default) add that fixed gate: a group with ``H <= entropy_min`` or
  ``H >= entropy_max`` is gated too. This module's earlier behaviour (no gate, unanswered
  responses left out of ``H``) is ``unanswered: excluded`` with
  ``entropy_max_fraction_of_log_g: null``.
* The authors' verl port (``verl-empo/.../reward_score/empo/compute_metrics.py`` at the same
  commit) differs: there an unanswered response is a singleton that *scores* 1/G, and no entropy
  gate is applied (its only group filter, on the top cluster frequency, is off in its scripts);
  the TRL trainer above is the one that gates on ``log G``.
* Answers are equal by value (``answers_equal``); the reference compares the extracted strings
  (math-verify's ``verify`` of two strings is string equality), so it splits ``0.5`` and ``1/2``.
* An empty group scores nothing (no outputs).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sarl.rewards.base import PerGroupReward, RewardOutput, Sample
from sarl.rewards.baselines.answer_clusters import Equal, cluster_answers, cluster_sizes
from sarl.rewards.math_answer import answers_equal, extract_answer
from sarl.rewards.registry import register_reward

COMPONENT_KEYS = ("has_answer", "cluster_frequency", "semantic_entropy", "num_clusters", "gated")
Unanswered = Literal["singleton", "excluded"]

#: Nats by which H may fall short of ``fraction · log G`` and still be gated: absorbs the rounding
#: of ``Σ p log p`` (a few ulps), far below the smallest real gap below ``log G`` (about
#: ``2 log 2 / G``, one pair among singletons).
GATE_TOLERANCE = 1e-9


class EMPORewardSettings(BaseModel):
    """Unanswered responses in ``H``, and the gates that zero a whole group (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    unanswered: Unanswered = Field(
        default="singleton",
        description="'singleton' (the reference): each unanswered response is its own cluster in "
        "H; 'excluded': H sums over the answer clusters only. Unanswered responses score 0 "
        "either way.",
    )
    entropy_max_fraction_of_log_g: float | None = Field(
        default=1.0,
        gt=0,
        le=1,
        description="Groups with H >= this fraction of log G score 0; 1.0 (the reference) gates "
        "groups whose responses are all in clusters of their own. null: no such gate.",
    )
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
    num_clusters: int  # clusters in H


def semantic_clusters(
    answers: Sequence[str | None],
    equal: Equal = answers_equal,
    unanswered: Unanswered = "singleton",
) -> SemanticClusters:
    """EMPO's ``r_i = p(c_j | q)`` and ``H`` for one group (conventions in the docstring)."""
    labels = cluster_answers(answers, equal)
    sizes = cluster_sizes(labels)
    if unanswered == "singleton":
        sizes += [1] * sum(c is None for c in labels)
    g = len(answers)
    probs = [n / g for n in sizes]
    # EMPO: H = -Σ_j p(c_j|q) log p(c_j|q), p(c_j|q) = |c_j| / G; r_i = p(c_j|q), o_i ∈ c_j.
    entropy = -math.fsum(p * math.log(p) for p in probs if p > 0)
    frequencies = tuple(0.0 if c is None else probs[c] for c in labels)
    return SemanticClusters(frequencies, entropy, len(sizes))


def entropy_gated(entropy: float, group_size: int, settings: EMPORewardSettings) -> bool:
    """Whether a group of ``group_size`` responses with entropy ``entropy`` scores 0 throughout."""
    fraction = settings.entropy_max_fraction_of_log_g
    if fraction is not None and entropy >= fraction * math.log(group_size) - GATE_TOLERANCE:
        return True
    lo, hi = settings.entropy_min, settings.entropy_max
    return (lo is not None and entropy <= lo) or (hi is not None and entropy >= hi)


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

    def score_group(self, group: Sequence[Sample], index: int) -> list[RewardOutput]:
        if not group:
            return []
        answers = [extract_answer(s.response) for s in group]
        clusters = semantic_clusters(answers, unanswered=self._settings.unanswered)
        gated = entropy_gated(clusters.entropy, len(group), self._settings)
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
