"""Pure status logic: the Experiment phase from its training job, and minimal status patches.

Called by ``experiment_handlers`` (reconcile and the status timer), ``study_handlers`` and
their shared layer ``reconcile``, and tested directly. The Experiment's status fields are those
of the CRD (charts/sarl-platform/crds/experiments.sarl.dev.yaml, generated from
``sarl.schemas.generate.ExperimentStatus``).

Conditions come from two writers: the training job's own conditions are copied as they are
(a PyTorchJob's ``Created``, ``Running``, ``Succeeded``...; a TrainJob's ``Suspended``,
``Complete``, ``Failed``), and the operator adds its own types
(:data:`OPERATOR_CONDITIONS`: ``Ready`` for an invalid spec or a missing dependency,
``TrackingReady`` for the MLflow run, ``StorageReady`` for the S3 credentials Secret in the
Experiment's namespace, ``InferenceReady`` for the InferenceServices training waits for,
``ChildrenReady`` for a child name taken by an object that is not this Experiment's,
``Evaluated`` for the evaluation Job, and ``Admitted`` for the Kueue Workload of a job with a
queue, :func:`sarl_operator.scheduling.workload_state`). ``InferenceReady`` turns False with reason
:data:`RELEASED` once the run ended (:func:`run_ended`) and its InferenceServices were
deleted. A writer that does not recompute one of the operator's conditions carries the current
one over, so the timer does not erase what reconcile reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from sarl.spec.secrets import redact_text
from sarl_operator.tracking import Progress

Phase = Literal["Pending", "Queued", "Running", "Succeeded", "Failed"]

#: Kubeflow v1 job condition type -> Experiment phase; later entries win (terminal last).
_PRECEDENCE: Final[Sequence[tuple[str, Phase]]] = (
    ("Created", "Pending"),
    ("Running", "Running"),
    ("Restarting", "Running"),
    ("Succeeded", "Succeeded"),
    ("Failed", "Failed"),
)
_CONDITION_KEYS: Final = ("type", "status", "reason", "message", "lastTransitionTime")
#: ``kind`` of a Kubeflow Trainer v2 job (its status has no Created/Running conditions).
TRAINJOB_KIND: Final = "TrainJob"
OPERATOR_CONDITIONS: Final = frozenset(
    {
        "Ready",
        "TrackingReady",
        "StorageReady",
        "InferenceReady",
        "ChildrenReady",
        "Evaluated",
        "Admitted",
    }
)
ConditionStatus = Literal["True", "False", "Unknown"]


def trainjob_phase(job: Mapping[str, Any]) -> Phase:
    """Phase of a Kubeflow Trainer v2 TrainJob. Its controller (v2.3.0
    ``pkg/controller/trainjob_controller.go`` and the jobset plugin's ``Status``) sets only
    ``Suspended``, ``Complete`` and ``Failed`` (trainjob_types.go), no Created or Running: Failed
    → Failed, Complete → Succeeded, Suspended → Pending (Kueue has not admitted it); otherwise
    Running once a child Job has all its pods ready (``status.jobsStatus[].ready``, which counts
    ready and completed pods) or has succeeded, else Pending (pods being scheduled or pulled)."""
    status = job.get("status") or {}
    true_types = {
        c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"
    }
    if "Failed" in true_types:
        return "Failed"
    if "Complete" in true_types:
        return "Succeeded"
    if "Suspended" in true_types:
        return "Pending"
    jobs = status.get("jobsStatus") or []
    if any((j.get("ready") or 0) > 0 or (j.get("succeeded") or 0) > 0 for j in jobs):
        return "Running"
    return "Pending"


def experiment_phase(job: Mapping[str, Any] | None, queued: bool = False) -> Phase:
    """The Experiment's phase: :func:`job_phase`, except ``Queued`` while the job is not
    finished and waits for Kueue (``queued``: suspended with a queue label, which Kueue lifts on
    admission and sets again on eviction; the job's own conditions may still say Running)."""
    phase = job_phase(job)
    if queued and phase in ("Pending", "Running"):
        return "Queued"
    return phase


def job_phase(job: Mapping[str, Any] | None) -> Phase:
    """Phase from the training job: a TrainJob's by :func:`trainjob_phase`; a PyTorchJob's from
    its ``status.conditions``, the strongest condition that is ``True`` (Failed > Succeeded >
    Running/Restarting > Created); no job or none true → Pending."""
    if job is not None and job.get("kind") == TRAINJOB_KIND:
        return trainjob_phase(job)
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    true_types = {c.get("type") for c in conditions if c.get("status") == "True"}
    phase: Phase = "Pending"
    for cond_type, mapped in _PRECEDENCE:
        if cond_type in true_types:
            phase = mapped
    return phase


def job_conditions(job: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The job's conditions as Experiment conditions (CRD fields only, order kept)."""
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    return [{k: c[k] for k in _CONDITION_KEYS if c.get(k) is not None} for c in conditions]


def condition(
    type_: str, status: ConditionStatus, reason: str, message: str = ""
) -> dict[str, Any]:
    """An operator condition (``lastTransitionTime`` is stamped by :func:`desired_status`)."""
    out: dict[str, Any] = {"type": type_, "status": status, "reason": reason}
    if message:  # status is readable by everyone who can get the object: no credential in it
        out["message"] = redact_text(message)
    return out


def batch_job_condition(
    job: Mapping[str, Any] | None, type_: str, reason_prefix: str, failed_message: str
) -> dict[str, Any]:
    """Condition ``type_`` from a batch/v1 Job: Complete → True, Failed → False, else Unknown;
    reasons ``<prefix>Succeeded``, ``<prefix>Failed``, ``<prefix>Running``, ``<prefix>Queued``
    (suspended: waiting for Kueue to admit it), ``<prefix>Pending`` (no Job yet, or not
    started)."""
    status = (job or {}).get("status") or {}
    true_types = {
        c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"
    }
    if "Failed" in true_types:
        return condition(type_, "False", f"{reason_prefix}Failed", failed_message)
    if "Complete" in true_types:
        return condition(type_, "True", f"{reason_prefix}Succeeded")
    if job is None:
        return condition(type_, "Unknown", f"{reason_prefix}Pending")
    if status.get("active"):
        return condition(type_, "Unknown", f"{reason_prefix}Running")
    if ((job or {}).get("spec") or {}).get("suspend") is True:
        return condition(type_, "Unknown", f"{reason_prefix}Queued")
    reason = f"{reason_prefix}Pending"
    return condition(type_, "Unknown", reason)


def eval_condition(job: Mapping[str, Any] | None) -> dict[str, Any]:
    """``Evaluated`` from the evaluation Job (see :func:`batch_job_condition`)."""
    return batch_job_condition(job, "Evaluated", "Evaluation", "evaluation Job failed")


def isvc_ready(isvc: Mapping[str, Any] | None) -> tuple[bool, str]:
    """(ready, why not) of a KServe InferenceService from its ``Ready`` condition."""
    conditions = ((isvc or {}).get("status") or {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None:
        return False, "no Ready condition yet"
    if ready.get("status") == "True":
        return True, ""
    return False, str(ready.get("message") or ready.get("reason") or "Ready is not True")


def serving_condition(waiting: Sequence[str], serving: Sequence[str]) -> dict[str, Any] | None:
    """``InferenceReady`` of served models: False while some are ``waiting`` (``"<name>:
    <why not ready>"``), else True naming those ``serving``; None when there are neither."""
    if waiting:
        message = "waiting for InferenceService " + "; ".join(waiting)
        return condition("InferenceReady", "False", "Waiting", message)
    if serving:
        return condition("InferenceReady", "True", "Ready", ", ".join(serving))
    return None


#: Reason of ``InferenceReady=False`` once the operator deleted the served models on purpose
#: (``spec.serving.release``): an expected transition, reported as a Normal Event.
RELEASED: Final = "Released"


def run_ended(job: Mapping[str, Any] | None, evaluated: Mapping[str, Any] | None) -> bool:
    """Whether the run needs its served models no more: training Failed, or Succeeded with its
    evaluation over for good (``evaluated``: the ``Evaluated`` condition, None when the run has
    no evaluation Job; True or False, the Job completed or exhausted its retries). A missing
    or still-running job has not ended."""
    phase = job_phase(job)
    if phase == "Failed":
        return True
    if phase != "Succeeded":
        return False
    return evaluated is None or evaluated.get("status") in ("True", "False")


def failed_status(
    message: str, generation: int | None, now: str, reason: str = "InvalidSpec"
) -> dict[str, Any]:
    """Status of an Experiment that cannot run (invalid spec, or ``reason`` such as a missing
    dependency): Failed, with the message in the ``Ready`` condition."""
    ready = condition("Ready", "False", reason, message)
    return {
        "phase": "Failed",
        "observedGeneration": generation,
        "conditions": [{**ready, "lastTransitionTime": now}],
    }


def stamped(
    own: Sequence[Mapping[str, Any]], current: Sequence[Mapping[str, Any]], now: str
) -> list[dict[str, Any]]:
    """``own`` with lastTransitionTime kept from ``current`` when the status did not change."""
    before = {c.get("type"): c for c in current}
    out = []
    for cond in own:
        prev = before.get(cond["type"])
        same = prev is not None and prev.get("status") == cond["status"]
        stamp = prev.get("lastTransitionTime") if same and prev is not None else None
        out.append({**cond, "lastTransitionTime": stamp or now})
    return out


def desired_status(
    job: Mapping[str, Any] | None,
    *,
    generation: int | None,
    checkpoint_uri: str,
    mlflow_run_url: str,
    mlflow_run_id: str = "",
    progress: Progress | None = None,
    conditions: Sequence[Mapping[str, Any]] = (),
    current: Mapping[str, Any] | None = None,
    now: str = "",
    job_kind: str = "",
    queued: bool = False,
) -> dict[str, Any]:
    """The status the Experiment should show for this job (``queued``: it waits for Kueue,
    :func:`experiment_phase`).

    ``conditions`` are the operator conditions this writer computed; the other operator
    conditions of ``current`` are carried over. ``progress`` None leaves lastStep/lastReward out
    of the result, so a patch keeps the last values. ``job_kind``: the kind of the training job
    (``jobKind``; empty: left out).
    """
    current_conditions = list((current or {}).get("conditions") or [])
    own_types = {c["type"] for c in conditions}
    carried = [
        c
        for c in current_conditions
        if c.get("type") in OPERATOR_CONDITIONS and c.get("type") not in own_types
    ]
    out: dict[str, Any] = {
        "phase": experiment_phase(job, queued),
        "observedGeneration": generation,
        "conditions": [
            *job_conditions(job),
            *carried,
            *stamped(conditions, current_conditions, now),
        ],
    }
    if job_kind:
        out["jobKind"] = job_kind
    if checkpoint_uri:
        out["checkpointUri"] = checkpoint_uri
    if mlflow_run_url:
        out["mlflowRunUrl"] = mlflow_run_url
    if mlflow_run_id:
        out["mlflowRunId"] = mlflow_run_id
    if progress is not None:
        out["lastStep"] = progress.step
        out["lastReward"] = progress.reward
    return out


def status_patch(
    current: Mapping[str, Any] | None, desired: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The fields of ``desired`` that differ from ``current``; None when nothing changed.
    Fields only in ``current`` (e.g. lastStep written by the trainer) are left alone."""
    current = current or {}
    changed = {k: v for k, v in desired.items() if current.get(k) != v}
    return changed or None
