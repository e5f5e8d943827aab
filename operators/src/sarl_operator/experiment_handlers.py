"""The Experiment's reconcile and status timer (``experiments.sarl.dev``): read state, apply
desired children, patch status.

Registered with kopf by :mod:`sarl_operator.handlers` (``on_experiment``, ``on_timer``); the
plumbing it shares with the Study's handlers is :mod:`sarl_operator.reconcile`. On
create/resume/update of the spec, :func:`reconcile`:

1. validates the spec (chat endpoints the operator serves get their URL first, see
   :func:`sarl_operator.served_models.fill_judge_urls`); invalid → status Failed with a condition
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
longer applies them (:func:`~sarl_operator.experiment_conditions.released`); a run whose job is
gone again gets them back.

A timer (every ``SARL_STATUS_INTERVAL_S`` s, default 30) runs :func:`refresh`: phase and
conditions from the training job (with a Kueue queue: phase ``Queued`` and condition
``Admitted`` from its Workload), lastStep/lastReward from the MLflow run (a failed read keeps
the last values), and, once training Succeeded with cluster benchmarks in the spec, the
evaluation Job (reported as condition ``Evaluated``); the conditions read besides the job are
:mod:`sarl_operator.experiment_conditions`. The timer computes the status from the Experiment
as it reads it from the API at that tick, not from kopf's copy (which may predate a condition
reconcile has just written), and writes it only if the Experiment has not changed since
(:func:`~sarl_operator.reconcile.write_fresh_status`). The work is in :func:`reconcile` and
:func:`observed_status`, which take the Kubernetes API and the MLflow client factory as
arguments, so tests call them with fakes or point them at test servers.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any, Final

import kopf

from sarl.integrations.cluster import check_cluster
from sarl.plan import check_plan
from sarl.spec.experiment import Experiment
from sarl.spec.loader import SpecError, load_experiment
from sarl.spec.secrets import redact_text
from sarl.tracking.describe import run_description, study_run_params
from sarl_operator import builders, evaluation, job_pods, scheduling, served_models, trainjob
from sarl_operator.admission import image_violations
from sarl_operator.experiment_conditions import (
    admission_condition,
    evaluation_condition,
    inference_condition,
    release_inference,
    released,
    storage_condition,
)
from sarl_operator.kube import ForeignOwnerError, KubeApi, MissingApiError, controlled_by
from sarl_operator.network_policies import network_policies
from sarl_operator.platform_settings import DEFAULT_PLATFORM, Platform
from sarl_operator.prerequisites import REQUIREMENTS
from sarl_operator.reconcile import (
    GROUP,
    VERSION,
    PostEvent,
    Settings,
    Tracker,
    apply_owned,
    fail,
    now,
    patch_status,
    tracked_run,
    tracking_unavailable,
    write_fresh_status,
)
from sarl_operator.status import condition, desired_status, job_phase, run_ended
from sarl_operator.tenant_mlflow import authenticated, progress_trackers, scoped
from sarl_operator.tenant_review import refuse_outside_policy
from sarl_operator.tenant_specs import as_spec_error
from sarl_operator.tracking import MlflowTracking, Progress, RunRef, TrackingError

log = logging.getLogger(__name__)

PLURAL: Final = "experiments"
KIND: Final = "Experiment"
#: Training job builder per kind (``spec.resources.job_kind``, ``status.jobKind``).
JOB_BUILDERS: Final[Mapping[str, builders.JobBuilder]] = {
    "TrainJob": trainjob.TrainJobBuilder(),
    "PyTorchJob": builders.PyTorchJobBuilder(),
}


def experiment_from_body(
    body: Mapping[str, Any], platform: Platform = DEFAULT_PLATFORM
) -> Experiment:
    """Validate the custom resource as an Experiment (served chat endpoints filled in first)
    within the tenant policy of ``platform``, its MLflow experiment scoped to the namespace
    under tenancy (``tenant_mlflow.scoped``); raises SpecError naming the field."""
    meta = body.get("metadata") or {}
    name, namespace = meta.get("name"), meta.get("namespace")
    spec = dict(body.get("spec") or {})
    if isinstance(name, str) and isinstance(namespace, str):
        spec = served_models.fill_judge_urls(spec, name, namespace, platform)
    doc = {
        "apiVersion": body.get("apiVersion", f"{GROUP}/{VERSION}"),
        "kind": body.get("kind", "Experiment"),
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    try:
        exp = load_experiment(doc)
        refuse_outside_policy(exp, str(namespace or ""), platform)
        return scoped(exp, str(namespace or ""), platform)
    except BaseException as e:  # any: the timer and reconcile see a SpecError (STOPS pass)
        raise as_spec_error(e) from e


def ensure_tracking(
    body: Mapping[str, Any],
    exp: Experiment,
    settings: Settings,
    tracker_factory: Callable[[str], Tracker],
) -> tuple[str, str, dict[str, Any]]:
    """(run id, run URL, TrackingReady condition); raises TrackingError when MLflow fails.

    A run id and URL already in the status are reused without calling MLflow, so a spec update
    does not depend on MLflow being up (a changed ``spec.tracking.mlflow_uri`` keeps the run);
    else the run tagged with the Experiment's uid is found or created."""

    def ensure(tracker: Tracker, meta: Mapping[str, Any]) -> RunRef:
        return tracker.ensure_run(
            exp.spec.tracking.experiment_name or exp.name,
            run_name=exp.name,
            namespace=meta["namespace"],
            uid=meta["uid"],
            tags=exp.spec.tracking.tags,
            params=study_run_params(exp.spec.tracking.tags),
            description=run_description(exp),
        )

    return tracked_run(
        body,
        exp,
        settings,
        tracker_factory,
        ensure,
        id_field="mlflowRunId",
        uri_field="spec.tracking.mlflow_uri",
    )


