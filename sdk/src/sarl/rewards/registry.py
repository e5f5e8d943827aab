"""The one registry of rewards by name, with typed settings per reward.

Called by the Experiment spec validation, the CLI and the adapters: ``create_reward("structure",
{...})``. Built-in rewards register on first lookup (no import-time side effects elsewhere); a
dotted path ``package.module:ClassName`` is the escape hatch for user rewards and is checked here:
imported in the user's own process, never in a validation for a cluster
(:mod:`sarl.rewards.cluster_names`).
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, ValidationError

from sarl.rewards import cluster_names
from sarl.rewards.base import Reward

_REGISTRY: dict[str, type[Reward]] = {}
# name -> module that registers it; imported lazily so `import sarl` stays light.
_BUILTINS: dict[str, str] = {
    "structure": "sarl.rewards.structure.reward",
    "ground_truth": "sarl.rewards.ground_truth",
    "structured_qa": "sarl.rewards.structured_qa.reward",
    "ground_truth_math_verify": "sarl.rewards.baselines.math_verify",
    "rlkd": "sarl.rewards.rlkd.reward",
    "ttrl": "sarl.rewards.baselines.ttrl",
    "empo": "sarl.rewards.baselines.empo",
    "format_length": "sarl.rewards.baselines.format_length",
    "self_certainty": "sarl.rewards.baselines.self_certainty",
    "tag_format": "sarl.rewards.tagged.format_reward",
    "tag_lcs": "sarl.rewards.tagged.lcs",
    "tag_maxflow": "sarl.rewards.tagged.maxflow",
}


#: One line per built-in reward, as ``sarl rewards`` lists them (without importing the rewards,
#: some of which load heavy modules); a registered user reward is described by the first line
#: of its class docstring.
_SUMMARIES: dict[str, str] = {
    "structure": "SARL structure reward SR = C/2 + 1/(1+L) of the response's reasoning map.",
    "ground_truth": "1 when the last \\boxed{} answer equals the ground truth, else 0.",
    "ground_truth_math_verify": "ground_truth with equivalence decided by math-verify (1/2 = 0.5).",
    "structured_qa": "Structured Q&A: R = R_verif + λ·R_judge, a verifier plus an LLM judge.",
    "rlkd": "RLKD: generative structure reward against a teacher's reasoning, plus the outcome.",
    "ttrl": "TTRL: 1 when the answer is its group's majority answer (no labels); group reward.",
    "empo": "EMPO: the share of the group in the response's answer cluster; group reward.",
    "format_length": "Label-free format and length surrogate of Xin et al. (2025).",
    "self_certainty": "Intuitor's self-certainty of the policy's tokens (needs logits: TRL).",
    "tag_format": "All-or-nothing score of the tagged reasoning format.",
    "tag_lcs": "LCS of the step tags against the group's siblings, signed by correctness; group.",
    "tag_maxflow": "Max-flow balance Q of the step graph read from a causal LM's attention.",
}


def reward_summary(name: str) -> str:
    """One line saying what the reward ``name`` scores (for ``sarl rewards``)."""
    if name in _SUMMARIES:
        return _SUMMARIES[name]
    try:
        doc = (get_reward_class(name).__doc__ or "").strip()
    except RewardConfigError as e:  # an installed package that fails to import: say so
        return f"(not loaded: {e})"
    return " ".join(doc.split("\n\n", 1)[0].split())


class RewardConfigError(ValueError):
    """A reward name or its settings are invalid; the message names the field and value.

    ``field`` is the wrong field's path within a reward term (``("name",)``,
    ``("settings", "clustering")``), ``value`` its value and ``detail`` the message without
    them, so that the spec loader can name ``spec.reward[0].settings.clustering`` itself;
    ``field`` is None when no single field is to blame."""

    def __init__(
        self,
        message: str,
        *,
        field: tuple[str | int, ...] | None = None,
        value: Any = None,
        detail: str = "",
    ) -> None:
        super().__init__(message)
        self.field = field
        self.value = value
        self.detail = detail or message


def register_reward(cls: type[Reward]) -> type[Reward]:
    """Class decorator: make ``cls`` available under ``cls.name``.

    A name already taken by another class is refused, except by a new definition of the same
    class (same module and qualified name): re-running a notebook cell that defines a reward, or
    reloading its module, replaces the old definition instead of failing.
    """
    existing = _REGISTRY.get(cls.name)
    if existing is not None and existing is not cls and not _same_definition(existing, cls):
        raise RewardConfigError(f"reward name {cls.name!r} is already registered by {existing}")
    _REGISTRY[cls.name] = cls
    return cls


def _same_definition(a: type[Reward], b: type[Reward]) -> bool:
    return (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


#: Installed packages register rewards by name under this entry point group (``[project.
#: entry-points."sarl.rewards"] my_reward = "my_pkg.reward:MyReward"``); loaded on first lookup.
ENTRY_POINT_GROUP: Final = "sarl.rewards"


def _installed() -> dict[str, EntryPoint]:
    """The ``sarl.rewards`` entry points of the installed packages, by name (a built-in's name
    is never taken by one)."""
    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in _BUILTINS}


def installed_rewards() -> dict[str, str]:
    """Name -> ``module:Class`` of each reward an installed package registers (not imported)."""
    return {name: ep.value for name, ep in _installed().items()}


def reward_names() -> list[str]:
    """Names of all built-in, registered and installed (entry point) rewards."""
    return sorted(set(_REGISTRY) | set(_BUILTINS) | set(_installed()))


def get_reward_class(name: str) -> type[Reward]:
    """Look a reward up by registered name or ``module:Class`` dotted path."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name in _BUILTINS:
        importlib.import_module(_BUILTINS[name])
        return _REGISTRY[name]
    installed = _installed().get(name)
    # An installed reward is its ``module:Class``: on a cluster checked as that dotted path
    # (allow-list, never imported), here imported and kept under its entry point name.
    path = installed.value if installed is not None else name
    if ":" in path:
        rules = cluster_names.active_rules()
        if rules is not None:  # a tenant's spec: never import what it names
            return _cluster_dotted(path, rules)
        cls = _load_dotted(path)
        if installed is not None:
            _REGISTRY[name] = cls
        return cls
    from sarl.spec.suggest import did_you_mean  # imported here: sarl.spec imports this module

    known = reward_names()
    hint = did_you_mean(name, known) or f"known: {', '.join(known)} (see `sarl rewards`)"
    raise RewardConfigError(
        f"reward: unknown name {name!r}; {hint}",
        field=("name",),
        value=name,
        detail=f"unknown reward; {hint}",
    )


