"""The verl 0.9.1 config keys sarl reads, and the Hydra overrides that set them.

Called by job builders and the CLI (:func:`verl_reward_overrides`, in any environment: this module
imports neither verl nor Hydra) and by the adapter's runtime modules (``compute_score``,
``reward_manager``), which parse their options with :func:`parse_score_options` /
:func:`parse_manager_options`.

Where verl 0.9.1 reads reward config (paths under ``verl/`` of the installed package):

* ``trainer/config/reward/reward.yaml`` mounts the ``reward`` group; the old top-level
  ``custom_reward_function`` / ``reward_model.*`` keys (``trainer/config/legacy_reward_impl.yaml``)
  are only copied over by ``migrate_legacy_reward_impl`` in
  ``experimental/reward_loop/reward_loop.py``, which ``trainer/main_ppo.py`` does not call (only
  ``experimental/fully_async_policy/fully_async_main.py`` does), so they are silently ignored.
* ``trainer/ppo/reward.py:get_custom_reward_fn`` loads ``reward.custom_reward_function.path`` /
  ``.name`` with ``utils/import_utils.py:load_extern_object`` (``pkg://dotted.module`` or a file
  path) and merges ``reward.custom_reward_function.reward_kwargs`` into every call, taking
  precedence over verl's own keyword arguments. ``reward_kwargs`` is not in the schema, hence the
  ``++`` (add-or-override) prefix.
* ``trainer/ppo/reward.py:resolve_reward_manager_cls``: with ``reward.reward_manager.source=
  importlib`` the class is ``getattr(load_module(reward.reward_manager.module.path),
  reward.reward_manager.name)`` (``module.name`` is not used).
* ``reward.reward_kwargs`` is where verl's own DAPO manager reads its options
  (``experimental/reward_loop/reward_manager/dapo.py``); sarl's manager reads
  ``reward.reward_kwargs.sarl``.
* ``reward.num_workers``: reward loop actors; each sample is sent to a random one
  (``experimental/agent_loop/agent_loop.py:_compute_score``), so group rewards need exactly one.

One reward term with weight 1.0 is written as ``reward`` (+ ``settings``); anything else (several
terms, weight-0 terms that are only logged, a weight other than 1.0) as ``terms``, a list of
:class:`TermOptions` scored as one weighted sum (:mod:`sarl.integrations.verl.terms`).

``pkg://`` paths are used rather than file paths because ``load_module`` executes a file path as
a fresh, unregistered module on every load; the adapter keeps its process-wide state in
``batcher.py`` so that both forms work.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sarl.rewards.registry import RewardConfigError, get_reward_class, parse_settings

COMPUTE_SCORE_PATH = "pkg://sarl.integrations.verl.compute_score"
COMPUTE_SCORE_NAME = "compute_score"
MANAGER_PATH = "pkg://sarl.integrations.verl.reward_manager"
MANAGER_CLASS = "SarlRewardManager"
#: Dotted config key holding :class:`ManagerOptions` (read by ``SarlRewardManager``).
MANAGER_OPTIONS_KEY = "reward.reward_kwargs.sarl"
_CUSTOM_KWARGS_KEY = "reward.custom_reward_function.reward_kwargs"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class TermOptions(BaseModel):
    """One term of the weighted sum (``terms``): a registered reward, its weight and settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reward: str = Field(description="Registered reward name or module:Class.")
    weight: float = Field(
        default=1.0,
        allow_inf_nan=False,  # a non-finite weight would put NaN into verl's token-level rewards
        description="Weight in the summed score; 0 scores and reports the term, trains on none.",
    )
    settings: dict[str, Any] = Field(
        default_factory=dict, description="The reward's typed settings (validated by the reward)."
    )


