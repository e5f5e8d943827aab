"""math-verify in warm worker subprocesses, each comparison bounded by its own timeout.

The worker side (:func:`verify_pair`, and EMPO's answer extraction
:func:`~sarl.rewards.baselines.empo_extract.parse_answer`, under the worker's own timer, run as
``python -m sarl.rewards.baselines.math_verify_pool --worker``) and the caller's side
(:class:`BoundedProcessPool`, and the process-wide :func:`shared_pool`). Used by the
``ground_truth_math_verify`` reward (:mod:`sarl.rewards.baselines.math_verify`, whose docstring
says why math-verify runs in subprocesses; comparisons, :meth:`BoundedProcessPool.map`) and the
``empo`` reward (extractions, :meth:`BoundedProcessPool.extract`); nothing here imports a
reward.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sarl.rewards.baselines.empo_extract import parse_answer

_T = TypeVar("_T")

#: A request to a worker without its timeout: ``[prediction, truth]`` (a comparison) or
#: ``{"extract": text}`` (an extraction).
Request = list[str] | dict[str, str]

# Worker results of one comparison.
CORRECT, WRONG, UNPARSEABLE = 1, 0, -1
WORKER_TIMED_OUT = -2  # the worker's own timer stopped the comparison
#: How far a worker's data may grow past its start (see _cap_memory): a comparison of real
#: answers stays well under it.
WORKER_MEMORY_BYTES = 192 * 2**20
_POLL_S = 0.05  # how often a waiting call looks at its cancel event


class TimedOut:
    """Marker result of a call abandoned at its deadline."""

    def __repr__(self) -> str:
        return "TIMED_OUT"


TIMED_OUT = TimedOut()


def verify_pair(prediction: str, truth: str) -> int:
    """CORRECT/WRONG per math-verify, UNPARSEABLE if it parses no answer on a side.

    Both timeouts of math-verify are off (they use ``signal.alarm``); the caller bounds the time.
    Runs in a worker process; callable anywhere for tests.
    """
    mv: Any = importlib.import_module("math_verify")
    gold = mv.parse("\\boxed{" + truth + "}", parsing_timeout=None)
    pred = mv.parse("\\boxed{" + prediction + "}", parsing_timeout=None)
    if not gold or not pred:
        return UNPARSEABLE
    return CORRECT if mv.verify(gold, pred, timeout_seconds=None) else WRONG


def _worker_main() -> None:
    """Worker loop (``python -m sarl.rewards.baselines.math_verify_pool --worker``).

    Protocol, one JSON document per line: the worker writes ``"ready"`` once math-verify is
    imported, then answers each request: ``[prediction, truth, timeout_seconds]`` (a comparison)
    with an int result, ``{"extract": text, "timeout": timeout_seconds}`` (EMPO's extraction)
    with the extracted string or :data:`UNPARSEABLE` if math-verify raised; either is
    :data:`WORKER_TIMED_OUT` when its own timer stopped the call. Its stdout is kept for the
    protocol only (anything a library prints goes to stderr).

    The timer is the mechanism math-verify itself uses (``math_verify/utils.py`` of math-verify
    0.9.0: ``signal.alarm`` raising from the SIGALRM handler), usable here because the worker
    compares on its main thread; but it raises :class:`_Interrupted`, a ``BaseException``, which
    the ``except Exception`` blocks of ``math_verify/grader.py`` do not swallow (they would turn
    math-verify's own ``TimeoutError`` into a verdict ``False``). So a runaway comparison costs
    its timeout and the worker stays warm; the pool kills it only when a computation does not
    return to the interpreter to take the signal.
    """
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled": on purpose
    # "equations=True ... is deprecated" on every parse of EMPO's config (which still applies it)
    logging.getLogger("latex2sympy2_extended").setLevel(logging.ERROR)
    importlib.import_module("math_verify")
    _cap_memory(WORKER_MEMORY_BYTES)
    signal.signal(signal.SIGALRM, _interrupt)
    protocol.write('"ready"\n')
    protocol.flush()
    for line in sys.stdin:
        request = json.loads(line)
        if isinstance(request, dict):
            timeout = float(request.get("timeout", 0.0))
            result: int | str = _timed(functools.partial(parse_answer, request["extract"]), timeout)
        else:
            prediction, truth, *rest = request
            result = _compare(prediction, truth, float(rest[0]) if rest else 0.0)
        protocol.write(json.dumps(result) + "\n")
        protocol.flush()


def _cap_memory(extra_bytes: int) -> None:
    """Let the worker's data (heap and private mappings, ``RLIMIT_DATA``) grow at most
    ``extra_bytes`` past what it holds once math-verify is imported (Linux; elsewhere nothing).

    Why: one hostile item (a tower of powers) took a worker from 57 to 732 MiB within its 10 s
    timeout, and a service runs two such workers. Past the cap an allocation fails: Python's
    MemoryError is caught by :func:`_timed` (the verdict falls back to ``answers_equal``), and
    an allocation failing in C code that aborts ends the worker, which the pool replaces.
    """
    try:
        import resource  # Unix only

        status = Path("/proc/self/status").read_text()
    except (ImportError, OSError):
        return
    data_kib = next((int(line.split()[1]) for line in status.splitlines()
                     if line.startswith("VmData:")), None)  # fmt: skip
    if data_kib is None:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    limit = data_kib * 1024 + extra_bytes
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))


class _Interrupted(BaseException):
    """Raised in a worker by its own timer (see :func:`_worker_main`)."""


def _interrupt(signum: int, frame: object) -> None:
    raise _Interrupted


def _compare(prediction: str, truth: str, timeout_seconds: float) -> int:
    result: int = _timed(lambda: verify_pair(prediction, truth), timeout_seconds)
    return result


def _timed(fn: Callable[[], _T], timeout_seconds: float) -> _T | int:
    """``fn()`` under the worker's timer; :data:`WORKER_TIMED_OUT` or :data:`UNPARSEABLE` else."""
    try:
        try:
            if timeout_seconds > 0:
                signal.setitimer(signal.ITIMER_REAL, timeout_seconds)
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)  # may itself be interrupted: caught below
    except _Interrupted:
        return WORKER_TIMED_OUT
    except Exception:  # math-verify raises on some inputs despite raise_on_error=False
        return UNPARSEABLE


class _Worker:
    """One worker subprocess and a thread that queues the lines it writes."""

    def __init__(self, command: Sequence[str]) -> None:
        self.proc = subprocess.Popen(
            list(command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )
        if self.proc.stdin is None or self.proc.stdout is None:  # cannot happen with PIPE
            raise RuntimeError("worker subprocess has no pipes")
        self._stdin, self._stdout = self.proc.stdin, self.proc.stdout
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.started = threading.Event()  # said "ready", or exited before
        threading.Thread(target=self._read, daemon=True, name="sarl-math-verify-reader").start()

    def _read(self) -> None:
        for line in self._stdout:
            if not self.started.is_set() and line.strip() == '"ready"':
                self.started.set()
                continue
            self.lines.put(line)
        self.lines.put(None)  # EOF: the worker exited
        self.started.set()

    @property
    def ready(self) -> bool:
        return self.started.is_set() and self.proc.poll() is None

    def send(self, payload: str) -> None:
        try:
            self._stdin.write(payload + "\n")
            self._stdin.flush()
        except OSError:
            pass  # the worker died: receive() sees its EOF and the call counts as timed out

    def receive(self, deadline: float, cancel: threading.Event) -> str | None:
        """The next line; None if the deadline passed, ``cancel`` was set or the worker died."""
        while not cancel.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                return self.lines.get(timeout=min(left, _POLL_S))
            except queue.Empty:
                continue
        return None

    def wait_started(self, deadline: float, cancel: threading.Event) -> bool:
        """Whether the worker is ready by ``deadline`` (False once ``cancel`` is set)."""
        while not cancel.is_set():
            left = deadline - time.monotonic()
            if self.started.wait(timeout=max(0.0, min(left, _POLL_S))):
                return self.ready
            if left <= 0:
                return False
        return False

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for stream in (self._stdin, self._stdout):
            with contextlib.suppress(OSError):
                stream.close()


class BoundedProcessPool:
    """Run :func:`verify_pair` in warm worker subprocesses, each call within its own timeout.

    Workers are plain subprocesses (``python -m sarl.rewards.baselines.math_verify_pool --worker``),
    not ``multiprocessing`` children: they neither fork the trainer nor re-import its
    ``__main__`` script (which ``spawn`` would do, re-running an unguarded training script).

    * At most ``workers`` calls run at once; concurrent :meth:`map` calls (threads, requests of
      the reward service) share the workers call by call. Workers stay alive between calls.
    * A call's timeout starts when its worker is ready: start-up (importing SymPy, bounded by
      ``startup_grace_seconds``) is never charged to a comparison.
    * The worker's own timer stops a comparison at its timeout (see :func:`_worker_main`); a
      worker that has not answered ``kill_margin_seconds`` later, or that died, is killed, the
      call yields :data:`TIMED_OUT`, and a *spare* worker, started ahead of need and already
      ready, takes its place (another spare starts in the background). So one runaway
      comparison costs its timeout (plus the margin at worst) and no start-up.
    * A call whose ``cancel`` event is set (the reward closed: its client left) stops at once:
      its worker is killed and replaced like a timed-out one, and calls not started never start.
    """

    def __init__(
        self,
        workers: int,
        timeout_seconds: float,
        startup_grace_seconds: float = 60.0,
        *,
        command: Sequence[str] | None = None,
        spares: int = 1,
        kill_margin_seconds: float = 1.0,
    ) -> None:
        self.workers = workers
        self.timeout_seconds = timeout_seconds
        self.startup_grace_seconds = startup_grace_seconds
        self.kill_margin_seconds = kill_margin_seconds
        self.command = list(command or [sys.executable, "-m", __name__, "--worker"])
        self._want_spares = spares
        self._idle: list[_Worker] = []  # started, not in use
        self._spares: list[_Worker] = []  # started, kept to replace a killed worker
        self._busy = 0
        self._closed = False
        self._cond = threading.Condition()
        self.timeouts = 0
        self.restarts = 0

    def map(
        self,
        calls: Sequence[tuple[str, str]],
        *,
        timeout_seconds: float | None = None,
        cancel: threading.Event | None = None,
    ) -> list[int | TimedOut]:
        """The result of each ``(prediction, truth)``, in order (see the class docstring);
        :data:`TIMED_OUT` for every call stopped by ``cancel``."""
        results = self._run([list(call) for call in calls], timeout_seconds, cancel)
        return [r if isinstance(r, (int, TimedOut)) else UNPARSEABLE for r in results]

    def extract(
        self,
        texts: Sequence[str],
        *,
        timeout_seconds: float | None = None,
        cancel: threading.Event | None = None,
    ) -> list[str | int | TimedOut]:
        """EMPO's extracted answer of each text, in order (``""``: none); :data:`UNPARSEABLE`
        where math-verify raised, :data:`TIMED_OUT` as in :meth:`map`."""
        return self._run([{"extract": text} for text in texts], timeout_seconds, cancel)

    def _run(
        self,
        requests: Sequence[Request],
        timeout_seconds: float | None,
        cancel: threading.Event | None,
    ) -> list[str | int | TimedOut]:
        timeout = self.timeout_seconds if timeout_seconds is None else timeout_seconds
        stop = cancel or threading.Event()
        parallel = min(self.workers, len(requests))
        if parallel <= 1:
            return [self._call(request, timeout, stop) for request in requests]
        with ThreadPoolExecutor(parallel, thread_name_prefix="sarl-math-verify") as pool:
            return list(pool.map(lambda request: self._call(request, timeout, stop), requests))

    def pids(self) -> list[int]:
        """Process ids of the live workers, spares included (tests and diagnostics)."""
        with self._cond:
            return [w.proc.pid for w in (*self._idle, *self._spares) if w.proc.poll() is None]

    def _call(
        self, request: Request, timeout: float, cancel: threading.Event
    ) -> str | int | TimedOut:
        worker = self._checkout(cancel)
        if worker is None:
            return TIMED_OUT
        answer: str | int | None = None
        payload = (
            [*request, timeout] if isinstance(request, list) else {**request, "timeout": timeout}
        )
        try:
            if worker.wait_started(time.monotonic() + self.startup_grace_seconds, cancel):
                worker.send(json.dumps(payload))
                line = worker.receive(time.monotonic() + timeout + self.kill_margin_seconds, cancel)
                answer = None if line is None else _result(line)
        finally:
            self._checkin(worker, healthy=answer is not None)
        if answer is None or answer == WORKER_TIMED_OUT:
            if not cancel.is_set():
                with self._cond:
                    self.timeouts += 1
            return TIMED_OUT
        return answer

    def _checkout(self, cancel: threading.Event) -> _Worker | None:
        """An idle worker (a ready one first), a spare, or a new one; None once cancelled."""
        with self._cond:
            while not self._idle and self._busy >= self.workers:
                if cancel.is_set() or self._closed:
                    return None
                self._cond.wait(_POLL_S)
            if cancel.is_set() or self._closed:
                return None
            if self._idle:
                self._idle.sort(key=lambda w: not w.ready)
                worker = self._idle.pop(0)
            else:
                worker = self._spares.pop(0) if self._spares else _Worker(self.command)
            self._busy += 1
            self._top_up_spares()
            return worker

    def _checkin(self, worker: _Worker, *, healthy: bool) -> None:
        if not healthy:
            worker.kill()
        with self._cond:
            self._busy -= 1
            if healthy and not self._closed:
                self._idle.append(worker)
            elif healthy:
                worker.kill()
            else:  # a spare (started ahead, ready by now) takes its place; a new spare starts
                self.restarts += 1
                self._spares = [w for w in self._spares if w.proc.poll() is None]
                if self._spares and not self._closed:
                    self._idle.append(self._spares.pop(0))
                self._top_up_spares()
            self._cond.notify()

    def _top_up_spares(self) -> None:
        """Start spares until ``spares`` of them are alive (call with the lock held)."""
        self._spares = [w for w in self._spares if w.proc.poll() is None]
        while not self._closed and len(self._spares) < self._want_spares:
            self._spares.append(_Worker(self.command))

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Kill every idle worker and spare; workers in use are killed when their call ends."""
        with self._cond:
            self._closed = True
            workers, self._idle, self._spares = [*self._idle, *self._spares], [], []
            self._cond.notify_all()
        for worker in workers:
            worker.kill()


def _result(line: str) -> str | int | None:
    """A worker's answer line: an int code or an extracted string; None if garbled."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, (int, str)) and not isinstance(value, bool) else None


_SHARED: dict[tuple[int, float], BoundedProcessPool] = {}
_SHARED_LOCK = threading.Lock()


def shared_pool(workers: int, startup_grace_seconds: float) -> BoundedProcessPool:
    """The process's pool of ``workers`` math-verify workers, created on first use and closed
    when the process exits: every :class:`MathVerifyReward` of a process (one per request in
    the reward service, one per command in ``sarl reward score``) shares its warm workers, so
    no request pays a worker's start-up or leaves workers behind."""
    key = (workers, startup_grace_seconds)
    with _SHARED_LOCK:
        pool = _SHARED.get(key)
        if pool is None or pool.closed:
            if not _SHARED:
                atexit.register(close_shared_pools)
            pool = _SHARED[key] = BoundedProcessPool(workers, 5.0, startup_grace_seconds)
        return pool


def close_shared_pools() -> None:
    """Kill the workers of every shared pool (at exit; tests)."""
    with _SHARED_LOCK:
        pools = list(_SHARED.values())
        _SHARED.clear()
    for pool in pools:
        pool.close()


if __name__ == "__main__":
    if sys.argv[1:] != ["--worker"]:
        raise SystemExit("usage: python -m sarl.rewards.baselines.math_verify_pool --worker")
    _worker_main()