def _cluster_dotted(name: str, rules: cluster_names.ClusterRewards) -> type[Reward]:
    """A dotted name validated for a cluster: its stand-in (not imported), or refused."""
    refused = cluster_names.refusal(name, rules)
    if refused is not None:
        raise RewardConfigError(f"reward: {refused}", field=("name",), value=name, detail=refused)
    return cluster_names.stand_in(name)


def _load_dotted(path: str) -> type[Reward]:
    module_name, _, attr = path.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as e:
        raise RewardConfigError(
            f"reward: cannot import {path!r}: {e}",
            field=("name",),
            value=path,
            detail=f"cannot import it: {e}",
        ) from e
    if not (isinstance(obj, type) and issubclass(obj, Reward)):
        detail = "is not a subclass of sarl.rewards.base.Reward"
        raise RewardConfigError(
            f"reward: {path!r} {detail}", field=("name",), value=path, detail=detail
        )
    return obj


def parse_settings(name: str, settings: Mapping[str, Any] | BaseModel | None) -> BaseModel:
    """Validate ``settings`` against the reward's typed Settings model."""
    return settings_of(get_reward_class(name), settings, name)


def settings_of(
    cls: type[Reward], settings: Mapping[str, Any] | BaseModel | None, name: str | None = None
) -> BaseModel:
    """Validate ``settings`` against ``cls.Settings`` (``name``: the reward as the spec names
    it, for messages; default ``cls.name``). A key the model does not declare is refused even
    where the model leaves pydantic's default ``extra="ignore"`` (a user's typo must not pass
    silently); only a model that sets ``extra="allow"`` itself takes any key."""
    name = cls.name if name is None else name
    if isinstance(settings, cls.Settings):
        return settings
    raw = settings.model_dump() if isinstance(settings, BaseModel) else dict(settings or {})
    try:
        strict = _strict(cls.Settings)
        parsed = strict.model_validate(raw)
        if strict is not cls.Settings:  # the reward gets an instance of its own model
            parsed = cls.Settings.model_validate(raw)
    except ValidationError as e:
        raise _settings_error(name, cls.Settings, e) from e
    found = _non_finite(parsed.model_dump())
    if found is not None:  # pydantic reads the string "1e999" as inf (issue 38 item 9)
        where, number = found
        detail = "not a finite number; write a finite value"
        raise RewardConfigError(
            f"reward {name!r}: setting {'.'.join(map(str, where))!r}={number}: {detail}",
            field=("settings", *where),
            value=number,
            detail=detail,
        )
    return parsed


