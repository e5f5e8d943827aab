"""Trivial predictors of correctness, the floor every reward's validity is read against.

A response without an answer is never correct, so "has an answer" alone ranks correct responses
above many incorrect ones: at the local Study's starting answer rate (~0.5) it reaches a pooled
AUROC near 0.8 with no knowledge of the problem. A label-free reward (structure, TTRL, EMPO)
carries information about correctness only as far as its validity (:mod:`sarl.evaluation.validity`)
*beats* these predictors on the same responses. Two predictors, each 1.0 or 0.0 per response:

* ``trivial.has_answer``: the response has a final answer, a complete ``\\boxed{}`` with non-empty
  content (:func:`sarl.rewards.math_answer.extract_answer`, the rule correctness itself uses: an
  empty box is no answer, it can never equal a ground truth).
* ``trivial.format_valid``: it has one and the answer looks like mathematics
  (:func:`sarl.rewards.baselines.format_length.valid_math`: no doubled or dangling operator,
  balanced brackets), the format half of the format + length surrogate of Xin et al. (2025).

Names are validity "rewards" (``validity/trivial.has_answer/...``), so every place that logs or
reads reward validity carries them beside the rewards. :func:`strongest` picks, per figure, the
predictor a reward must beat. Called by the TRL adapter and the verl hook (logged every step),
by ``sarl reward diagnose`` (:mod:`sarl.evaluation.diagnosis`) and by the Study report.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Final

from sarl.evaluation.validity import Validity

TRIVIAL_PREFIX: Final = "trivial."
HAS_ANSWER: Final = "trivial.has_answer"
FORMAT_VALID: Final = "trivial.format_valid"
TRIVIAL: Final = (HAS_ANSWER, FORMAT_VALID)


def has_answer(response: str) -> float:
    """1.0 when ``response`` has a non-empty final ``\\boxed{}`` answer, else 0.0."""
    from sarl.rewards.math_answer import extract_answer

    return 1.0 if extract_answer(response) else 0.0


def format_valid(response: str) -> float:
    """1.0 when ``response`` has an answer that looks like valid mathematics, else 0.0."""
    from sarl.rewards.baselines.format_length import valid_math
    from sarl.rewards.math_answer import extract_answer

    answer = extract_answer(response)
    return 1.0 if answer and valid_math(answer) else 0.0


_PREDICTORS: Mapping[str, Callable[[str], float]] = {
    HAS_ANSWER: has_answer,
    FORMAT_VALID: format_valid,
}


def is_trivial(name: str) -> bool:
    """Whether a validity "reward" name is one of the trivial predictors."""
    return name.startswith(TRIVIAL_PREFIX)


def trivial_scores(responses: Sequence[str]) -> dict[str, list[float]]:
    """Each trivial predictor's value per response, by name (:data:`TRIVIAL` order)."""
    return {name: [rule(r) for r in responses] for name, rule in _PREDICTORS.items()}


def oriented(value: float | None, lower_is_better: bool) -> float | None:
    """A figure read so that higher is better (``1 - value`` for a lower-is-better one: the
    AUROC and the within-prompt AUROC of ``-x`` are one minus those of ``x``)."""
    if value is None:
        return None
    return 1.0 - value if lower_is_better else value


def strongest(baselines: Mapping[str, Validity], figure: str) -> tuple[str, float] | None:
    """The trivial predictor with the highest ``figure`` (``pair_auroc`` or ``auroc``) and its
    value; None when no predictor defines it. Ties go to the first in :data:`TRIVIAL` order."""
    best: tuple[str, float] | None = None
    for name, v in baselines.items():
        value = getattr(v, figure)
        if value is not None and (best is None or value > best[1]):
            best = (name, value)
    return best


__all__ = [
    "FORMAT_VALID",
    "HAS_ANSWER",
    "TRIVIAL",
    "TRIVIAL_PREFIX",
    "format_valid",
    "has_answer",
    "is_trivial",
    "oriented",
    "strongest",
    "trivial_scores",
]
