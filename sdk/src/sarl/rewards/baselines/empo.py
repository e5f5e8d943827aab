"""Registry entry ``"empo"``: EMPO's semantic-entropy reward (a group reward).

Zhang et al., "Right Question is Already Half the Answer: Fully Unsupervised LLM Reasoning
Incentivization" (EMPO, 2025, arXiv:2504.05812). The G responses to a prompt are clustered by
meaning, ``p(c_j | q) ≈ |c_j| / G``, the semantic entropy is
``H = -Σ_j p(c_j | q) log p(c_j | q)``, and minimising it is done by rewarding each response with
the probability of its cluster: ``r_i = p(c_j | q)`` for ``o_i ∈ c_j``. Imported lazily by
``sarl.rewards.registry``; called by the adapters with whole groups (``needs_group``).

By default this gives the reference's rewards: ``get_empo_math_reward`` in
``trl/src/open_r1/rewards.py`` of github.com/QingyangZhang/EMPO at c5eccd4
(c5eccd400ba7a7a1685dedf25eab03780aad855f), with ``get_semantic_ids_by_rule`` of
``trl/src/open_r1/semantic_uncertainty.py`` there and math-verify (pinned 0.5.2 there), checked
against that function run unchanged (``tests/sarl/rewards/baselines/fixtures/empo_reference.json``:
G = 1-16, ties, empty boxes, fallback extraction, equivalent forms):

* ``extraction: math_verify``: a response's answer is what math-verify's ``parse`` extracts as the
  reference calls it (:mod:`.empo_extract`: "The final answer is $3$" gives ``3``, units
  stripped), run in math-verify worker subprocesses (:mod:`.math_verify_pool`; timeout
  ``timeout_seconds``, component ``extraction_timeout``). ``""`` (an empty ``\\boxed{}``,
  ``\\boxed 5``, "The answer is 7", no answer, a timed-out or failed parse) is no answer.
* ``clustering: strings``: answers are equal when their stripped strings are (the reference's
  rule is math-verify's ``verify`` of two strings, which is that), so ``0.5`` and ``1/2`` are two
  clusters; clusters in order of first appearance (``get_semantic_ids_by_rule``).
* ``unanswered: singleton``: each unanswered response is a cluster of its own in ``H`` and still
  counts in G; it scores 0. A group whose answers are all distinct or missing has ``H = log G``.
* ``gate_arithmetic: reference``: a group with ``H >= log G`` scores 0 throughout (component
  ``gated``; the reference keeps ``H < log G``, "entropy thresholding"), with ``H`` computed by
  the reference's float expression (numpy ``-(p * log p).sum()`` over the clusters in order).
  That sum falls one ulp below ``log G`` for all-distinct groups at G = 3, 6, 7, 10, 14, 21, 22,
  24, 25, ..., so there the reference does not gate, and neither does this default. A group of
  one response is always gated (``H = 0 = log 1``).

sarl's own rules are named settings (docs/baselines.md): ``extraction: boxed_only`` (the last
complete ``\\boxed{}``, ``sarl.rewards.math_answer.extract_answer``; an empty box is then an
answer), ``clustering: values`` (``answers_equal``, greedy leader clustering:
``0.5`` = ``1/2``), ``gate_arithmetic: exact`` (``math.fsum`` and a 1e-9 nats tolerance: the gate
fires at every G), ``unanswered: excluded`` (``H`` over the answer clusters only, so
``Σ_j p(c_j | q) < 1``; 0 for a group without answers). ``entropy_max_fraction_of_log_g``
(default 1.0, the reference) scales the ``log G`` gate, null turns it off; ``entropy_min`` /
``entropy_max`` (nats, unset) add the paper's fixed gate ``δ_low < H < δ_high``. This module's
behaviour before issue 39 is ``extraction: boxed_only``, ``clustering: values``,
``gate_arithmetic: exact``, ``unanswered: excluded``, ``entropy_max_fraction_of_log_g: null``.

Without math-verify installed (``pip install 'sarl[math]'``), ``on_missing: fallback`` (default)
extracts as ``boxed_only`` and logs a warning when built; ``error`` refuses to build.
math-verify's version matters where ``parse`` changed: with 0.9 several boxes in one response are
read as a set (``first \\boxed{1} then \\boxed{2}`` gives ``1,2``; 0.5.2 and 0.6.0 give ``2``).

The authors' verl port (``verl-empo/.../reward_score/empo/compute_metrics.py`` at the same commit)
differs: there an unanswered response is a singleton that *scores* 1/G, and no entropy gate is
applied; the TRL trainer above is the one that gates on ``log G``. An empty group scores nothing.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from sarl.rewards.base import PerGroupReward, RewardOutput, Sample
from sarl.rewards.baselines.answer_clusters import Equal, cluster_answers, cluster_sizes
from sarl.rewards.baselines.empo_extract import normalize_answer
from sarl.rewards.baselines.math_verify import math_verify_available
from sarl.rewards.baselines.math_verify_pool import TIMED_OUT, BoundedProcessPool, shared_pool
from sarl.rewards.math_answer import answers_equal, extract_answer
from sarl.rewards.registry import register_reward

_LOG = logging.getLogger(__name__)
COMPONENT_KEYS = (
    "has_answer",
    "cluster_frequency",
    "semantic_entropy",
    "num_clusters",
    "gated",
    "extraction_timeout",
)
Unanswered = Literal["singleton", "excluded"]
Extraction = Literal["math_verify", "boxed_only"]
Clustering = Literal["strings", "values"]
Arithmetic = Literal["reference", "exact"]

#: Nats by which H may fall short of ``fraction · log G`` and still be gated
#: (``gate_arithmetic: exact``): absorbs the rounding of ``Σ p log p`` (a few ulps), far below
#: the smallest real gap below ``log G`` (about ``2 log 2 / G``, one pair among singletons).
GATE_TOLERANCE = 1e-9


class EMPORewardSettings(BaseModel):
    """Extraction, clustering, unanswered responses in ``H`` and the gates (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    extraction: Extraction = Field(
        default="math_verify",
        description="'math_verify' (the reference): math-verify's parse as EMPO calls it "
        "('The final answer is $3$', units stripped; an empty box is no answer); 'boxed_only': "
        "the last complete \\boxed{} (an empty box is an answer).",
    )
    clustering: Clustering = Field(
        default="strings",
        description="'strings' (the reference): answers equal when their stripped strings are "
        "(0.5 and 1/2 differ); 'values': answers_equal (0.5 = 1/2).",
    )
    gate_arithmetic: Arithmetic = Field(
        default="reference",
        description="'reference': H as the reference's float sum, which misses the log G gate by "
        "one ulp at some G (3, 6, 7, 10, 14, ...); 'exact': fsum with a 1e-9 tolerance, the gate "
        "fires at every G.",
    )
    unanswered: Unanswered = Field(
        default="singleton",
        description="'singleton' (the reference): each unanswered response is its own cluster in "
        "H; 'excluded': H sums over the answer clusters only. Unanswered responses score 0 "
        "either way.",
    )
    entropy_max_fraction_of_log_g: float | None = Field(
        default=1.0,
        gt=0,
        le=1,
        description="Groups with H >= this fraction of log G score 0; 1.0 (the reference) gates "
        "groups whose responses are all in clusters of their own. null: no such gate.",
    )
    entropy_min: float | None = Field(
        default=None, ge=0, description="δ_low: groups with H <= this score 0 (nats)."
    )
    entropy_max: float | None = Field(
        default=None, gt=0, description="δ_high: groups with H >= this score 0 (nats)."
    )
    timeout_seconds: float = Field(
        default=3.0,
        gt=0,
        description="Bound on one math-verify extraction (the reference's parse timeout); a "
        "timed-out response has no answer.",
    )
    workers: int = Field(
        default=1, ge=1, le=64, description="math-verify worker processes (shared in a process)."
    )
    startup_grace_seconds: float = Field(
        default=60.0, ge=0, description="How long an extraction waits for a starting worker."
    )
    on_missing: Literal["fallback", "error"] = Field(
        default="fallback",
        description="Without math-verify installed: extract as 'boxed_only', or refuse.",
    )

    @model_validator(mode="after")
    def _ordered(self) -> EMPORewardSettings:
        lo, hi = self.entropy_min, self.entropy_max
        if lo is not None and hi is not None and lo >= hi:
            raise ValueError(f"entropy_min ({lo}) must be below entropy_max ({hi})")
        return self


@dataclass(frozen=True, slots=True)
class SemanticClusters:
    """Cluster frequency of each response and the group's semantic entropy."""

    frequencies: tuple[float, ...]  # p(c_j | q) of each response's cluster; 0 without answer
    entropy: float  # H in nats
    num_clusters: int  # clusters in H


def same_string(a: str, b: str) -> bool:
    """The reference's equality of two answers: math-verify's ``verify`` of two strings
    (``grader.py`` of math-verify 0.5.2: both stripped, non-empty and equal)."""
    a, b = a.strip(), b.strip()
    return bool(a) and a == b


def semantic_clusters(
    answers: Sequence[str | None],
    equal: Equal = same_string,
    unanswered: Unanswered = "singleton",
    arithmetic: Arithmetic = "reference",
) -> SemanticClusters:
    """EMPO's ``r_i = p(c_j | q)`` and ``H`` for one group (conventions in the docstring)."""
    labels = cluster_answers(answers, equal)
    if unanswered == "singleton":
        sizes = _sizes_in_order(labels)
    else:
        sizes = cluster_sizes(labels)
    g = len(answers)
    answered = cluster_sizes(labels)
    frequencies = tuple(0.0 if c is None else answered[c] / g for c in labels)
    return SemanticClusters(frequencies, _entropy(sizes, g, arithmetic), len(sizes))


def _sizes_in_order(labels: Sequence[int | None]) -> list[int]:
    """Cluster sizes with each unanswered response a cluster of its own, in order of first
    appearance (the reference's semantic ids; the order matters to its float sum)."""
    sizes = cluster_sizes(labels)
    ordered: list[int] = []
    for c in labels:
        if c is None:
            ordered.append(1)
        elif sizes[c]:
            ordered.append(sizes[c])
            sizes[c] = 0  # counted at its first member
    return ordered


def _entropy(sizes: Sequence[int], group_size: int, arithmetic: Arithmetic) -> float:
    """``H = -Σ_j p_j log p_j`` with ``p_j = |c_j| / G`` (EMPO; the clusters ``sizes`` in order)."""
    if arithmetic == "exact":
        return -math.fsum(n / group_size * math.log(n / group_size) for n in sizes if n)
    # the reference's expression, term for term: counts / G, then -(p * log p).sum() in numpy
    probabilities = np.asarray(sizes, dtype=np.int64) / group_size  # (clusters,)
    return float(-(probabilities * np.log(probabilities)).sum()) + 0.0  # -0.0 -> 0.0


def entropy_gated(entropy: float, group_size: int, settings: EMPORewardSettings) -> bool:
    """Whether a group of ``group_size`` responses with entropy ``entropy`` scores 0 throughout."""
    fraction = settings.entropy_max_fraction_of_log_g
    if fraction is not None:
        bound = fraction * math.log(group_size)
        # reference: keeps H < log G, no tolerance (so a one-ulp miss keeps the group)
        tolerance = GATE_TOLERANCE if settings.gate_arithmetic == "exact" else 0.0
        if entropy >= bound - tolerance:
            return True
    lo, hi = settings.entropy_min, settings.entropy_max
    return (lo is not None and entropy <= lo) or (hi is not None and entropy >= hi)


@register_reward
class EMPOReward(PerGroupReward):
    """Each response scores the frequency of its answer's cluster in the group."""

    name = "empo"
    Settings = EMPORewardSettings
    components = COMPONENT_KEYS
    needs_group = True

    def __init__(self, settings: EMPORewardSettings) -> None:
        super().__init__(settings)
        self._settings = settings
        self._pool: BoundedProcessPool | None = None
        self._cancel = threading.Event()  # set by close(): stop extractions still running
        if settings.extraction == "math_verify":
            if math_verify_available():
                self._pool = shared_pool(settings.workers, settings.startup_grace_seconds)
            elif settings.on_missing == "error":
                raise ImportError(
                    "reward 'empo': extraction 'math_verify' needs math-verify "
                    "(pip install 'sarl[math]'), and on_missing='error'"
                )
            else:
                _LOG.warning(
                    "math-verify is not installed; reward 'empo' extracts the last \\boxed{} "
                    "(extraction 'boxed_only') instead of the reference's math-verify parse "
                    "(pip install 'sarl[math]')"
                )

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        texts = [s.response for group in groups for s in group]
        answers = iter(self._extract(texts))
        return [self._score([next(answers) for _ in group]) for group in groups]

    def score_group(self, group: Sequence[Sample], index: int) -> list[RewardOutput]:
        return self.score_groups([group])[0]

    def _extract(self, texts: Sequence[str]) -> list[tuple[str | None, bool]]:
        """(answer or None, timed out) per text, as ``extraction`` says."""
        if self._pool is None:
            return [(extract_answer(t), False) for t in texts]
        results = self._pool.extract(
            texts, timeout_seconds=self._settings.timeout_seconds, cancel=self._cancel
        )
        out: list[tuple[str | None, bool]] = []
        for result in results:
            answer = normalize_answer(result) if isinstance(result, str) else ""
            out.append((answer or None, result is TIMED_OUT))
        return out

    def _score(self, extracted: Sequence[tuple[str | None, bool]]) -> list[RewardOutput]:
        if not extracted:
            return []
        s = self._settings
        answers = [a for a, _ in extracted]
        equal = same_string if s.clustering == "strings" else answers_equal
        clusters = semantic_clusters(answers, equal, s.unanswered, s.gate_arithmetic)
        gated = entropy_gated(clusters.entropy, len(answers), s)
        return [
            RewardOutput(
                0.0 if gated else freq,
                {
                    "has_answer": float(answer is not None),
                    "cluster_frequency": freq,
                    "semantic_entropy": clusters.entropy,
                    "num_clusters": float(clusters.num_clusters),
                    "gated": float(gated),
                    "extraction_timeout": float(timed_out),
                },
            )
            for (answer, timed_out), freq in zip(extracted, clusters.frequencies, strict=True)
        ]

    def close(self) -> None:
        """Stop this reward's extractions still running; the shared workers stay warm."""
        self._cancel.set()
