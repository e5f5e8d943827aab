"""Registry entry ``"format_length"``: the label-free format + length surrogate of Xin et al.

Xin et al., "Surrogate Signals from Format and Length: Reinforcement Learning for Solving
Mathematical Problems without Ground Truth Answers" (2025, arXiv:2505.19439), §2; SARL's related
work cites it as the format-compliance + response-length baseline. Imported lazily by
``sarl.rewards.registry``; a per-sample reward.

The rule is the authors' code (insightLLM/rl-without-gt, ``rl/verl/lib/src/rewards/
math_reward.py``, ``RewardMathFn_xrh.__call__``, lines 359-386, the "Format-Length" branch), which
produced the paper's numbers; the paper's eq. 1 text ("R_f = 1 for a valid boxed answer")
leaves out its think-tag half and where the box must be:

* Format (``format_rule="reference"``, default): ``R_f = 0.5 * think + 0.5 * box``, where
  ``think`` = the response contains ``<think>...</think>`` (``soft_format_reward_func_v2``:
  ``re.search(r"<think>.*?</think>", re.DOTALL)``) and ``box`` = the answer is valid mathematics
  (``answer_format_reward_func``: non-empty and accepted by the validity check). The answer is
  found as ``eval/evaluator.py:MATHEvaluator_Base.parse_answer`` finds it: with an
  ``<answer>...</answer>`` block (greedy), its last ``\\boxed{}``, else its last ``\\(...\\)``,
  else its content; otherwise the *last* ``\\boxed`` after the last ``</think>`` (the whole
  response when there is none), taken only if a ``{`` follows at once and closes
  (``extract_boxed_answer``: an unclosed last box is no answer, even after a complete one). So a
  box only inside the thinking is no answer, and a response without think tags earns at most
  0.5 from the format. (The reference normalises the ``<answer>``-content fallback with
  ``normalize_final_answer`` before its check; here the content is only stripped of ``$`` and
  whitespace — the prompt of the paper's runs asks for ``\\boxed{}``, not answer tags.)
* ``format_rule="box_only"``: the paper's eq. 1 as written, the previous behaviour of this
  reward: ``R_f = 1`` if the response's last complete ``\\boxed{}`` anywhere (think or not) is
  valid, else 0.
* Validity check (both rules): the reference parses the content with SymPy (``val_by_sympy``:
  ``_normalize``, LaTeX to text with pylatexenc, ``=`` -> ``==``, then ``parse_expr`` with implicit
  multiplication, which also *evaluates* the expression). :func:`valid_math` is a dependency-free
  stand-in that rejects the paper's wrong cases (``\\boxed{}``, ``\\boxed{x +* 2}``,
  ``\\boxed{(0,1 }``): empty content, a doubled or dangling operator, or unbalanced brackets
  (``(``/``[`` close with ``)``/``]`` in either combination, so intervals such as ``[0, 1)``
  pass). It is kept deliberately: pylatexenc is not a dependency, and evaluating runs without
  bound on a power tower such as ``9^9^9^9`` (the reference's own ``should_allow_eval`` guard is
  not called there), which a policy can write.
* Length (eqs. 2-3, ``length_reward_func_v3`` with ``p = 0.5``): with ``x = L / L_max`` and
  turning point ``p``, ``R_l = 1 - (1 - x/p)^2`` for ``x <= p`` and ``1 - 2((x - p)/(1 - p))^2``
  for ``x > p``: it rises from 0 to its maximum 1 at ``x = p`` and falls to -1 at ``x = 1``
  (smooth at ``p``). ``shape="polyline"`` is the paper's eq. 4 ablation (``2x``, ``3 - 4x`` at
  ``p = 0.5``), generalised to any ``p`` through the same three points (0, 0), (p, 1), (1, -1).
  ``x`` is clipped to [0, 1]: a response longer than ``L_max`` (truncated) scores as ``x = 1``.
* Combination (eq. 5 and the reference's branch): ``R = R_f + R_l`` when the answer is valid,
  else ``min(0, R_l)`` — the think half never rescues a response without a valid answer, and a
  badly formatted response never earns a positive reward.

Length unit: the reference counts L in tokens against the maximum response length (3072 tokens
in its runs). Rewards here see text only, so L is counted in characters (default) or
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

COMPONENT_KEYS = ("format", "think", "valid_answer", "length_reward", "length_ratio")
Shape = Literal["smooth", "polyline"]
FormatRule = Literal["reference", "box_only"]

_DOUBLED_OPERATOR = re.compile(r"[-+*/^=]\s*[*/^=]")
_LEADING_OPERATOR = re.compile(r"^\s*[*/^=]")
_DANGLING_OPERATOR = re.compile(r"[-+*/^=]\s*$")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_ANSWER_OPEN, _ANSWER_CLOSE = "<answer>", "</answer>"
_BOXED = "\\boxed"


class FormatLengthRewardSettings(BaseModel):
    """``L_max`` and its unit, the turning point ``p``, the length curve and the format rule."""

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
    format_rule: FormatRule = Field(
        default="reference",
        description="'reference' (the authors' code): 0.5 for <think>...</think> + 0.5 for a "
        "valid \\boxed{} answer after </think>; 'box_only' (the paper's eq. 1 text, the old "
        "rule): 1 for a valid last \\boxed{} anywhere.",
    )


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


def has_think(response: str) -> bool:
    """``<think>...</think>`` anywhere (the reference's ``re.search(r"<think>.*?</think>")``,
    decided in linear time: the first ``<think>`` has a ``</think>`` after it)."""
    start = response.find(_THINK_OPEN)
    return start >= 0 and response.find(_THINK_CLOSE, start + len(_THINK_OPEN)) >= 0


def last_boxed(text: str) -> str | None:
    """Content of the *last* ``\\boxed`` if a ``{`` follows at once and closes, else None.

    The reference's ``extract_boxed_answer``: ``text.rfind("\\boxed")``, then the braces from
    there; unlike :func:`sarl.rewards.math_answer.extract_answer` it does not fall back to an
    earlier complete box, nor accept ``\\boxed {x}``.
    """
    first = text.rfind(_BOXED) + len(_BOXED)
    if first < len(_BOXED) or not text.startswith("{", first):
        return None
    depth = 0
    for i in range(first, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[first + 1 : i]
    return None


def _last_inline_math(text: str) -> str | None:
    """Content of the last ``\\(...\\)``: the reference's last non-overlapping lazy match, found
    in linear time (a ``\\(`` without a later ``\\)`` ends the search)."""
    found, pos = None, 0
    while (start := text.find("\\(", pos)) >= 0:
        end = text.find("\\)", start + 2)
        if end < 0:
            break
        found, pos = text[start + 2 : end], end + 2
    return found


def reference_answer(response: str) -> str:
    """The answer the reference's ``parse_answer`` takes ("" for none; rules in the docstring)."""
    start = response.find(_ANSWER_OPEN)
    end = response.rfind(_ANSWER_CLOSE)
    if start >= 0 and end >= start + len(_ANSWER_OPEN):  # re.search("<answer>(.*)</answer>")
        block = response[start + len(_ANSWER_OPEN) : end]
        answer = last_boxed(block)
        if answer is None:
            answer = _last_inline_math(block)
        return block.replace("$", "").strip() if answer is None else answer
    # after the last </think> (the whole response without one): the thinking is not the answer
    return last_boxed(response.rpartition(_THINK_CLOSE)[2]) or ""


def format_reward(response: str, rule: FormatRule = "reference") -> tuple[float, bool]:
    """``(R_f, valid answer)``: the reference's ``0.5 * think + 0.5 * box``, or eq. 1's box."""
    if rule == "box_only":
        answer = extract_answer(response)
        valid = answer is not None and valid_math(answer)
        return float(valid), valid
    valid = valid_math(reference_answer(response))
    return 0.5 * has_think(response) + 0.5 * valid, valid


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


def format_length_reward(r_format: float, r_length: float, valid_answer: bool) -> float:
    """Eq. 5 as the reference computes it: ``R_f + R_l`` with a valid answer, else
    ``min(0, R_l)`` (``math_reward.py``: ``if answer_format_reward > 0 ... else min(0.0,
    length_reward)``)."""
    return r_format + r_length if valid_answer else min(0.0, r_length)


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
        r_format, valid = format_reward(response, s.format_rule)
        r_length = length_reward(ratio, s.turning_point, s.shape)
        return RewardOutput(
            format_length_reward(r_format, r_length, valid),
            {
                "format": r_format,
                "think": float(has_think(response)),
                "valid_answer": float(valid),
                "length_reward": r_length,
                "length_ratio": ratio,
            },
        )
