"""Reward-validity metrics of one verl training batch, from each trajectory's reward extra info.

Called by :class:`sarl.integrations.verl.sampler.SarlReplayBuffer` (verl's replay buffer, which
merges the returned dict into the step's metrics) with the batch's TransferQueue keys and each
trajectory's ``extra_fields["reward_extra_info"]``. Pure: imports no verl.

What the extra info holds (:func:`sarl.integrations.verl.compute_score.verl_result`): ``score``
(what verl trains on), ``answer_correct`` (1.0 / 0.0 against the row's ground truth, ``None``
without one) and, with several terms (:mod:`sarl.integrations.verl.terms`), every term's own
score as ``reward/<name>``, weight-0 terms included. So the rewards measured are the terms when
there are ``reward/<name>`` keys, else the single reward (``reward_name``) from ``score``. The
figures and their names are the local runner's, the trivial predictors of
:mod:`sarl.evaluation.trivial` included (extra-info keys ``trivial.has_answer`` and
``trivial.format_valid``; all-NaN when absent, then not logged) (:mod:`sarl.evaluation.validity`,
``validity/<reward>/{auroc,pair_agreement,pair_ties}``), with one difference: TRL averages the
figures of a step's scoring batches, verl's batch is the whole step, so here they are over the
step's batch at once.

verl's keys are ``{uid}_{session}_{output}`` (``verl/trainer/ppo/v1/replay_buffer.py`` of verl
0.9.1, class docstring): the uid is the prompt's group. A multi-output session (an agent loop
that returns several outputs) is one response; its last output is the one scored
(``SarlRewardManager.run_single``), so only that output counts. A batch where any trajectory
lacks ``answer_correct`` (a dataset without ground truth, a failed reward) gives no figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from sarl.evaluation.trivial import HAS_ANSWER, TRIVIAL
from sarl.evaluation.validity import count_metrics, validity
from sarl.tracking.metrics import REWARD_PREFIX, validity_metric

#: Extra-info key of the response's correctness against its ground truth (None without one).
ANSWER_CORRECT_KEY = "answer_correct"


def last_outputs(keys: Sequence[str]) -> list[int]:
    """Indices of the last output of each ``{uid}_{session}_{output}`` session, in key order."""
    last: dict[tuple[str, str], tuple[int, int]] = {}
    for i, key in enumerate(keys):
        uid, session, output = _split_key(key)
        if (uid, session) not in last or output > last[uid, session][0]:
            last[uid, session] = (output, i)
    return sorted(i for _, i in last.values())


def _split_key(key: str) -> tuple[str, str, int]:
    parts = key.rsplit("_", 2)
    if len(parts) != 3 or not parts[2].isdigit():
        return key, "", 0  # not verl's trajectory key: one response of its own group
    return parts[0], parts[1], int(parts[2])


def reward_scores(infos: Sequence[Mapping[str, Any]], reward_name: str) -> dict[str, list[float]]:
    """Each measured reward's score per trajectory (``None`` / missing as NaN: left out)."""
    terms = sorted(
        {k for info in infos for k in info if k.startswith(REWARD_PREFIX)},
    )
    columns = {k.removeprefix(REWARD_PREFIX): k for k in terms} or {reward_name: "score"}
    return {name: [_number(info.get(key)) for info in infos] for name, key in columns.items()}


def _number(value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return math.nan


def batch_validity(
    keys: Sequence[str], infos: Sequence[Mapping[str, Any]], reward_name: str
) -> dict[str, float]:
    """``validity/<reward>/<figure>`` for one training batch (see the module docstring)."""
    if len(keys) != len(infos):
        raise ValueError(f"got {len(keys)} keys for {len(infos)} extra infos")
    picked = last_outputs(keys)
    chosen = [infos[i] for i in picked]
    flags = [info.get(ANSWER_CORRECT_KEY) for info in chosen]
    if not flags or any(not isinstance(f, int | float) or math.isnan(f) for f in flags):
        return {}
    correct = [bool(f) for f in flags]
    groups = [_split_key(keys[i])[0] for i in picked]
    metrics: dict[str, float] = {}
    columns = reward_scores(chosen, reward_name)
    # The trivial predictors (compute_score.trivial_result), the floor read beside each reward.
    columns |= {name: [_number(info.get(name)) for info in chosen] for name in TRIVIAL}
    for name, scores in columns.items():
        figures = validity(scores, correct, groups)
        for figure, value in figures.as_metrics().items():
            metrics[validity_metric(name, figure)] = value
        if name == HAS_ANSWER and figures.samples:  # defined for every response: the counts
            metrics |= count_metrics(figures)
    return metrics
