"""Registry entry ``"format_length"``: the label-free format + length surrogate of Xin et al.

Xin et al., "Surrogate Signals from Format and Length: Reinforcement Learning for Solving
Mathematical Problems without Ground Truth Answers" (2025, arXiv:2505.19439), §2; SARL's related
work cites it as the format-compliance + response-length baseline. Imported lazily by
``sarl.rewards.registry``; a per-sample reward.

* Format (eq. 1, App. A.8): ``R_f = 1`` if the response has a ``\\boxed{}`` answer whose content
  is valid mathematics, else 0. The paper validates the content with SymPy; :func:`valid_math`
  is a dependency-free stand-in that rejects the paper's wrong cases (``\\boxed{}``,
  ``\\boxed{x +* 2}``, ``\\boxed{(0,1 }``): empty content, a doubled or dangling operator, or
  unbalanced brackets (``(``/``[`` close with ``)``/``]`` in either combination, so intervals
  such as ``[0, 1)`` pass). It accepts text answers SymPy would not parse.
* Length (eqs. 2-3): with ``x = L / L_max`` and turning point ``p`` (default 0.5),
  ``R_l = 1 - (1 - x/p)^2`` for ``x <= p`` and ``1 - 2((x - p)/(1 - p))^2`` for ``x > p``: it
  rises from 0 to its maximum 1 at ``x = p`` and falls to -1 at ``x = 1`` (smooth at ``p``).
  ``shape="polyline"`` is the paper's eq. 4 ablation (``2x``, ``3 - 4x`` at ``p = 0.5``),
  generalised to any ``p`` through the same three points (0, 0), (p, 1), (1, -1). ``x`` is
  clipped to [0, 1]: a response longer than ``L_max`` (truncated) scores as ``x = 1``.
* Combination (eq. 5): ``R = R_f + R_l`` when the format is right, else ``min(0, R_f + R_l)``,
  so a badly formatted response never earns a positive reward.

Length unit: the paper measures L in tokens against the maximum response length (3072 tokens in
its runs). Rewards here see text only, so L is counted in characters (default) or
whitespace-separated words, and ``max_length`` must be given in the same unit; the default
12288 characters is the paper's 3072 tokens at ~4 characters per token.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sarl.rewards.base import PerSampleReward, RewardOutput, Sample
from sarl.rewards.math_answer import extract_answer
from sarl.rewards.registry import register_reward

COMPONENT_KEYS = ("format", "length_reward", "length_ratio")
Shape = Literal["smooth", "polyline"]

_DOUBLED_OPERATOR = re.compile(r"[-+*/^=]\s*[*/^=]")
_LEADING_OPERATOR = re.compile(r"^\s*[*/^=]")
_DANGLING_OPERATOR = re.compile(r"[-+*/^=]\s*$")


class FormatLengthRewardSettings(BaseModel):
    """``L_max`` and its unit, the turning point ``p`` and the length curve's shape."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_length: int = Field(
        default=12288, gt=0, description="L_max, in length_unit (paper: 3072 tokens ≈ 12288 chars)."
    )
    length_unit: Literal["chars", "words"] = Field(
        default="chars", description="How L is counted: characters or whitespace-separated words."
    )
    turning_point: float = Field(
        default=0.5, gt=0, lt=1, description="p: the length ratio L/L_max of maximal reward."
    )
    shape: Shape = Field(default="smooth", description="'smooth' (eq. 2) or 'polyline' (eq. 4).")


def valid_math(content: str) -> bool:
    """Whether boxed content looks like valid mathematics (rules in the module docstring)."""
    if not content.strip():
        return False
    if (
        _DOUBLED_OPERATOR.search(content)
        or _LEADING_OPERATOR.search(content)
        or _DANGLING_OPERATOR.search(content)
    ):
        return False
    depth = 0
    for ch in content:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
            if depth < 0:
                return False
    return depth == 0


def format_reward(response: str) -> float:
    """Xin et al. eq. 1: 1 if the last ``\\boxed{}`` holds valid mathematics, else 0."""
    answer = extract_answer(response)
    return float(answer is not None and valid_math(answer))


def length_reward(x: float, p: float = 0.5, shape: Shape = "smooth") -> float:
    """Xin et al. eq. 2 (``smooth``) or eq. 4 (``polyline``) at ``x = L / L_max`` (clipped)."""
    x = min(max(x, 0.0), 1.0)
    if shape == "smooth":
        # eq. 2: 1 - (1 - x/p)^2 for x <= p; 1 - 2((x - p)/(1 - p))^2 for x > p
        if x <= p:
            return 1.0 - (1.0 - x / p) ** 2
        return 1.0 - 2.0 * ((x - p) / (1.0 - p)) ** 2
    # eq. 4 (2x, 3 - 4x at p = 0.5), through (0, 0), (p, 1), (1, -1) for any p
    return x / p if x <= p else 1.0 - 2.0 * (x - p) / (1.0 - p)


def format_length_reward(r_format: float, r_length: float) -> float:
    """Xin et al. eq. 5: ``R_f + R_l`` if the format is right, else ``min(0, R_f + R_l)``."""
    total = r_format + r_length
    return total if r_format > 0 else min(0.0, total)


def text_length(text: str, unit: Literal["chars", "words"]) -> int:
    return len(text) if unit == "chars" else len(text.split())


@register_reward
class FormatLengthReward(PerSampleReward):
    """``R_fl`` of Xin et al. eq. 5 per response (no ground truth, no siblings)."""

    name = "format_length"
    Settings = FormatLengthRewardSettings
    components = COMPONENT_KEYS

    def __init__(self, settings: FormatLengthRewardSettings) -> None:
        super().__init__(settings)
        self._settings = settings

    def score_sample(self, sample: Sample, where: tuple[int, int]) -> RewardOutput:
        response = sample.response
        s = self._settings
        ratio = text_length(response, s.length_unit) / s.max_length
        r_format = format_reward(response)
        r_length = length_reward(ratio, s.turning_point, s.shape)
        return RewardOutput(
            format_length_reward(r_format, r_length),
            {"format": r_format, "length_reward": r_length, "length_ratio": ratio},
        )
