"""The allow-list of spec fields that may be logged (MLflow params, the stored spec document).

Called by :meth:`sarl.tracking.tracker.Tracker.start_experiment` (a training run's params and
``spec/experiment.yaml``), the evaluation job (``sarl_jobs.evaluate``), the Study runner (the
parent run's ``spec/study.yaml``) and the operator's Study ConfigMap (which its report Job logs
as ``spec/study.yaml``). This module is the one source of truth for what of a spec
leaves the user's machine for a tracking server.

Why an allow-list and not only redaction (issue 38 item 8): :func:`sarl.spec.secrets.redact`
catches credential *shapes* and *places*, but a credential with no known shape in a free-form
field (an ``extra_args`` value, a custom reward's ``note`` setting, an annotation) passes every
rule. So a spec leaf is logged only when its path is named here (model name, rewards' names and
weights, hyper-parameters, seeds, dataset names, sizes) or, under ``reward[i].settings``, when it
is a typed setting of a registered reward holding a number, a bool or a fixed choice. In MLflow
params every other leaf is :data:`NOT_LOGGED` (a reader sees that something was there); in the
stored spec document it is left out, so the document still validates for the Study report, and
the file starts with :data:`DOCUMENT_NOTE`. A new spec field is not logged until it is named here.

Paths are dotted, relative to an ``ExperimentSpec``; ``*`` stands for one key or list index.
The user's ``tracking.tags`` are not filtered here: they are logged as run tags because the user
asked for exactly that (still redacted), and are not logged as params.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel

NOT_LOGGED = "<not logged: field not in the allow-list>"

#: Leaves of an ExperimentSpec that may be logged. Free-form strings (prompt_template, URIs,
#: images, extra_args, tokens, selectors, tolerations, tags, custom reward settings) are absent
#: on purpose.
SPEC_FIELDS: tuple[str, ...] = (
    "preset",
    "model.name",
    "model.dtype",
    "model.tiny.*",
    "model.warm_start.*",
    "data.task",
    "data.dataset",
    "data.question_field",
    "data.answer_field",
    "data.train_size",
    "data.eval_size",
    "data.split_seed",
    "data.difficulty",
    "data.shuffle",
    "algorithm.*",
    "reward.*.name",
    "reward.*.weight",
    "evaluation.benchmarks.*",
    "evaluation.k",
    "evaluation.every_n_steps",
    "evaluation.temperature",
    "evaluation.max_problems",
    "tracking.experiment_name",
    "tracking.log_maps_every_n_steps",
    "storage.every_n_steps",
    "storage.keep_last",
    "resources.backend",
    "resources.job_kind",
    "resources.nodes",
    "resources.gpus_per_node",
    "resources.gpu_resource",
    "resources.gpu_memory",
    "resources.cpu",
    "resources.memory",
    "resources.scratch_size",
    "resources.trl_vllm",
    "resources.evaluation.cpu",
    "resources.evaluation.memory",
    "resources.evaluation.scratch_size",
    "serving.deployment_mode",
    "serving.release",
    "serving.knative_features.*",
    "serving.*.cpu",
    "serving.*.memory",
    "serving.*.gpus",
    "serving.*.gpu_resource",
    "serving.*.max_model_len",
)

#: Leaves of an Experiment or Study document outside its ``spec``.
_DOCUMENT_FIELDS: tuple[str, ...] = ("apiVersion", "kind", "metadata.name", "metadata.namespace")

#: Leaves of a StudySpec besides its base spec and the arms' overrides.
_STUDY_FIELDS: tuple[str, ...] = ("arms.*.name", "seeds.*", "parallelism", "reference")

_Path = tuple[str, ...]


def _split(patterns: Sequence[str]) -> tuple[_Path, ...]:
    return tuple(tuple(p.split(".")) for p in patterns)


def _matches(path: _Path, patterns: tuple[_Path, ...], container: bool) -> bool:
    """``path`` is a listed leaf, or with ``container`` a mapping or list something listed
    lies under."""
    return any(
        (len(p) > len(path) if container else len(p) == len(path))
        and all(a in ("*", b) for a, b in zip(p, path, strict=False))
        for p in patterns
    )


def _is_container(value: Any) -> bool:
    return isinstance(value, Mapping | list | tuple)


def _spec_allowed(spec: Mapping[str, Any]) -> Callable[[_Path, Any], bool]:
    """Whether a value at a path (relative to ``spec``) of an ExperimentSpec may be logged: a
    leaf, or a mapping or list that may hold a leaf that may (its keys are logged too)."""
    fields = _split(SPEC_FIELDS)

    def allowed(path: _Path, value: Any) -> bool:
        container = _is_container(value)
        if len(path) >= 3 and path[0] == "reward" and path[2] == "settings":
            if len(path) == 3:  # the settings' keys: a registered reward's declared names
                return container and _settings_model(spec, path[1]) is not None
            return not container and len(path) == 4 and _typed_setting(spec, path, value)
        return _matches(path, fields, container)

    return allowed


def _settings_model(spec: Mapping[str, Any], index: str) -> type[BaseModel] | None:
    """The settings model of ``spec.reward[index]`` when the reward is registered by name.

    None for a reward named by a dotted path: the user's module, never imported here, whose
    settings are untyped as far as sarl knows (a reward registered by name in the user's
    process has a typed model and is treated like a built-in one)."""
    from sarl.rewards.registry import get_reward_class, reward_names

    terms = spec.get("reward")
    if not isinstance(terms, list) or not index.isdigit() or int(index) >= len(terms):
        return None
    term = terms[int(index)]
    reward = term.get("name") if isinstance(term, Mapping) else None
    if reward not in reward_names():
        return None
    return get_reward_class(reward).Settings


def _typed_setting(spec: Mapping[str, Any], path: _Path, value: Any) -> bool:
    """A declared setting of a registered reward holding a number, bool, null or a fixed
    choice (nested values are never logged)."""
    model = _settings_model(spec, path[1])
    field = None if model is None else model.model_fields.get(path[3])
    if field is None:
        return False
    if value is None or isinstance(value, bool | int | float):
        return True
    return isinstance(value, str) and _is_choice(field.annotation)


def _is_choice(annotation: Any) -> bool:
    """A Literal or Enum annotation (possibly optional): its strings come from a fixed set."""
    if typing.get_origin(annotation) is typing.Literal:
        return True
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return True
    args = typing.get_args(annotation)
    return bool(args) and all(a is type(None) or _is_choice(a) for a in args)


class _Omit:
    """What a leaf that is not logged becomes in a document (left out, see :func:`_keep`)."""


_OMIT = _Omit()


def _keep(value: Any, path: _Path, allowed: Callable[[_Path, Any], bool], omit: bool) -> Any:
    """``value`` with every leaf ``allowed`` rejects, and every mapping or list nothing allowed
    lies under (its keys may be the user's own words), replaced by :data:`NOT_LOGGED`, or with
    ``omit`` left out (with a mapping or list left empty by that). An empty mapping or list,
    like null, holds nothing and is kept."""
    if value is None or value == {} or value == []:
        return value
    if not allowed(path, value):
        return _OMIT if omit else NOT_LOGGED
    if not _is_container(value):
        return value
    items = value.items() if isinstance(value, Mapping) else enumerate(value)
    kept = {k: _keep(v, (*path, str(k)), allowed, omit) for k, v in items}
    kept = {k: v for k, v in kept.items() if v is not _OMIT}
    if not kept and omit:
        return _OMIT
    return kept if isinstance(value, Mapping) else list(kept.values())


def loggable_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """An ExperimentSpec as a JSON dict (``model_dump(mode="json")``) for MLflow params: every
    leaf not allow-listed (:data:`SPEC_FIELDS`, typed reward settings) is :data:`NOT_LOGGED`."""
    kept = _keep(spec, (), _spec_allowed(spec), omit=False)
    return dict(kept) if isinstance(kept, Mapping) else {}


def _document(doc: Mapping[str, Any], spec: Callable[[Mapping[str, Any]], Any]) -> dict[str, Any]:
    """``doc`` with its top-level leaves filtered and its ``spec`` given to ``spec``."""
    top = _split(_DOCUMENT_FIELDS)
    head = {k: v for k, v in doc.items() if k != "spec"}
    out = _keep(head, (), lambda p, v: _matches(p, top, _is_container(v)), omit=True)
    out = dict(out) if isinstance(out, Mapping) else {}
    body = doc.get("spec")
    if isinstance(body, Mapping):
        kept = spec(body)
        if kept is not _OMIT:
            out["spec"] = kept
    return out


def loggable_experiment(doc: Mapping[str, Any]) -> dict[str, Any]:
    """An Experiment document as a JSON dict with only its allow-listed leaves: the others are
    left out (not replaced), so the document still validates, with defaults in their place;
    stored as ``spec/experiment.yaml`` under a comment saying so (:data:`DOCUMENT_NOTE`)."""
    return _document(doc, lambda spec: _keep(spec, (), _spec_allowed(spec), omit=True))


def loggable_study(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A Study document as a JSON dict with only its allow-listed leaves (others left out, as
    :func:`loggable_experiment`): its base spec as an Experiment's, each arm's override by the
    path it sets in the spec (``algorithm: {learning_rate: 1e-5}`` and a reward list are kept,
    ``serving.judge.extra_args`` is not), arm names, seeds, parallelism and reference. The Study
    report reads arm order, reference arm and ``k`` from it."""

    def spec(body: Mapping[str, Any]) -> Any:
        base = body.get("base")
        base_allowed = _spec_allowed(base if isinstance(base, Mapping) else {})
        study = _split(_STUDY_FIELDS)

        def allowed(path: _Path, value: Any) -> bool:
            if path[:1] == ("base",):
                return base_allowed(path[1:], value)
            if len(path) >= 3 and path[0] == "arms" and path[2] == "override":
                if len(path) == 3:
                    return _is_container(value)
                # An override is a partial spec: judged as one, its own reward list (lists
                # replace) typing its reward settings.
                return _spec_allowed(_override(body, path[1]))(path[3:], value)
            return _matches(path, study, _is_container(value))

        return _keep(body, (), allowed, omit=True)

    return _document(doc, spec)


def _override(body: Mapping[str, Any], index: str) -> Mapping[str, Any]:
    """The override of ``body``'s arm ``index`` (empty when not a mapping)."""
    arms = body.get("arms")
    arm = arms[int(index)] if isinstance(arms, list) and index.isdigit() else None
    override = arm.get("override") if isinstance(arm, Mapping) else None
    return override if isinstance(override, Mapping) else {}


#: The first line of a stored spec document: what was left out and why.
DOCUMENT_NOTE = (
    "# Only the fields sarl allows to be logged (sarl.spec.loggable); the others are left out\n"
    "# and read here as their defaults. The full spec stays with the user.\n"
)


def logged_experiment(doc: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """What a run logs of an Experiment document: (its spec for MLflow params, as
    :func:`loggable_spec`; the YAML stored as ``spec/experiment.yaml``: :data:`DOCUMENT_NOTE`,
    then :func:`loggable_experiment`), both redacted (:func:`sarl.spec.secrets.redact`)."""
    import yaml

    from sarl.spec.secrets import redact

    spec = doc.get("spec")
    params = redact(loggable_spec(spec)) if isinstance(spec, Mapping) else {}
    stored = redact(loggable_experiment(doc))
    return params, DOCUMENT_NOTE + yaml.safe_dump(stored, sort_keys=False, allow_unicode=True)


__all__ = [
    "DOCUMENT_NOTE",
    "NOT_LOGGED",
    "SPEC_FIELDS",
    "loggable_experiment",
    "loggable_spec",
    "loggable_study",
    "logged_experiment",
]
