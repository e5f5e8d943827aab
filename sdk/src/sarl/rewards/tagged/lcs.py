"""Registry entry ``"tag_lcs"``: the Longest Common Subsequence reward of tagged reasoning (§3.2).

Imported lazily by ``sarl.rewards.registry``; used by the adapters, which must keep groups whole
(``needs_group``). A completion is scored against every sibling of its group (all completions of
one prompt) by the longest common subsequence of their step tags, weighted by step lengths with
the length-suppression factor, signed by whether each of the two is correct (eq. 4), and averaged
over the siblings (eq. 5). The pure functions below are the formulas; the reward only parses,
measures and checks answers.

Step length is measured in characters of the stripped step text (``length_unit="chars"``) or in
whitespace-separated words; the paper counts tokens, but every length enters only through ratios
(ratio_k, L_lcs / L_i), which a tokenizer-free unit approximates without loading one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from sarl.rewards.base import PerGroupReward, RewardOutput, Sample
from sarl.rewards.math_answer import answers_equal, extract_answer
from sarl.rewards.registry import register_reward
from sarl.rewards.tagged.tags import parse_completion

COMPONENT_KEYS = ("correct", "num_steps", "overlap_correct", "overlap_incorrect")

#: The steps of one completion as ``(tag, length)`` pairs, in order.
TaggedSteps = Sequence[tuple[str, float]]


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two tag sequences (classic O(|a||b|) DP)."""
    prev = [0] * (len(b) + 1)
    for x in a:
        row = [0]
        for j, y in enumerate(b):
            row.append(prev[j] + 1 if x == y else max(prev[j + 1], row[j]))
        prev = row
    return prev[-1]


def suppression_ratio(len_i: float, len_j: float) -> float:
    """Length-suppression factor ratio_k of a matched step (§3.2, before eq. 4).

    ``ratio_k = l_j / (2 l_i)`` if ``l_i > l_j`` else ``1 - l_i / (2 l_j)``; 0.5 at equal lengths,
    so ``ratio_k * l_i`` stops growing once step i is longer than its match (padding a step gains
    nothing). Two empty steps (0 / 0) get the equal-length value 0.5; their weight is 0 anyway.
    """
    if len_i > len_j:
        return len_j / (2.0 * len_i)
    if len_j == 0:
        return 0.5
    return 1.0 - len_i / (2.0 * len_j)


@dataclass(frozen=True, slots=True)
class LcsMatch:
    """A longest common subsequence of two step sequences, seen from the first one."""

    length: int
    #: L_lcs = sum over matched steps k of ratio_k * l_{i,k}.
    weighted: float
    #: Matched ``(index in i, index in j)`` step pairs, in order.
    pairs: tuple[tuple[int, int], ...]


def weighted_lcs(steps_i: TaggedSteps, steps_j: TaggedSteps) -> LcsMatch:
    """The LCS of the tags of ``steps_i`` and ``steps_j`` and its weighted length L_lcs (§3.2).

    Several alignments can reach the LCS length and the paper does not say which one it weighs;
    we take the one with the largest L_lcs (lexicographic DP on ``(matches, L_lcs)``), which
    makes the result independent of backtracking order.
    """
    n, m = len(steps_i), len(steps_j)
    # best[a][b]: best (matches, L_lcs) of steps_i[:a] vs steps_j[:b]; move[a][b]: how it is reached
    best = [[(0, 0.0)] * (m + 1) for _ in range(n + 1)]
    move = [[""] * (m + 1) for _ in range(n + 1)]
    for a in range(1, n + 1):
        tag_i, len_i = steps_i[a - 1]
        for b in range(1, m + 1):
            tag_j, len_j = steps_j[b - 1]
            # on a tie "up" wins ("up" > "left"); either way the value is the same
            best[a][b], move[a][b] = max((best[a - 1][b], "up"), (best[a][b - 1], "left"))
            if tag_i == tag_j:
                count, weight = best[a - 1][b - 1]
                diag = (count + 1, weight + suppression_ratio(len_i, len_j) * len_i)
                if diag > best[a][b]:
                    best[a][b], move[a][b] = diag, "diag"
    pairs: list[tuple[int, int]] = []
    a, b = n, m
    while a > 0 and b > 0:
        step = move[a][b]
        if step == "diag":
            pairs.append((a - 1, b - 1))
        a, b = (a - 1, b) if step == "up" else (a, b - 1) if step == "left" else (a - 1, b - 1)
    count, weight = best[n][m]
    return LcsMatch(count, weight, tuple(reversed(pairs)))


