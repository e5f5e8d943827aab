"""Reward names on a cluster: registry names, or dotted paths the platform allows, never imported.

On a cluster a spec is a tenant's untrusted input, and importing the module a dotted reward name
(``pkg.module:Class``) names runs that module's code in the validating process: a module whose
import raises ``SystemExit`` would stop the operator for every team. So the operator, its
admission webhook and ``sarl submit``'s cluster checks validate a spec inside
:func:`validating_for_cluster`, under which :func:`sarl.rewards.registry.get_reward_class`
resolves a dotted name to a stand-in (:func:`stand_in`) **without importing it**, and only when
its module is under a prefix of the platform's allow-list of reward modules shipped in its images
(chart value ``operator.allowedRewardModules``, env :data:`ENV_ALLOWED_MODULES`, comma separated;
empty: none). The stand-in accepts any settings; the trainer process, which runs the platform's
image, is the only place the dotted path is imported and its settings validated.

Outside :func:`validating_for_cluster` (local runs, notebooks, the trainer: the user's own
process) dotted paths are imported as before. The switch is a context variable, so it holds for
everything validated within it on that thread (a Study's arm x seed Experiments included).
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from pydantic import BaseModel, ConfigDict

from sarl.rewards.base import Reward, RewardOutput, Sample

ENV_ALLOWED_MODULES: Final = "SARL_ALLOWED_REWARD_MODULES"
CHART_VALUE: Final = "operator.allowedRewardModules"
_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*", re.ASCII)
_ATTR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)


@dataclass(frozen=True)
class ClusterRewards:
    """The reward rules of a validation for a cluster: ``allowed_modules`` are module prefixes
    (whole dotted components) a dotted name may use; None: any, decided later by the platform
    (``sarl submit``, which does not know the platform's list; the webhook and operator do)."""

    allowed_modules: tuple[str, ...] | None


_ACTIVE: ContextVar[ClusterRewards | None] = ContextVar("sarl_cluster_rewards", default=None)


@contextlib.contextmanager
def validating_for_cluster(allowed_modules: Sequence[str] | None) -> Iterator[None]:
    """Within: dotted reward names are never imported (see the module docstring);
    ``allowed_modules`` None: any well-formed dotted name passes (``sarl submit``)."""
    rules = ClusterRewards(None if allowed_modules is None else tuple(allowed_modules))
    token = _ACTIVE.set(rules)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_rules() -> ClusterRewards | None:
    """The rules of the validation for a cluster in progress; None: a local validation."""
    return _ACTIVE.get()


def allowed_reward_modules(env: Mapping[str, str]) -> tuple[str, ...]:
    """The platform's allow-list (:data:`ENV_ALLOWED_MODULES`, comma separated module prefixes;
    empty: none); ValueError naming an entry that is not a dotted module name."""
    entries = tuple(e.strip() for e in env.get(ENV_ALLOWED_MODULES, "").split(",") if e.strip())
    for entry in entries:
        if not _MODULE.fullmatch(entry):
            raise ValueError(
                f"{ENV_ALLOWED_MODULES}: {entry!r} is not a module prefix (e.g. "
                f"acme_rewards or acme_rewards.math); set it with {CHART_VALUE}"
            )
    return entries


def module_allowed(module: str, allowed: Sequence[str]) -> bool:
    """Whether ``module`` is one of ``allowed`` or below one (whole components: ``acme``
    allows ``acme.math`` but not ``acme_evil``)."""
    return any(module == prefix or module.startswith(prefix + ".") for prefix in allowed)


class _AnySettings(BaseModel):
    """Settings of a reward not imported here: kept as given, validated by the trainer."""

    model_config = ConfigDict(extra="allow", frozen=True)


class UnimportedReward(Reward):
    """Stands in for an allow-listed reward during a validation for a cluster: any settings, no
    group or truncation needs assumed (the trainer, which imports the real class, checks them).
    It scores nothing."""

    name: ClassVar[str] = "unimported"
    Settings: ClassVar[type[BaseModel]] = _AnySettings

    def score_groups(self, groups: Sequence[Sequence[Sample]]) -> list[list[RewardOutput]]:
        raise RuntimeError(f"reward {self.name!r} is imported and scored by the trainer only")


def refusal(path: str, rules: ClusterRewards) -> str | None:
    """Why the dotted reward name ``path`` is refused under ``rules`` (the message names the
    fix, never the name, which is the tenant's input), or None when it may be used."""
    module, sep, attr = path.partition(":")
    if not (sep and _MODULE.fullmatch(module) and _ATTR.fullmatch(attr)):
        return "not a registered reward name (see `sarl rewards`) nor a package.module:Class path"
    if rules.allowed_modules is None or module_allowed(module, rules.allowed_modules):
        return None
    listed = ", ".join(rules.allowed_modules) or "none"
    return (
        "on a cluster a reward is a registered name: use one of `sarl rewards`, or ask the "
        f"platform to add the module to {CHART_VALUE} ({ENV_ALLOWED_MODULES}; allowed "
        f"modules: {listed}); a dotted path is imported only by the trainer"
    )


@functools.lru_cache(maxsize=256)
def stand_in(path: str) -> type[Reward]:
    """The :class:`UnimportedReward` class named ``path`` (one per name, so a repeated name is
    recognised as the same reward)."""
    attrs: dict[str, Any] = {"name": path, "__doc__": UnimportedReward.__doc__}
    return type("UnimportedReward", (UnimportedReward,), attrs)
