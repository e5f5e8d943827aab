"""kopf handlers for ``experiments.sarl.dev``: read state, apply desired children, patch status.

Run by ``kopf run --standalone -m sarl_operator.handlers`` (charts/sarl-platform). On
create/resume/update of the spec, :func:`reconcile`:

1. validates the spec (chat endpoints the operator serves get their URL first, see
   :func:`sarl_operator.builders.fill_judge_urls`); invalid → status Failed with a condition
   naming the field, and ``kopf.PermanentError`` (no retries);
2. gets the MLflow run (:mod:`sarl_operator.tracking`; reused from ``status.mlflowRunId``, else
   found by its uid tag, else created). MLflow configured but unreachable → ``TrackingReady=False``
   and ``kopf.TemporaryError(delay=30)``: no job is created without its run, so a run's metrics
   are never split over two runs. No tracking URI at all → no run, ``MLFLOW_RUN_ID`` empty;
3. checks the S3 credentials Secret exists in the Experiment's namespace with both keys (the
   pods reference it there; missing → ``StorageReady=False`` naming the ``kubectl`` command and a
   retry every 30 s);
4. builds the children (:mod:`sarl_operator.builders`), makes the Experiment their controller
   owner (deletion is left to the garbage collector) and creates or merge-patches them. An
   existing object with a child's name that another owner controls (the finished PyTorchJob of a
   deleted Experiment of the same name, not yet garbage-collected) is never adopted:
   ``ChildrenReady=False`` and a retry. The training job is created only once the
   InferenceServices it calls report Ready (``InferenceReady``). The training job is a
   Kubeflow Trainer v2 TrainJob (:mod:`sarl_operator.trainjob`) or a Training Operator
   PyTorchJob: ``spec.resources.job_kind``, ``auto`` resolved by discovery, chosen once and kept
   in ``status.jobKind`` (:func:`choose_job_kind`). A kind the cluster does not serve (Trainer,
   Training Operator or KServe not installed, or the chart's ClusterTrainingRuntime missing)
   ends Failed once (``<Kind>Unavailable``), naming what to install;
5. patches the status when it changed, with an Event per phase or condition transition.

Served models are released (``spec.serving.release``, default ``on_completion``): once training
Failed, or Succeeded and its evaluation Job (if any) ended, :func:`refresh_status` deletes the
Experiment's InferenceServices (``InferenceReady=False``, reason ``Released``) and reconcile no
longer applies them (:func:`released`); a run whose job is gone again gets them back.

A timer (every ``SARL_STATUS_INTERVAL_S`` s, default 30) runs :func:`refresh_status`: phase and
conditions from the training job (with a Kueue queue: phase ``Queued`` and condition
``Admitted`` from its Workload, :func:`admission_condition`), lastStep/lastReward from the MLflow
run (a failed read keeps the last values), and, once training Succeeded with cluster benchmarks
in the spec, the evaluation Job (reported as condition ``Evaluated``). The work is in
:func:`reconcile` and :func:`refresh_status`, which take the Kubernetes API and the MLflow
client factory as arguments, so tests call them with fakes or point them at test servers.
"""

from __future__ import annotations

import datetime
import logging
import os
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import kopf

from sarl.integrations.cluster import check_cluster
from sarl.spec.experiment import Experiment
from sarl.spec.loader import SpecError, load_experiment
from sarl.spec.secrets import redact_text
from sarl.tracking.describe import run_description, study_run_params
from sarl_operator import builders, evaluation, scheduling, trainjob
from sarl_operator.admission import allowed_registries, image_violations
from sarl_operator.kube import (
    DynamicKubeApi,
    ForeignOwnerError,
    KubeApi,
    MissingApiError,
    apply,
    controlled_by,
)
from sarl_operator.status import (
    OPERATOR_CONDITIONS,
    RELEASED,
    condition,
    desired_status,
    eval_condition,
    failed_status,
    isvc_ready,
    job_phase,
    run_ended,
    status_patch,
)
from sarl_operator.tracking import MlflowTracking, Progress, RunRef, TrackingError, run_url