@functools.cache
def _strict(model: type[BaseModel]) -> type[BaseModel]:
    """``model`` refusing undeclared keys (itself where it forbids them or allows any)."""
    if model.model_config.get("extra") in ("forbid", "allow"):
        return model
    config = ConfigDict(**{**model.model_config, "extra": "forbid"})
    return type(model.__name__, (model,), {"model_config": config, "__module__": model.__module__})


def _settings_error(name: str, model: type[BaseModel], e: ValidationError) -> RewardConfigError:
    """The first error of ``e`` as a RewardConfigError naming the setting (and, for an unknown
    key, the closest declared one)."""
    # Imported here: sarl.spec imports this module. The value may be a credential (a URL
    # with user:password@, a token): redacted, shown only when it is a number or a short
    # word, and removed from the validator's message.
    from sarl.spec.secrets import describe_value, redact, redact_text, scrub_values
    from sarl.spec.suggest import NO_VALUE, hint_for, path, with_hint

    first = e.errors()[0]
    loc = path(first["loc"])
    key = str(first["loc"][-1]) if first["loc"] else ""
    value = describe_value(redact(first.get("input"), key))
    unknown = first["type"] == "extra_forbidden"
    msg = "unknown setting" if unknown else str(first["msg"]).removeprefix("Value error, ")
    hint = hint_for(first, model)
    if unknown and not model.model_fields:
        hint = "this reward takes no settings (its class declares no Settings model)"
    msg = scrub_values(with_hint(msg, hint), first.get("input"))
    shown = "" if unknown else f"={value}"
    return RewardConfigError(
        redact_text(f"reward {name!r}: setting {loc!r}{shown}: {msg}"),
        field=("settings", *first["loc"]),
        value=NO_VALUE if unknown else first.get("input"),
        detail=redact_text(msg),
    )


def _non_finite(
    value: Any, loc: tuple[str | int, ...] = ()
) -> tuple[tuple[str | int, ...], float] | None:
    """The path and value of the first float in ``value`` (a settings model's dump) that is
    inf or nan: no reward setting means one."""
    if isinstance(value, float) and not math.isfinite(value):
        return loc, value
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list | tuple)
        else ()
    )
    for key, item in items:
        found = _non_finite(item, (*loc, key))
        if found is not None:
            return found
    return None


def create_reward(name: str, settings: Mapping[str, Any] | BaseModel | None = None) -> Reward:
    """Instantiate a reward by name with validated settings."""
    return get_reward_class(name)(parse_settings(name, settings))
