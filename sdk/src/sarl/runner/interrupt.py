"""SIGTERM and SIGHUP end a local run like Ctrl-C does, so its MLflow run is closed ``KILLED``,
and a second signal never interrupts that closing.

Called by :class:`sarl.runner.session.LocalSession` around a run; ``sarl run`` turns
:class:`Terminated` into a one-line message and exit code ``128 + signal``. Python raises
``KeyboardInterrupt`` for SIGINT, but SIGTERM's (and SIGHUP's) default action ends the process
without running ``finally`` blocks or ``__exit__``, which left the MLflow run RUNNING forever and a
checkpoint save's temp directory behind. Only SIGKILL still does that; the next ``sarl run`` of
the experiment tidies up after it (see :mod:`sarl.runner.rundir`).

SIGINT is taken over too (it still raises a plain ``KeyboardInterrupt``): a notebook user who
presses "interrupt" twice, or a terminal that delivers Ctrl-C to the whole process group while
the parent also forwards a signal, would otherwise interrupt the clean-up of the first one and
leave the run RUNNING.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """The run was asked to stop by a signal (a ``KeyboardInterrupt``: handled as Ctrl-C is)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM/SIGHUP raise :class:`Terminated` and SIGINT raises
    ``KeyboardInterrupt``, in the main thread.

    After the first signal all three are ignored until the block ends, so closing the run and
    removing temp files is not interrupted again (SIGKILL still ends it). A signal that was
    ignored before (``nohup`` ignores SIGHUP) stays ignored, and SIGINT is left alone unless it
    has Python's default handler (a debugger's or a framework's own handler keeps working).
    Outside the main thread, where Python cannot install handlers, the block runs with the
    process's handlers unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in HANDLED}
    active = [s for s in HANDLED if _takes_over(s, previous[s])]

    def interrupt(signum: int, frame: FrameType | None) -> None:
        for s in active:
            signal.signal(s, signal.SIG_IGN)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)

    for s in active:
        signal.signal(s, interrupt)
    try:
        yield
    finally:
        for s in active:
            signal.signal(s, previous[s])


def _takes_over(signum: int, handler: object) -> bool:
    if signum == signal.SIGINT:
        return handler is signal.default_int_handler
    return handler is not signal.SIG_IGN