def choose_job_kind(api: KubeApi, exp: Experiment, body: Mapping[str, Any]) -> str:
    """The kind of the Experiment's training job (a key of :data:`JOB_BUILDERS`), chosen once
    and kept for the run, so a running Experiment never switches kind:

    1. ``status.jobKind``, written by the first reconcile that chose it;
    2. the kind of a job of the Experiment's name that it controls (an Experiment from before
       ``status.jobKind``: its running PyTorchJob stays its job);
    3. ``spec.resources.job_kind`` when it names a kind (not served: reconcile fails naming
       what to install);
    4. ``auto``: :func:`auto_job_kind` of the kinds the cluster serves. Discovery is step 2's
       get: the client raises MissingApiError for a kind the cluster does not serve.
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
    return auto_job_kind(exp, served)


def auto_job_kind(exp: Experiment, served: Sequence[str]) -> str:
    """``job_kind: auto`` among the ``served`` kinds: TrainJob when the cluster serves it and a
    TrainJob can carry the spec (:func:`sarl_operator.trainjob.cannot_carry`: not with
    ``priority_class``), else PyTorchJob. A TrainJob that cannot carry the spec is returned only
    where no PyTorchJob is served: its builder then fails naming the field, and
    :func:`_unfit_kind_message` says why auto had no other choice. Neither served: PyTorchJob,
    whose MissingApiError names what to install (:func:`_missing_api_message`)."""
    if trainjob.KIND in served and (not trainjob.cannot_carry(exp) or "PyTorchJob" not in served):
        return trainjob.KIND
    return "PyTorchJob"


def _unfit_kind_message(error: str, exp: Experiment, kind: str) -> str:
    """Why the Experiment fails for good when the chosen kind cannot carry its spec: the
    builder's ``error`` and, where ``auto`` chose it, why auto had no other kind."""
    if kind != trainjob.KIND or exp.spec.resources.job_kind != "auto":
        return error
    return (
        f"{error}; job_kind auto chose TrainJob because this cluster serves no PyTorchJob: "
        f"install {REQUIREMENTS['PyTorchJob']}, or unset spec.resources.priority_class"
    )


