"""Registry entry ``"rlkd"``: RLKD's generative structure reward combined with an outcome reward.

Imported lazily by ``sarl.rewards.registry``; called by the adapters with batches of groups.

Inputs per sample: ``Sample.response`` (the student's response), ``Sample.prompt`` (the
problem, shown to the decomposer) and the teacher in ``Sample.extra[teacher_key]`` (default
``"teacher"``; with TRL, a dataset column of that name):

* a string: the teacher's response (RLKD uses DeepSeek-R1's responses in OpenR1-Math). It is
  decomposed once per distinct (problem, reasoning) and cached (``teacher_cache_size``), since
  all responses of a group share it and paths recur across epochs;
* a list of objects ``{"meta_reasoning", "sub_problem", "answer"}`` (the key variants of
  ``steps.steps_from_json``): an already decomposed teacher, used as is (no decomposer call).

A missing teacher raises ``ValueError`` naming the column, like a missing ground truth.

Only the reasoning is decomposed, on both sides: the text before the first ``</think>`` (the
whole text when there is none), as the reference code does (xsc1234/RLKD,
``open-r1-main/src/open_r1/rewards.py``, ``searchain_reward_openr1_math``: ``content.split(
'</think>')[0]`` for the student's completions and ``generation[i].split('</think>')[0]`` for the
teacher's). The final answer after ``</think>`` is the outcome reward's business.

Score (RLKD §3.2 and App. B: the GSRM reward and the task's outcome reward "in a weighted
manner"; the paper's R_acc : R_gsrm is 3 : 3, i.e. equal weights)::

    score = structure_weight * r + outcome_weight * outcome

where ``r`` is Algorithm 1's total (``algorithm.structured_reward``), unnormalised as in the paper
(``normalize="none"``, r in [0, min(n, m)]) or divided by the teacher's step count n
(``"teacher_steps"``, r in [0, 1]); ``outcome`` is the score of the registered reward named
``outcome`` (default ``ground_truth``) or absent (``outcome: null``).

Remote failures: the chat clients time out and retry (``chat``); the judge is re-asked on a
non-verdict (``gsrm``). A sample whose structure term cannot be computed after that (a chat
call failed, the judge never gave a verdict, the teacher has no step even after re-asking, or a
decomposition of either side has steps but no meta-reasoning label the parser knows —
``gsrm.DecompositionError``, which would otherwise score 0 everywhere) gets the ``on_failure``
outcome, and is counted (``stats().failed_samples``, component ``failed``):

* ``"nan"`` (default): score NaN; the TRL adapter turns it into ``None`` (the trainer leaves
  this reward out for that sample) instead of training on a made-up value;
* ``"zero"``: the structure term is 0, the outcome term is kept;
* ``"raise"``: ``RuntimeError`` stops the step.

A *student* path the decomposer finds no step in (after re-asking) is not a failure: it has no
steps and earns r = 0, like an empty reasoning (which is not sent at all).

Components: ``structure`` (r after normalisation; NaN on failure), ``outcome`` (the outcome
reward's score; NaN without one), ``teacher_steps`` n, ``student_steps`` m, ``matched_steps``
(steps whose meta-reasoning matched), ``early_exit`` (1 when the loop ended at a meta-reasoning
mismatch), ``judge_calls`` (match decisions asked, re-asks not counted) and
``failed``. HTTP-level counters are in :meth:`RLKDReward.stats`.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard, cast

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.registry import create_reward, parse_settings, register_reward
from sarl.rewards.rlkd.algorithm import StructuredMatch, structured_reward
from sarl.rewards.rlkd.chat import ChatClient, ChatEndpointSettings, ChatError, ChatStats
from sarl.rewards.rlkd.gsrm import GSRM, DecompositionError, GSRMStats, VerdictError
from sarl.rewards.rlkd.steps import FieldName, Step, steps_from_json

COMPONENT_KEYS = (
    "structure",
    "outcome",
    "teacher_steps",
    "student_steps",
    "matched_steps",
    "early_exit",
    "judge_calls",
    "failed",
)
_NAN = math.nan

#: A teacher as found in a sample: ``(problem, path)`` to decompose, or already given steps.
TeacherSource = tuple[str, str] | tuple[Step, ...]


def reasoning(text: str) -> str:
    """The part of a response that is decomposed: before the first ``</think>`` (all of it when
    there is none), as the reference's ``split('</think>')[0]``."""
    return text.partition("</think>")[0]


def _is_steps(source: TeacherSource) -> TypeGuard[tuple[Step, ...]]:
    return bool(source) and isinstance(source[0], Step)


