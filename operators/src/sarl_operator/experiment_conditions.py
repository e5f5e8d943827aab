"""What an Experiment's reconcile and status timer read from the cluster besides the training
job, each as an operator condition (:data:`~sarl_operator.status.OPERATOR_CONDITIONS`).

Called by :mod:`sarl_operator.experiment_handlers`: ``StorageReady`` (the S3 credentials Secret
in the Experiment's namespace), ``InferenceReady`` (its InferenceServices, and their release
once the run ended), ``Evaluated`` (the evaluation Job, created once) and ``Admitted`` (the
Kueue Workload of a job with a queue). Each takes the Kubernetes API as an argument.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sarl.cluster.tenancy import TENANT_SECRET, TenantKeys
from sarl.spec.experiment import Experiment
from sarl_operator import child_meta, evaluation, job_pods, scheduling, served_models, trainjob
from sarl_operator.kube import KubeApi, MissingApiError, controlled_by
from sarl_operator.platform_settings import Platform
from sarl_operator.reconcile import PostEvent, Settings, release_owned
from sarl_operator.status import (
    RELEASED,
    condition,
    eval_condition,
    isvc_ready,
    job_phase,
    run_ended,
    serving_condition,
)


def storage_condition(
    api: KubeApi, exp: Experiment, namespace: str, platform: Platform
) -> dict[str, Any]:
    """``StorageReady`` from the S3 credentials Secret the pods reference in ``namespace``.

    The pods fail with CreateContainerConfigError when it or one of its keys is missing; the
    platform chart creates it only in its own namespace, so each namespace that runs
    Experiments needs a copy. Only the platform's Secret name is checked (the operator may read
    Secrets of that name only); a ``spec.storage.credentials_secret`` of another name is the
    user's to provide and is not read."""
    secret, id_key, secret_key = job_pods.store_credentials(exp, namespace, platform)
    if not secret:
        return condition("StorageReady", "True", "NoCredentials", "no S3 credentials Secret used")
    tenant = platform.tenancy.enabled and secret == TENANT_SECRET
    if secret != platform.s3_credentials_secret and not tenant:
        return condition("StorageReady", "Unknown", "NotChecked", f"Secret {secret!r} not read")
    # A tenant's pods also read its MLflow user, signing key, Ray token and API key from it.
    keys = TenantKeys.ALL if tenant else (id_key, secret_key)
    found = api.get("v1", "Secret", namespace, secret)
    missing = [k for k in keys if found is not None and k not in (found.get("data") or {})]
    if found is not None and not missing:
        return condition("StorageReady", "True", "SecretFound", f"Secret {secret!r}")
    create = (
        f"sarl tenant credentials {namespace} (as the platform's administrator)"
        if tenant
        else f"kubectl create secret generic {secret} -n {namespace} "
        + " ".join(f"--from-literal={k}=..." for k in keys)
    )
    what = f"Secret {secret!r} not found" if found is None else f"Secret {secret!r} has no key"
    if missing:
        what += " " + ", ".join(repr(k) for k in missing)
    return condition(
        "StorageReady",
        "False",
        "SecretMissing",
        f"{what} in namespace {namespace!r}: the training pods read the S3 credentials from "
        f"it; create it there ({create})",
    )


def inference_condition(
    api: KubeApi, services: Sequence[Mapping[str, Any]], owner_uid: str
) -> dict[str, Any] | None:
    """``InferenceReady`` of the InferenceServices among ``services`` (None: there are none)."""
    isvcs = [c for c in services if c["kind"] == "InferenceService"]
    waiting = []
    for isvc in isvcs:
        name = isvc["metadata"]["name"]
        current = api.get(
            isvc["apiVersion"], "InferenceService", isvc["metadata"]["namespace"], name
        )
        ok, why = isvc_ready(current if controlled_by(current, owner_uid) else None)
        if not ok:
            waiting.append(f"{name}: {why}")
    return serving_condition(waiting, [c["metadata"]["name"] for c in isvcs])


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
        services = served_models.inference_services(exp, meta["namespace"], settings.platform)
    except ValueError:
        return None  # an invalid spec: reported Failed by reconcile, nothing was served
    if not services:
        return None
    for isvc in services:
        name = isvc["metadata"]["name"]
        current = api.get(isvc["apiVersion"], isvc["kind"], meta["namespace"], name)
        release_owned(api, body, isvc["apiVersion"], isvc["kind"], name, current, post_event)
    names = ", ".join(c["metadata"]["name"] for c in services)
    message = (
        f"deleted {names}: training and evaluation ended (spec.serving.release: on_completion)"
    )
    return condition("InferenceReady", "False", RELEASED, message)


def evaluation_condition(
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
        api.create(child_meta.owned(job, meta))
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
    state = scheduling.workload_state(scheduling.owned_workloads(found, uid), str(queue))
    lost = trainjob.replaced_tolerations(job) if job.get("kind") == trainjob.KIND else []
    if lost:
        keys = ", ".join(sorted({str(t.get("key") or "*") for t in lost}))
        state["message"] += (
            f"; the admitted flavor's tolerations replaced spec.resources.tolerations ({keys}) "
            "on the TrainJob's pods (Kueue fills its own runtimePatches entry, which Kubeflow "
            "Trainer v2.3.0 applies after the operator's, and a pod's tolerations are replaced, "
            "not merged): add them to the ResourceFlavor's spec.tolerations, or set "
            "spec.resources.job_kind: PyTorchJob (Kueue merges tolerations into a PyTorchJob)"
        )
    return state
