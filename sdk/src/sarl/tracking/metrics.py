"""Names of the metrics a sarl run logs to MLflow, and the curves ``sarl compare`` draws.

The local runner logs under these names and :mod:`sarl.tracking.compare` reads them back, so both
import them from here instead of spelling strings twice. Importing this module is free (no MLflow).

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
ACCURACY = "accuracy"
ANSWER_RATE = "answer_rate"  # share of training responses with a final answer
RESPONSE_LENGTH = "response_length"
KL = "kl"
ENTROPY = "entropy"
EVAL_PREFIX = "eval/"

# Anything outside MLflow's portable name alphabet (Windows refuses the colon, so it goes too).
_NOT_ALLOWED = re.compile(r"[^\w./\- ]")


def metric_key(name: str) -> str:
    """``name`` with every character MLflow refuses in a metric or param name replaced by ``_``.

    >>> metric_key("pkg.rewards:MyReward")
    'pkg.rewards_MyReward'
    """
    return _NOT_ALLOWED.sub("_", name)


def reward_metric(reward_name: str) -> str:
    """The per-term reward metric, e.g. ``reward/structure``; dotted-path names are made safe."""
    return REWARD_PREFIX + metric_key(reward_name)


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
