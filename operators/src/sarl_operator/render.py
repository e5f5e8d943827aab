"""The objects the operator would create for an Experiment or a Study, without a cluster.

Called by ``sarl render`` (:mod:`sarl_operator.cli_render`, a ``sarl.cli`` plugin) and by
``sarl submit --dry-run`` through the ``sarl.render`` entry point (:func:`document_objects`):
the sdk never imports the operator, so the operator offers its builders to the CLI instead of
the CLI reaching for them. Every object comes from the builders :mod:`sarl_operator.
experiment_handlers` and :mod:`sarl_operator.study_handlers` call, with the same arguments,
after the same validation (:func:`~sarl_operator.experiment_handlers.experiment_from_body` on
the object ``sarl submit`` would store). What a cluster alone decides is fixed here and said in
:class:`Rendered`'s notes: the MLflow run id (empty: the operator creates the run first), the
job kind of ``job_kind: auto`` (what a cluster serving both kinds picks), and the operator's
settings: its defaults (:class:`~sarl_operator.reconcile.Settings` with no environment), or
those of a real install when the caller passes the operator Deployment's environment
(``--operator-env FILE``, :mod:`sarl.cluster.operator_env`): ``Settings.from_env`` and the reward
allow-list read from it as the operator reads its own, and a value the operator would refuse
is an :class:`~sarl.cluster.operator_env.OperatorEnvError` naming the variable, redacted.
Owner references are added by the operator when it applies an object, so they are not shown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sarl.cluster.documents import (
    experiment_body,
    load_for_cluster,
    load_study_for_cluster,
    study_body,
)
from sarl.cluster.operator_env import KUBECTL_LIST, OperatorEnvError
from sarl.rewards.cluster_names import allowed_reward_modules, validating_for_cluster
from sarl.spec.experiment import Experiment
from sarl.spec.secret_shapes import REDACTED
from sarl.spec.secrets import is_secret_key, redact_text
from sarl.spec.study import Study, is_study_document
from sarl_operator import admission, evaluation, served_models, study_builders, trainjob
from sarl_operator.builders import configmap
from sarl_operator.experiment_handlers import JOB_BUILDERS, auto_job_kind, experiment_from_body
from sarl_operator.network_policies import network_policies
from sarl_operator.reconcile import Settings, status_interval_s

#: The kinds a cluster may serve, as ``job_kind: auto`` sees them on a cluster serving both.
BOTH_KINDS: Final = (trainjob.KIND, "PyTorchJob")


@dataclass
class Rendered:
    """The objects in the order the operator applies them, and notes on what was assumed."""

    objects: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def job_kind_of(exp: Experiment, wanted: str | None = None) -> str:
    """``wanted``, else ``spec.resources.job_kind``, with ``auto`` as a cluster serving both
    kinds resolves it (:func:`~sarl_operator.experiment_handlers.auto_job_kind`)."""
    kind = wanted or exp.spec.resources.job_kind
    return auto_job_kind(exp, BOTH_KINDS) if kind == "auto" else kind


def experiment_objects(
    exp: Experiment, namespace: str, settings: Settings, job_kind: str | None = None
) -> list[dict[str, Any]]:
    """The children of one Experiment in the order reconcile applies them: NetworkPolicies,
    the ConfigMap, InferenceServices, the training job, and the evaluation Job (created once
    training Succeeded, when the spec names cluster benchmarks). Raises ValueError as the
    builders do (a spec field the chosen kind cannot express)."""
    platform = settings.platform
    services = [
        configmap(exp, namespace, platform),
        *served_models.inference_services(exp, namespace, platform),
    ]
    served = any(c["kind"] == "InferenceService" for c in services)
    objects = [*network_policies(exp, namespace, platform, served), *services]
    common: Mapping[str, Any] = {
        "image": settings.image_of(exp),
        "mlflow_run_id": "",
        "tracking_uri": settings.tracking_uri_of(exp),
        "platform": platform,
    }
    objects.append(JOB_BUILDERS[job_kind_of(exp, job_kind)].build(exp, namespace, **common))
    if evaluation.cluster_benchmarks(exp):
        objects.append(evaluation.eval_job(exp, namespace, **common))
    return objects


def _as_operator_sees(
    body: Mapping[str, Any], settings: Settings, reward_modules: tuple[str, ...] | None
) -> Experiment:
    """The Experiment the operator validates from a stored object (rewards never imported;
    ``reward_modules`` None: any dotted reward passes, as ``sarl submit`` checks it)."""
    with validating_for_cluster(reward_modules):
        return experiment_from_body(body, settings.platform)


def study_objects(
    study: Study,
    namespace: str,
    settings: Settings,
    job_kind: str | None = None,
    reward_modules: tuple[str, ...] | None = None,
) -> list[dict[str, Any]]:
    """The Study's own objects (ConfigMap, shared InferenceServices), then each arm x seed
    Experiment followed by its children, then the report Job (created once every run ended)."""
    platform = settings.platform
    objects = [study_builders.configmap(study, namespace)]
    objects += [m.isvc for m in study_builders.shared_models(study, namespace, platform)]
    for obj in study_builders.experiments(study, namespace, "", platform):
        exp = _as_operator_sees(obj, settings, reward_modules)
        objects += [obj, *experiment_objects(exp, namespace, settings, job_kind)]
    base = study_builders.base_experiment(study, namespace)
    report = study_builders.report_job(
        study,
        namespace,
        image=settings.image_of(base),
        parent_run_id="",
        tracking_uri=settings.tracking_uri_of(base),
        platform=platform,
    )
    return [*objects, report]


def operator_settings(env: Mapping[str, str], source: str) -> tuple[Settings, tuple[str, ...]]:
    """The settings and the reward allow-list the operator reads from ``env`` (its
    Deployment's environment, from ``source``), checked as the operator checks them
    (``handlers``: the status interval at import, the rest before each object);
    OperatorEnvError ``source: VARIABLE...: what to fix``, redacted, for a value it refuses."""
    try:
        status_interval_s(env)
        return Settings.from_env(env), allowed_reward_modules(env)
    except ValueError as e:  # each names its variable; the values may hold a URL's userinfo
        raise OperatorEnvError(_without_secrets(f"{source}: {e}", env)) from e


def _without_secrets(message: str, env: Mapping[str, str]) -> str:
    """``message`` redacted, and without the value of any credential-named variable of
    ``env`` (``MLFLOW_TRACKING_PASSWORD`` set in the file by hand), whatever its shape."""
    for name, value in env.items():
        if value and is_secret_key(name):
            message = message.replace(value, REDACTED)
    return redact_text(message)


def document_objects(
    source: Path | dict[str, Any],
    namespace: str,
    *,
    job_kind: str | None = None,
    settings: Settings | None = None,
    operator_env: Mapping[str, str] | None = None,
    operator_env_source: str = "the operator's environment",
) -> Rendered:
    """The objects for the Experiment or Study in ``source`` (a file or a parsed document),
    validated as ``sarl submit`` and the operator validate it (SpecError naming the field),
    the stored custom object first; with ``operator_env``, then checked as the admission
    webhook checks a CREATE (:func:`~sarl_operator.admission.refusal`: images, rewards and
    tenant policy, the plan against the store's room): ValueError naming what it refuses. The
    ``sarl.render`` entry point. ``operator_env``: the
    operator Deployment's variables (``operator_env_source`` names where they were read), used
    instead of ``settings``; OperatorEnvError for a value the operator would refuse."""
    reward_modules: tuple[str, ...] | None = None
    if operator_env is not None:
        settings, reward_modules = operator_settings(operator_env, operator_env_source)
    settings = settings or Settings()
    data = source if isinstance(source, dict) else None
    if data is None:
        from sarl.spec.loader import load_document

        data, _ = load_document(source)
    if is_study_document(data):
        study, spec = load_study_for_cluster(source)
        objects = [
            study_body(study, namespace, spec),
            *study_objects(study, namespace, settings, job_kind, reward_modules),
        ]
        kinds = {job_kind_of(run.experiment, job_kind) for run in study.runs()}
    else:
        exp, spec = load_for_cluster(source)
        body = experiment_body(exp, namespace, spec)
        seen = _as_operator_sees(body, settings, reward_modules)
        objects = [body, *experiment_objects(seen, namespace, settings, job_kind)]
        kinds = {job_kind_of(seen, job_kind)}
    # What the webhook (or, without it, the create handler) answers on submit; without the
    # install's environment its allow-lists and store size are unknown, so nothing to check.
    refused = (
        None
        if operator_env is None
        else admission.refusal(objects[0], "CREATE", None, dict(operator_env))
    )
    if refused:
        raise ValueError(f"the platform's admission check refuses it: {refused}")
    used = None if operator_env is None else operator_env_source
    return Rendered(objects, _notes(sorted(kinds), job_kind, used))


def _notes(kinds: list[str], wanted: str | None, env_source: str | None) -> list[str]:
    """What the rendering assumed; ``env_source``: where the operator's environment was read
    (None: its defaults)."""
    settings = (
        f"operator settings: from {env_source} (Settings.from_env, as the operator reads its "
        "Deployment's environment)"
        if env_source
        else "operator settings: its defaults (the platform chart's values may change images, "
        "queue, gang scheduler and network policies; --operator-env FILE reads them from "
        f"'{KUBECTL_LIST}')"
    )
    how = "--job-kind" if wanted else "spec.resources.job_kind; auto: as on a cluster serving both"
    return [
        f"training job: {', '.join(kinds)} ({how}; --job-kind chooses)",
        "MLFLOW_RUN_ID is empty, and MLFLOW_TRACKING_URI without spec.tracking.mlflow_uri: "
        "the operator creates the run on the platform's MLflow before the job",
        "ownerReferences are added by the operator when it applies each object",
        settings,
    ]