def _missing_api_message(e: MissingApiError, exp: Experiment) -> str:
    """Why the Experiment fails for good when a kind it needs is not served (reason
    ``<kind>Unavailable``): what to install. The Trainer is offered beside the Training
    Operator only where a TrainJob could carry the spec."""
    message = f"{e}: install {REQUIREMENTS.get(e.kind, 'the CRD of ' + e.kind)}"
    if e.kind == "PyTorchJob" and exp.spec.resources.job_kind == "auto":
        refused = trainjob.cannot_carry(exp)
        if refused:
            message += f" (the Kubeflow Trainer would not do: {refused})"
        else:
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
    namespace = meta["namespace"]
    platform = settings.platform
    try:
        exp = experiment_from_body(body, platform)
        check_cluster(exp)  # what the trainer would refuse fails here, not in a restarting pod
        # What would not fit its GPUs, disk or the platform's store fails here too, not hours
        # into the run (an OOM at the first update, an upload refused at the first checkpoint).
        check_plan(exp, platform.store_capacity)
        # The admission webhook refuses these first; this holds when it is off or was bypassed.
        refused = image_violations(body, settings.allowed_registries)
        if refused:
            raise ValueError("; ".join(refused))
        services = [
            builders.configmap(exp, namespace, platform),
            *served_models.inference_services(exp, namespace, platform),
        ]
        # Before the InferenceServices and the job: their pods start isolated.
        served = any(c["kind"] == "InferenceService" for c in services)
        services = [*network_policies(exp, namespace, platform, served), *services]
    except BaseException as e:  # any: a tenant's spec never stops the operator (STOPS pass)
        # kopf logs the message; the status shows it.
        raise fail(body, patch, post_event, str(as_spec_error(e))) from e
    ready = condition("Ready", "True", "SpecValid")
    kind = choose_job_kind(api, exp, body)
    builder = JOB_BUILDERS[kind]
    # Patches the status with this reconcile's conditions wherever it stops, and when done.
    refreshed = functools.partial(
        refresh_status, body, patch, api, exp=exp, settings=settings, post_event=post_event
    )
    tracker_factory = authenticated(tracker_factory, api, namespace, settings)
    try:
        run_id, url, tracking = ensure_tracking(body, exp, settings, tracker_factory)
    except TrackingError as e:
        down, retry = tracking_unavailable(e)
        refreshed(conditions=[ready, down], job_kind=kind)
        raise retry from e
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
        message = _unfit_kind_message(str(e), exp, kind)
        raise fail(body, patch, post_event, redact_text(message)) from e
    own = [ready, tracking]

    def wait(cond: dict[str, Any], message: str) -> kopf.TemporaryError:
        # ``cond`` may be in ``own`` already: each condition type once in the status.
        waiting = [*(c for c in own if c["type"] != cond["type"]), cond]
        refreshed(conditions=waiting, run_id=run_id, run_url=url, job_kind=kind)
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
            apply_owned(api, child, body, post_event)
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
            raise fail(body, patch, post_event, message, reason=f"{kind}Unavailable")
        # An existing job gets only what may change on it (TrainJob: its metadata), and keeps
        # the tolerations Kueue merged into its pods when it admitted it.
        desired = (
            job if current is None else scheduling.keep_admission(builder.update(job), current)
        )
        apply_owned(api, desired, body, post_event)
    except ForeignOwnerError as e:
        raise wait(condition("ChildrenReady", "False", "NameInUse", str(e)), str(e)) from e
    except MissingApiError as e:
        message = _missing_api_message(e, exp)
        raise fail(body, patch, post_event, message, reason=f"{e.kind}Unavailable") from e
    own.append(condition("ChildrenReady", "True", "Applied"))
    refreshed(conditions=own, run_id=run_id, run_url=url, job_kind=kind)


def _runtime_exists(api: KubeApi) -> bool:
    """Whether the chart's ClusterTrainingRuntime exists (the Trainer's webhook refuses a
    TrainJob whose runtime does not; checking first names the fix)."""
    found = api.get(trainjob.API_VERSION, trainjob.RUNTIME_KIND, "", trainjob.RUNTIME_NAME)
    return found is not None


