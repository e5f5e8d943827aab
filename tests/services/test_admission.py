"""Admission by expected work (sarl_services.admission): rate estimate, deadlines, Retry-After.

Pure and deterministic: a fake clock, rates fixed by a prior that observations never touch.
"""

from __future__ import annotations

import math

import pytest

from sarl_services.admission import (
    Admission,
    BusyMeter,
    Overloaded,
    RateEstimator,
    sharing_finish,
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _admission(*, fair: bool, rate: float = 10.0, deadline_s: float = 1.0) -> Admission:
    """``rate`` units/s, a deadline planned in full (headroom 1), on a fake clock."""
    return Admission(
        deadline_s,
        RateEstimator(rate),
        fair=fair,
        unit="tokens",
        headroom=1.0,
        clock=Clock(),
    )


def _refusal(admission: Admission, work: float) -> Overloaded:
    with pytest.raises(Overloaded) as info:
        admission.admit(work)
    return info.value


# -- the rate ---------------------------------------------------------------------------------


def test_rate_is_the_prior_until_observed_then_follows_observations() -> None:
    rate = RateEstimator(100.0, prior_s=1.0)
    assert rate.per_s == 100.0
    for _ in range(50):
        rate.observe(500.0, 1.0)  # 500 units/s for 50 s of work
    assert rate.per_s == pytest.approx(500.0, rel=0.01)


def test_rate_believes_a_slowdown_at_once_and_a_speedup_gradually() -> None:
    rate = RateEstimator(100.0, prior_s=1.0)
    for _ in range(60):
        rate.observe(100.0, 1.0)
    rate.observe(50.0, 2.0)  # two slow seconds: the fast average drops, and the rate with it
    slowed = rate.per_s
    assert slowed < 80.0
    rate = RateEstimator(100.0, prior_s=1.0)
    for _ in range(60):
        rate.observe(100.0, 1.0)
    rate.observe(400.0, 2.0)  # two fast seconds: the slow average holds the rate down
    assert rate.per_s < 120.0


def test_rate_weights_observations_by_their_duration() -> None:
    rate = RateEstimator(1.0, prior_s=1e-9, half_lives_s=(1e9,))  # no decay: a plain ratio
    rate.observe(100.0, 10.0)  # 10/s for 10 s
    rate.observe(100.0, 1.0)  # 100/s for 1 s
    assert rate.per_s == pytest.approx(200.0 / 11.0)


def test_busy_meter_credits_overlapping_calls_once() -> None:
    clock = Clock()
    rate = RateEstimator(1.0, prior_s=1e-9, half_lives_s=(1e9,))
    meter = BusyMeter(rate, clock)
    meter.begin()
    meter.begin()  # two calls in flight from t = 0
    clock.now += 1.0
    meter.end(10.0)  # t = 1
    clock.now += 1.0
    meter.end(10.0)  # t = 2: 20 units in 2 busy seconds, not in 1 + 2 = 3
    assert rate.per_s == pytest.approx(10.0)
    clock.now += 5.0  # idle: not counted
    meter.begin()
    clock.now += 1.0
    meter.end(None)  # failed or cancelled: its time is credited to nobody
    meter.begin()
    clock.now += 1.0
    meter.end(10.0)
    assert rate.per_s == pytest.approx(30.0 / 3.0)


# -- first come first served (the reward service) ---------------------------------------------


def test_fifo_admits_until_the_deadline_then_refuses_with_retry_after() -> None:
    admission = _admission(fair=False)  # 10 units/s, deadline 1 s
    first = admission.admit(5)
    admission.admit(5)  # 10 units: done in exactly 1 s
    refused = _refusal(admission, 1)
    assert refused.status == 503 and refused.kind == "overloaded"
    assert refused.reason == "deadline"
    assert refused.headers["Retry-After"] == "1"
    assert "would finish in about 1.1 s" in refused.message
    assert "deadline of 1 s" in refused.message and "--deadline-s" in refused.message
    assert "10 tokens queued" in refused.message
    admission.release(first)
    admission.admit(1)  # room again


def test_work_not_requests_is_counted() -> None:
    admission = _admission(fair=False)
    for _ in range(10):
        admission.admit(1)  # ten small requests fit ...
    admission = _admission(fair=False)
    admission.admit(8)
    _refusal(admission, 3)  # ... two large ones do not


@pytest.mark.parametrize(("work", "retry_after"), [(5, "1"), (25, "2"), (39, "3")])
def test_retry_after_is_the_time_until_it_fits_in_whole_seconds(
    work: float, retry_after: str
) -> None:
    admission = _admission(fair=False, deadline_s=10.0)  # 10 units/s
    admission.admit(100)  # full for 10 s; a request of w units fits after w / 10 s
    # Rounded down (at least 1): 0.5 s -> 1, 2.5 s -> 2, 3.9 s -> 3.
    assert _refusal(admission, work).headers["Retry-After"] == retry_after


def test_refused_requests_are_promised_turns_of_their_own() -> None:
    admission = _admission(fair=False, deadline_s=10.0)  # 10 units/s
    admission.admit(100)  # 10 s of work: full
    waits = [int(_refusal(admission, 20).headers["Retry-After"]) for _ in range(4)]
    # Each would fit after 2 s; the next refused one comes after the previous one's 2 s turn,
    # up to one deadline ahead.
    assert waits == [2, 4, 6, 8]
    assert int(_refusal(admission, 20).headers["Retry-After"]) <= 12


def test_headroom_plans_with_part_of_the_deadline() -> None:
    admission = Admission(1.0, RateEstimator(10.0), fair=False, unit="tokens", clock=Clock())
    admission.admit(8)  # 0.8 s: the default headroom of 80%
    refused = _refusal(admission, 1)
    assert "within 0.8 s (80% of the deadline of 1 s" in refused.message


def test_oversize_request_is_admitted_once_the_queue_ahead_fits() -> None:
    admission = _admission(fair=False)  # 10 units/s, deadline 1 s
    big = admission.admit(50)  # 5 s alone: best effort, on an idle server
    assert big.best_effort and math.isinf(big.deadline)
    refused = _refusal(admission, 50)  # the queue ahead (5 s) does not fit the deadline
    assert refused.reason == "oversize"
    assert "split it into smaller requests" in refused.message
    assert "needs about 5.0 s" in refused.message
    assert refused.headers["Retry-After"] == "4"  # 5 s queued - 1 s deadline
    _refusal(admission, 1)  # first come first served: small ones wait behind it, so refused
    admission.release(big)
    admission.admit(5)
    admission.admit(50)  # the queue ahead (0.5 s) fits: admitted, best effort


# -- fair sharing (the embedding batcher) -----------------------------------------------------


def test_sharing_finish_worked_example() -> None:
    # Processor sharing of jobs 1, 3 and 2: job 1 done after 3 units served (all three share),
    # job 2 after 1 + 2 + 2 = 5, job 3 after all 6.
    assert sharing_finish([1.0, 3.0, 2.0]) == [3.0, 6.0, 5.0]
    assert sharing_finish([]) == []


def test_fair_small_request_is_admitted_beside_a_best_effort_one() -> None:
    fair, fifo = _admission(fair=True), _admission(fair=False)
    for admission in (fair, fifo):
        admission.admit(100)  # 10 s alone: best effort
    fair.admit(2)  # with fair sharing it finishes in (2 + 2) / 10 = 0.4 s
    _refusal(fifo, 2)  # first come first served: behind the 10 s


def test_fair_refuses_what_would_make_an_accepted_request_late() -> None:
    admission = _admission(fair=True)  # 10 units/s, deadline 1 s
    admission.admit(8)  # finishes at 0.8 s
    # Alone-ish a newcomer of 5 would finish at (5 + 5) / 10 = 1.0 s, in time; but it would
    # delay the first to (8 + 5) / 10 = 1.3 s.
    refused = _refusal(admission, 5)
    assert refused.reason == "deadline"
    assert "push requests already accepted past the deadline" in refused.message
    admission.admit(2)  # delays the first to 1.0 s: still in time


def test_fair_requests_already_late_are_not_protected() -> None:
    admission = _admission(fair=True)
    clock = admission._clock
    assert isinstance(clock, Clock)
    admission.admit(8)
    clock.now += 0.9  # no progress reported: it is now projected late (0.9 + 0.8 > 1)
    admission.admit(2)  # it would block every admission otherwise


def test_deadline_must_be_positive_and_finite() -> None:
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="--deadline-s: must be a number of seconds > 0"):
            Admission(bad, RateEstimator(1.0), fair=True, unit="tokens")
