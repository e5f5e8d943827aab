"""Expected seconds per item of every reward that is not ``structure``, for admission.

Called by :mod:`sarl_services.reward`: a sample reward's request is admitted by its expected time
(:class:`~sarl_services.admission.Admission` with work in seconds), so a queue of slow requests
(math-verify comparisons that spin to their timeout, judge calls) refuses a cheap request at
once with 503 + Retry-After instead of letting it wait for minutes behind them.

* **Measured per reward**: items completed per second of busy time of that reward's requests
  (:class:`~sarl_services.admission.BusyMeter`, so overlapping requests are not counted twice),
  with the conservative :class:`~sarl_services.admission.RateEstimator`: a reward that gets
  slower (hostile items) is believed at once, one that gets faster gradually.
* **Bounded for ``ground_truth_math_verify``** by its worst case, ``timeout_seconds / workers``
  per item (a comparison never costs more than its timeout: :mod:`sarl.rewards.baselines.
  math_verify`). Until measured, it is expected to cost that bound (a prior of
  :data:`_PRIOR_VERIFY_S` per item, above any request's timeout under the default maximum).
  The same bound gives a request's worst-case verifier time, which the service refuses up front
  (413) above ``--max-verify-s``: otherwise 1,024 items at a 10 s timeout could hold a slot for
  hours, whatever admission expected.
* **Two lanes** (:func:`lane`): the rewards of :data:`CHEAP_REWARDS` (string rules and numpy on
  what the request carries, linear in its bytes) are admitted and scored apart from every other
  sample reward (verifiers, judges, group rewards), each lane with its own admission queue and
  slots, so math-verify work cannot make a ``ground_truth`` client wait or be refused (before:
  one queue, ``Retry-After: 52`` twice, waits of 104-156 s). A reward not listed is expensive:
  a new reward is at worst kept from delaying cheap ones.
* **Groups costed by size**: a reward that scores whole groups compares every answer of a group
  with the others (TTRL's and EMPO's votes and clusters), so a group of ``g`` items counts as
  ``g * max(1, g / 64)`` items (:func:`work_units`): linear up to the usual group sizes,
  quadratic beyond (one group of 1,024 took 90-101 s). A group over ``--max-group-size``
  (default 256: 3.7 s for TTRL on one core here) is refused with 413: one group is one chunk
  of CPU work, which cannot be stopped once it runs.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Literal

from pydantic import BaseModel

from sarl.rewards.baselines.math_verify import MathVerifyRewardSettings
from sarl_services.admission import BusyMeter, RateEstimator

MATH_VERIFY = "ground_truth_math_verify"
_PRIOR_ITEMS_PER_S = 100.0  # a sample reward before its first request completes
_PRIOR_VERIFY_S = 10.0  # seconds per math-verify item before any is measured
#: Sample rewards whose cost is linear in the request's bytes (no verifier, judge, model or group).
CHEAP_REWARDS = frozenset({"ground_truth", "format_length", "tag_format", "self_certainty"})
_LINEAR_GROUP = 64  # groups up to this size count as their items (see work_units)

Lane = Literal["cheap", "expensive"]


def lane(name: str) -> Lane:
    """The admission lane of sample reward ``name`` (see the module docstring)."""
    return "cheap" if name in CHEAP_REWARDS else "expensive"


def group_sizes(items: list[Any]) -> list[int]:
    """Sizes of the groups a group reward forms from ``items`` (equal ``group`` values; items
    without one form one group), from the raw items, before any is parsed."""
    return list(Counter(_group_key(item) for item in items).values())


def _group_key(item: Any) -> str | int | None:
    # An invalid key (a list, a bool) fails its item later; counted with the keyless group here.
    group = item.get("group") if isinstance(item, dict) else None
    return group if isinstance(group, str | int) and not isinstance(group, bool) else None


def work_units(sizes: list[int]) -> float:
    """Item-equivalents of groups of these sizes: linear up to 64, quadratic beyond."""
    return float(sum(g * max(1.0, g / _LINEAR_GROUP) for g in sizes))


def worst_item_s(settings: BaseModel) -> float | None:
    """The most one item can cost with these settings; None where nothing bounds it."""
    if not isinstance(settings, MathVerifyRewardSettings):
        return None
    return settings.timeout_seconds / settings.workers


class ItemCosts:
    """Per-reward measured seconds per item (see the module docstring); one event loop."""

    def __init__(self) -> None:
        self._meters: dict[str, BusyMeter] = {}

    def meter(self, name: str) -> BusyMeter:
        """The busy meter that measures reward ``name`` (begin/end around each request)."""
        meter = self._meters.get(name)
        if meter is None:
            prior = 1.0 / _PRIOR_VERIFY_S if name == MATH_VERIFY else _PRIOR_ITEMS_PER_S
            meter = self._meters[name] = BusyMeter(RateEstimator(prior))
        return meter

    def expected_s(self, name: str, settings: BaseModel, items: float) -> float:
        """Expected seconds to score ``items`` items (or item-equivalents) of reward ``name``."""
        per_item = 1.0 / self.meter(name).rate.per_s
        bound = worst_item_s(settings)
        if bound is not None:
            per_item = min(per_item, bound)
        return items * per_item
