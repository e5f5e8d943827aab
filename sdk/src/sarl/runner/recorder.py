"""Wraps the TRL reward functions of a local run to keep the last batch for logging.

Called by ``sarl.runner.local``: TRL calls every reward function with the batch's prompts,
completions, completion ids and dataset columns; the first wrapper records them (and the
accuracy against the ``ground_truth`` column, whether or not a ground-truth reward is part of
the objective) so the MLflow callback can log accuracy and draw reasoning maps of sample
responses without another generation pass (the policy embedder re-embeds the recorded ids).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sarl.integrations.trl import completion_text
from sarl.rewards.math_answer import answers_equal, extract_answer

RewardFunc = Callable[..., list[float | None]]


@dataclass
class BatchRecord:
    """The most recent batch TRL scored."""

    completions: list[str] = field(default_factory=list)
    ground_truth: list[str] = field(default_factory=list)
    # What the policy embedder needs to embed the recorded completions again (reasoning maps).
    prompts: list[Any] = field(default_factory=list)
    completion_ids: list[list[int]] | None = None

    def answer_rate(self) -> float | None:
        """Share of the batch's responses that give a final answer at all (a policy can raise
        a structure reward by never concluding; the Study report flags that)."""
        if not self.completions:
            return None
        answered = [extract_answer(text) is not None for text in self.completions]
        return sum(answered) / len(answered)

    def accuracy(self) -> float | None:
        if not self.completions or len(self.ground_truth) != len(self.completions):
            return None
        hits = [
            (pred := extract_answer(text)) is not None and answers_equal(pred, truth)
            for text, truth in zip(self.completions, self.ground_truth, strict=True)
        ]
        return sum(hits) / len(hits)


def recording(func: RewardFunc, record: BatchRecord) -> RewardFunc:
    """``func`` that also stores the batch in ``record`` (keeps TRL's ``__name__``)."""

    def wrapper(prompts: Sequence[Any], completions: Sequence[Any], *args: Any, **kw: Any) -> Any:
        record.completions = [completion_text(c) for c in completions]
        record.prompts = list(prompts)
        ids = kw.get("completion_ids", args[0] if args else None)
        record.completion_ids = [list(i) for i in ids] if ids is not None else None
        truth = kw.get("ground_truth")
        record.ground_truth = [str(t) for t in truth] if isinstance(truth, list) else []
        return func(prompts, completions, *args, **kw)

    wrapper.__name__ = getattr(func, "__name__", "reward")
    return wrapper
