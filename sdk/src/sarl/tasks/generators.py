"""Verifiable task generators (multi-step arithmetic, Countdown) and dataset-file loading.

Called by the local runner (training and held-out prompts), ``sarl.tasks.traces`` (the solution
steps become structured reasoning traces) and ``sarl.runner.tiny`` (warm-start problems).

Both generators build a random expression tree over small positive integers with + - *; every
intermediate value is a positive integer (subtraction puts the larger operand first and never
reaches 0), so answers are exact and each tree node is one solution step ("7 + 5 = 12").

* ``arithmetic``: "Compute ((7 + 5) * 3) - 4." -> answer "32".
* ``countdown``: "Use 3, 4, 5, 7 to make 32." -> answer "((7 + 5) * 3) - 4", an expression using
  every given number exactly once. ``sarl.rewards.math_answer.answers_equal`` accepts any other
  expression with the same numbers and value, so alternative solutions count as correct.

Generation is deterministic in ``(task, seed, difficulty)`` and questions are unique within a
call (Countdown lists its numbers sorted, so one question string = one problem).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

TaskName = Literal["arithmetic", "countdown"]
TASKS: tuple[TaskName, ...] = ("arithmetic", "countdown")
_MAX_DIFFICULTY = 12
_MAX_REPEATS = 2000  # consecutive already-seen draws before a generator counts as exhausted


@dataclass(frozen=True, slots=True)
class Problem:
    """One verifiable problem.

    ``steps`` is a reference solution path, one operation per step ("7 + 5 = 12"), in an order
    that evaluates it; empty for problems read from dataset files (no known solution path).
    """

    question: str
    answer: str
    steps: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Node:
    value: int
    text: str  # expression; parenthesised when it is used as an operand of a larger expression
    steps: tuple[str, ...]
    atom: bool

    def operand(self) -> str:
        return self.text if self.atom else f"({self.text})"


@dataclass(frozen=True, slots=True)
class _Ranges:
    low: int
    high: int
    max_value: int  # cap on any intermediate value, so numbers stay short for a tiny model


_ARITHMETIC = _Ranges(low=1, high=9, max_value=99)
_COUNTDOWN = _Ranges(low=1, high=25, max_value=300)


def _combine(rng: random.Random, a: _Node, b: _Node, ranges: _Ranges) -> _Node:
    """Join two subtrees with a random operator that keeps the result a positive integer."""
    ops = ["+", "-", "*"]
    rng.shuffle(ops)
    for op in ops:
        left, right = (a, b) if rng.random() < 0.5 else (b, a)
        if op == "-":
            left, right = (a, b) if a.value >= b.value else (b, a)
            value = left.value - right.value
            if value <= 0:
                continue
        elif op == "*":
            value = left.value * right.value
            if 1 in (left.value, right.value) or value > ranges.max_value:
                continue
        else:
            value = left.value + right.value
            if value > ranges.max_value:
                continue
        step = f"{left.value} {op} {right.value} = {value}"
        text = f"{left.operand()} {op} {right.operand()}"
        return _Node(value, text, (*left.steps, *right.steps, step), atom=False)
    # Only reachable when a + b exceeds max_value: still exact, just a larger number.
    value = a.value + b.value
    step = f"{a.value} + {b.value} = {value}"
    return _Node(value, f"{a.operand()} + {b.operand()}", (*a.steps, *b.steps, step), atom=False)


def _random_tree(rng: random.Random, leaves: int, ranges: _Ranges) -> tuple[_Node, list[int]]:
    numbers = [rng.randint(ranges.low, ranges.high) for _ in range(leaves)]
    nodes = [_Node(x, str(x), (), atom=True) for x in numbers]
    while len(nodes) > 1:
        i, j = rng.sample(range(len(nodes)), 2)
        joined = _combine(rng, nodes[i], nodes[j], ranges)
        nodes = [n for k, n in enumerate(nodes) if k not in (i, j)] + [joined]
    return nodes[0], numbers


def _iter_arithmetic(rng: random.Random, difficulty: int) -> Iterator[Problem]:
    while True:
        root, _ = _random_tree(rng, difficulty + 1, _ARITHMETIC)
        yield Problem(f"Compute {root.text}.", str(root.value), root.steps)


def _iter_countdown(rng: random.Random, difficulty: int) -> Iterator[Problem]:
    while True:
        root, numbers = _random_tree(rng, difficulty + 1, _COUNTDOWN)
        if root.value in numbers:  # the target is a given number: trivial, draw again
            continue
        given = ", ".join(str(x) for x in sorted(numbers))
        yield Problem(f"Use {given} to make {root.value}.", root.text, root.steps)


def _stream(task: str, seed: int, difficulty: int, name: str) -> Iterator[Problem]:
    if task not in TASKS:
        raise ValueError(
            f"task: unknown generator {task!r}; known: {', '.join(TASKS)} "
            "(task 'dataset' is read with load_dataset_file)"
        )
    if not 1 <= difficulty <= _MAX_DIFFICULTY:
        raise ValueError(f"difficulty: must be in 1..{_MAX_DIFFICULTY}, got {difficulty}")
    # A string seed is hashed with SHA-512 by `random`, so streams are stable across processes.
    rng = random.Random(f"{task}:{seed}:{difficulty}:{name}")
    if task == "arithmetic":
        return _iter_arithmetic(rng, difficulty)
    return _iter_countdown(rng, difficulty)


def _take_unique(
    stream: Iterator[Problem], n: int, exclude: frozenset[str], *, what: str, strict: bool = True
) -> list[Problem]:
    """The first ``n`` problems of ``stream`` whose questions are new and not in ``exclude``."""
    seen: set[str] = set(exclude)
    out: list[Problem] = []
    draws = misses = 0
    # Small difficulties have few distinct problems: give up after a long run of repeats rather
    # than spin (the last few distinct problems of a small space take the longest to hit).
    while len(out) < n and misses < _MAX_REPEATS:
        problem = next(stream)
        draws += 1
        if problem.question in seen:
            misses += 1
            continue
        misses = 0
        seen.add(problem.question)
        out.append(problem)
    if strict and len(out) < n:
        raise ValueError(
            f"{what}: found only {len(out)} distinct problems after {draws} draws, {n} requested; "
            "raise difficulty or ask for fewer"
        )
    return out


def arithmetic(n: int, *, seed: int, difficulty: int) -> list[Problem]:
    """``n`` distinct multi-step arithmetic problems with ``difficulty`` operations each."""
    return make_problems("arithmetic", n, seed=seed, difficulty=difficulty)


def countdown(n: int, *, seed: int, difficulty: int) -> list[Problem]:
    """``n`` distinct Countdown problems over ``difficulty + 1`` numbers (all used once)."""
    return make_problems("countdown", n, seed=seed, difficulty=difficulty)


def make_problems(
    task: str,
    n: int,
    *,
    seed: int,
    difficulty: int,
    exclude: Sequence[str] = (),
    strict: bool = True,
) -> list[Problem]:
    """``n`` distinct problems of a built-in ``task``, none with a question in ``exclude``.

    ``strict=False`` returns fewer than ``n`` when the task has too few distinct problems at this
    difficulty instead of raising ValueError.
    """
    if n < 0:
        raise ValueError(f"n: must be >= 0, got {n}")
    stream = _stream(task, seed, difficulty, "problems")
    return _take_unique(stream, n, frozenset(exclude), what=task, strict=strict)


def train_eval_split(
    task: str, train_size: int, eval_size: int, *, seed: int, difficulty: int
) -> tuple[list[Problem], list[Problem]]:
    """Disjoint (by question) training and held-out problems of a built-in task.

    The held-out set is drawn from its own seed stream first, so it does not change when
    ``train_size`` does (runs with different training sizes evaluate on the same problems).
    """
    if train_size < 0 or eval_size < 0:
        raise ValueError(f"train_size/eval_size: must be >= 0, got {train_size}/{eval_size}")
    eval_problems = _take_unique(
        _stream(task, seed, difficulty, "eval"), eval_size, frozenset(), what=f"{task} eval"
    )
    train = _take_unique(
        _stream(task, seed, difficulty, "train"),
        train_size,
        frozenset(p.question for p in eval_problems),
        what=f"{task} train",
    )
    return train, eval_problems


def split_problems(
    problems: Sequence[Problem], eval_size: int, *, seed: int, train_size: int | None = None
) -> tuple[list[Problem], list[Problem]]:
    """Split dataset problems into (train, eval), disjoint by question after de-duplication.

    Problems are de-duplicated by question (first occurrence wins), shuffled with ``seed``; the
    first ``eval_size`` are held out and the next ``train_size`` (default: all the rest) train.
    """
    unique = list({p.question: p for p in reversed(problems)}.values())[::-1]
    if eval_size < 0 or eval_size >= len(unique):
        raise ValueError(
            f"eval_size: {eval_size} leaves no training problems out of {len(unique)} distinct"
        )
    random.Random(f"split:{seed}").shuffle(unique)
    rest = unique[eval_size:]
    return (rest if train_size is None else rest[:train_size]), unique[:eval_size]


def load_dataset_file(
    path: str | Path, question_field: str = "question", answer_field: str = "answer"
) -> list[Problem]:
    """Problems from a local JSONL file (one object per line) or Parquet file (needs pyarrow).

    Answers may be strings or numbers (stored as ``str``); blank JSONL lines are skipped. Errors
    are ValueError naming the file, the line (JSONL, 1-based) or row (Parquet, 0-based) and field.
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"dataset: no such file {str(p)!r}")
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _load_jsonl(p, question_field, answer_field)
    if suffix in (".parquet", ".pq"):
        return _load_parquet(p, question_field, answer_field)
    raise ValueError(
        f"dataset {str(p)!r}: unsupported file type {suffix!r}; use .jsonl or .parquet"
    )


