"""Which sample fields each registered reward reads: the input contract of offline scoring.

Called by ``sarl reward score`` to check every line for the fields its reward needs *before*
scoring, so a line without them is that line's error and never fails the group it belongs to
(a reward raising for one member would fail its whole group), and to say in ``--help`` and the
docs (how-to/score-traces.md) what a line must hold. The table lives here rather than on the
reward classes because it
describes the JSON text contract (:mod:`sarl.rewards.samples`), not the scoring; a reward that is
not in it (a dotted-path user reward) needs ``response`` only, and its own errors still land on
the lines or groups that caused them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pydantic import BaseModel

from sarl.rewards.base import Reward, Sample


@dataclass(frozen=True, slots=True)
class RewardInputs:
    """Fields a reward needs besides ``response`` (``required``) and reads when given
    (``optional``); ``offline`` says why the reward cannot score text alone (None: it can)."""

    required: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    offline: str | None = None


_GROUND_TRUTH = RewardInputs(required=("ground_truth",))
_TABLE: Mapping[str, RewardInputs] = {
    "structure": RewardInputs(),
    "ground_truth": _GROUND_TRUTH,
    "ground_truth_math_verify": _GROUND_TRUTH,
    "structured_qa": RewardInputs(required=("ground_truth",), optional=("problem", "prompt")),
    "format_length": RewardInputs(),
    "tag_format": RewardInputs(),
    "tag_lcs": _GROUND_TRUTH,
    "tag_maxflow": RewardInputs(optional=("prompt", "prompt_messages", "truncated")),
    "ttrl": RewardInputs(),
    "empo": RewardInputs(),
    "self_certainty": RewardInputs(
        offline="it needs the policy's logits, which text does not carry; it is scored during "
        "training only (sarl.integrations.trl_self_certainty)"
    ),
}


def reward_inputs(name: str, settings: BaseModel | None = None) -> RewardInputs:
    """The input contract of the registered reward ``name`` with these settings.

    ``rlkd`` depends on its settings: the teacher field is ``teacher_key`` (default
    ``teacher``), and its outcome reward's required fields are required too.
    """
    if name == "rlkd":
        return _rlkd_inputs(settings)
    return _TABLE.get(name, RewardInputs())


def _rlkd_inputs(settings: BaseModel | None) -> RewardInputs:
    teacher = str(getattr(settings, "teacher_key", "teacher"))
    outcome = getattr(settings, "outcome", "ground_truth")
    inner = reward_inputs(outcome) if isinstance(outcome, str) else RewardInputs()
    return RewardInputs(required=(teacher, *inner.required), optional=("prompt",))


def inputs_of(reward: Reward) -> RewardInputs:
    """:func:`reward_inputs` of a built reward (its name and settings)."""
    return reward_inputs(reward.name, reward.settings)


def missing_field(sample: Sample, inputs: RewardInputs) -> str | None:
    """The first required field ``sample`` lacks (null counts as missing), or None."""
    for field in inputs.required:
        value = sample.ground_truth if field == "ground_truth" else sample.extra.get(field)
        if value is None:
            return field
    return None
