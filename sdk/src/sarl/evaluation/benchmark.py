"""Benchmark evaluation, the pure part: problems from verl rows, answers checked by math-verify,
per-problem results, avg@k/pass@k per benchmark and their metric names.

Called by the evaluation job (``sarl_jobs.evaluate``); generation lives in
:mod:`sarl.evaluation.generation`, the artifacts in :mod:`sarl.evaluation.report`. Answers are
the last complete ``\\boxed{}`` of a response (:func:`sarl.rewards.math_answer.extract_answer`),
checked by the ``ground_truth_math_verify`` reward (math-verify in a bounded worker process); the
metrics are :func:`sarl.evaluation.passk.summarize` over each problem's k verdicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from sarl.datasets.schema import check_row
from sarl.evaluation.passk import summarize
from sarl.rewards.math_answer import extract_answer
from sarl.tracking.metrics import EVAL_PREFIX, eval_avg_at, eval_pass_at, metric_key

#: Name under which the mean over benchmarks is logged (the papers' "Avg" column).
MEAN_BENCHMARK = "mean"


@dataclass(frozen=True)
class BenchmarkProblem:
    """One problem: its chat prompt (as stored in the parquet) and ground-truth answer."""

    benchmark: str
    index: int
    messages: list[dict[str, str]]
    ground_truth: str


@dataclass(frozen=True)
class ProblemResult:
    """The k sampled responses to one problem, their extracted answers and verdicts."""

    benchmark: str
    index: int
    prompt: str
    ground_truth: str
    responses: list[str]
    answers: list[str | None]
    correct: list[bool]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class AnswerChecker(Protocol):
    """Verdicts for groups of responses, each group sharing one ground truth."""

    def __call__(self, groups: Sequence[tuple[Sequence[str], str]]) -> list[list[bool]]: ...


def problems_from_rows(
    benchmark: str, rows: Sequence[Mapping[str, Any]], where: str, limit: int | None = None
) -> list[BenchmarkProblem]:
    """Problems of verl ``rows`` (the first ``limit``); ValueError naming ``where`` and the row."""
    if not rows:
        raise ValueError(f"{where}: benchmark {benchmark!r} has no rows")
    chosen = rows[:limit] if limit else rows
    out = []
    for i, row in enumerate(chosen):
        messages, truth = check_row(row, f"{where} row {i}")
        out.append(BenchmarkProblem(benchmark, i, messages, truth))
    return out


class MathVerifyChecker:
    """:class:`AnswerChecker` backed by the ``ground_truth_math_verify`` reward.

    ``on_missing="error"``: evaluation numbers claim math-verify, so without it installed
    (``sarl[math]``) building the checker fails instead of silently using the simpler rule.
    """

    def __init__(self, workers: int = 1, timeout_seconds: float = 5.0) -> None:
        from sarl.rewards.baselines.math_verify import MathVerifyReward, MathVerifyRewardSettings

        self._reward = MathVerifyReward(
            MathVerifyRewardSettings(
                workers=workers, timeout_seconds=timeout_seconds, on_missing="error"
            )
        )

    def __call__(self, groups: Sequence[tuple[Sequence[str], str]]) -> list[list[bool]]:
        from sarl.rewards.base import Sample

        batch = [[Sample(response=r, ground_truth=truth) for r in rs] for rs, truth in groups]
        scored = self._reward.score_groups(batch)
        return [[out.components["correct"] == 1.0 for out in group] for group in scored]

    def close(self) -> None:
        self._reward.close()


def score_problems(
    problems: Sequence[BenchmarkProblem],
    prompts: Sequence[str],
    samples: Sequence[Sequence[str]],
    check: AnswerChecker,
) -> list[ProblemResult]:
    """Per-problem results of ``samples`` (k responses per problem, in problem order)."""
    if not len(problems) == len(prompts) == len(samples):
        raise ValueError(
            f"{len(problems)} problems, {len(prompts)} prompts and {len(samples)} sample groups"
        )
    verdicts = check([(texts, p.ground_truth) for p, texts in zip(problems, samples, strict=True)])
    return [
        ProblemResult(
            p.benchmark,
            p.index,
            prompt,
            p.ground_truth,
            list(texts),
            [extract_answer(t) for t in texts],
            list(ok),
        )
        for p, prompt, texts, ok in zip(problems, prompts, samples, verdicts, strict=True)
    ]


def benchmark_stats(results: Sequence[ProblemResult], k: int) -> dict[str, float]:
    """``avg@k``, ``pass@k``, ``problems`` (passk.summarize) and ``answer_rate`` (share of
    responses with a boxed answer) of one benchmark's results."""
    stats = summarize([r.correct for r in results], k)
    answers = [a for r in results for a in r.answers]
    stats["answer_rate"] = sum(a is not None for a in answers) / max(1, len(answers))
    return stats


def benchmark_metrics(stats: Mapping[str, Mapping[str, float]], k: int) -> dict[str, float]:
    """MLflow metrics: ``eval/<b>/avg_at_<k>``, ``pass_at_<k>``, ``answer_rate`` per benchmark,
    and the unweighted mean over benchmarks under ``eval/mean/...`` when there are several."""
    metrics: dict[str, float] = {}
    for name, s in stats.items():
        metrics[eval_avg_at(name, k)] = s["avg@k"]
        metrics[eval_pass_at(name, k)] = s["pass@k"]
        metrics[f"{EVAL_PREFIX}{metric_key(name)}/answer_rate"] = s["answer_rate"]
    if len(stats) > 1:
        metrics[eval_avg_at(MEAN_BENCHMARK, k)] = _mean(s["avg@k"] for s in stats.values())
        metrics[eval_pass_at(MEAN_BENCHMARK, k)] = _mean(s["pass@k"] for s in stats.values())
    return metrics


def _mean(values: Iterable[float]) -> float:
    items = [float(v) for v in values]
    return sum(items) / len(items)
