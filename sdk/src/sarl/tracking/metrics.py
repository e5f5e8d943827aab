"""Names of the metrics a sarl run logs to MLflow, what their values are, and the curves
``sarl compare`` draws.

The local runner logs under these names and :mod:`sarl.tracking.compare` reads them back, so both
import them from here instead of spelling strings twice. :func:`metric_info` is the one table of
what a metric's values are — an axis label in words with its unit, and the :class:`Range` its
values lie in — used by both figures (:mod:`sarl.study.plot`, :mod:`sarl.tracking.compare`) and
by the Study report's numbers (:mod:`sarl.study.aggregate` clips its intervals to it). Importing
this module is free (no MLflow).

MLflow only accepts metric names made of letters, digits, ``_ - . / :`` and spaces (checked by
``mlflow.utils.validation.validate_param_and_metric_name`` in MLflow 3.17; ``:`` not on Windows),
so ``@`` is out: evaluation metrics are ``eval/<benchmark>/avg_at_<k>`` and ``pass_at_<k>``
rather than ``avg@k``. :func:`metric_key` maps any other name onto the allowed characters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Training, logged every step.
REWARD_MEAN = "reward/mean"
REWARD_STD = "reward/std"
REWARD_PREFIX = "reward/"  # + the reward's registered name: reward/structure, reward/ground_truth
STRUCTURE_CLUSTERING = "structure/clustering"
STRUCTURE_PATH_LENGTH = "structure/path_length"
STRUCTURE_NUM_STEPS = "structure/num_steps"
STRUCTURE_NUM_NODES = "structure/num_nodes"
STRUCTURE_NUM_EDGES = "structure/num_edges"
# The structure reward SR itself, logged under this alias whatever the reward term is named, so
# runs whose structure reward is weighted or renamed still compare on the same curve.
STRUCTURE_SCORE = "structure/score"
STRUCTURE_DEGENERATE = "structure/degenerate"  # share of reasoning maps with < 2 nodes
ACCURACY = "accuracy"
ANSWER_RATE = "answer_rate"  # share of training responses with a final answer
FRAC_REWARD_ZERO_STD = "frac_reward_zero_std"  # share of groups whose rewards are all equal
RESPONSE_LENGTH = "response_length"
KL = "kl"
ENTROPY = "entropy"
EVAL_PREFIX = "eval/"
# Reward validity (sarl.evaluation.validity), per reward, weight 0 included:
# validity/<reward>/auroc, validity/<reward>/pair_agreement, validity/<reward>/pair_ties.
VALIDITY_PREFIX = "validity/"
VALIDITY_FIGURES = ("auroc", "pair_agreement", "pair_ties")

# Anything outside MLflow's portable name alphabet (Windows refuses the colon, so it goes too).
_NOT_ALLOWED = re.compile(r"[^\w./\- ]")
# eval/<benchmark>/avg_at_<k>, pass_at_<k>, answer_rate (the benchmark name is made safe first).
_VALIDITY_KEY = re.compile(
    r"^" + re.escape(VALIDITY_PREFIX) + r"(.+)/(" + "|".join(VALIDITY_FIGURES) + r")$"
)
_EVAL_KEY = re.compile(r"^" + re.escape(EVAL_PREFIX) + r".+/(?:(avg|pass)_at_(\d+)|answer_rate)$")


def metric_key(name: str) -> str:
    """``name`` with every character MLflow refuses in a metric or param name replaced by ``_``.

    >>> metric_key("pkg.rewards:MyReward")
    'pkg.rewards_MyReward'
    """
    return _NOT_ALLOWED.sub("_", name)


def reward_metric(reward_name: str) -> str:
    """The per-term reward metric, e.g. ``reward/structure``; dotted-path names are made safe."""
    return REWARD_PREFIX + metric_key(reward_name)


def validity_metric(reward_name: str, figure: str) -> str:
    """A reward-validity figure of one reward, e.g. ``validity/structure/auroc``."""
    if figure not in VALIDITY_FIGURES:
        raise ValueError(f"validity figure {figure!r}: expected one of {VALIDITY_FIGURES}")
    return f"{VALIDITY_PREFIX}{metric_key(reward_name)}/{figure}"


def eval_avg_at(benchmark: str, k: int) -> str:
    """Mean accuracy over ``k`` samples per problem: ``eval/<benchmark>/avg_at_<k>``."""
    return f"{EVAL_PREFIX}{metric_key(benchmark)}/avg_at_{k}"


def eval_pass_at(benchmark: str, k: int) -> str:
    """Share of problems solved by any of ``k`` samples: ``eval/<benchmark>/pass_at_<k>``."""
    return f"{EVAL_PREFIX}{metric_key(benchmark)}/pass_at_{k}"


@dataclass(frozen=True)
class Curve:
    """One panel of ``sarl compare``'s plot: a title and the metric names it may come from.

    ``metrics`` are tried in order per run; the first one the run logged is drawn (``SR`` is
    ``structure/score`` when present, else ``reward/structure``).
    """

    title: str
    metrics: tuple[str, ...]


CURVES: tuple[Curve, ...] = (
    Curve("reward", (REWARD_MEAN,)),
    Curve("accuracy", (ACCURACY,)),
    Curve("SR", (STRUCTURE_SCORE, REWARD_PREFIX + "structure")),
    Curve("length", (RESPONSE_LENGTH,)),
    Curve("KL", (KL,)),
    Curve("entropy", (ENTROPY,)),
)


def curve_metrics() -> tuple[str, ...]:
    """Every metric name any curve may draw, in panel order, without repeats."""
    return tuple(dict.fromkeys(m for curve in CURVES for m in curve.metrics))


# -- what a metric's values are --------------------------------------------------------------------


@dataclass(frozen=True)
class Range:
    """The values a metric can take, ``[low, high]``; ``None`` leaves that end open.

    Intervals over seeds are clipped to it: a Student-t interval from two seeds is about twelve
    standard errors wide and would otherwise put a share below 0 or a KL below 0.
    """

    low: float | None = None
    high: float | None = None

    @property
    def bounded(self) -> bool:
        """Whether either end is set (an open range clips nothing)."""
        return self.low is not None or self.high is not None

    def clip(self, value: float) -> float:
        """``value`` moved into the range."""
        if self.low is not None and value < self.low:
            return self.low
        if self.high is not None and value > self.high:
            return self.high
        return value

    def difference(self) -> Range:
        """The range of ``a − b`` for ``a``, ``b`` in this range (a change over a run, an arm
        minus the reference): ``[−w, w]`` with ``w = high − low``; open unless both ends are set
        (KL ≥ 0 says nothing about how far it can fall)."""
        if self.low is None or self.high is None:
            return Range()
        width = self.high - self.low
        return Range(-width, width)

    def __str__(self) -> str:
        """``[0, 1]``, ``[0, ∞)``; how the report names the range it clipped to."""
        low = "(-∞" if self.low is None else f"[{self.low:g}"
        high = "∞)" if self.high is None else f"{self.high:g}]"
        return f"{low}, {high}"


@dataclass(frozen=True)
class MetricInfo:
    """How a metric reads: ``label``, words with the unit (an axis label), and its ``range``."""

    label: str
    range: Range = Range()


SHARE = Range(0.0, 1.0)  # a fraction of responses, problems, maps or groups
NON_NEGATIVE = Range(0.0, None)
#: SR = C/2 + 1/(1+L) (sarl.rewards.structure.score): C is in [0, 1], so C/2 <= 1/2, and L is a
#: mean hop distance between distinct nodes, L >= 1, so 1/(1+L) <= 1/2; a degenerate map scores
#: ``degenerate_score`` in [0, 1]; the c_only / l_only ablations lie in [0, 1/2].
SR_RANGE = Range(0.0, 1.0)
_SR = MetricInfo("SR = C/2 + 1/(1+L)", SR_RANGE)

_METRICS: dict[str, MetricInfo] = {
    REWARD_MEAN: MetricInfo("reward (weighted sum of the terms)"),  # the weights set its range
    STRUCTURE_SCORE: _SR,
    REWARD_PREFIX + "structure": _SR,  # the structure term, unweighted: SR itself
    STRUCTURE_CLUSTERING: MetricInfo("C, mean local clustering", SHARE),
    STRUCTURE_PATH_LENGTH: MetricInfo("L, mean path length (hops)", Range(1.0, None)),
    STRUCTURE_NUM_STEPS: MetricInfo("reasoning steps per response", NON_NEGATIVE),
    STRUCTURE_NUM_NODES: MetricInfo("map nodes per response", NON_NEGATIVE),
    STRUCTURE_NUM_EDGES: MetricInfo("map edges per response", NON_NEGATIVE),
    STRUCTURE_DEGENERATE: MetricInfo("degenerate maps (share)", SHARE),
    ACCURACY: MetricInfo("training accuracy (share correct)", SHARE),
    ANSWER_RATE: MetricInfo("answer rate (share answered)", SHARE),
    FRAC_REWARD_ZERO_STD: MetricInfo("groups with equal rewards (share)", SHARE),
    RESPONSE_LENGTH: MetricInfo("response length (tokens)", NON_NEGATIVE),
    # Per-token means in nats (TRL: k3 estimate of KL to the reference policy, which is >= 0;
    # Shannon entropy of the policy's next-token distribution).
    KL: MetricInfo("KL to reference (nats/token)", NON_NEGATIVE),
    ENTROPY: MetricInfo("entropy (nats/token)", NON_NEGATIVE),
}


def metric_info(key: str) -> MetricInfo:
    """Label and range of the metric logged as ``key``; a key this table does not know reads as
    itself, with no range (nothing is clipped)."""
    if key in _METRICS:
        return _METRICS[key]
    if m := _EVAL_KEY.match(key):
        kind, k = m.group(1), m.group(2)
        if kind == "avg":
            return MetricInfo(f"accuracy, mean of {k} samples (share)", SHARE)
        if kind == "pass":
            return MetricInfo(f"solved by any of {k} samples (share)", SHARE)
        return MetricInfo("answer rate (share answered)", SHARE)
    if m := _VALIDITY_KEY.match(key):
        reward, figure = m.group(1), m.group(2)
        label = {
            "auroc": f"{reward}: AUROC vs correctness (0.5 = chance)",
            "pair_agreement": f"{reward}: correct > incorrect pairs in a group (share)",
            "pair_ties": f"{reward}: tied correct/incorrect pairs in a group (share)",
        }[figure]
        return MetricInfo(label, SHARE)
    return MetricInfo(key)
