"""SIGTERM/SIGHUP inside a run raise ``Terminated`` (a KeyboardInterrupt, so the run closes KILLED),
once; the process's own handlers come back afterwards and an ignored signal stays ignored."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from sarl.runner.interrupt import Terminated, signals_interrupt


@pytest.fixture(autouse=True)
def restore_handlers() -> Iterator[None]:
    """Each test starts from the dispositions of a plain process (SIG_DFL), not the caller's:
    under ``nohup`` SIGHUP is inherited ignored, and ``signals_interrupt`` rightly keeps an
    ignored signal ignored, so a test expecting ``Terminated`` must set what it needs."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    for s in saved:
        signal.signal(s, signal.SIG_DFL)
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


def _deliver(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(1)  # the handler runs at the next bytecode; sleep is interrupted by it


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_signal_raises_terminated_once(signum: int) -> None:
    before = signal.getsignal(signum)
    with pytest.raises(Terminated) as caught, signals_interrupt():
        _deliver(signum)
    assert caught.value.signum == signum
    assert isinstance(caught.value, KeyboardInterrupt)
    assert str(caught.value) == f"stopped by {signal.Signals(signum).name}"
    assert signal.getsignal(signum) is before


def test_a_second_signal_during_cleanup_is_ignored() -> None:
    cleaned = False
    with pytest.raises(Terminated), signals_interrupt():
        try:
            _deliver(signal.SIGTERM)
        finally:
            _deliver(signal.SIGTERM)  # e.g. a supervisor repeating itself: must not interrupt
            cleaned = True
    assert cleaned


def test_an_ignored_signal_stays_ignored() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as under nohup
    with signals_interrupt():
        _deliver(signal.SIGHUP)
    assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
