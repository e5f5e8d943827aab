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
``timeout_seconds=None``) and each comparison runs in a warm worker subprocess
(:class:`~sarl.rewards.baselines.math_verify_pool.BoundedProcessPool`; plain subprocesses, so
the trainer is neither forked nor its ``__main__`` re-imported), shared by every reward of the
process (:func:`~sarl.rewards.baselines.math_verify_pool.shared_pool`). A
comparison gets ``timeout_seconds`` from the moment its worker is ready (start-up is never
charged to it): the worker's own timer stops it then, and a worker that does not answer is
killed and replaced by a spare that is already running. A timed-out comparison falls back to
``answers_equal`` and is counted (component ``verifier_timeout``, :meth:`stats`). Component
``math_verify`` is 1 where math-verify itself decided. :meth:`MathVerifyReward.close` stops the
reward's comparisons still running (the reward service closes the reward of a request whose
client has left), and leaves the shared workers warm for the next reward.

math-verify is an optional dependency (``pip install 'sarl[math]'``: it pulls SymPy and an ANTLR
runtime). Without it, ``on_missing="fallback"`` (default) scores with ``answers_equal`` (the
``ground_truth`` reward's rule; component ``math_verify`` = 0) and logs a warning when built;
``"error"`` refuses to build the reward.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.baselines.math_verify_pool import (
    CORRECT,
    TIMED_OUT,
    UNPARSEABLE,
    BoundedProcessPool,
    shared_pool,
)
from sarl.rewards.ground_truth import GroundTruthRewardSettings
from sarl.rewards.math_answer import answers_equal, extract_answer
from sarl.rewards.registry import register_reward

_LOG = logging.getLogger(__name__)
COMPONENT_KEYS = ("has_answer", "correct", "math_verify", "verifier_timeout")


class MathVerifyRewardSettings(GroundTruthRewardSettings):
    """The ``ground_truth`` scores plus how math-verify is run (see the module docstring)."""

    timeout_seconds: float = Field(
        default=5.0, gt=0, description="Bound on one comparison, from its worker being ready."
    )
    workers: int = Field(
        default=1, ge=1, le=64, description="Worker processes (shared within the process)."
    )
    startup_grace_seconds: float = Field(
        default=60.0, ge=0, description="How long a comparison waits for a starting worker."
    )
    on_missing: Literal["fallback", "error"] = Field(
        default="fallback",
        description="Without math-verify installed: score with answers_equal, or refuse.",
    )


def math_verify_available() -> bool:
    return importlib.util.find_spec("math_verify") is not None


@dataclass(frozen=True, slots=True)
class MathVerifyStats:
    comparisons: int  # sent to math-verify
    timeouts: int  # abandoned at the deadline or lost with a dead worker (answers_equal decided)
    unparseable: int  # math-verify parsed a side as nothing (answers_equal decided)
    worker_restarts: int  # of the (shared) pool: workers killed and replaced


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
        self._cancel = threading.Event()  # set by close(): stop comparisons still running
        self._comparisons = 0
        self._unparseable = 0
        self._timeouts = 0
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
            self._pool = shared_pool(settings.workers, settings.startup_grace_seconds)

    def stats(self) -> MathVerifyStats:
        pool = self._pool
        with self._lock:
            comparisons, unparseable, timeouts = (
                self._comparisons,
                self._unparseable,
                self._timeouts,
            )
        return MathVerifyStats(
            comparisons, timeouts, unparseable, 0 if pool is None else pool.restarts
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
        results = self._pool.map(
            pairs, timeout_seconds=self._settings.timeout_seconds, cancel=self._cancel
        )
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
            self._timeouts += sum(r is TIMED_OUT for r in results)
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
        """Stop this reward's comparisons still running (their workers are killed and replaced
        by spares); the shared pool's other workers stay warm for the next reward."""
        self._cancel.set()