class RLKDRewardSettings(BaseModel):
    """Endpoints, weights and failure policy of the RLKD reward (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    decomposer: ChatEndpointSettings = Field(
        description="Chat model that decomposes paths into (meta-reasoning, sub-problem, answer)."
    )
    judge: ChatEndpointSettings | None = Field(
        default=None, description="Chat model that decides matches (default: the decomposer's)."
    )
    teacher_key: str = Field(default="teacher", min_length=1, description="Sample.extra key.")
    structure_weight: float = Field(default=1.0, ge=0, description="Weight of the GSRM term.")
    outcome_weight: float = Field(default=1.0, ge=0, description="Weight of the outcome term.")
    outcome: str | None = Field(
        default="ground_truth", description="Registered outcome reward; null for GSRM alone."
    )
    outcome_settings: dict[str, Any] = Field(
        default_factory=dict, description="Settings of the outcome reward."
    )
    normalize: Literal["none", "teacher_steps"] = Field(
        default="none", description="'none': r as in the paper; 'teacher_steps': r / n."
    )
    parse_retries: int = Field(
        default=1, ge=0, le=5, description="Re-asks after a reply without steps or verdict."
    )
    on_failure: Literal["nan", "zero", "raise"] = Field(
        default="nan", description="Outcome for a sample whose structure term failed."
    )
    max_concurrency: int = Field(default=8, ge=1, le=256, description="Samples scored at once.")
    decompose_max_tokens: int | None = Field(
        default=4096, ge=1, description="Token cap of a decomposition reply (null: the server's)."
    )
    judge_max_tokens: int | None = Field(
        default=8, ge=1, description="Token cap of a judge's verdict reply (null: the server's)."
    )
    teacher_cache_size: int = Field(default=4096, ge=0, description="Decomposed teachers kept.")

    @field_validator("outcome")
    @classmethod
    def _not_self(cls, value: str | None) -> str | None:
        if value == "rlkd":
            raise ValueError("the outcome reward cannot be 'rlkd' itself")
        return value

    @model_validator(mode="after")
    def _check_outcome(self) -> RLKDRewardSettings:
        if self.outcome is not None:
            parse_settings(self.outcome, self.outcome_settings)  # RewardConfigError names it
        return self


@dataclass(frozen=True, slots=True)
class RLKDStats:
    """Counters since the reward was built."""

    samples: int
    failed_samples: int  # scored under on_failure
    teacher_decompositions: int  # decomposer calls for teachers (cache misses)
    teacher_cache_hits: int
    decomposer: ChatStats
    judge: ChatStats
    gsrm: GSRMStats


@dataclass(frozen=True, slots=True)
class _Scored:
    match: StructuredMatch | None  # None: failed
    student_steps: int
    judge_calls: int
    error: str = ""


@register_reward
class RLKDReward(Reward):
    """``structure_weight * r + outcome_weight * outcome`` with r from RLKD Algorithm 1."""

    name = "rlkd"
    Settings = RLKDRewardSettings
    components = COMPONENT_KEYS

    def __init__(self, settings: RLKDRewardSettings) -> None:
        super().__init__(settings)
        self._settings = settings
        self._decomposer = ChatClient(settings.decomposer)
        self._judge = (
            self._decomposer
            if settings.judge is None or settings.judge == settings.decomposer
            else ChatClient(settings.judge)
        )
        self._gsrm = GSRM(
            self._decomposer,
            self._judge,
            parse_retries=settings.parse_retries,
            decompose_max_tokens=settings.decompose_max_tokens,
            judge_max_tokens=settings.judge_max_tokens,
        )
        self._outcome = (
            None
            if settings.outcome is None
            else create_reward(settings.outcome, settings.outcome_settings)
        )
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[str, str], tuple[Step, ...]] = OrderedDict()
        self._counts = {"samples": 0, "failed_samples": 0, "teacher_decompositions": 0, "hits": 0}

    def stats(self) -> RLKDStats:
        with self._lock:
            c = dict(self._counts)
        return RLKDStats(
            samples=c["samples"],
            failed_samples=c["failed_samples"],
            teacher_decompositions=c["teacher_decompositions"],
            teacher_cache_hits=c["hits"],
            decomposer=self._decomposer.stats(),
            judge=self._judge.stats(),
            gsrm=self._gsrm.stats(),
        )

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        flat = [s for g in groups for s in g]
        teachers = [self._teacher_source(s, i) for i, s in enumerate(flat)]
        outcomes = self._outcome_scores(groups)
        pool = self._executor()
        decomposed = self._decompose_teachers(pool, teachers)
        futures = [
            pool.submit(self._score_sample, sample, decomposed[key])
            for sample, key in zip(flat, teachers, strict=True)
        ]
        scored = [f.result() for f in futures]
        outputs = iter([self._output(r, o) for r, o in zip(scored, outcomes, strict=True)])
        return [[next(outputs) for _ in g] for g in groups]

    # -- teacher -------------------------------------------------------------------------------

    def _teacher_source(self, sample: Sample, index: int) -> TeacherSource:
        """Cache key ``(problem, path)`` of a textual teacher, or the given steps."""
        key = self._settings.teacher_key
        value = sample.extra.get(key)
        if isinstance(value, str) and value.strip():
            return (sample.prompt, reasoning(value))
        if isinstance(value, Sequence) and not isinstance(value, str):
            steps = steps_from_json(list(value))
            if steps:
                return tuple(steps)
        raise ValueError(
            f"reward 'rlkd': sample {index} of the batch (prompt {sample.prompt[:80]!r}) has no "
            f"teacher in extra[{key!r}] (a reasoning path string or a list of step objects); "
            f"give the dataset a {key!r} column"
        )

    def _decompose_teachers(
        self, pool: ThreadPoolExecutor, sources: Sequence[TeacherSource]
    ) -> dict[TeacherSource, tuple[Step, ...] | str]:
        """Steps (or an error message) per teacher source, decomposing each distinct one once."""
        out: dict[TeacherSource, tuple[Step, ...] | str] = {}
        todo: list[tuple[str, str]] = []
        for source in sources:
            if source in out or source in todo:
                continue
            if _is_steps(source):
                out[source] = source
                continue
            text = cast(tuple[str, str], source)
            cached = self._cache_get(text)
            if cached is None:
                todo.append(text)
            else:
                out[text] = cached
        futures = [(key, pool.submit(self._decompose_teacher, key)) for key in todo]
        for key, future in futures:
            out[key] = future.result()
        return out

    def _decompose_teacher(self, key: tuple[str, str]) -> tuple[Step, ...] | str:
        if not key[1].strip():
            return "the teacher's reasoning (its text before </think>) is empty"
        with self._lock:
            self._counts["teacher_decompositions"] += 1
        try:
            steps = tuple(self._gsrm.decompose(key[1], key[0]))
        except (ChatError, DecompositionError) as e:
            return f"teacher decomposition failed: {e}"
        if not steps:
            return "the decomposer found no step in the teacher's path"
        self._cache_put(key, steps)
        return steps

    def _cache_get(self, key: tuple[str, str]) -> tuple[Step, ...] | None:
        with self._lock:
            steps = self._cache.get(key)
            if steps is not None:
                self._cache.move_to_end(key)
                self._counts["hits"] += 1
            return steps

    def _cache_put(self, key: tuple[str, str], steps: tuple[Step, ...]) -> None:
        size = self._settings.teacher_cache_size
        with self._lock:
            self._cache[key] = steps
            while len(self._cache) > size:
                self._cache.popitem(last=False)

    # -- student -------------------------------------------------------------------------------

    def _score_sample(self, sample: Sample, teacher: tuple[Step, ...] | str) -> _Scored:
        with self._lock:
            self._counts["samples"] += 1
        if isinstance(teacher, str):
            return _Scored(None, 0, 0, teacher)
        calls = 0

        def match(field: FieldName, t: str, s: str) -> bool:
            nonlocal calls
            calls += 1
            return self._gsrm.match(field, t, s)

        student: list[Step] = []
        path = reasoning(sample.response)
        try:
            if path.strip():
                student = self._gsrm.decompose(path, sample.prompt)
            return _Scored(structured_reward(teacher, student, match), len(student), calls)
        except (ChatError, VerdictError, DecompositionError) as e:
            return _Scored(None, len(student), calls, str(e))

    def _outcome_scores(self, groups: Sequence[Sequence[Sample]]) -> list[float]:
        if self._outcome is None:
            return [_NAN for g in groups for _ in g]
        return [o.score for g in self._outcome.score_groups(groups) for o in g]

    def _output(self, scored: _Scored, outcome: float) -> RewardOutput:
        s = self._settings
        outcome_term = 0.0 if self._outcome is None else s.outcome_weight * outcome
        m = scored.match
        if m is None:
            with self._lock:
                self._counts["failed_samples"] += 1
            if s.on_failure == "raise":
                raise RuntimeError(f"reward 'rlkd': {scored.error}")
            structure = _NAN
            score = _NAN if s.on_failure == "nan" else outcome_term
        else:
            structure = m.score
            if s.normalize == "teacher_steps":
                structure /= m.teacher_steps  # >= 1: a teacher without steps is a failure
            score = s.structure_weight * structure + outcome_term
        components = {
            "structure": structure,
            "outcome": outcome,
            "teacher_steps": _NAN if m is None else float(m.teacher_steps),
            "student_steps": float(scored.student_steps),
            "matched_steps": _NAN if m is None else float(m.matched_steps),
            "early_exit": _NAN if m is None else float(m.early_exit),
            "judge_calls": float(scored.judge_calls),
            "failed": float(m is None),
        }
        return RewardOutput(score, components)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    self._settings.max_concurrency, thread_name_prefix="sarl-rlkd"
                )
            return self._pool

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self._decomposer.close()
        self._judge.close()
        if self._outcome is not None:
            self._outcome.close()


def teacher_steps_payload(steps: Sequence[Step]) -> list[Mapping[str, str]]:
    """Steps as the list of objects ``extra[teacher_key]`` accepts (to store decompositions)."""
    return [
        {"meta_reasoning": s.meta, "sub_problem": s.question, "answer": s.answer} for s in steps
    ]
