"""Several weighted reward terms as one reward: verl trains on the sum, every term is reported.

Called by the verl adapter through :data:`sarl.integrations.verl.batcher.SHARED` (``combined``)
when the options hold ``terms`` (``spec.reward`` with several terms, weight-0 terms, or a weight
other than 1.0). verl 0.9.1 calls one reward function (or manager) per response; TRL instead takes
one ``reward_funcs`` entry per term with ``reward_weights`` and logs each function's mean. Here the
terms are combined into one :class:`~sarl.rewards.base.Reward`, so the adapter's micro-batching,
group collection and error policy apply to the sum unchanged. Pure: no verl import.

Per response (same for every response, as verl needs, see ``compute_score``):

* ``score = sum(weight_i * score_i)`` over the terms with a non-zero weight (``math.fsum``). A
  weight-0 term is scored and reported only: its score never reaches the sum, so an undefined
  (NaN) one is harmless. A NaN score of a weighted term makes the sum NaN, which the adapter
  refuses (verl takes finite rewards only, and a stand-in would be a silent guess); TRL 1.16 would
  leave that term out of the sum (``nansum`` in ``GRPOTrainer._generate_and_score_completions``).
* components, named as the local runner and the TRL adapter name the metrics
  (:mod:`sarl.tracking.metrics`, :mod:`sarl.runner.callbacks`): each term's unweighted score as
  ``reward/<name>`` (:func:`~sarl.tracking.metrics.reward_metric`) and each of its components as
  ``<name>/<component>`` (e.g. ``structure/clustering``), term by term in spec order.

Each term's reward name appears once: two terms of one reward would report under the same keys.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.registry import RewardConfigError
from sarl.tracking.metrics import metric_key, reward_metric


class WeightedSettings(BaseModel):
    """What a combination is (for ``Reward.settings``): its terms' names and weights."""

    model_config = ConfigDict(frozen=True)

    names: tuple[str, ...]
    weights: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Term:
    """One term: the reward, its weight, and the keys its score and components are reported as."""

    reward: Reward
    weight: float

    @property
    def score_key(self) -> str:
        """``reward/<name>``: the term's unweighted score."""
        return reward_metric(self.reward.name)

    def component_key(self, component: str) -> str:
        """``<name>/<component>``, as the TRL adapter logs a reward's components."""
        return f"{metric_key(self.reward.name)}/{component}"


def term_keys(reward: Reward) -> tuple[str, ...]:
    """The keys one term of ``reward`` adds: ``reward/<name>`` then ``<name>/<component>``."""
    term = Term(reward, 0.0)
    return (term.score_key, *(term.component_key(k) for k in reward.component_keys))


class WeightedRewards(Reward):
    """``score = sum(weight * term)``; components: every term's score and components.

    Closing it closes its terms (idempotent, as every reward's ``close``)."""

    name = "weighted_sum"
    Settings = WeightedSettings

    def __init__(self, terms: Sequence[tuple[Reward, float]]) -> None:
        if not terms:
            raise RewardConfigError("terms: at least one reward term is needed")
        self.terms = tuple(Term(reward, float(weight)) for reward, weight in terms)
        seen: dict[str, int] = {}
        for i, term in enumerate(self.terms):
            if not math.isfinite(term.weight):
                raise RewardConfigError(f"terms[{i}].weight={term.weight!r}: must be finite")
            if term.score_key in seen:
                first = seen[term.score_key]
                raise RewardConfigError(
                    f"terms[{i}]: reward {term.reward.name!r} is already terms[{first}]; each "
                    "reward may appear once (its values are reported as "
                    f"{term.score_key} and {metric_key(term.reward.name)}/<component>)"
                )
            seen[term.score_key] = i
        super().__init__(
            WeightedSettings(
                names=tuple(t.reward.name for t in self.terms),
                weights=tuple(t.weight for t in self.terms),
            )
        )
        self._keys = tuple(key for t in self.terms for key in term_keys(t.reward))

    # A combination needs groups (or masks truncated completions) when any of its terms does,
    # so these are per instance, where the base class has class constants.
    @property
    def needs_group(self) -> bool:  # type: ignore[override]
        return any(t.reward.needs_group for t in self.terms)

    @property
    def masks_truncated(self) -> bool:  # type: ignore[override]
        return any(t.reward.masks_truncated for t in self.terms)

    @property
    def component_keys(self) -> tuple[str, ...]:
        return self._keys

    @property
    def label(self) -> str:
        """``1*ground_truth + 0*structure``: how error messages name the combination."""
        return " + ".join(f"{t.weight:g}*{t.reward.name}" for t in self.terms)

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        return self.combine(groups, [t.reward.score_groups(groups) for t in self.terms])

    async def ascore_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        # The terms score the same batch at once (e.g. embedding requests while answers are
        # checked); the first failure fails the batch, as one reward's failure would.
        scored = await asyncio.gather(*(t.reward.ascore_groups(groups) for t in self.terms))
        return self.combine(groups, list(scored))

    def combine(
        self,
        groups: Sequence[Sequence[Sample]],
        per_term: Sequence[Sequence[Sequence[RewardOutput]]],
    ) -> list[list[RewardOutput]]:
        """The weighted outputs from each term's outputs (``per_term[t][group][sample]``)."""
        sizes = [len(g) for g in groups]
        for term, scored in zip(self.terms, per_term, strict=True):
            if [len(g) for g in scored] != sizes:
                raise RuntimeError(
                    f"reward {term.reward.name!r}: score_groups returned groups of sizes "
                    f"{[len(g) for g in scored]} for inputs of sizes {sizes}"
                )
        return [
            [self._one([scored[g][i] for scored in per_term]) for i in range(size)]
            for g, size in enumerate(sizes)
        ]

    def _one(self, outputs: Sequence[RewardOutput]) -> RewardOutput:
        components: dict[str, float] = {}
        weighted: list[float] = []
        for term, out in zip(self.terms, outputs, strict=True):
            missing = [k for k in term.reward.component_keys if k not in out.components]
            if missing:
                raise ValueError(f"reward {term.reward.name!r}: output lacks components {missing}")
            components[term.score_key] = float(out.score)
            for key in term.reward.component_keys:
                components[term.component_key(key)] = float(out.components[key])
            if term.weight != 0.0:  # a weight-0 term is reported, never summed (NaN included)
                weighted.append(term.weight * float(out.score))
        # fsum raises on inf - inf; any non-finite weighted score makes the sum undefined.
        total = math.fsum(weighted) if all(map(math.isfinite, weighted)) else math.nan
        return RewardOutput(total, components)

    def close(self) -> None:
        for term in self.terms:
            term.reward.close()