def reads_progress(status: Mapping[str, Any]) -> bool:
    """Whether a status tick reads the run's metrics from MLflow: not while the job waits for
    Kueue (phase Queued), which has logged nothing since it last ran — a Study queues many runs
    at once, each ticking every interval. A skipped read keeps the last values."""
    return status.get("phase") != "Queued"


def read_progress(
    settings: Settings, exp: Experiment, run_id: str, trackers: Callable[[str], Tracker]
) -> Progress | None:
    """Latest step/reward of the run; None (keep the last values) when there is no run or the
    read fails (logged as a warning: the timer tries again next interval)."""
    uri = settings.tracking_uri_of(exp)
    if not (uri and run_id):
        return None
    try:
        return trackers(uri).latest_progress(run_id)
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
    """Reconcile's status write: :func:`observed_status` put into kopf's ``patch`` when it
    changed, with an Event per transition (:func:`~sarl_operator.reconcile.patch_status`)."""
    desired = observed_status(
        body,
        api,
        exp=exp,
        settings=settings,
        post_event=post_event,
        conditions=conditions,
        run_id=run_id,
        run_url=run_url,
        progress=progress,
        job_kind=job_kind,
    )
    patch_status(body, patch, desired, post_event)


def observed_status(
    body: Mapping[str, Any],
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
) -> dict[str, Any]:
    """The status the Experiment should show, from its training (and evaluation) job; creates
    the evaluation Job and releases served models when due. ``conditions``: those the caller
    computed (reconcile's); the operator's other conditions of ``body``'s status are carried
    over. ``run_id``/``run_url`` None: those of the current status; ``job_kind`` None: chosen by
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
        evaluated = evaluation_condition(body, api, exp, settings, str(run_id or ""))
        own.append(evaluated)
    if exp.spec.serving.release == "on_completion" and run_ended(job, evaluated):
        release = release_inference(body, api, exp, settings, post_event)
        if release is not None:
            own = [*(c for c in own if c["type"] != "InferenceReady"), release]
    return desired_status(
        job,
        generation=meta.get("generation"),
        checkpoint_uri=job_pods.checkpoint_uri(exp, meta["namespace"], settings.platform),
        mlflow_run_url=str(run_url or ""),
        mlflow_run_id=str(run_id or ""),
        progress=progress,
        conditions=own,
        current=status,
        now=now(),
        job_kind=kind,
        queued=scheduling.waiting_for_admission(job),
    )


def refresh(
    body: Mapping[str, Any],
    patch: MutableMapping[str, Any],
    api: KubeApi,
    *,
    settings: Settings,
    post_event: PostEvent,
) -> None:
    """The timer's work: :func:`observed_status` with the run's latest metrics (not read while
    the job is queued, :func:`reads_progress`), computed from the Experiment as read from the
    API at this tick and written guarded by its resourceVersion
    (:func:`~sarl_operator.reconcile.write_fresh_status`: kopf's ``body`` may predate what
    reconcile just wrote; kopf's ``patch`` is left empty). Nothing for an invalid spec or a kind
    the cluster does not serve (both reported once by :func:`reconcile`)."""
    read: list[Progress | None] = []  # the run's metrics: read at the first try only

    def desired_of(fresh: Mapping[str, Any]) -> dict[str, Any] | None:
        try:
            exp = experiment_from_body(fresh, settings.platform)
        except SpecError:
            return None  # reported once by reconcile; nothing to watch
        status = fresh.get("status") or {}
        if not read:
            run_id = str(status.get("mlflowRunId") or "")
            trackers = progress_trackers(api, fresh["metadata"]["namespace"], settings)
            queued = not reads_progress(status)
            read.append(None if queued else read_progress(settings, exp, run_id, trackers))
        try:
            return observed_status(
                fresh, api, exp=exp, settings=settings, post_event=post_event, progress=read[0]
            )
        except MissingApiError:
            return None  # reported once by reconcile (Failed, naming what to install)

    write_fresh_status(body, api, KIND, desired_of, post_event)
