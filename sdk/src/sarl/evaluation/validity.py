"""Reward validity: does a reward rank correct responses above incorrect ones? Pure Python.

Label-free rewards (structure, TTRL, EMPO, self-certainty, format+length) are only worth training
on if they order a policy's own samples the way correctness does. Wherever ground truth is known
(every math dataset), these figures say how far they do:

* **AUROC** of the reward against correctness over a batch: the probability that a random correct
  response scores above a random incorrect one, a tie counting one half (the Mann-Whitney U
  statistic over ``n_correct * n_incorrect``). 0.5 is chance, 1 a perfect ranking, 0 a reversed
  one. Undefined (``None``) when the batch holds no correct or no incorrect response.
* **Within-group pairwise agreement**, what GRPO actually uses: its advantage compares each
  response only with the other responses to the same prompt, so the question is whether, inside
  one prompt's group, the reward puts the correct response above the incorrect one. Over all
  (correct, incorrect) pairs of the same group, pooled over the batch's groups (each pair counts
  once): ``agreement`` is the share ordered correctly, ``ties`` the share the reward cannot tell
  apart (equal scores: zero advantage difference, no signal), and ``1 - agreement - ties`` the
  share ordered the wrong way. Ties are counted apart, not as one half as in AUROC, because a
  reward that ties everything (``agreement`` 0, ``ties`` 1) is useless to GRPO while one at
  AUROC 0.5 by ties alone would look like chance. Undefined when no group holds both kinds.
* **Within-prompt AUROC** (``pair_auroc``), the headline: ``agreement + ties / 2``, the same
  pairs read as an AUROC (ties one half), so it compares with the pooled AUROC and with the
  trivial predictors of :mod:`sarl.evaluation.trivial`. The pooled AUROC is secondary: it mixes
  between-prompt signal (a reward that scores easy prompts high is "valid" over the batch while
  it orders no pair of one prompt right; ``tests/sarl/evaluation/test_trivial.py`` has a batch
  with within-prompt agreement 0 and pooled AUROC 0.75).

Counts: ``prompts`` (groups with a defined score) and ``mixed_prompts`` (groups holding both a
correct and an incorrect response: only they make pairs). Intervals over prompts
(:mod:`sarl.evaluation.validity_bootstrap`) resample those; below :data:`MIN_PROMPTS` mixed
prompts :func:`few_prompts_warning` says the interval is not to be trusted.

Conventions: scores are compared exactly (a tie is ``==``); a NaN score (the reward says it is
undefined for that sample) leaves that sample out of both figures. Groups are given as one key
per sample (the prompt, or any id); samples need not be contiguous.

Called by the TRL adapter (``sarl.integrations.trl``: the figures of every reward, weight 0
included, each scoring batch of local and TRL-job training), by the verl job's metrics hook, by
``sarl reward diagnose`` (intervals by :mod:`sarl.evaluation.validity_bootstrap`) and by the
Study report. Metric names
are :func:`sarl.tracking.metrics.validity_metric`'s.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

#: Fewer prompts with both a correct and an incorrect response than this and an interval over
#: prompts gets a warning. Measured (``tests/sarl/evaluation/coverage.py``, 1,000 simulated
#: batches per size): the 95 % percentile bootstrap covers the true within-prompt AUROC in 32 %
#: of batches with ~2 such prompts, 77 % with ~4, 90 % with ~8, 91 % with ~16, 93 % with ~31
#: and 94 % with ~62 (docs/validity.md).
MIN_PROMPTS: Final = 20


@dataclass(frozen=True, slots=True)
class PairCounts:
    """(correct, incorrect) pairs of the same group, by how the reward orders them."""

    agree: int = 0  # the correct response scores higher
    disagree: int = 0  # the incorrect one scores higher
    tied: int = 0  # equal scores

    @property
    def pairs(self) -> int:
        return self.agree + self.disagree + self.tied

    def __add__(self, other: PairCounts) -> PairCounts:
        return PairCounts(
            self.agree + other.agree, self.disagree + other.disagree, self.tied + other.tied
        )


@dataclass(frozen=True, slots=True)
class Validity:
    """The validity figures of one reward over one batch (``None``: undefined, see module)."""

    auroc: float | None
    pair_agreement: float | None
    pair_ties: float | None
    pairs: int  # (correct, incorrect) pairs within groups
    samples: int  # samples with a defined score
    correct: int  # of which correct
    prompts: int = 0  # groups with a defined score
    mixed_prompts: int = 0  # groups with both a correct and an incorrect response (pairs)

    @property
    def pair_auroc(self) -> float | None:
        """Within-prompt AUROC, the headline: ``pair_agreement + pair_ties / 2``."""
        if self.pair_agreement is None or self.pair_ties is None:
            return None
        return self.pair_agreement + self.pair_ties / 2

    def as_metrics(self) -> dict[str, float]:
        """The defined figures by short name (``auroc``, ``pair_agreement``, ``pair_ties``)."""
        out = {
            "auroc": self.auroc,
            "pair_agreement": self.pair_agreement,
            "pair_ties": self.pair_ties,
        }
        return {k: v for k, v in out.items() if v is not None}


def _split(scores: Sequence[float], correct: Sequence[bool]) -> tuple[list[float], list[float]]:
    if len(scores) != len(correct):
        raise ValueError(f"got {len(scores)} scores for {len(correct)} correctness flags")
    pos = [float(s) for s, c in zip(scores, correct, strict=True) if c and not math.isnan(s)]
    neg = [float(s) for s, c in zip(scores, correct, strict=True) if not c and not math.isnan(s)]
    return pos, neg


def pair_counts(scores: Sequence[float], correct: Sequence[bool]) -> PairCounts:
    """How the reward orders every (correct, incorrect) pair of one group (NaN scores skipped)."""
    pos, neg = _split(scores, correct)
    neg.sort()
    agree = tied = 0
    for s in pos:
        below = bisect.bisect_left(neg, s)
        agree += below
        tied += bisect.bisect_right(neg, s) - below
    return PairCounts(agree, len(pos) * len(neg) - agree - tied, tied)


def auroc(scores: Sequence[float], correct: Sequence[bool]) -> float | None:
    """P(correct scores above incorrect) + P(tie) / 2 over a batch; None without both kinds."""
    counts = pair_counts(scores, correct)  # every (correct, incorrect) pair of the batch
    if counts.pairs == 0:
        return None
    return (counts.agree + 0.5 * counts.tied) / counts.pairs


def group_indices(groups: Sequence[Hashable]) -> list[list[int]]:
    """Sample indices per group key, groups in order of first appearance."""
    by_key: dict[Hashable, list[int]] = {}
    for i, key in enumerate(groups):
        by_key.setdefault(key, []).append(i)
    return list(by_key.values())


def validity(
    scores: Sequence[float], correct: Sequence[bool], groups: Sequence[Hashable]
) -> Validity:
    """AUROC over the batch and pairwise agreement within ``groups`` (one key per sample)."""
    if len(groups) != len(scores):
        raise ValueError(f"got {len(groups)} group keys for {len(scores)} scores")
    pos, neg = _split(scores, correct)
    within = PairCounts()
    prompts = mixed = 0
    for idx in group_indices(groups):
        counts = pair_counts([scores[i] for i in idx], [correct[i] for i in idx])
        within += counts
        prompts += any(not math.isnan(scores[i]) for i in idx)
        mixed += counts.pairs > 0
    n = within.pairs
    return Validity(
        auroc=auroc(scores, correct),
        pair_agreement=within.agree / n if n else None,
        pair_ties=within.tied / n if n else None,
        pairs=n,
        samples=len(pos) + len(neg),
        correct=len(pos),
        prompts=prompts,
        mixed_prompts=mixed,
    )


#: Per-batch counts behind the figures, logged once per batch next to them (TRL, verl):
#: ``validity_counts/prompts``, ``.../prompts_with_pairs``, ``.../pairs`` (of all responses).
COUNTS_PREFIX: Final = "validity_counts/"


def count_metrics(v: Validity) -> dict[str, float]:
    """The counts of ``v`` as metrics under :data:`COUNTS_PREFIX`."""
    return {
        f"{COUNTS_PREFIX}prompts": float(v.prompts),
        f"{COUNTS_PREFIX}prompts_with_pairs": float(v.mixed_prompts),
        f"{COUNTS_PREFIX}pairs": float(v.pairs),
    }


def few_prompts_warning(v: Validity) -> str | None:
    """One line when ``v``'s intervals rest on fewer than :data:`MIN_PROMPTS` mixed prompts."""
    if v.mixed_prompts >= MIN_PROMPTS:
        return None
    return (
        f"only {v.mixed_prompts} prompts with both a correct and an incorrect response "
        f"(< {MIN_PROMPTS}): intervals over prompts are too narrow, read them as rough"
    )


Interval = tuple[float, float]  # a (low, high) confidence interval


Correctness = Callable[[str, str], bool]


def correctness_flags(
    responses: Sequence[str], truths: Sequence[str | None], is_correct: Correctness
) -> list[bool] | None:
    """Each response's correctness against its ground truth; None when any truth is missing."""
    if any(t is None for t in truths):
        return None
    return [is_correct(r, t) for r, t in zip(responses, truths, strict=True) if t is not None]


def validity_by_reward(
    scores: Mapping[str, Sequence[float]], correct: Sequence[bool], groups: Sequence[Hashable]
) -> dict[str, Validity]:
    """:func:`validity` of several rewards over the same samples, by reward name."""
    return {name: validity(values, correct, groups) for name, values in scores.items()}