class ScoreOptions(BaseModel):
    """Options of the per-sample path: ``reward.custom_reward_function.reward_kwargs``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    reward: str = Field(default="structure", description="Registered reward name or module:Class.")
    settings: dict[str, Any] = Field(
        default_factory=dict, description="The reward's typed settings (validated by the reward)."
    )
    terms: list[TermOptions] | None = Field(
        default=None,
        min_length=1,
        description=(
            "Instead of reward and settings: score = sum of weight * term over these rewards, each "
            "term's score and components returned too (reward/<name>, <name>/<component>)."
        ),
    )
    timeout_s: float = Field(
        default=60.0,
        gt=0,
        description=(
            "Bound on scoring one sample (per-sample path) or one complete group (manager), "
            "batching window included."
        ),
    )
    on_error: float | None = Field(
        default=None,
        allow_inf_nan=False,  # a NaN fallback would put NaN into verl's token-level rewards
        description=(
            "None (default): a failed or timed-out scoring raises, naming the reward. A number: "
            "that sample gets this score, reward_failed=1.0 and a logged warning instead."
        ),
    )
    max_batch_samples: int = Field(
        default=256, ge=1, description="Flush a micro-batch once it holds this many samples."
    )
    max_wait_ms: float = Field(
        default=10.0, ge=0, description="Flush a micro-batch this long after its first sample."
    )

    @model_validator(mode="after")
    def _reward_or_terms(self) -> ScoreOptions:
        if self.terms is not None and {"reward", "settings"} & self.model_fields_set:
            raise ValueError("give either reward (and settings) or terms, not both")
        return self

    def term_list(self) -> list[TermOptions]:
        """The terms scored: ``terms``, or ``reward`` with weight 1.0."""
        if self.terms is not None:
            return list(self.terms)
        return [TermOptions(reward=self.reward, settings=self.settings)]

    def label(self) -> str:
        """How errors name what is scored: the reward, or the weighted sum of the terms."""
        if self.terms is None:
            return self.reward
        return " + ".join(f"{t.weight:g}*{t.reward}" for t in self.terms)


class ManagerOptions(ScoreOptions):
    """Options of ``SarlRewardManager``: ``reward.reward_kwargs.sarl``."""

    group_size: int | None = Field(
        default=None,
        ge=1,
        description="Responses per uid; default actor_rollout_ref.rollout.n (group rewards only).",
    )
    group_timeout_s: float = Field(
        default=1800.0,
        gt=0,
        description=(
            "How long the first response of a group waits for its siblings (verl streams rewards "
            "during rollout, so this must cover the spread of generation times)."
        ),
    )


OptionsT = TypeVar("OptionsT", bound=ScoreOptions)


def to_plain(value: Any) -> Any:
    """Recursively turn mappings and sequences (e.g. OmegaConf containers) into dicts and lists.

    verl passes ``reward_kwargs`` as ``dict(DictConfig)``: the top level is a dict, nested values
    are still ``DictConfig``/``ListConfig``.
    """
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [to_plain(v) for v in value]
    return value


def parse_score_options(raw: Mapping[str, Any]) -> ScoreOptions:
    """Validate the per-sample options; raises :class:`RewardConfigError` naming the key."""
    return _parse(ScoreOptions, raw, _CUSTOM_KWARGS_KEY)


def parse_manager_options(raw: Mapping[str, Any] | None) -> ManagerOptions:
    """Validate the reward manager's options; raises :class:`RewardConfigError` naming the key."""
    return _parse(ManagerOptions, raw or {}, MANAGER_OPTIONS_KEY)


def _parse(model_cls: type[OptionsT], raw: Mapping[str, Any], where: str) -> OptionsT:
    try:
        return model_cls.model_validate(to_plain(raw))
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        if not loc:  # a check across fields (_reward_or_terms)
            raise RewardConfigError(f"{where}: {first['msg']}") from e
        raise RewardConfigError(f"{where}.{loc}={first.get('input')!r}: {first['msg']}") from e


def verl_reward_overrides(
    reward_name: str = "structure",
    settings: Mapping[str, Any] | BaseModel | None = None,
    *,
    group: bool,
    timeout_s: float | None = None,
    on_error: float | None = None,
    group_size: int | None = None,
) -> list[str]:
    """Hydra overrides that make verl 0.9.1's trainer score with ``reward_name``.

    ``group=False``: ``compute_score`` as the custom reward function of verl's default manager
    (per-sample rewards that need text only). ``group=True``: ``SarlRewardManager`` with one
    reward worker, so every response of a prompt reaches one process and group rewards see whole
    groups; also required for rewards that mask truncated completions (it sees the tokens). Settings
    are validated here (raising :class:`RewardConfigError`) and only non-default ones are emitted.
    Options left as None keep their defaults (:class:`ScoreOptions`, :class:`ManagerOptions`).
    """
    options = {"reward": reward_name, **_checked_settings(reward_name, settings, group=group)}
    return _reward_lines(
        options, group=group, timeout_s=timeout_s, on_error=on_error, group_size=group_size
    )


