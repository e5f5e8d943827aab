"""Waiting on the cluster: the phases a wait may ask for, polling an Experiment or Study until
its phase is one of them, and polling a deleted object until it is gone.

Called by :class:`sarl.cluster.client.ClusterClient` (``wait``, ``wait_study``) and
:class:`sarl.cluster.resources.CustomObjects` (``delete`` with ``wait``); ``sarl wait``
(:mod:`sarl.cli.cluster`) checks ``--for`` with :func:`wanted_phases` before it connects. The
reads are passed in, so nothing here makes a request itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TypeVar

from sarl.cluster.errors import (
    ClusterError,
    ExperimentNotFound,
    StudyNotFound,
    Target,
    WaitTimeout,
)
from sarl.cluster.models import PHASES, TERMINAL_PHASES, ExperimentInfo, StudyInfo

#: Called with each ExperimentInfo seen while waiting (the CLI draws its status line with it).
OnPoll = Callable[[ExperimentInfo], None]
OnStudyPoll = Callable[[StudyInfo], None]

Info = TypeVar("Info", ExperimentInfo, StudyInfo)


def wanted_phases(until: str | Iterable[str] | None) -> frozenset[str]:
    """``until`` as a set of phases (default: the terminal ones); unknown phases → ValueError."""
    wanted = (
        TERMINAL_PHASES
        if until is None
        else frozenset([until] if isinstance(until, str) else until)
    )
    unknown = sorted(wanted - set(PHASES))
    if unknown or not wanted:
        raise ValueError(f"until={sorted(wanted)}: phases are {', '.join(PHASES)}")
    return wanted


def wait_for_phase(
    read: Callable[[], Info],
    what: str,
    wanted: frozenset[str],
    *,
    timeout: float,
    poll_interval: float,
    on_poll: Callable[[Info], None] | None,
) -> Info:
    """Call ``read`` (then ``on_poll``) until the phase is in ``wanted``; return what it read.

    ``what`` names the object in messages (``experiment NAME in namespace NS``). Ending in
    another terminal phase → ``ClusterError`` with the failure message; ``timeout`` seconds
    passing → ``WaitTimeout`` (the object is left as it is)."""
    deadline = time.monotonic() + timeout
    while True:
        info = read()
        if on_poll is not None:
            on_poll(info)
        if info.phase in wanted:
            return info
        if info.status.done:
            why = info.status.failure_message()
            raise ClusterError(
                f"{what} ended {info.phase} while waiting for "
                f"{' or '.join(sorted(wanted))}" + (f": {why}" if why else "")
            )
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(
                f"{what} is {info.status.summary()} after "
                f"{timeout:g}s of waiting for {' or '.join(sorted(wanted))}"
            )
        time.sleep(min(poll_interval, left))


def wait_until_gone(
    read: Callable[[], object], target: Target, *, timeout: float, poll_interval: float
) -> None:
    """Call ``read`` until it raises ``ExperimentNotFound``/``StudyNotFound`` (the deleted
    ``target`` is gone); ``timeout`` seconds passing → ``WaitTimeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            read()
        except (ExperimentNotFound, StudyNotFound):
            return
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(
                f"{target.what} in namespace {target.namespace} still exists {timeout:g}s "
                "after deletion (its children are still being deleted, or a finalizer blocks it)"
            )
        time.sleep(min(poll_interval, left))
