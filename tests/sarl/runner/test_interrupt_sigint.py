"""Ctrl-C (SIGINT) inside a run: a plain ``KeyboardInterrupt`` as always, but a second one (a
notebook user pressing "interrupt" twice) cannot break the clean-up that closes the MLflow run;
a SIGINT handler someone else installed is left alone."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from sarl.runner.interrupt import Terminated, signals_interrupt


@pytest.fixture(autouse=True)
def restore_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a script or a kernel cell
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def _deliver(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(1)  # the handler runs at the next bytecode; sleep is interrupted by it


def test_sigint_is_a_plain_keyboard_interrupt_and_a_second_one_waits() -> None:
    cleaned = False
    with pytest.raises(KeyboardInterrupt) as caught, signals_interrupt():
        try:
            _deliver(signal.SIGINT)
        finally:
            _deliver(signal.SIGINT)  # pressed again while the run is being closed
            _deliver(signal.SIGTERM)  # or a supervisor joins in
            cleaned = True
    assert cleaned
    assert not isinstance(caught.value, Terminated)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_custom_sigint_handler_is_left_alone() -> None:
    seen: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)

    signal.signal(signal.SIGINT, handler)
    with signals_interrupt():
        assert signal.getsignal(signal.SIGINT) is handler
        _deliver(signal.SIGINT)
    assert seen == [signal.SIGINT]