def verl_terms_overrides(
    terms: Sequence[TermOptions],
    *,
    group: bool,
    timeout_s: float | None = None,
    on_error: float | None = None,
    group_size: int | None = None,
) -> list[str]:
    """Like :func:`verl_reward_overrides`, for a weighted sum of reward terms (the ``terms``
    option): verl trains on ``sum(weight * term)`` and gets every term's score and components as
    extra info. ``group`` must be True when any term needs groups or masks truncated completions.
    """
    entries = [
        {
            "reward": term.reward,
            "weight": term.weight,
            **_checked_settings(term.reward, term.settings, group=group),
        }
        for term in terms
    ]
    return _reward_lines(
        {"terms": entries},
        group=group,
        timeout_s=timeout_s,
        on_error=on_error,
        group_size=group_size,
    )


def _checked_settings(
    reward_name: str, settings: Mapping[str, Any] | BaseModel | None, *, group: bool
) -> dict[str, Any]:
    """``{"settings": <non-default settings>}`` (or ``{}``) once the reward can run on this path."""
    reward_cls = get_reward_class(reward_name)
    if reward_cls.needs_group and not group:
        raise RewardConfigError(
            f"reward {reward_name!r} needs whole groups; use group=True (the reward manager): "
            "verl's custom reward function sees one response at a time"
        )
    if reward_cls.masks_truncated and not group:
        raise RewardConfigError(
            f"reward {reward_name!r} masks truncated completions; use group=True (the reward "
            "manager, which sees the response tokens): verl's custom reward function gets only "
            "the text and cannot tell a truncated response"
        )
    non_default = parse_settings(reward_name, settings).model_dump(
        mode="json", exclude_defaults=True
    )
    return {"settings": non_default} if non_default else {}


def _reward_lines(
    options: dict[str, Any],
    *,
    group: bool,
    timeout_s: float | None,
    on_error: float | None,
    group_size: int | None,
) -> list[str]:
    if group_size is not None and not group:
        raise RewardConfigError("group_size: only used with group=True")
    extra = {"timeout_s": timeout_s, "on_error": on_error, "group_size": group_size}
    options.update({k: v for k, v in extra.items() if v is not None})
    if not group:
        parse_score_options(options)
        return [
            f"reward.custom_reward_function.path={COMPUTE_SCORE_PATH}",
            f"reward.custom_reward_function.name={COMPUTE_SCORE_NAME}",
            *_assignments(_CUSTOM_KWARGS_KEY, options),
        ]
    parse_manager_options(options)
    return [
        "reward.reward_manager.source=importlib",
        f"reward.reward_manager.name={MANAGER_CLASS}",
        f"reward.reward_manager.module.path={MANAGER_PATH}",
        "reward.num_workers=1",
        *_assignments(MANAGER_OPTIONS_KEY, options),
    ]


def _assignments(prefix: str, values: Mapping[str, Any]) -> list[str]:
    """``++prefix.key=value`` lines, nested mappings flattened into dotted keys."""
    lines: list[str] = []
    for key, value in values.items():
        if not _IDENTIFIER.match(key):
            raise ValueError(f"{prefix}: key {key!r} cannot be written as a Hydra override")
        if isinstance(value, Mapping) and value:
            lines.extend(_assignments(f"{prefix}.{key}", value))
        else:
            lines.append(f"++{prefix}.{key}={hydra_value(value)}")
    return lines


def hydra_value(value: Any) -> str:
    """A value in Hydra's override grammar; strings are always quoted so '1' stays a string."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return hydra_quote(value)
    if isinstance(value, Mapping):
        for key in value:
            if not isinstance(key, str) or not _IDENTIFIER.match(key):
                raise ValueError(f"key {key!r} cannot be written in a Hydra override value")
        items = ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, Sequence):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} {value!r} as a Hydra override value")


def hydra_quote(text: str) -> str:
    """Single-quote ``text`` so that Hydra and OmegaConf hand back exactly ``text``.

    Hydra unescapes only backslashes that precede a quote (or end the string); OmegaConf then
    resolves ``${...}``, so ``${`` is escaped as ``\\${`` and backslashes just before it doubled.
    """
    text = re.sub(r"(\\*)\$\{", lambda m: m.group(1) * 2 + "\\${", text)
    text = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    text = re.sub(r"(\\+)\Z", lambda m: m.group(1) * 2, text)
    return f"'{text}'"
