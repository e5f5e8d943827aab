"""Which reward settings one request may set, and how high: the allow-list and the maxima.

Called by :mod:`sarl_services.reward` before a request is queued. A request's ``settings`` may
only hold the scoring knobs listed in :data:`REQUEST_SETTINGS` for its reward; everything else —
endpoints, model names and paths, API-key environment variables, devices, worker pools, nested
reward configurations — comes from the service's own configuration (``--embedder ...``,
``--reward-settings NAME=FILE``). Otherwise a client could choose which environment variable is
sent as a Bearer token to the deployed judge (``settings.decomposer.api_key_env``), which host
the service calls, or which model it loads. Knobs that scale the work (``max_steps``,
``kmeans_n_init``, ...) have a maximum, :data:`DEFAULT_MAXIMA`, which the operator changes with
``sarl serve reward --max-setting REWARD.FIELD=VALUE``. A refused request gets 400 naming the
field (``param: "settings.<field>"``); no message repeats a value the request did not send.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ValidationError

from sarl.rewards.registry import get_reward_class
from sarl.rewards.structure.config import StructureRewardConfig
from sarl_services.errors import BadRequest

_VERIFIABLE = (
    "correct_reward",
    "format_reward",
    "n_max",
    "length_penalty_per_pair",
    "length_penalty_cap",
    "qa_penalty_per_violation",
    "qa_penalty_cap",
)
_GROUND_TRUTH = ("correct_score", "wrong_score", "missing_answer_score")

#: reward -> the settings a request may set. A reward missing here (one registered by user
#: code) takes no per-request settings at all.
REQUEST_SETTINGS: Mapping[str, frozenset[str]] = {
    name: frozenset(keys)
    for name, keys in {
        "structure": (
            *StructureRewardConfig.model_fields,  # scoring settings only: not embedder/workers
        ),
        "ground_truth": _GROUND_TRUTH,
        "ground_truth_math_verify": (*_GROUND_TRUTH, "timeout_seconds", "on_missing"),
        "structured_qa": (*_VERIFIABLE, "lambda_judge"),  # judge on/off: the deployment's call
        "rlkd": (
            "teacher_key",
            "structure_weight",
            "outcome_weight",
            "normalize",
            "parse_retries",
            "on_failure",
            "decompose_max_tokens",
            "judge_max_tokens",
        ),
        "ttrl": ("voting", "extraction", "tie_break", "unanswered"),
        "empo": (
            "extraction",
            "clustering",
            "gate_arithmetic",
            "unanswered",
            "entropy_max_fraction_of_log_g",
            "entropy_min",
            "entropy_max",
            "timeout_seconds",
            "on_missing",
        ),
        "format_length": ("max_length", "length_unit", "turning_point", "shape", "format_rule"),
        "self_certainty": ("temperature",),
        "tag_format": ("valid_score", "invalid_score", "tags", "min_steps", "allowed_violations"),
        "tag_lcs": ("length_unit", "max_steps"),
        "tag_maxflow": (
            "layer",
            "tau",
            "top_share",
            "max_completion_tokens",
            "truncated_score",
            "max_steps",
        ),
    }.items()
}

#: reward -> setting -> the largest value a request may give (work grows with these; about twice
#: each default). Changed per deployment with ``--max-setting REWARD.FIELD=VALUE``.
DEFAULT_MAXIMA: Mapping[str, Mapping[str, float]] = {
    "structure": {"max_steps": 1024, "kmeans_n_init": 10, "kmeans_max_iter": 1000},
    "ground_truth_math_verify": {"timeout_seconds": 10.0},
    "empo": {"timeout_seconds": 6.0},
    "rlkd": {"decompose_max_tokens": 4096, "judge_max_tokens": 64},
    "tag_lcs": {"max_steps": 256},
    "tag_maxflow": {"max_steps": 512},
}


def _show(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except RecursionError:  # bodies are depth-limited before decoding; never a 500 anyway
        return "a value nested too deeply to show"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class RequestSettingsPolicy:
    """The allow-list and the maxima one service enforces on request settings."""

    allowed: Mapping[str, frozenset[str]] = field(default_factory=lambda: dict(REQUEST_SETTINGS))
    maxima: Mapping[str, Mapping[str, float]] = field(
        default_factory=lambda: {k: dict(v) for k, v in DEFAULT_MAXIMA.items()}
    )

    def with_maxima(self, overrides: Mapping[str, float]) -> RequestSettingsPolicy:
        """A copy with ``{"REWARD.FIELD": value}`` maxima (the operator's ``--max-setting``);
        ValueError unless the field is one a request may set and the value is a number."""
        maxima = {name: dict(limits) for name, limits in self.maxima.items()}
        for key, value in overrides.items():
            name, _, setting = key.partition(".")
            if setting not in self.allowed.get(name, frozenset()):
                raise ValueError(
                    f"--max-setting {key}: not a per-request setting; per-request settings "
                    f"of {name!r}: {', '.join(sorted(self.allowed.get(name, ()))) or 'none'}"
                )
            if not _number(value):
                raise ValueError(f"--max-setting {key}: expected a number, got {value!r}")
            maxima.setdefault(name, {})[setting] = value
        return RequestSettingsPolicy(self.allowed, maxima)

    def check(self, reward: str, settings: Mapping[str, Any] | None) -> None:
        """400 (:class:`BadRequest` naming ``settings.<field>``) for a setting outside the
        allow-list of ``reward`` or above its maximum; types are checked later by the reward."""
        allowed = self.allowed.get(reward, frozenset())
        limits = self.maxima.get(reward, {})
        for key, value in (settings or {}).items():
            param = f"settings.{key}"
            if key not in allowed:
                listed = ", ".join(sorted(allowed)) or "none"
                raise BadRequest(
                    f"{param}: not settable per request for reward {reward!r} (per-request "
                    f"settings: {listed}); endpoints, models, keys, devices and worker pools are "
                    "part of the service's configuration",
                    param=param,
                )
            maximum = limits.get(key)
            if maximum is None:
                continue
            if not _number(value):
                raise BadRequest(
                    f"{param}: expected a number at most {maximum:g} (this service's maximum)",
                    param=param,
                )
            if value > maximum:
                raise BadRequest(
                    f"{param}: {value} is above this service's maximum of {maximum:g} "
                    f"(sarl serve reward --max-setting {reward}.{key}=N)",
                    param=param,
                )


def validate_settings(
    model: type[BaseModel], merged: Mapping[str, Any], requested: Mapping[str, Any] | None
) -> BaseModel:
    """``merged`` (the service's defaults with the request's settings on top) as ``model``;
    400 naming the field. The offending value is shown only when the request sent it: the
    defaults may hold deployment details that are not the client's business."""
    try:
        return model.model_validate(dict(merged))
    except ValidationError as e:
        first = e.errors()[0]
        loc = [str(p) for p in first["loc"]]
        param = ".".join(["settings", *loc])
        if loc and requested is not None and loc[0] in requested:
            message = f"{param}: {first['msg']} (got {_show(first.get('input'))})"
        elif loc:  # a field only the service's configuration sets
            message = (
                f"{param}: {first['msg']}; this field is part of the service's configuration "
                "(sarl serve reward --reward-settings), not of the request"
            )
        else:  # a check across fields
            message = f"settings: {first['msg']}"
        raise BadRequest(message, param=param) from e


def reward_settings_model(reward: str) -> type[BaseModel]:
    """The typed settings a request for ``reward`` is validated against."""
    if reward == "structure":  # the service's own embedder; no per-request worker pools
        return StructureRewardConfig
    return get_reward_class(reward).Settings
