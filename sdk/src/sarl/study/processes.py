"""Run calls in fresh (spawned) processes, ``jobs`` at once; stop them all on an interrupt.

Called by :func:`sarl.study.runner.run_study` for a Study's parallel runs (``-j N``, or
``Client.local().study(..., jobs=N)``). One process per call, not a process pool: when the parent
is interrupted (Ctrl-C, a notebook's "interrupt", SIGTERM/SIGHUP) a pool keeps its queued calls
and an idle worker would start the next run while the parent waits for the pool to shut down,
so an interrupted notebook cell seemed to hang for minutes. Here, on any exception in the parent
(``KeyboardInterrupt`` included), every live child gets SIGTERM (the local runner closes its
MLflow run ``KILLED``: :mod:`sarl.runner.interrupt`), is waited for up to
:data:`STOP_GRACE_S` seconds and then killed; no call starts after that.

``spawn``, not ``fork``: a forked child would inherit torch's thread pools and the parent's MLflow
client. A spawned child imports what it runs by name, so a call must be a module-level function
of an importable module, and ``imports`` lists modules to import first (those that register
rewards the calls look up by name); nothing defined in ``__main__`` (a notebook, a script) can
be imported there, which :func:`sarl.study.runner.check_importable_rewards` checks up front.

A child gets SIGTERM when the parent dies, even by SIGKILL (:mod:`sarl.parent_death`), so a
killed Study leaves no run training on its own.
"""

from __future__ import annotations

import importlib
import os
import signal
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

#: Seconds an interrupted child gets to close its run before it is killed.
STOP_GRACE_S = 120.0


@dataclass(frozen=True)
class Call:
    """``target(*args)`` in a child process; ``target`` is a module-level function."""

    target: Callable[..., Any]
    args: tuple[Any, ...]


@dataclass
class _Child:
    index: int
    process: BaseProcess
    receiver: Connection
    reply: tuple[str, Any] | None = None


def run_in_processes(
    calls: Sequence[Call],
    jobs: int,
    done: Callable[[int, Any, str | None], None],
    *,
    imports: Sequence[str] = (),
) -> None:
    """Run ``calls``, ``jobs`` at a time; ``done(index, result, error)`` as each one ends, with
    ``error`` a one-line message when it raised or its process died before answering."""
    import multiprocessing
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")
    pending = list(enumerate(calls))
    live: list[_Child] = []
    try:
        while pending or live:
            while pending and len(live) < jobs:
                index, call = pending.pop(0)
                receiver, sender = ctx.Pipe(duplex=False)
                process = ctx.Process(
                    target=_child,
                    args=(sender, call, tuple(imports), os.getpid()),
                    name=f"sarl-call-{index}",
                )
                process.start()
                sender.close()  # the child holds the only sending end now
                live.append(_Child(index, process, receiver))
            # Replies are read as they come, so a child never blocks on a full pipe.
            waiting = [c.receiver for c in live if c.reply is None]
            ready = wait([*waiting, *(c.process.sentinel for c in live)])
            for child in list(live):
                if child.reply is None and child.receiver in ready:
                    child.reply = _receive(child.receiver)
                if child.process.sentinel in ready:
                    live.remove(child)
                    _finish(child, done)
    except BaseException:
        stop([c.process for c in live])
        raise
    finally:
        for child in live:
            child.receiver.close()


def stop(processes: Sequence[BaseProcess], grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM each live process, wait up to ``grace_s`` seconds in all, SIGKILL the rest."""
    import time

    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + grace_s
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


def _receive(receiver: Connection) -> tuple[str, Any] | None:
    try:
        reply: tuple[str, Any] = receiver.recv()
    except (EOFError, OSError):  # the child died without answering
        return None
    return reply


def _finish(child: _Child, done: Callable[[int, Any, str | None], None]) -> None:
    child.process.join()
    if child.reply is None and child.receiver.poll():
        child.reply = _receive(child.receiver)
    child.receiver.close()
    if child.reply is None:
        code = child.process.exitcode
        done(child.index, None, f"its process exited with code {code} before reporting a result")
    elif child.reply[0] == "ok":
        done(child.index, child.reply[1], None)
    else:
        done(child.index, None, str(child.reply[1]))


def _child(sender: Connection, call: Call, imports: tuple[str, ...], parent_pid: int) -> None:
    """Entry point of a child process: run the call, send ``("ok", result)`` or
    ``("error", message)`` back."""
    from sarl.parent_death import die_with_parent

    try:
        die_with_parent(parent_pid, signal.SIGTERM)
        for module in imports:
            importlib.import_module(module)
        reply: tuple[str, Any] = ("ok", call.target(*call.args))
    except KeyboardInterrupt as e:  # SIGTERM from the parent, or Ctrl-C of the process group
        reply = ("error", f"interrupted ({e})" if str(e) else "interrupted")
    except BaseException as e:
        reply = ("error", "".join(traceback.format_exception_only(type(e), e)).strip())
    try:
        sender.send(reply)
    except (BrokenPipeError, OSError):
        pass  # the parent is gone: nobody to tell
    finally:
        sender.close()


__all__ = ["STOP_GRACE_S", "Call", "run_in_processes", "stop"]
