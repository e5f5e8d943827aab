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
"""

from __future__ import annotations

from pydantic import BaseModel

from sarl.rewards.baselines.math_verify import MathVerifyRewardSettings
from sarl_services.admission import BusyMeter, RateEstimator

MATH_VERIFY = "ground_truth_math_verify"
_PRIOR_ITEMS_PER_S = 100.0  # a sample reward before its first request completes
_PRIOR_VERIFY_S = 10.0  # seconds per math-verify item before any is measured


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

    def expected_s(self, name: str, settings: BaseModel, items: int) -> float:
        """Expected seconds to score ``items`` items of reward ``name``."""
        per_item = 1.0 / self.meter(name).rate.per_s
        bound = worst_item_s(settings)
        if bound is not None:
            per_item = min(per_item, bound)
        return items * per_item
