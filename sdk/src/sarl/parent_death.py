"""Worker processes that die with the process that started them, even when it is SIGKILLed.

Used by :class:`sarl.rewards.structure.scorer.StructureScorer` for its clustering pool (through
:class:`ParentBoundProcessPool`) and by :mod:`sarl.study.processes` for a Study's parallel runs
(SIGTERM there, so a run closes its MLflow run ``KILLED``; the thread that starts those children
waits for them, so it outlives them). A ``ProcessPoolExecutor`` worker whose parent is killed waits
forever for its next task: it holds the write end of its own call queue, so it never sees EOF,
and init adopts it. Two mechanisms end it here:

* on Linux, ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, set first thing in the worker. The kernel sends
  the signal when the *thread* that forked the worker exits, not the process, so all workers of a
  :class:`ParentBoundProcessPool` are started by one thread of its own that lives as long as the
  pool: a pool first used from a short-lived thread (``asyncio.to_thread``, a request thread)
  keeps its workers when that thread ends;
* everywhere (macOS, or a kernel that refuses ``prctl``), a daemon thread in the worker that
  checks once a second whether its parent pid changed (a dead parent's children are re-parented).

Multiprocessing's resource tracker (started by the first ``spawn``) needs neither: it exits when
every holder of its pipe (the parent and its spawned workers) is gone, so it follows the workers.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from multiprocessing.context import BaseContext
from typing import Any, ParamSpec, TypeVar

_P = ParamSpec("_P")
_T = TypeVar("_T")

#: Seconds between two checks of the parent pid by a worker's watch thread.
WATCH_INTERVAL_S = 1.0

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int, sig: int = signal.SIGKILL) -> None:
    """In a child process: get ``sig`` as soon as ``parent_pid`` (its parent) is gone.

    Call it first thing in the child (a pool's initializer), from the process's main thread.
    If the parent already died before the call, the signal comes at once. ``SIGTERM`` lets a
    child that handles it close what it holds (a local run closes its MLflow run ``KILLED``).
    """
    _set_parent_death_signal(sig)
    # Checked after prctl: a parent that died before it would never send the signal.
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)
    threading.Thread(
        target=_watch, args=(parent_pid, sig), name="sarl-parent-watch", daemon=True
    ).start()


def _set_parent_death_signal(sig: int) -> bool:
    """``prctl(PR_SET_PDEATHSIG, sig)`` on Linux; False where there is no such call."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False  # no libc or no prctl (another libc): the watch thread covers it


def _watch(parent_pid: int, sig: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(WATCH_INTERVAL_S)
    os.kill(os.getpid(), sig)


def _init_worker(
    parent_pid: int, initializer: Callable[..., object] | None, initargs: tuple[Any, ...]
) -> None:
    die_with_parent(parent_pid)
    if initializer is not None:
        initializer(*initargs)


class ParentBoundProcessPool(Executor):
    """A ``ProcessPoolExecutor`` whose workers die with this process (see the module docstring).

    Every call into the inner pool that may start a worker (``submit``) and its shutdown run on
    one thread owned by the pool, so the workers' parent-death signal is tied to a thread that
    ends only after they have exited.
    """

    def __init__(
        self,
        max_workers: int,
        mp_context: BaseContext,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
    ) -> None:
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = (
            queue.SimpleQueue()
        )
        self._pool = ProcessPoolExecutor(
            max_workers=max_workers,
            mp_context=mp_context,
            initializer=_init_worker,
            initargs=(os.getpid(), initializer, initargs),
        )
        # A daemon thread: never joined at interpreter exit, so it outlives the pool's own
        # exit hook (which stops the workers) and the signal is not sent to exiting workers.
        self._owner = threading.Thread(target=self._serve, name="sarl-pool-owner", daemon=True)
        self._lock = threading.Lock()
        self._shutdown = False
        self._owner.start()

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        done: Future[Future[_T]] = Future()
        with self._lock:  # never queued behind the owner's last item: it would wait forever
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._calls.put((lambda: self._pool.submit(fn, *args, **kwargs), done))
        return done.result()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        def stop() -> None:
            self._pool.shutdown(wait=True, cancel_futures=cancel_futures)

        with self._lock:
            if not self._shutdown:
                self._shutdown = True
                # The owner shuts the inner pool down and waits for its workers before it ends.
                self._calls.put((stop, Future()))
                self._calls.put(None)
        if wait:
            self._owner.join()

    def _serve(self) -> None:
        while (item := self._calls.get()) is not None:
            call, done = item
            try:
                result = call()
            except BaseException as e:  # handed to the caller, re-raised there
                done.set_exception(e)
            else:
                done.set_result(result)


__all__ = ["WATCH_INTERVAL_S", "ParentBoundProcessPool", "die_with_parent"]
