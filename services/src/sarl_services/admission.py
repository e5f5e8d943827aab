"""Admission by expected work: refuse at once (503 + Retry-After) what could not finish in time.

Used by the embedding service (:mod:`sarl_services.batching`: work = tokens, served in fair
shares) and the reward service (:mod:`sarl_services.reward`: work = distinct step texts to embed,
served first come first served). Counting requests, as :class:`~sarl_services.limits.
ConcurrencyLimiter` does, cannot bound waits: one request may be a single string or 2048 of them.
Here each admitted request holds a :class:`Ticket` with its work not yet done, the service rate
is measured from completed work (:class:`RateEstimator`), and a new request is refused when
admitting it would finish it after the deadline (``--deadline-s``, default 10 s) — or, with fair
sharing, would push a request already accepted past its own deadline. So an accepted request
finishes in about the deadline, and an excess one learns at once when to come back instead of
waiting minutes.

Expected completion times, in seconds of work at the measured rate ``R``:

* first come first served (``fair=False``): everything queued, then the new work:
  ``(Σ w_i + w) / R``. New requests never delay older ones.
* fair sharing (``fair=True``, the embedding batcher, which serves earliest expected finish
  first: a small request overtakes a big one, a big one is not overtaken once it has waited
  its own work's time): planned as processor sharing, where
  request k finishes once ``Σ_i min(w_i, w_k)`` is done; a new request of work ``w`` finishes at
  ``(Σ_i min(w_i, w) + w) / R`` and delays request k by ``min(w, w_k) / R``.

Admission plans to finish within ``headroom`` (80%) of the deadline: the rest is for what the
estimate cannot see — the machine slowing down after a request was admitted (other processes on
the same cores), and work outside the measured path (reading, parsing and answering requests).

A request that alone needs more than the deadline (``w / R > deadline``) can never meet it. It is
neither refused for good (a 413 that depended on the machine's speed of the moment: the same
request accepted on an idle GPU, refused on a busy CPU) nor held back until the server is idle
(under steady load it would never be). It is admitted once the work queued ahead of it fits
within the deadline, and is then served *best effort*: it takes its share, no deadline of its own
protects it, and requests that arrive later are still admitted if they fit (with fair sharing
they do not wait for it). The refusal tells the client to split it.

Retry-After is the estimated time until the request would fit, in whole seconds rounded down
(at least 1), and each refused request is promised a turn of its own: the next one refused is
asked to come back after the previous one's work (the promises reach at most one deadline
ahead), so refused clients do not all return in the same second, to be refused again, all but
one. The response is :class:`Overloaded`: 503, body type ``"overloaded"``, with the expected
time and the deadline in the message (see :mod:`sarl_services.limits` for why 503 and not 429).

The reward service sits in front of the embedding service and both admit by work; the reward
service's rate is measured end to end (embedding service included), so the work it admits fits
the embedding service's queue too, and the embedding service sheds only traffic that nobody in
front of it accounted for (trainers calling it directly, other reward-service replicas).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from sarl_services.errors import Unavailable

Clock = Callable[[], float]


class RateEstimator:
    """Work units per second of busy time, measured from completed work; conservative.

    Two exponentially weighted ratios of sums — decayed units over decayed seconds, weights
    halving every ``half_lives_s[i]`` seconds of observed work, so a long batch counts more than
    a short one — and the *lower* of them is the rate: a machine that gets slower (another
    process takes the cores) is believed within seconds, one that gets faster only gradually,
    since overestimating the rate admits work that then misses the deadline. Until real
    observations outweigh it, a ``prior_per_s`` worth ``prior_s`` seconds holds the estimate:
    choose it low for the same reason.
    """

    def __init__(
        self,
        prior_per_s: float,
        *,
        prior_s: float = 1.0,
        half_lives_s: tuple[float, ...] = (3.0, 30.0),
    ) -> None:
        if not (prior_per_s > 0 and prior_s > 0 and half_lives_s and min(half_lives_s) > 0):
            raise ValueError("prior_per_s, prior_s and half_lives_s must be > 0")
        self._half_lives_s = half_lives_s
        self._units = [prior_per_s * prior_s] * len(half_lives_s)
        self._seconds = [prior_s] * len(half_lives_s)

    def observe(self, units: float, seconds: float) -> None:
        """``units`` of work completed in ``seconds`` of busy time."""
        if seconds <= 0 or units < 0:
            return  # below the clock's resolution: nothing to learn
        for i, half_life in enumerate(self._half_lives_s):
            keep = 0.5 ** (seconds / half_life)
            self._units[i] = self._units[i] * keep + units
            self._seconds[i] = self._seconds[i] * keep + seconds

    @property
    def per_s(self) -> float:
        return min(u / s for u, s in zip(self._units, self._seconds, strict=True))


class BusyMeter:
    """Feeds a :class:`RateEstimator` from jobs that overlap (the reward service's admitted
    requests): each completed job is credited with the busy time — time with at least one job
    under way — since the previous completion, so overlapping jobs are not counted twice and
    the rate is the throughput the service delivers, every overhead and downstream queue
    included. A job that fails or is cancelled completes nothing; its time is credited to
    nobody."""

    def __init__(self, rate: RateEstimator, clock: Clock = time.monotonic) -> None:
        self.rate = rate
        self._clock = clock
        self._in_flight = 0
        self._mark = 0.0

    def begin(self) -> None:
        if self._in_flight == 0:
            self._mark = self._clock()
        self._in_flight += 1

    def end(self, units: float | None) -> None:
        """A job ended, having completed ``units`` of work (None: it failed or was cancelled)."""
        now = self._clock()
        self._in_flight -= 1
        if units is not None:
            self.rate.observe(units, now - self._mark)
        self._mark = now


@dataclass(eq=False)
class Ticket:
    """One admitted request: its work not yet done (its owner lowers ``work`` as work
    completes) and the clock time it should be done by (``inf``: best effort)."""

    work: float
    deadline: float

    @property
    def best_effort(self) -> bool:
        return math.isinf(self.deadline)


class Overloaded(Unavailable):
    """503 ``overloaded``: the request is refused at once. ``reason``, the metrics label:
    ``deadline`` (it, or requests already accepted, would finish past the deadline),
    ``oversize`` (alone longer than the deadline, and the queue ahead does not fit it), or
    ``queue_full`` (:class:`~sarl_services.limits.ConcurrencyLimiter`: no slot)."""

    def __init__(self, message: str, *, retry_after_s: int, reason: str) -> None:
        super().__init__(message, kind="overloaded", retry_after_s=retry_after_s)
        self.reason = reason


def _retry_after(wait_s: float) -> int:
    # Rounded down: a client back too early costs one cheap refusal, one back too late leaves
    # capacity idle (and the rate the wait is computed with is a conservative one).
    return max(1, math.floor(wait_s))


def sharing_finish(works: list[float]) -> list[float]:
    """Processor sharing: the work served (all jobs together) when each job is done, i.e.
    ``Σ_i min(w_i, w_k)`` for job k; ``[]`` for no jobs."""
    finish = [0.0] * len(works)
    served = 0.0
    order = sorted(range(len(works)), key=works.__getitem__)
    for rank, k in enumerate(order):
        finish[k] = served + works[k] * (len(works) - rank)
        served += works[k]
    return finish


class Admission:
    """Admits work against a deadline; create and use it on one event loop.

    ``unit`` names the work in messages ("tokens", "texts"); expected completions are held to
    ``headroom`` times the deadline (see the module docstring).
    """

    def __init__(
        self,
        deadline_s: float,
        rate: RateEstimator,
        *,
        fair: bool,
        unit: str,
        headroom: float = 0.8,
        clock: Clock = time.monotonic,
    ) -> None:
        if not (deadline_s > 0 and math.isfinite(deadline_s)):
            raise ValueError(f"--deadline-s: must be a number of seconds > 0, got {deadline_s}")
        if not 0 < headroom <= 1:
            raise ValueError(f"headroom: must be in (0, 1], got {headroom}")
        self.deadline_s = deadline_s
        self.headroom = headroom
        self.rate = rate
        self.fair = fair
        self.unit = unit
        self._clock = clock
        self._tickets: list[Ticket] = []
        self._retry_at = -math.inf  # when the last refused request was asked to come back

    @property
    def queued_work(self) -> float:
        """Work of admitted requests not done yet."""
        return sum(t.work for t in self._tickets)

    @property
    def admitted(self) -> int:
        return len(self._tickets)

    def drain_s(self) -> float:
        """Expected seconds until everything admitted is done (the queue's expected wait)."""
        return self.queued_work / self.rate.per_s

    def admit(self, work: float) -> Ticket:
        """A ticket for ``work`` units, or :class:`Overloaded`; release it when done."""
        now = self._clock()
        rate = self.rate.per_s
        deadline = self.deadline_s * self.headroom  # what admission plans with
        queued_s = self.queued_work / rate
        own_s = work / rate
        if own_s > deadline:  # can never be in time: best effort, once the queue ahead fits
            if queued_s > deadline:
                self._refuse(
                    f"this request alone needs about {own_s:.1f} s, more than the deadline allows, "
                    "so it is accepted only once the work queued ahead of it (about "
                    f"{queued_s:.1f} s) fits within it; or split it into smaller requests",
                    excess_s=queued_s - deadline,
                    work_s=0.0,  # it would run best effort: reserve nothing for it
                    reason="oversize",
                )
            due = math.inf
        else:
            if self.fair:
                finish_s = (sum(min(t.work, work) for t in self._tickets) + work) / rate
            else:
                finish_s = queued_s + own_s
            if finish_s > deadline:
                self._refuse(
                    f"this request would finish in about {finish_s:.1f} s",
                    excess_s=finish_s - deadline,
                    work_s=own_s,
                    reason="deadline",
                )
            due = now + deadline
        if self.fair:
            self._protect_accepted(work, now, rate, own_s)
        ticket = Ticket(work, due)
        self._tickets.append(ticket)
        return ticket

    def release(self, ticket: Ticket) -> None:
        """The request is done, failed or was cancelled: its remaining work leaves the queue."""
        if ticket in self._tickets:
            self._tickets.remove(ticket)

    def _protect_accepted(self, work: float, now: float, rate: float, own_s: float) -> None:
        """Fair sharing: refuse ``work`` if it would push an accepted request that is on time
        past its deadline (requests already late, and best-effort ones, are not protected:
        otherwise one of them would block every admission until it is done)."""
        works = [t.work for t in self._tickets]
        late_by = 0.0
        for ticket, finish in zip(self._tickets, sharing_finish(works), strict=True):
            if ticket.best_effort or now + finish / rate > ticket.deadline:
                continue
            late_by = max(late_by, now + (finish + min(work, ticket.work)) / rate - ticket.deadline)
        if late_by > 0:
            self._refuse(
                "admitting this request would push requests already accepted past the deadline",
                excess_s=late_by,
                work_s=min(own_s, self.deadline_s * self.headroom),
                reason="deadline",
            )

    def _refuse(self, why: str, *, excess_s: float, work_s: float, reason: str) -> NoReturn:
        """Raise :class:`Overloaded`; ``excess_s``: how much too late it would be now;
        ``work_s``: the turn it is promised when it comes back (see the module docstring)."""
        now = self._clock()
        planned = self.deadline_s * self.headroom
        back_at = max(now + excess_s, min(self._retry_at, now + planned))
        self._retry_at = back_at + work_s
        retry = _retry_after(back_at - now)
        raise Overloaded(
            f"overloaded: {why}; requests are admitted while expected to finish within "
            f"{planned:.3g} s ({self.headroom:.0%} of the deadline of {self.deadline_s:g} s, "
            f"--deadline-s); {self.queued_work:.0f} {self.unit} queued, expected wait "
            f"{self.drain_s():.1f} s at about {self.rate.per_s:.0f} {self.unit}/s; retry after "
            f"{retry} s",
            retry_after_s=retry,
            reason=reason,
        )