log = logging.getLogger(__name__)

GROUP: Final = "sarl.dev"
VERSION: Final = "v1alpha1"
PLURAL: Final = "experiments"
DEFAULT_STATUS_INTERVAL_S: Final = 30.0
TRACKING_RETRY_DELAY_S: Final = 30
#: Seconds between checks while waiting for a Secret, InferenceServices or a previous child
#: (``SARL_RETRY_DELAY_S``).
WAIT_RETRY_DELAY_S: Final = 30.0
#: What to install when the cluster does not serve a child's kind (README: cluster section).
REQUIREMENTS: Final[Mapping[str, str]] = {
    "PyTorchJob": "the Kubeflow Training Operator v1.7 or later (v1.9.0 tested), e.g. "
    "kubectl apply --server-side -k "
    '"github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.9.0"',
    "TrainJob": "Kubeflow Trainer v2.3.0, e.g. kubectl apply --server-side -k "
    '"github.com/kubeflow/trainer.git/manifests/overlays/manager?ref=v2.3.0", and the '
    f"ClusterTrainingRuntime {trainjob.RUNTIME_NAME} of the sarl-platform chart "
    "(trainer.v2.runtime.enabled: true)",
    "InferenceService": "KServe v0.17 or later with its huggingface ServingRuntime (the "
    "operator serves embedding/judge models with vLLM --runner=pooling)",
}
DEFAULT_IMAGES: Final[Mapping[str, str]] = {
    "verl": "ghcr.io/sarl-dev/sarl-verl:latest",
    "trl": "ghcr.io/sarl-dev/sarl-trl:latest",
}
#: Training job builder per kind (``spec.resources.job_kind``, ``status.jobKind``).
JOB_BUILDERS: Final[Mapping[str, builders.JobBuilder]] = {
    "TrainJob": trainjob.TrainJobBuilder(),
    "PyTorchJob": builders.PyTorchJobBuilder(),
}

#: (involved object, type "Normal"/"Warning", reason, message) -> None
PostEvent = Callable[[Mapping[str, Any], str, str, str], None]


class Tracker(Protocol):
    """What the handlers use of :class:`~sarl_operator.tracking.MlflowTracking`."""

    def ensure_run(
        self,
        experiment_name: str,
        *,
        run_name: str,
        namespace: str,
        uid: str,
        tags: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        description: str | None = None,
        experiment_description: str | None = None,
    ) -> RunRef: ...

    def latest_progress(self, run_id: str) -> Progress | None: ...


@dataclass(frozen=True)
class Settings:
    """The operator's process settings (its environment, wired by charts/sarl-platform)."""

    verl_image: str = DEFAULT_IMAGES["verl"]
    trl_image: str = DEFAULT_IMAGES["trl"]
    tracking_uri: str = ""
    ui_url: str = ""
    platform: builders.Platform = field(default_factory=builders.Platform)
    retry_delay_s: float = WAIT_RETRY_DELAY_S
    #: Image prefixes an Experiment may name (``SARL_ALLOWED_IMAGE_REGISTRIES``); empty: any.
    allowed_registries: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        return cls(
            verl_image=env.get("SARL_TRAINER_IMAGE") or DEFAULT_IMAGES["verl"],
            trl_image=env.get("SARL_TRL_TRAINER_IMAGE") or DEFAULT_IMAGES["trl"],
            tracking_uri=env.get("SARL_MLFLOW_TRACKING_URI", ""),
            ui_url=env.get("SARL_MLFLOW_UI_URL", ""),
            platform=builders.Platform.from_env(env),
            retry_delay_s=_seconds(env, "SARL_RETRY_DELAY_S", WAIT_RETRY_DELAY_S),
            allowed_registries=allowed_registries(env),
        )

    def image_of(self, exp: Experiment) -> str:
        """``spec.resources.image``, else the platform's image for the backend."""
        backend = builders.backend(exp)
        return exp.spec.resources.image or (self.trl_image if backend == "trl" else self.verl_image)

    def tracking_uri_of(self, exp: Experiment) -> str:
        """``spec.tracking.mlflow_uri``, else the platform's MLflow; empty: no tracking."""
        return exp.spec.tracking.mlflow_uri or self.tracking_uri

    def ui_url_of(self, exp: Experiment) -> str:
        """Base of run URLs: the spec's own server, else SARL_MLFLOW_UI_URL, else the URI."""
        return exp.spec.tracking.mlflow_uri or self.ui_url or self.tracking_uri


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """``env[name]`` as a positive number of seconds (``default`` when unset)."""
    raw = env.get(name, "")
    try:
        value = float(raw) if raw else default
    except ValueError as e:
        raise ValueError(f"{name}={raw!r}: not a number of seconds") from e
    if not value > 0:
        raise ValueError(f"{name}={raw!r}: must be > 0")
    return value


