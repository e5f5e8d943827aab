"""Synthetic structured reasoning traces for the generated tasks, and the tokenizer corpus.

Called by ``sarl.runner.tiny`` (warm-start SFT targets and tokenizer training texts). A trace is a
``<think>`` block of steps separated by blank lines (the structure reward's default delimiter),
then the ``\\boxed{}`` answer::

    <think>
    Goal: ((7 + 5) * 3) - 4.

    Plan: work inside out.

    Compute 7 + 5 = 12.

    Check: 12 - 5 = 7.
    ...
    </think>
    \\boxed{32}

The structure varies from trace to trace: an optional restated goal, an optional plan, compute
steps in varied wording, occasional verify steps (the inverse operation) and revisit/reflect
steps, an optional summary.
Without that variety every warm-started response would have the same reasoning map and the
structure reward would have nothing to prefer among a group's responses.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from sarl.tasks.generators import Problem

_STEP = re.compile(r"^(\d+) ([-+*]) (\d+) = (\d+)$")
_P_GOAL = 0.7
_P_PLAN = 0.85
_P_VERIFY = 0.5
_P_REFLECT = 0.6
_P_SUMMARY = 0.85

# Short wordings: local runs cap responses at ~100 tokens, and each digit is a token.
_ARITHMETIC_PLANS = (
    "Plan: inner brackets first.",
    "Plan: {n} operations, one per step.",
    "Plan: work inside out.",
)
_COUNTDOWN_PLANS = (
    "Plan: reach {target}, two numbers at a time.",
    "Plan: use each number once.",
    "Plan: aim for {target}.",
)
_FIRST = ("Compute {s}.", "First, {s}.")
_NEXT = ("Compute {s}.", "Then {s}.", "Next, {s}.")
_REFLECTS = (
    "Wait, recheck {s}: it is right.",
    "Revisit: {done} of {n} done.",
    "Looking back, each step is right.",
)


def _is_countdown(problem: Problem) -> bool:
    return problem.question.startswith("Use ")


def _inverse(step: str) -> str:
    """A check of ``a op b = c`` by the inverse operation (or commuting, for products)."""
    m = _STEP.match(step)
    if m is None:
        return f"Check: {step}."
    a, op, b, c = m.groups()
    if op == "+":
        return f"Check: {c} - {b} = {a}."
    if op == "-":
        return f"Check: {c} + {b} = {a}."
    return f"Check: {b} * {a} = {c}."


def _plan(problem: Problem, rng: random.Random) -> str:
    if _is_countdown(problem):
        target = problem.question.rstrip(".").rpartition(" ")[2]
        return rng.choice(_COUNTDOWN_PLANS).format(target=target)
    return rng.choice(_ARITHMETIC_PLANS).format(n=len(problem.steps))


def _goal(problem: Problem) -> str:
    """Restate what is asked: a step of its own kind that involves no arithmetic."""
    if _is_countdown(problem):
        return "Goal: " + problem.question.removeprefix("Use ").rstrip(".") + "."
    return "Goal: " + problem.question.removeprefix("Compute ").rstrip(".") + "."


def _summary(problem: Problem) -> str:
    if _is_countdown(problem):
        target = problem.question.rstrip(".").rpartition(" ")[2]
        return f"That makes {target}."
    return f"So the answer is {problem.answer}."


def _body(problem: Problem, rng: random.Random) -> list[str]:
    """Compute steps with occasional checks, and at most one reflection."""
    out: list[str] = []
    reflect_at = rng.randrange(len(problem.steps)) if rng.random() < _P_REFLECT else -1
    for i, step in enumerate(problem.steps):
        out.append(rng.choice(_FIRST if i == 0 else _NEXT).format(s=step))
        if rng.random() < _P_VERIFY:
            out.append(_inverse(step))
        if i == reflect_at:
            reflect = rng.choice(_REFLECTS)
            out.append(reflect.format(s=step.partition(" =")[0], done=i + 1, n=len(problem.steps)))
    return out


def structured_trace(problem: Problem, rng: random.Random) -> str:
    """One structured reasoning trace solving ``problem``, ending in ``\\boxed{answer}``.

    Needs the problem's solution ``steps`` (generated problems have them; dataset problems do
    not: ValueError). ``rng`` picks the structure, so a seeded rng gives a reproducible trace.
    """
    if not problem.steps:
        raise ValueError(f"problem {problem.question[:60]!r} has no solution steps to trace")
    steps: list[str] = []
    if rng.random() < _P_GOAL:
        steps.append(_goal(problem))
    if rng.random() < _P_PLAN:
        steps.append(_plan(problem, rng))
    steps.extend(_body(problem, rng))
    if rng.random() < _P_SUMMARY or len(steps) < 2:
        steps.append(_summary(problem))
    return "<think>\n" + "\n\n".join(steps) + "\n</think>\n\\boxed{" + problem.answer + "}"


def corpus(problems: Sequence[Problem], rng: random.Random) -> list[str]:
    """Texts to train the tokenizer on: every question and, where it has steps, one trace."""
    texts: list[str] = []
    for problem in problems:
        texts.append(problem.question)
        if problem.steps:
            texts.append(structured_trace(problem, rng))
    return texts
