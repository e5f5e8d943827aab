"""Test helpers for users' own rewards: :func:`check_reward` checks a reward's contract.

Called from a reward author's tests (docs/how-to/add-a-reward.md), e.g. with pytest::

    from sarl.testing import check_reward, groups_from_jsonl

    def test_contract():
        check_reward(MyReward, groups_from_jsonl("traces.jsonl"), {"target": 20})

The checks are what the adapters (TRL, verl, the reward service) rely on and would otherwise
find mid-training: settings typed and refusing unknown keys, scores finite and shaped like the
input, the declared components on every output (a component may be NaN: not applicable), the
same scores on a second call, a per-sample reward's score independent of its siblings, and
``close`` safe to call twice.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from sarl.rewards.base import Reward, RewardOutput, Sample
from sarl.rewards.registry import RewardConfigError, settings_of
from sarl.rewards.samples import group_key, parse_sample

__all__ = ["RewardContractError", "check_reward", "groups_from_jsonl"]

_UNKNOWN_KEY = "sarl_testing_unknown_key"


class RewardContractError(AssertionError):
    """A reward breaks its contract; the message names the reward, the rule and the place."""


def groups_from_jsonl(path: str | Path, group_by: str = "prompt") -> list[list[Sample]]:
    """The samples of a JSON-lines file (as ``sarl reward score`` reads it), grouped by the
    ``group_by`` field in the order each group first appears."""
    groups: dict[Any, list[Sample]] = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            obj = json.loads(line)
            groups.setdefault(group_key(obj, group_by), []).append(parse_sample(obj))
    return list(groups.values())


def check_reward(
    reward_cls: type[Reward],
    groups: Sequence[Sequence[Sample]],
    settings: Mapping[str, Any] | None = None,
) -> list[list[RewardOutput]]:
    """Check ``reward_cls`` with ``settings`` on ``groups`` and return its scores; raises
    :class:`RewardContractError` naming the first rule broken."""
    label = f"reward {getattr(reward_cls, 'name', reward_cls.__name__)!r}"
    if not (isinstance(reward_cls, type) and issubclass(reward_cls, Reward)):
        raise RewardContractError(f"{reward_cls!r} is not a subclass of sarl.rewards.base.Reward")
    if not isinstance(getattr(reward_cls, "name", None), str) or not reward_cls.name:
        raise RewardContractError(f"{reward_cls.__name__}: set the class attribute name")
    parsed = _checked_settings(reward_cls, settings or {}, label)
    if not groups or any(not group for group in groups):
        raise RewardContractError("check_reward: give at least one group, none of them empty")
    reward = reward_cls(parsed)
    try:
        first = reward.score_groups(groups)
        _check_shape(first, groups, reward.component_keys, label)
        if _plain(reward.score_groups(groups)) != _plain(first):
            raise RewardContractError(f"{label}: a second call on the same groups scored otherwise")
        if not reward.needs_group:
            alone = [[reward.score_groups([[s]])[0][0] for s in group] for group in groups]
            if _plain(alone) != _plain(first):
                raise RewardContractError(
                    f"{label}: a sample scored alone differs from the same sample in its group; "
                    "set needs_group = True on a reward that reads the siblings"
                )
    finally:
        reward.close()
    reward.close()  # idempotent
    return first


def _checked_settings(cls: type[Reward], settings: Mapping[str, Any], label: str) -> BaseModel:
    """The parsed settings, after checking they round-trip and refuse an unknown key."""
    try:
        parsed = settings_of(cls, settings)
        again = settings_of(cls, parsed.model_dump(mode="json"))
    except RewardConfigError as e:
        raise RewardContractError(f"{label}: settings: {e}") from e
    if again != parsed:
        raise RewardContractError(f"{label}: settings do not round-trip through JSON: {parsed!r}")
    if cls.Settings.model_config.get("extra") != "allow":
        try:
            settings_of(cls, {**parsed.model_dump(mode="json"), _UNKNOWN_KEY: 1})
        except RewardConfigError:
            return parsed
        raise RewardContractError(f"{label}: settings took an unknown key")
    return parsed


def _check_shape(
    out: Any, groups: Sequence[Sequence[Sample]], keys: tuple[str, ...], label: str
) -> None:
    """``out`` mirrors ``groups``; every score and component is a finite number; each output
    has exactly the declared component keys."""
    if not isinstance(out, list) or len(out) != len(groups):
        raise RewardContractError(f"{label}: score_groups must return a list of {len(groups)}")
    for g, (scores, group) in enumerate(zip(out, groups, strict=True)):
        if not isinstance(scores, list) or len(scores) != len(group):
            raise RewardContractError(f"{label}: group {g}: expected {len(group)} outputs")
        for i, result in enumerate(scores):
            where = f"{label}: group {g}, sample {i}"
            if not isinstance(result, RewardOutput):
                raise RewardContractError(f"{where}: {type(result).__name__}, not RewardOutput")
            if set(result.components) != set(keys):
                raise RewardContractError(
                    f"{where}: components {sorted(result.components)} differ from the declared "
                    f"{sorted(keys)} (class attribute components)"
                )
            if not _number(result.score) or not math.isfinite(result.score):
                raise RewardContractError(f"{where}: score={result.score!r} is not a finite number")
            for key, value in result.components.items():
                # NaN is allowed: a component that does not apply (logged as missing).
                if not _number(value) or math.isinf(value):
                    raise RewardContractError(f"{where}: component {key}={value!r} is not a number")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _plain(out: Sequence[Sequence[RewardOutput]]) -> list[list[tuple[Any, ...]]]:
    """Outputs as comparable tuples (NaN as None: NaN never equals itself)."""

    def num(x: float) -> float | None:
        return None if isinstance(x, float) and math.isnan(x) else x

    return [
        [(num(r.score), tuple(sorted((k, num(v)) for k, v in r.components.items()))) for r in g]
        for g in out
    ]