def overlap(steps_i: TaggedSteps, steps_j: TaggedSteps) -> float:
    """L_lcs / L_i with L_i the total step length of i; 0 when i has no (or only empty) steps."""
    total = math.fsum(length for _, length in steps_i)
    if total <= 0:
        return 0.0
    return weighted_lcs(steps_i, steps_j).weighted / total


def pair_score(overlap_ij: float, correct_i: bool, correct_j: bool) -> float:
    """Score_lcs(r_i, r_j) of eq. (4) from ``overlap_ij = L_lcs / L_i``.

    Both correct: overlap; both incorrect: -overlap; i correct, j not: 1 - overlap; i incorrect,
    j correct: -1 + overlap.
    """
    if correct_i and correct_j:
        return overlap_ij
    if not correct_i and not correct_j:
        return -overlap_ij
    if correct_i:
        return 1.0 - overlap_ij
    return -1.0 + overlap_ij


@dataclass(frozen=True, slots=True)
class LcsScore:
    """r_lcs of one completion plus its mean overlap with correct and with incorrect siblings."""

    score: float
    #: Mean L_lcs / L_i over correct siblings; NaN without one.
    overlap_correct: float
    #: Mean L_lcs / L_i over incorrect siblings; NaN without one.
    overlap_incorrect: float


def group_lcs_scores(steps: Sequence[TaggedSteps], correct: Sequence[bool]) -> list[LcsScore]:
    """r_lcs(c_i) = 1/(n-1) * sum_{j != i} Score_lcs(c_i, c_j) for every completion (eq. 5).

    Edge cases: an empty group gives ``[]``; a single completion has no sibling to compare with
    (eq. 5 divides by n - 1 = 0) and scores 0.0, which is also what GRPO's group-relative
    advantage gives it.
    """
    if len(steps) != len(correct):
        raise ValueError(f"got {len(steps)} step sequences for {len(correct)} correctness flags")
    n = len(steps)
    out: list[LcsScore] = []
    for i in range(n):
        scores: list[float] = []
        by_partner: dict[bool, list[float]] = {True: [], False: []}
        for j in range(n):
            if j == i:
                continue
            x = overlap(steps[i], steps[j])
            scores.append(pair_score(x, correct[i], correct[j]))
            by_partner[correct[j]].append(x)
        out.append(
            LcsScore(
                math.fsum(scores) / len(scores) if scores else 0.0,
                _mean(by_partner[True]),
                _mean(by_partner[False]),
            )
        )
    return out


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


class TagLcsSettings(BaseModel):
    """How step lengths are measured for the length-suppression factor and L_i."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    length_unit: Literal["chars", "words"] = Field(
        default="chars", description="Unit of step length: characters or whitespace words."
    )


@register_reward
class TagLcsReward(PerGroupReward):
    """LCS reward of eqs. (4)–(5) over each group; correctness is the boxed answer vs the truth.

    A completion is correct when its last ``\\boxed{}`` answer equals ``Sample.ground_truth``
    (reduced to its own boxed answer if it has one) under ``answers_equal``; a sample without a
    ground truth is an error, as in the ``ground_truth`` reward.
    """

    name = "tag_lcs"
    Settings = TagLcsSettings
    components = COMPONENT_KEYS
    needs_group = True

    def __init__(self, settings: TagLcsSettings) -> None:
        super().__init__(settings)
        self._settings = settings

    def score_group(self, group: Sequence[Sample], index: int) -> list[RewardOutput]:
        steps = [self._steps(sample.response) for sample in group]
        correct = [_is_correct(sample, (index, i)) for i, sample in enumerate(group)]
        return [
            RewardOutput(
                result.score,
                {
                    "correct": float(ok),
                    "num_steps": float(len(seq)),
                    "overlap_correct": result.overlap_correct,
                    "overlap_incorrect": result.overlap_incorrect,
                },
            )
            for result, ok, seq in zip(
                group_lcs_scores(steps, correct), correct, steps, strict=True
            )
        ]

    def _steps(self, response: str) -> list[tuple[str, float]]:
        words = self._settings.length_unit == "words"
        return [
            (step.tag, float(len(step.text.split()) if words else len(step.text)))
            for step in parse_completion(response).steps
        ]


def _is_correct(sample: Sample, where: tuple[int, int]) -> bool:
    if sample.ground_truth is None:
        raise ValueError(
            f"reward 'tag_lcs': sample {where[1]} of group {where[0]} (prompt "
            f"{sample.prompt[:80]!r}) has no ground truth; give the dataset a 'ground_truth' column"
        )
    pred = extract_answer(sample.response)
    truth = extract_answer(sample.ground_truth) or sample.ground_truth
    return pred is not None and answers_equal(pred, truth)
