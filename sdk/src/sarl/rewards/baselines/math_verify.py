"""Registry entry ``"ground_truth_math_verify"``: the ground-truth reward checked by math-verify.

Imported lazily by ``sarl.rewards.registry``; a per-sample reward with the ``ground_truth``
reward's contract (a ``\\boxed{}`` answer against ``Sample.ground_truth``, the same three scores,
a missing ground truth is an error) but Hugging Face's ``math-verify`` deciding equivalence
(symbolic: ``\\frac{1}{2}`` = ``0.5`` = ``1/2``, ``x^2-1`` = ``(x-1)(x+1)``, sets, intervals).
It does not know the Countdown rule (an expression of the given numbers that reaches the target),
so use ``ground_truth`` for Countdown.

Both answers are taken as ``sarl.rewards.math_answer.extract_answer`` finds them (the response's
last complete ``\\boxed{}``, and the ground truth's if it has one) and re-wrapped in ``\\boxed{}``
for ``math_verify.parse``; then ``math_verify.verify(gold, prediction)``. When math-verify cannot
parse either side, the comparison falls back to ``math_answer.answers_equal``.

Safe off the main thread: math-verify bounds its work with ``signal.alarm``, which works only on
a process's main thread (reward adapters call from worker threads: TRL's async rewards, verl's
pools, ``Reward.ascore_groups``). Here its own timeouts are disabled (``parsing_timeout=None``,
``timeout_seconds=None``) and each comparison runs in a worker subprocess
(:class:`BoundedProcessPool`; plain subprocesses, so the trainer is neither forked nor its
``__main__`` re-imported). Comparisons are sent ``workers`` at a time and must all be answered
within ``timeout_seconds`` (plus ``startup_grace_seconds`` while a new worker imports SymPy); a
worker still busy then is killed (a runaway SymPy computation cannot be interrupted any other
way) and replaced for the next comparisons. A timed-out comparison falls back to
``answers_equal`` and is counted (component ``verifier_timeout``, :meth:`stats`). Component
``math_verify`` is 1 where math-verify itself decided.

math-verify is an optional dependency (``pip install 'sarl[math]'``: it pulls SymPy and an ANTLR
runtime). Without it, ``on_missing="fallback"`` (default) scores with ``answers_equal`` (the
``ground_truth`` reward's rule; component ``math_verify`` = 0) and logs a warning when built;
``"error"`` refuses to build the reward.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.ground_truth import GroundTruthRewardSettings
from sarl.rewards.math_answer import answers_equal, extract_answer
from sarl.rewards.registry import register_reward

_LOG = logging.getLogger(__name__)
COMPONENT_KEYS = ("has_answer", "correct", "math_verify", "verifier_timeout")

# Worker results of one comparison.
CORRECT, WRONG, UNPARSEABLE = 1, 0, -1


class TimedOut:
    """Marker result of a call abandoned at its deadline."""

    def __repr__(self) -> str:
        return "TIMED_OUT"


TIMED_OUT = TimedOut()


class MathVerifyRewardSettings(GroundTruthRewardSettings):
    """The ``ground_truth`` scores plus how math-verify is run (see the module docstring)."""

    timeout_seconds: float = Field(
        default=5.0, gt=0, description="Bound on one batch of `workers` comparisons."
    )
    workers: int = Field(default=1, ge=1, le=64, description="Worker processes.")
    startup_grace_seconds: float = Field(
        default=60.0, ge=0, description="Extra time for the first comparisons of new workers."
    )
    on_missing: Literal["fallback", "error"] = Field(
        default="fallback",
        description="Without math-verify installed: score with answers_equal, or refuse.",
    )


def math_verify_available() -> bool:
    return importlib.util.find_spec("math_verify") is not None


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
    """Worker loop (``python -m sarl.rewards.baselines.math_verify --worker``).

    Protocol, one JSON document per line: the worker writes ``"ready"`` once math-verify is
    imported, then answers each request ``[prediction, truth]`` with an int result. Its stdout is
    kept for the protocol only (anything a library prints goes to stderr).
    """
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled": on purpose
    importlib.import_module("math_verify")
    protocol.write('"ready"\n')
    protocol.flush()
    for line in sys.stdin:
        prediction, truth = json.loads(line)
        try:
            result = verify_pair(prediction, truth)
        except Exception:  # math-verify raises on some inputs despite raise_on_error=False
            result = UNPARSEABLE
        protocol.write(f"{result}\n")
        protocol.flush()


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
        threading.Thread(target=self._read, daemon=True, name="sarl-math-verify-reader").start()
        self.ready = False

    def _read(self) -> None:
        for line in self._stdout:
            self.lines.put(line)
        self.lines.put(None)  # EOF: the worker exited

    def send(self, payload: str) -> None:
        try:
            self._stdin.write(payload + "\n")
            self._stdin.flush()
        except OSError:
            pass  # the worker died: receive() sees its EOF and the call counts as timed out

    def receive(self, deadline: float) -> str | None:
        """The next line, or None if the deadline passed or the worker died."""
        try:
            return self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return None

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for stream in (self._stdin, self._stdout):
            with contextlib.suppress(OSError):
                stream.close()


class BoundedProcessPool:
    """Run :func:`verify_pair` in worker subprocesses, each batch of calls within a deadline.

    Workers are plain subprocesses (``python -m sarl.rewards.baselines.math_verify --worker``),
    not ``multiprocessing`` children: they neither fork the trainer nor re-import its
    ``__main__`` script (which ``spawn`` would do, re-running an unguarded training script).
    :meth:`map` sends the calls ``workers`` at a time; a call not answered by its batch's
    deadline (``timeout_seconds``, plus ``startup_grace_seconds`` for a worker that has not yet
    said it is ready) yields :data:`TIMED_OUT` and its worker is killed, to be started again on
    the next call. A worker that dies is handled the same way. Concurrent ``map`` calls take
    turns.
    """

    def __init__(
        self,
        workers: int,
        timeout_seconds: float,
        startup_grace_seconds: float = 60.0,
        *,
        command: Sequence[str] | None = None,
    ) -> None:
        self.workers = workers
        self.timeout_seconds = timeout_seconds
        self.startup_grace_seconds = startup_grace_seconds
        self.command = list(command or [sys.executable, "-m", __name__, "--worker"])
        self._slots: list[_Worker | None] = [None] * workers
        self._lock = threading.Lock()
        self.timeouts = 0
        self.restarts = 0

    def map(self, calls: Sequence[tuple[str, str]]) -> list[int | TimedOut]:
        """The result of each ``(prediction, truth)``, in order (see the class docstring)."""
        results: list[int | TimedOut] = []
        with self._lock:
            for start in range(0, len(calls), self.workers):
                results += self._batch(calls[start : start + self.workers])
        return results

    def _worker(self, slot: int) -> _Worker:
        worker = self._slots[slot]
        if worker is None:
            worker = self._slots[slot] = _Worker(self.command)
        return worker

    def _batch(self, calls: Sequence[tuple[str, str]]) -> list[int | TimedOut]:
        workers = [self._worker(i) for i in range(len(calls))]
        grace = any(not w.ready for w in workers)
        deadline = time.monotonic() + self.timeout_seconds
        deadline += self.startup_grace_seconds if grace else 0.0
        for worker, call in zip(workers, calls, strict=True):
            worker.send(json.dumps(list(call)))
        out: list[int | TimedOut] = []
        for slot, worker in enumerate(workers):
            line = worker.receive(deadline)
            if line is not None and line.strip() == '"ready"':
                worker.ready = True
                line = worker.receive(deadline)
            if line is None:
                out.append(TIMED_OUT)
                self.timeouts += 1
                self._kill(slot)
            else:
                out.append(int(line))
        return out

    def _kill(self, slot: int) -> None:
        worker = self._slots[slot]
        if worker is not None:
            worker.kill()
            self._slots[slot] = None
            self.restarts += 1

    def close(self) -> None:
        with self._lock:
            for slot, worker in enumerate(self._slots):
                if worker is not None:
                    worker.kill()
                    self._slots[slot] = None


@dataclass(frozen=True, slots=True)
class MathVerifyStats:
    comparisons: int  # sent to math-verify
    timeouts: int  # abandoned at the deadline or lost with a dead worker (answers_equal decided)
    unparseable: int  # math-verify parsed a side as nothing (answers_equal decided)
    worker_restarts: int


@register_reward
class MathVerifyReward(Reward):
    """Correctness of the last ``\\boxed{}`` answer, decided by math-verify (see the docstring)."""

    name = "ground_truth_math_verify"
    Settings = MathVerifyRewardSettings
    components = COMPONENT_KEYS

    def __init__(self, settings: MathVerifyRewardSettings) -> None:
        super().__init__(settings)
        self._settings = settings
        self._pool: BoundedProcessPool | None = None
        self._lock = threading.Lock()  # score_groups may run in several threads at once
        self._comparisons = 0
        self._unparseable = 0
        if not math_verify_available():
            if settings.on_missing == "error":
                raise ImportError(
                    "reward 'ground_truth_math_verify': math-verify is not installed "
                    "(pip install 'sarl[math]'), and on_missing='error'"
                )
            _LOG.warning(
                "math-verify is not installed; reward 'ground_truth_math_verify' falls back to "
                "sarl.rewards.math_answer.answers_equal (pip install 'sarl[math]')"
            )
        else:
            self._pool = BoundedProcessPool(
                settings.workers, settings.timeout_seconds, settings.startup_grace_seconds
            )

    def stats(self) -> MathVerifyStats:
        pool = self._pool
        with self._lock:
            comparisons, unparseable = self._comparisons, self._unparseable
        return MathVerifyStats(
            comparisons,
            0 if pool is None else pool.timeouts,
            unparseable,
            0 if pool is None else pool.restarts,
        )

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        pairs = [
            self._pair(s, (g, i)) for g, group in enumerate(groups) for i, s in enumerate(group)
        ]
        compared = [(p, t) for p, t in pairs if p is not None]
        verdicts = iter(self._verify(compared))
        flat = iter([self._missing() if p is None else next(verdicts) for p, _ in pairs])
        return [[next(flat) for _ in group] for group in groups]

    def _pair(self, sample: Sample, where: tuple[int, int]) -> tuple[str | None, str]:
        if sample.ground_truth is None:
            raise ValueError(
                f"reward 'ground_truth_math_verify': sample {where[1]} of group {where[0]} "
                f"(prompt {sample.prompt[:80]!r}) has no ground truth; give the dataset a "
                "'ground_truth' column"
            )
        truth = extract_answer(sample.ground_truth) or sample.ground_truth
        return extract_answer(sample.response), truth

    def _verify(self, pairs: Sequence[tuple[str, str]]) -> list[RewardOutput]:
        if self._pool is None:
            return [self._answered(answers_equal(p, t)) for p, t in pairs]
        results = self._pool.map(pairs)
        out = []
        for (p, t), result in zip(pairs, results, strict=True):
            if result is TIMED_OUT:
                out.append(self._answered(answers_equal(p, t), timed_out=True))
            elif result == UNPARSEABLE:
                out.append(self._answered(answers_equal(p, t)))
            else:
                out.append(self._answered(result == CORRECT, by_math_verify=True))
        with self._lock:
            self._comparisons += len(pairs)
            self._unparseable += sum(r == UNPARSEABLE for r in results)
        return out

    def _answered(
        self, correct: bool, *, by_math_verify: bool = False, timed_out: bool = False
    ) -> RewardOutput:
        s = self._settings
        return RewardOutput(
            s.correct_score if correct else s.wrong_score,
            {
                "has_answer": 1.0,
                "correct": float(correct),
                "math_verify": float(by_math_verify),
                "verifier_timeout": float(timed_out),
            },
        )

    def _missing(self) -> RewardOutput:
        return RewardOutput(
            self._settings.missing_answer_score,
            {"has_answer": 0.0, "correct": 0.0, "math_verify": 0.0, "verifier_timeout": 0.0},
        )

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()


if __name__ == "__main__":
    if sys.argv[1:] != ["--worker"]:
        raise SystemExit("usage: python -m sarl.rewards.baselines.math_verify --worker")
    _worker_main()
