"""tests.support.waiting: wait_until returns whether the condition came, and never hangs."""

from __future__ import annotations

import itertools

from tests.support.waiting import wait_until


def test_true_once_the_condition_holds() -> None:
    calls = itertools.count()
    assert wait_until(lambda: next(calls) >= 3, timeout_s=30, poll_s=0.0)


def test_false_at_the_deadline() -> None:
    assert not wait_until(lambda: False, timeout_s=0.05, poll_s=0.01)