def status_interval_s(env: Mapping[str, str]) -> float:
    """``SARL_STATUS_INTERVAL_S`` as a positive number of seconds (default 30)."""
    return _seconds(env, "SARL_STATUS_INTERVAL_S", DEFAULT_STATUS_INTERVAL_S)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def experiment_from_body(
    body: Mapping[str, Any], platform: builders.Platform = builders.DEFAULT_PLATFORM
) -> Experiment:
    """Validate the custom resource as an Experiment (served chat endpoints filled in first);
    raises SpecError naming the field."""
    meta = body.get("metadata") or {}
    name, namespace = meta.get("name"), meta.get("namespace")
    spec = dict(body.get("spec") or {})
    if isinstance(name, str) and isinstance(namespace, str):
        spec = builders.fill_judge_urls(spec, name, namespace, platform)
    doc = {
        "apiVersion": body.get("apiVersion", f"{GROUP}/{VERSION}"),
        "kind": body.get("kind", "Experiment"),
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    return load_experiment(doc)


def _patch_status(
    body: Mapping[str, Any],
    patch: MutableMapping[str, Any],
    desired: Mapping[str, Any],
    post_event: PostEvent,
    watched: frozenset[str] = OPERATOR_CONDITIONS,
) -> None:
    """Put the changed status fields into kopf's patch; an Event per transition of the phase
    and of the ``watched`` condition types (the operator's own)."""
    current = body.get("status") or {}
    changes = status_patch(current, desired)
    if changes is None:
        return
    patch.setdefault("status", {}).update(changes)
    phase = changes.get("phase")
    if phase is not None:
        kind = "Warning" if phase == "Failed" else "Normal"
        post_event(body, kind, f"Phase{phase}", f"phase {current.get('phase')} -> {phase}")
    before = {c.get("type"): c.get("status") for c in current.get("conditions") or []}
    for cond in changes.get("conditions") or []:
        if cond["type"] in watched and before.get(cond["type"]) != cond["status"]:
            # Released served models and a job waiting in its Kueue queue are expected.
            warn = cond["status"] == "False" and cond.get("reason") not in (
                RELEASED,
                scheduling.QUEUED,
            )
            kind = "Warning" if warn else "Normal"
            message = f"{cond['type']}={cond['status']}: {cond.get('message', '')}".rstrip(": ")
            post_event(body, kind, str(cond.get("reason") or cond["type"]), message)


def ensure_tracking(
    body: Mapping[str, Any],
    exp: Experiment,
    settings: Settings,
    tracker_factory: Callable[[str], Tracker],
) -> tuple[str, str, dict[str, Any]]:
    """(run id, run URL, TrackingReady condition); raises TrackingError when MLflow fails.

    A run id and URL already in the status are reused without calling MLflow, so a spec update
    does not depend on MLflow being up (a changed ``spec.tracking.mlflow_uri`` keeps the run)."""
    uri = settings.tracking_uri_of(exp)
    if not uri:
        message = "no MLflow tracking URI (spec.tracking.mlflow_uri or SARL_MLFLOW_TRACKING_URI)"
        return "", "", condition("TrackingReady", "False", "TrackingNotConfigured", message)
    status = body.get("status") or {}
    if status.get("mlflowRunId") and status.get("mlflowRunUrl"):
        run_id, url = str(status["mlflowRunId"]), str(status["mlflowRunUrl"])
    else:
        meta = body["metadata"]
        ref = tracker_factory(uri).ensure_run(
            exp.spec.tracking.experiment_name or exp.name,
            run_name=exp.name,
            namespace=meta["namespace"],
            uid=meta["uid"],
            tags=exp.spec.tracking.tags,
            params=study_run_params(exp.spec.tracking.tags),
            description=run_description(exp),
        )
        run_id, url = ref.run_id, run_url(settings.ui_url_of(exp), ref)
    return run_id, url, condition("TrackingReady", "True", "RunReady", f"MLflow run {run_id}")


def choose_job_kind(api: KubeApi, exp: Experiment, body: Mapping[str, Any]) -> str:
    """The kind of the Experiment's training job (a key of :data:`JOB_BUILDERS`), chosen once
    and kept for the run, so a running Experiment never switches kind:

    1. ``status.jobKind``, written by the first reconcile that chose it;
    2. the kind of a job of the Experiment's name that it controls (an Experiment from before
       ``status.jobKind``: its running PyTorchJob stays its job);
    3. ``spec.resources.job_kind`` when it names a kind (not served: reconcile fails naming
       what to install);
    4. ``auto``: TrainJob when the cluster serves ``trainer.kubeflow.org/v1alpha1`` TrainJobs,
       else PyTorchJob. Discovery is step 2's get: the client raises MissingApiError for a
       kind the cluster does not serve.
    """
    meta = body["metadata"]
    recorded = (body.get("status") or {}).get("jobKind")
    if isinstance(recorded, str) and recorded in JOB_BUILDERS:
        return recorded
    served = []
    for kind, builder in JOB_BUILDERS.items():
        try:
            current = api.get(builder.api_version, kind, meta["namespace"], exp.name)
        except MissingApiError:
            continue
        if controlled_by(current, meta["uid"]):
            return kind
        served.append(kind)
    wanted = exp.spec.resources.job_kind
    if wanted != "auto":
        return wanted
    return trainjob.KIND if trainjob.KIND in served else "PyTorchJob"


def _unavailable(
    body: Mapping[str, Any],
    patch: MutableMapping[str, Any],
    post_event: PostEvent,
    kind: str,
    message: str,
) -> kopf.PermanentError:
    """Fail the Experiment once for a missing dependency (reason ``<kind>Unavailable``)."""
    generation = body["metadata"].get("generation")
    failed = failed_status(message, generation, _now(), reason=f"{kind}Unavailable")
    _patch_status(body, patch, failed, post_event)
    return kopf.PermanentError(message)


def _missing_api_message(e: MissingApiError, exp: Experiment) -> str:
    message = f"{e}: install {REQUIREMENTS.get(e.kind, 'the CRD of ' + e.kind)}"
    if e.kind == "PyTorchJob" and exp.spec.resources.job_kind == "auto":
        message += f"; or {REQUIREMENTS[trainjob.KIND]}"
    return message


def reconcile(
    body: Mapping[str, Any],
    patch: MutableMapping[str, Any],
    api: KubeApi,
    *,
    settings: Settings,
    post_event: PostEvent,
    tracker_factory: Callable[[str], Tracker] = MlflowTracking,
) -> None:
    """Validate, get the MLflow run, build, own and apply the children, patch the status."""
    meta = body["metadata"]
    namespace, generation = meta["namespace"], meta.get("generation")
    platform = settings.platform
    try:
        exp = experiment_from_body(body, platform)
        check_cluster(exp)  # what the trainer would refuse fails here, not in a restarting pod
        # The admission webhook refuses these first; this holds when it is off or was bypassed.
        refused = image_violations(body, settings.allowed_registries)
        if refused:
            raise ValueError("; ".join(refused))
        services = [
            builders.configmap(exp, namespace, platform),
            *builders.inference_services(exp, namespace, platform),
        ]
    except (SpecError, ValueError) as e:
        message = redact_text(str(e))  # kopf logs it; the status shows it
        _patch_status(body, patch, failed_status(message, generation, _now()), post_event)
        raise kopf.PermanentError(message) from e
    ready = condition("Ready", "True", "SpecValid")
    kind = choose_job_kind(api, exp, body)
    builder = JOB_BUILDERS[kind]
    try:
        run_id, url, tracking = ensure_tracking(body, exp, settings, tracker_factory)
    except TrackingError as e:
        down = condition("TrackingReady", "False", "TrackingUnavailable", str(e))
        refresh_status(
            body,
            patch,
            api,
            exp=exp,
            settings=settings,
            post_event=post_event,
            conditions=[ready, down],
            job_kind=kind,
        )
        raise kopf.TemporaryError(str(e), delay=TRACKING_RETRY_DELAY_S) from e
    try:
        job = builder.build(
            exp,
            namespace,
            image=settings.image_of(exp),
            mlflow_run_id=run_id,
            tracking_uri=settings.tracking_uri_of(exp),
            platform=platform,
        )
    except ValueError as e:  # a spec field the chosen kind cannot express
        message = redact_text(str(e))
        _patch_status(body, patch, failed_status(message, generation, _now()), post_event)
        raise kopf.PermanentError(message) from e
    own = [ready, tracking]

    def wait(cond: dict[str, Any], message: str) -> kopf.TemporaryError:
        refresh_status(
            body, patch, api, exp=exp, settings=settings, post_event=post_event,
            conditions=[*own, cond], run_id=run_id, run_url=url, job_kind=kind,
        )  # fmt: skip
        return kopf.TemporaryError(message, delay=settings.retry_delay_s)

    try:
        storage = storage_condition(api, exp, namespace, platform)
        own.append(storage)
        if storage["status"] == "False":
            raise wait(storage, storage["message"])
        current = api.get(job["apiVersion"], job["kind"], namespace, job["metadata"]["name"])
        if released(api, exp, namespace, current if controlled_by(current, meta["uid"]) else None):
            # Released by refresh_status: a resume or spec update must not serve them again.
            # A run whose job is gone (deleted to run again) has not ended: it gets them back.
            services = [c for c in services if c["kind"] != "InferenceService"]
        for child in services:
            _apply(api, child, meta, body, post_event)
        inference = inference_condition(api, services, meta["uid"])
        if inference is not None:
            own.append(inference)
            # Gate creation only: a job that runs already is not stopped by a service restart.
            if inference["status"] != "True" and not controlled_by(current, meta["uid"]):
                raise wait(inference, inference["message"])
        if current is None and kind == trainjob.KIND and not _runtime_exists(api):
            message = (
                f"ClusterTrainingRuntime {trainjob.RUNTIME_NAME} not found: install "
                f"{REQUIREMENTS[trainjob.KIND]}"
            )
            raise _unavailable(body, patch, post_event, kind, message)
        # An existing job gets only what may change on it (TrainJob: its metadata).
        _apply(api, job if current is None else builder.update(job), meta, body, post_event)
    except ForeignOwnerError as e:
        raise wait(condition("ChildrenReady", "False", "NameInUse", str(e)), str(e)) from e
    except MissingApiError as e:
        message = _missing_api_message(e, exp)
        raise _unavailable(body, patch, post_event, e.kind, message) from e
    own.append(condition("ChildrenReady", "True", "Applied"))
    refresh_status(
        body,
        patch,
        api,
        exp=exp,
        settings=settings,
        post_event=post_event,
        conditions=own,
        run_id=run_id,
        run_url=url,
        job_kind=kind,
    )


def _runtime_exists(api: KubeApi) -> bool:
    """Whether the chart's ClusterTrainingRuntime exists (the Trainer's webhook refuses a
    TrainJob whose runtime does not; checking first names the fix)."""
    found = api.get(trainjob.API_VERSION, trainjob.RUNTIME_KIND, "", trainjob.RUNTIME_NAME)
    return found is not None


def _apply(
    api: KubeApi,
    child: Mapping[str, Any],
    meta: Mapping[str, Any],
    body: Mapping[str, Any],
    post_event: PostEvent,
) -> None:
    if apply(api, builders.owned(child, meta)) == "created":
        name = child["metadata"]["name"]
        post_event(body, "Normal", "Created", f"created {child['kind']} {name}")


def storage_condition(
    api: KubeApi, exp: Experiment, namespace: str, platform: builders.Platform
) -> dict[str, Any]:
    """``StorageReady`` from the S3 credentials Secret the pods reference in ``namespace``.

    The pods fail with CreateContainerConfigError when it or one of its keys is missing; the
    platform chart creates it only in its own namespace, so each namespace that runs
    Experiments needs a copy. Only the platform's Secret name is checked (the operator may read
    Secrets of that name only); a ``spec.storage.credentials_secret`` of another name is the
    user's to provide and is not read."""
    secret = exp.spec.storage.credentials_secret or platform.s3_credentials_secret
    if not secret:
        return condition("StorageReady", "True", "NoCredentials", "no S3 credentials Secret used")
    if secret != platform.s3_credentials_secret:
        return condition("StorageReady", "Unknown", "NotChecked", f"Secret {secret!r} not read")
    keys = (platform.s3_access_key_id_key, platform.s3_secret_access_key_key)
    found = api.get("v1", "Secret", namespace, secret)
    missing = [k for k in keys if found is not None and k not in (found.get("data") or {})]
    if found is not None and not missing:
        return condition("StorageReady", "True", "SecretFound", f"Secret {secret!r}")
    create = f"kubectl create secret generic {secret} -n {namespace} " + " ".join(
        f"--from-literal={k}=..." for k in keys
    )
    what = f"Secret {secret!r} not found" if found is None else f"Secret {secret!r} has no key"
    if missing:
        what += " " + ", ".join(repr(k) for k in missing)
    return condition(
        "StorageReady",
        "False",
        "SecretMissing",
        f"{what} in namespace {namespace!r}: the training pods read the S3 credentials from "
        f"it; create it there ({create}), with the platform's S3 keys",
    )


def inference_condition(
    api: KubeApi, services: Sequence[Mapping[str, Any]], owner_uid: str
) -> dict[str, Any] | None:
    """``InferenceReady`` of the InferenceServices among ``services`` (None: there are none)."""
    isvcs = [c for c in services if c["kind"] == "InferenceService"]
    if not isvcs:
        return None
    waiting = []
    for isvc in isvcs:
        name = isvc["metadata"]["name"]
        current = api.get(
            isvc["apiVersion"], "InferenceService", isvc["metadata"]["namespace"], name
        )
        ok, why = isvc_ready(current if controlled_by(current, owner_uid) else None)
        if not ok:
            waiting.append(f"{name}: {why}")
    if waiting:
        message = "waiting for InferenceService " + "; ".join(waiting)
        return condition("InferenceReady", "False", "Waiting", message)
    return condition(
        "InferenceReady", "True", "Ready", ", ".join(c["metadata"]["name"] for c in isvcs)
    )


def released(api: KubeApi, exp: Experiment, namespace: str, job: Mapping[str, Any] | None) -> bool:
    """Whether the served models are to be gone: ``spec.serving.release`` is on_completion and
    the run ended (:func:`~sarl_operator.status.run_ended`; ``job``: the training job if ours)."""
    if exp.spec.serving.release != "on_completion":
        return False
    evaluated = None
    if job_phase(job) == "Succeeded" and evaluation.cluster_benchmarks(exp):
        evaluated = eval_condition(api.get("batch/v1", "Job", namespace, evaluation.eval_name(exp)))
    return run_ended(job, evaluated)


def release_inference(
    body: Mapping[str, Any],
    api: KubeApi,
    exp: Experiment,
    settings: Settings,
    post_event: PostEvent,
) -> dict[str, Any] | None:
    """Delete the run's InferenceServices (those this Experiment controls) and return
    ``InferenceReady=False`` (:data:`RELEASED`) naming them; None when it serves none."""
    meta = body["metadata"]
    try:
        services = builders.inference_services(exp, meta["namespace"], settings.platform)
    except ValueError:
        return None  # an invalid spec: reported Failed by reconcile, nothing was served
    if not services:
        return None
    for isvc in services:
        name = isvc["metadata"]["name"]
        current = api.get(isvc["apiVersion"], isvc["kind"], meta["namespace"], name)
        if controlled_by(current, meta["uid"]) and api.delete(
            isvc["apiVersion"], isvc["kind"], meta["namespace"], name
        ):
            post_event(body, "Normal", RELEASED, f"deleted InferenceService {name}")
    names = ", ".join(c["metadata"]["name"] for c in services)
    message = (
        f"deleted {names}: training and evaluation ended (spec.serving.release: on_completion)"
    )
    return condition("InferenceReady", "False", RELEASED, message)


def _evaluation(
    body: Mapping[str, Any], api: KubeApi, exp: Experiment, settings: Settings, run_id: str
) -> dict[str, Any]:
    """Create ``<name>-eval`` if missing (never patched: a Job's template is immutable) and
    return its ``Evaluated`` condition."""
    meta = body["metadata"]
    name = evaluation.eval_name(exp)
    current = api.get("batch/v1", "Job", meta["namespace"], name)
    if current is None:
        job = evaluation.eval_job(
            exp,
            meta["namespace"],
            image=settings.image_of(exp),
            mlflow_run_id=run_id,
            tracking_uri=settings.tracking_uri_of(exp),
            platform=settings.platform,
        )
        api.create(builders.owned(job, meta))
    return eval_condition(current)


def admission_condition(api: KubeApi, job: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``Admitted`` from the Kueue Workload of the training ``job`` (ours), found by the
    ``kueue.x-k8s.io/job-uid`` label Kueue sets and its controller reference
    (:func:`~sarl_operator.scheduling.workload_state`); None when the job has no queue label
    (not Kueue-managed: no Workload is read)."""
    labels = ((job or {}).get("metadata") or {}).get("labels") or {}
    queue = labels.get(scheduling.QUEUE_LABEL)
    if job is None or not queue:
        return None
    meta = job["metadata"]
    uid = str(meta.get("uid") or "")
    try:
        found = api.list(
            scheduling.WORKLOAD_API_VERSION,
            scheduling.WORKLOAD_KIND,
            meta["namespace"],
            f"{scheduling.JOB_UID_LABEL}={uid}",
        )
    except MissingApiError:
        return scheduling.kueue_unavailable(str(queue))
    return scheduling.workload_state(scheduling.owned_workloads(found, uid), str(queue))


def reads_progress(status: Mapping[str, Any]) -> bool:
    """Whether a status tick reads the run's metrics from MLflow: not while the job waits for
    Kueue (phase Queued), which has logged nothing since it last ran — a Study queues many runs
    at once, each ticking every interval. A skipped read keeps the last values."""
    return status.get("phase") != "Queued"


def read_progress(settings: Settings, exp: Experiment, run_id: str) -> Progress | None:
    """Latest step/reward of the run; None (keep the last values) when there is no run or the
    read fails (logged as a warning: the timer tries again next interval)."""
    uri = settings.tracking_uri_of(exp)
    if not (uri and run_id):
        return None
    try:
        return MlflowTracking(uri, max_retries=1).latest_progress(run_id)
    except TrackingError as e:
        log.warning("Experiment %s: metrics not read, keeping the last values: %s", exp.name, e)
        return None


def refresh_status(
    body: Mapping[str, Any],
    patch: MutableMapping[str, Any],
    api: KubeApi,
    *,
    exp: Experiment,
    settings: Settings,
    post_event: PostEvent,
    conditions: Sequence[Mapping[str, Any]] = (),
    run_id: str | None = None,
    run_url: str | None = None,
    progress: Progress | None = None,
    job_kind: str | None = None,
) -> None:
    """Read the training (and evaluation) job and patch the Experiment status when it changed.
    ``run_id``/``run_url`` None: those of the current status; ``job_kind`` None: chosen by
    :func:`choose_job_kind` (``status.jobKind`` once reconcile wrote it)."""
    meta, status = body["metadata"], body.get("status") or {}
    run_id = status.get("mlflowRunId", "") if run_id is None else run_id
    run_url = status.get("mlflowRunUrl", "") if run_url is None else run_url
    kind = job_kind or choose_job_kind(api, exp, body)
    job = api.get(JOB_BUILDERS[kind].api_version, kind, meta["namespace"], exp.name)
    if not controlled_by(job, meta["uid"]):
        job = None  # another owner's job of the same name: its phase is not ours
    own = list(conditions)
    admitted = admission_condition(api, job)
    if admitted is not None:
        own.append(admitted)
    evaluated = None
    if job_phase(job) == "Succeeded" and evaluation.cluster_benchmarks(exp):
        evaluated = _evaluation(body, api, exp, settings, str(run_id or ""))
        own.append(evaluated)
    if exp.spec.serving.release == "on_completion" and run_ended(job, evaluated):
        release = release_inference(body, api, exp, settings, post_event)
        if release is not None:
            own = [*(c for c in own if c["type"] != "InferenceReady"), release]
    desired = desired_status(
        job,
        generation=meta.get("generation"),
        checkpoint_uri=builders.checkpoint_uri(exp, meta["namespace"], settings.platform),
        mlflow_run_url=str(run_url or ""),
        mlflow_run_id=str(run_id or ""),
        progress=progress,
        conditions=own,
        current=status,
        now=_now(),
        job_kind=kind,
        queued=scheduling.waiting_for_admission(job),
    )
    _patch_status(body, patch, desired, post_event)


# ---- kopf wiring: process settings and the cluster client, read once ----

_API: KubeApi | None = None


def cluster_api() -> KubeApi:
    global _API
    if _API is None:
        _API = DynamicKubeApi()
    return _API


def _kopf_event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    kopf.event(obj, type=type_, reason=reason, message=message)  # type: ignore[arg-type]


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
def on_experiment(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    reconcile(
        body,
        patch,
        cluster_api(),
        settings=Settings.from_env(os.environ),
        post_event=_kopf_event,
    )


# kopf fixes a timer's interval when the decorator runs, so this one setting is read at import.
_INTERVAL_S: Final = status_interval_s(os.environ)


@kopf.on.startup()
def post_only_warnings_as_events(settings: kopf.OperatorSettings, **_: Any) -> None:
    """kopf turns every INFO line logged about an object into a Kubernetes Event (posting.level
    INFO by default; the filter of ``K8sPoster`` in kopf 1.45 ``_core/engines/posting.py``),
    "Timer 'on_timer' succeeded." included: one API write per Experiment and Study at every
    status tick. Only warnings and errors are posted from the log; the operator's own Events
    (phase and condition transitions, ``kopf.event``, which that level does not filter) stay."""
    settings.posting.level = logging.WARNING


@kopf.timer(GROUP, VERSION, PLURAL, interval=_INTERVAL_S, initial_delay=_INTERVAL_S)
def on_timer(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    settings = Settings.from_env(os.environ)
    try:
        exp = experiment_from_body(body, settings.platform)
    except SpecError:
        return  # reported once by on_experiment; nothing to watch
    status = body.get("status") or {}
    run_id = str(status.get("mlflowRunId") or "")
    try:
        refresh_status(
            body,
            patch,
            cluster_api(),
            exp=exp,
            settings=settings,
            post_event=_kopf_event,
            progress=read_progress(settings, exp, run_id) if reads_progress(status) else None,
        )
    except MissingApiError:
        return  # reported once by on_experiment (Failed, naming what to install)


# kopf registers handlers when their module is imported, and the operator runs this module
# (`kopf run -m sarl_operator.handlers`): importing the Study handlers here registers them too
# (the admission webhook's handlers are registered by the import of sarl_operator.admission
# at the top).
# Last, because they build on this module.
from sarl_operator import study_handlers  # noqa: E402, F401