def _load_jsonl(path: Path, question_field: str, answer_field: str) -> list[Problem]:
    problems: list[Problem] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"dataset {where}: invalid JSON: {e.msg}") from e
            if not isinstance(row, dict):
                raise ValueError(
                    f"dataset {where}: expected a JSON object, got {type(row).__name__}"
                )
            problems.append(_problem(row, question_field, answer_field, where))
    if not problems:
        raise ValueError(f"dataset {path}: no rows")
    return problems


def _load_parquet(path: Path, question_field: str, answer_field: str) -> list[Problem]:
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as e:
        raise ValueError(
            f"dataset {path}: reading Parquet needs pyarrow (pip install pyarrow)"
        ) from e
    columns = pq.read_schema(path).names
    for field in (question_field, answer_field):
        if field not in columns:
            raise ValueError(
                f"dataset {path}: no column {field!r} (columns: {', '.join(columns)}); "
                "set data.question_field / data.answer_field"
            )
    wanted = list(dict.fromkeys([question_field, answer_field]))
    rows = pq.read_table(path, columns=wanted).to_pylist()
    problems = [
        _problem(row, question_field, answer_field, f"{path} row {i}") for i, row in enumerate(rows)
    ]
    if not problems:
        raise ValueError(f"dataset {path}: no rows")
    return problems


def _problem(row: dict[str, Any], question_field: str, answer_field: str, where: str) -> Problem:
    for field in (question_field, answer_field):
        if field not in row:
            raise ValueError(
                f"dataset {where}: missing field {field!r} (fields: {', '.join(map(str, row))})"
            )
    question, answer = row[question_field], row[answer_field]
    if not isinstance(question, str) or not question.strip():
        raise ValueError(f"dataset {where}: field {question_field!r} must be a non-empty string")
    if isinstance(answer, bool) or not isinstance(answer, str | int | float):
        raise ValueError(
            f"dataset {where}: field {answer_field!r} must be a string or number, "
            f"got {type(answer).__name__}"
        )
    return Problem(question=question, answer=str(answer))
