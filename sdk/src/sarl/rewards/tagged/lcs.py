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

Cost (issue 12): a group of G completions needs G(G-1) weighted LCS tables of S_i x S_j cells.
:func:`group_lcs_scores` fills all of them at once, one anti-diagonal of cells per numpy step
(the cells of an anti-diagonal are independent), which gives the same values bit for bit as the
cell-by-cell :func:`weighted_lcs`. Only the first ``max_steps`` steps of each completion (128 by
default) are compared: past that a completion is scored on its first ``max_steps`` steps (L_i is
their total length; the ``num_steps`` component still counts them all), so a runaway completion
costs at most G * max_steps**2 cells per sample instead of growing with its length squared.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from sarl.rewards.base import PerGroupReward, RewardOutput, Sample
from sarl.rewards.math_answer import answers_equal, extract_answer
from sarl.rewards.registry import register_reward
from sarl.rewards.tagged.tags import parse_completion

COMPONENT_KEYS = ("correct", "num_steps", "overlap_correct", "overlap_incorrect")
DEFAULT_MAX_STEPS = 128

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
    advantage gives it. Overlaps are :func:`overlap`'s, all computed in one batched table fill.
    """
    if len(steps) != len(correct):
        raise ValueError(f"got {len(steps)} step sequences for {len(correct)} correctness flags")
    n = len(steps)
    pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    weighted = batched_weighted_lcs([(steps[i], steps[j]) for i, j in pairs])
    totals = [math.fsum(length for _, length in seq) for seq in steps]
    overlaps = {
        (i, j): (float(w) / totals[i] if totals[i] > 0 else 0.0)
        for (i, j), w in zip(pairs, weighted, strict=True)
    }
    out: list[LcsScore] = []
    for i in range(n):
        scores: list[float] = []
        by_partner: dict[bool, list[float]] = {True: [], False: []}
        for j in range(n):
            if j == i:
                continue
            x = overlaps[(i, j)]
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


def batched_weighted_lcs(
    pairs: Sequence[tuple[TaggedSteps, TaggedSteps]],
) -> npt.NDArray[np.float64]:
    """L_lcs of :func:`weighted_lcs` for every ``(steps_i, steps_j)`` pair, shape (P,).

    The DP of :func:`weighted_lcs` for all pairs at once, one anti-diagonal ``a + b = d`` of
    cells per step: a cell needs only the two previous anti-diagonals, so each step is a few
    numpy operations over (cells, pairs). Pairs are padded to the longest sequences with tags
    that never match; a pair's answer is read on its own last anti-diagonal. The same float
    operations in the same order as the scalar DP, so the values are identical.
    """
    p = len(pairs)
    n = np.array([len(a) for a, _ in pairs], dtype=np.int64)  # (P,)
    m = np.array([len(b) for _, b in pairs], dtype=np.int64)  # (P,)
    result = np.zeros(p)  # (P,): 0 for pairs with an empty side
    if p == 0 or int(n.max()) == 0 or int(m.max()) == 0:
        return result
    big_n, big_m = int(n.max()), int(m.max())
    # Steps along the first axis so that an anti-diagonal's cells are contiguous rows.
    ti, li = np.full((big_n, p), -1, np.int32), np.zeros((big_n, p))  # (N, P), padded
    tj, lj = np.full((big_m, p), -2, np.int32), np.zeros((big_m, p))  # (M, P), padded
    vocab: dict[str, int] = {}
    for k, (a, b) in enumerate(pairs):
        ti[: len(a), k] = [vocab.setdefault(t, len(vocab)) for t, _ in a]
        li[: len(a), k] = [length for _, length in a]
        tj[: len(b), k] = [vocab.setdefault(t, len(vocab)) for t, _ in b]
        lj[: len(b), k] = [length for _, length in b]
    tj, lj = tj[::-1], lj[::-1]  # reversed: an anti-diagonal's j-steps are a plain slice
    ends = {int(d): np.flatnonzero((n + m == d) & (n > 0) & (m > 0)) for d in np.unique(n + m)}
    # Three rotating anti-diagonals (d, d-1, d-2) indexed by a, i.e. cell (a, d - a): counts and
    # weights. Row 0 (a = 0) is never written and stays 0 (the empty prefix of i).
    counts = [np.zeros((big_n + 1, p), np.int32) for _ in range(3)]
    weights = [np.zeros((big_n + 1, p)) for _ in range(3)]
    for d in range(2, big_n + big_m + 1):
        c0, w0 = counts[d % 3], weights[d % 3]
        c1, w1 = counts[(d - 1) % 3], weights[(d - 1) % 3]
        c2, w2 = counts[(d - 2) % 3], weights[(d - 2) % 3]
        lo, hi = max(1, d - big_m), min(big_n, d - 1)  # cells with 1 <= a <= N, 1 <= b <= M
        c0[lo : hi + 1], w0[lo : hi + 1] = _diagonal_cells(
            (c1[lo - 1 : hi], w1[lo - 1 : hi]),  # up: (a-1, b)
            (c1[lo : hi + 1], w1[lo : hi + 1]),  # left: (a, b-1)
            (c2[lo - 1 : hi], w2[lo - 1 : hi]),  # diagonal: (a-1, b-1)
            (ti[lo - 1 : hi], li[lo - 1 : hi]),  # step a of i
            (tj[big_m - d + lo : big_m - d + hi + 1], lj[big_m - d + lo : big_m - d + hi + 1]),
        )
        if d <= big_n:  # cell (d, 0): the empty prefix of j, read by the next two diagonals
            c0[d], w0[d] = 0, 0.0
        done = ends.get(d)
        if done is not None and done.size:
            result[done] = w0[n[done], done]
    return result


_Cells = tuple[npt.NDArray[np.int32], npt.NDArray[np.float64]]


def _diagonal_cells(
    up: _Cells, left: _Cells, diag: _Cells, step_i: _Cells, step_j: _Cells
) -> _Cells:
    """(matches, L_lcs) of one anti-diagonal's cells, each (cells, P): the recurrence of
    :func:`weighted_lcs` (up wins ties with left; the diagonal only when strictly better)."""
    take_up = (up[0] > left[0]) | ((up[0] == left[0]) & (up[1] >= left[1]))
    count, weight = np.where(take_up, up[0], left[0]), np.where(take_up, up[1], left[1])
    match = step_i[0] == step_j[0]
    if not match.any():
        return count, weight
    len_i, len_j = step_i[1], step_j[1]
    with np.errstate(divide="ignore", invalid="ignore"):  # the branch not taken may divide by 0
        ratio = np.where(
            len_i > len_j,
            len_j / (2.0 * len_i),
            np.where(len_j == 0, 0.5, 1.0 - len_i / (2.0 * len_j)),
        )  # suppression_ratio, elementwise
    d_count, d_weight = diag[0] + 1, diag[1] + ratio * len_i
    take = match & ((d_count > count) | ((d_count == count) & (d_weight > weight)))
    return np.where(take, d_count, count), np.where(take, d_weight, weight)


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values) if values else math.nan


class TagLcsSettings(BaseModel):
    """How step lengths are measured for the length-suppression factor and L_i."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    length_unit: Literal["chars", "words"] = Field(
        default="chars", description="Unit of step length: characters or whitespace words."
    )
    max_steps: int = Field(
        default=DEFAULT_MAX_STEPS,
        ge=1,
        description="Steps of each completion compared (the first ones); bounds the work per "
        "sample to group size x max_steps^2 LCS cells. Longer completions are scored on their "
        "first max_steps steps.",
    )


@register_reward
class TagLcsReward(PerGroupReward):
    """LCS reward of eqs. (4)–(5) over each group; correctness is the boxed answer vs the truth.

    A completion is correct when its last ``\\boxed{}`` answer equals ``Sample.ground_truth``
    (reduced to its own boxed answer if it has one) under ``answers_equal``; a sample without a
    ground truth is an error, as in the ``ground_truth`` reward. Only the first
    ``settings.max_steps`` steps of a completion enter eqs. (4)–(5) (module docstring);
    ``num_steps`` counts all of them.
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
        cap = self._settings.max_steps
        scores = group_lcs_scores([seq[:cap] for seq in steps], correct)
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
            for result, ok, seq in zip(scores, correct, steps, strict=True)
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
