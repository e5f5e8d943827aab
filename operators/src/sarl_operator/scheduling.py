"""Pure scheduling logic on shared GPU clusters: Kueue queues, pod priority, gang scheduling.

Called by the job builders (``builders.pytorchjob``, ``evaluation.eval_job``, the Trainer v2
``trainjob`` builder) for the fields they add to the jobs they build, by ``experiment_handlers``
for the Experiment's ``Queued`` phase, and by ``experiment_conditions`` for its ``Admitted``
condition. Nothing here reads the environment or talks to a cluster; ``platform`` is a
:class:`sarl_operator.platform_settings.Platform` (``default_queue``: the chart's
``kueue.defaultQueue``; ``gang_scheduler``: its ``gangScheduler``, one of
:data:`sarl_operator.platform_settings.GANG_SCHEDULERS`).

**Kueue** (v0.19.2). A job with the ``kueue.x-k8s.io/queue-name`` label
(pkg/controller/constants/constants.go, ``QueueLabel``) is managed by Kueue: it must be created
suspended (PyTorchJob ``spec.runPolicy.suspend``, pkg/controller/jobs/kubeflow/kubeflowjob;
batch Job and TrainJob ``spec.suspend``, pkg/controller/jobs/job and jobs/trainjob); Kueue
creates a Workload owned by the job (controller reference, label ``kueue.x-k8s.io/job-uid``,
pkg/controller/jobframework/reconciler.go ``ConstructWorkload``) and unsuspends the job once
the Workload is admitted. Kueue's mutating webhook would suspend a labelled job by itself
(jobframework/defaults.go ``ApplyDefaultForSuspend`` → utils.go ``WorkloadShouldBeSuspended``:
true for any job with a queue name, whatever ``manageJobsWithoutQueueName`` says), but only for
the integrations enabled in Kueue's configuration (``integrations.frameworks`` defaults to
``batch/job`` alone, apis/config/v1beta2/defaults.go). We set it anyway: a PyTorchJob or TrainJob
whose integration is off would otherwise start at once, outside the queue's quota, whereas a
suspended one waits visibly (phase ``Queued``, ``Admitted=False`` saying no Workload exists).
Once the job exists, ``suspend`` and the queue label belong to Kueue (it flips the one, and its
webhook refuses a queue change on a running job, jobframework/validation.go
``validateUpdateForQueueName``): :func:`creation_only` leaves them out of later patches, so a
reconcile never suspends an admitted job (which the Training Operator would answer by
deleting its pods).

**Priority.** ``spec.resources.priority_class`` names a ``scheduling.k8s.io`` PriorityClass: it
becomes ``priorityClassName`` of every trainer and evaluation pod (:func:`pod_priority`), which
is also where Kueue reads the Workload's priority from (``KubeflowJob.PriorityClass``:
``runPolicy.schedulingPolicy.priorityClass``, else the first replica's
``priorityClassName``). The ``kueue.x-k8s.io/priority-class`` label, which names a Kueue
*WorkloadPriorityClass* (a different object, queue order only), is not set: one name for two
kinds of object would be wrong for one of them, and a WorkloadPriorityClass cannot be added to
a running job (validation.go ``ValidateUpdateForWorkloadPriorityClassName``).

**Gang scheduling** (Training Operator v1.9, pkg/controller.v1/common/job.go). Only when the
Training Operator runs with ``--gang-scheduler-name`` (``volcano``, or the scheduler-plugins
scheduler's name) does it create a PodGroup per job; it then reads
``runPolicy.schedulingPolicy`` (``minAvailable`` → ``minMember``, default all replicas;
``queue`` → the Volcano queue, default ``default``; ``priorityClass``) and sets the pods'
``schedulerName`` when empty (pkg/controller.v1/common/pod.go). The platform's
``gangScheduler`` must name the same scheduler. A Kueue LocalQueue is not a Volcano queue, so
``queue`` is never set here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Final

from sarl.spec.experiment import Experiment
from sarl_operator import pod_security
from sarl_operator.platform_settings import Platform
from sarl_operator.status import condition

#: Kueue's LocalQueue label on a job (pkg/controller/constants, v0.19.2).
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
#: The label Kueue puts on a job's Workload: the job's uid.
JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
#: Kueue's WorkloadPriorityClass label (not set by the operator, see the module docstring).
WORKLOAD_PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"
#: The Workload API (kueue.x-k8s.io/v1beta2: the storage version of v0.19.2; v1beta1 is
#: served too).
WORKLOAD_API_VERSION: Final = "kueue.x-k8s.io/v1beta2"
WORKLOAD_KIND: Final = "Workload"
#: Pod ``schedulerName`` per gang scheduler: scheduler-plugins' chart deploys its second
#: scheduler as ``scheduler-plugins-scheduler`` (the name the Training Operator docs pass to
#: ``--gang-scheduler-name``); Volcano's is ``volcano``.
SCHEDULER_NAMES: Final[Mapping[str, str]] = {
    "scheduler-plugins": "scheduler-plugins-scheduler",
    "volcano": "volcano",
}
#: Reasons of the Experiment's ``Admitted`` condition.
QUEUED: Final = "Queued"
ADMITTED: Final = "Admitted"
EVICTED: Final = "Evicted"
KUEUE_UNAVAILABLE: Final = "KueueUnavailable"


def queue_name(exp: Experiment, platform: Platform) -> str | None:
    """The Kueue LocalQueue of the Experiment's jobs: ``spec.resources.queue``, else the
    platform's default (``kueue.defaultQueue``); None: not Kueue-managed."""
    return exp.spec.resources.queue or platform.default_queue or None


def job_labels(exp: Experiment, platform: Platform) -> dict[str, str]:
    """Labels to add to a job's ``metadata.labels``: the queue label, or nothing."""
    queue = queue_name(exp, platform)
    return {QUEUE_LABEL: queue} if queue else {}


def starts_suspended(exp: Experiment, platform: Platform) -> bool:
    """Whether the jobs are created suspended: exactly when they have a queue (Kueue
    unsuspends them on admission)."""
    return queue_name(exp, platform) is not None


def pod_priority(exp: Experiment) -> dict[str, str]:
    """Pod spec fields for ``spec.resources.priority_class``: ``priorityClassName``, or
    nothing."""
    pc = exp.spec.resources.priority_class
    return {"priorityClassName": pc} if pc else {}


def gang_scheduler(exp: Experiment, platform: Platform) -> str | None:
    """The gang scheduler of the training job (``scheduler-plugins`` or ``volcano``), or None:
    one node needs no gang, and ``none`` configures none."""
    if exp.spec.resources.nodes <= 1 or platform.gang_scheduler == "none":
        return None
    return platform.gang_scheduler


def scheduler_name(exp: Experiment, platform: Platform) -> dict[str, str]:
    """Pod spec fields of every training pod: ``schedulerName`` of the gang scheduler, or
    nothing (the default scheduler)."""
    gang = gang_scheduler(exp, platform)
    return {"schedulerName": SCHEDULER_NAMES[gang]} if gang else {}


def pytorchjob_scheduling_policy(exp: Experiment, platform: Platform) -> dict[str, Any] | None:
    """``spec.runPolicy.schedulingPolicy`` of the PyTorchJob with a gang scheduler:
    ``minAvailable`` = nodes (every pod or none; the Training Operator's default too, written
    so the PodGroup does not depend on it) and ``priorityClass`` (the PodGroup's, and Kueue's
    first choice). None without a gang."""
    if gang_scheduler(exp, platform) is None:
        return None
    policy: dict[str, Any] = {"minAvailable": exp.spec.resources.nodes}
    if exp.spec.resources.priority_class:
        policy["priorityClass"] = exp.spec.resources.priority_class
    return policy


# ---- multi-node start: the Workers wait for the Master without counting restarts ----

#: Name of the Workers' init container that waits for the Master (:func:`master_wait_container`).
MASTER_WAIT_CONTAINER: Final = "wait-for-master"
#: Seconds between two lookups of the Master's name.
MASTER_WAIT_INTERVAL_S: Final = 5
_MASTER_WAIT_SCRIPT: Final = """import socket, sys, time
while True:
    try:
        socket.getaddrinfo(sys.argv[1], None)
        break
    except OSError:
        time.sleep(float(sys.argv[2]))
"""


def master_host(job_name: str) -> str:
    """The Master's DNS name as the Training Operator's init container looks it up: its
    headless Service ``<job>-master-0`` (``replicaName``, pkg/controller.v1/pytorch), which
    resolves only once the Master pod is ready."""
    return f"{job_name}-master-0"


def master_wait_container(job_name: str, image: str) -> dict[str, Any]:
    """The Workers' first init container: waits, without limit and without ever failing, until
    the Master's name resolves.

    The trap it closes (Training Operator v1.9, pkg/controller.v1/pytorch/initcontainer.go and
    pkg/core/job.go ``PastBackoffLimit``): the operator appends an init container to every
    Worker that tries ``nslookup <job>-master-0`` 100 times 2 s apart and then exits 1; the
    kubelet restarts it while the Master is Pending (no free GPU, image pull), and once the
    Worker is Running its init container's restarts are added to the job's restart count. A
    Master that waited ~25 min for GPUs thus fails a 2-node job (backoffLimit 6) the moment it
    starts. With this container first, the operator's runs only after the name resolves and
    succeeds at once: no restart is counted, however long the wait. It runs the trainer image
    (Python is there; no other image to allow or pull) with small requests = limits."""
    amounts = {"cpu": "100m", "memory": "64Mi"}
    return {
        "name": MASTER_WAIT_CONTAINER,
        "image": image,
        "command": ["python", "-c", _MASTER_WAIT_SCRIPT],
        "args": [master_host(job_name), str(MASTER_WAIT_INTERVAL_S)],
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        "securityContext": pod_security.container_context(),
    }


# ---- an existing job: what Kueue owns ----


def _suspend_holder(job: Mapping[str, Any]) -> Mapping[str, Any]:
    """The mapping holding ``suspend``: a PyTorchJob's ``spec.runPolicy``, else ``spec``
    (batch Job, TrainJob)."""
    spec: Mapping[str, Any] = job.get("spec") or {}
    if job.get("kind") == "PyTorchJob":
        run_policy: Mapping[str, Any] = spec.get("runPolicy") or {}
        return run_policy
    return spec


def is_suspended(job: Mapping[str, Any] | None) -> bool:
    """Whether ``job`` (PyTorchJob, TrainJob or batch Job) is suspended."""
    return job is not None and _suspend_holder(job).get("suspend") is True


def waiting_for_admission(job: Mapping[str, Any] | None) -> bool:
    """Whether ``job`` waits for Kueue: it has a queue label and is suspended (Kueue
    unsuspends it on admission and suspends it again on eviction)."""
    labels = ((job or {}).get("metadata") or {}).get("labels") or {}
    return bool(labels.get(QUEUE_LABEL)) and is_suspended(job)


def creation_only(job: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the desired ``job`` without the fields that are set on creation only:
    ``suspend`` (Kueue flips it) and the queue label (Kueue refuses a change on a running
    job). A merge patch leaves absent fields as they are."""
    out = copy.deepcopy(dict(job))
    spec = out.get("spec") or {}
    spec.pop("suspend", None)
    (spec.get("runPolicy") or {}).pop("suspend", None)
    (out.get("metadata", {}).get("labels") or {}).pop(QUEUE_LABEL, None)
    return out


def _replica_templates(job: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Pod templates by replica type (``""`` for a batch Job's one template)."""
    spec: Mapping[str, Any] = job.get("spec") or {}
    if job.get("kind") == "PyTorchJob":
        replicas: Mapping[str, Any] = spec.get("pytorchReplicaSpecs") or {}
        return {name: r.get("template") or {} for name, r in replicas.items()}
    return {"": spec["template"]} if "template" in spec else {}


def toleration_key(t: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """What makes two tolerations the same one (Kueue v0.19.2 pkg/util/tolerations ``Equal``:
    ``MatchToleration``'s key, operator, value and effect; an empty operator is ``Equal``)."""
    op = str(t.get("operator") or "Equal")
    return (str(t.get("key") or ""), op, str(t.get("value") or ""), str(t.get("effect") or ""))


def keep_admission(patch: Mapping[str, Any], current: Mapping[str, Any] | None) -> dict[str, Any]:
    """The merge ``patch`` of an existing job, keeping what Kueue merged into its pod templates
    when it admitted it.

    On admission Kueue merges the assigned ResourceFlavors' node labels and tolerations into
    every pod template of the job and unsuspends it in the same write (v0.19.2
    pkg/controller/jobs/kubeflow/kubeflowjob ``RunWithPodSetsInfo`` and jobs/job →
    pkg/podset/podset.go ``Merge``: nodeSelector keys added, refused on a conflicting value;
    tolerations appended unless an equal one is there; labels, annotations and scheduling gates
    likewise). A merge patch (RFC 7386) merges maps, so the nodeSelector keys, labels and
    annotations Kueue added survive it, and lists it does not name; but it replaces a list it
    names: the spec's ``tolerations`` would drop the flavor's, and a pod recreated after a node
    loss would no longer tolerate the taints of the nodes Kueue admitted the job to. Kueue
    itself does not notice: with the Workload admitted its equivalence check ignores
    tolerations (pkg/controller/jobframework/reconciler.go ``EquivalentToWorkload``,
    ``WithIgnoreTolerations``).

    So, while ``current`` runs (not suspended), each pod template's tolerations in the patch
    are the spec's followed by the live ones not among them: those Kueue added, and any the spec
    dropped since, which go when Kueue restores the template on suspension (``RestorePodSpec``)
    or with the next run. Running is the test, not the queue label: Kueue may manage a job the
    operator created without one (its default LocalQueue, ``manageJobsWithoutQueueName``). A
    suspended job is patched as desired: Kueue restored its templates when it suspended it. The
    nodeSelector is left to the merge patch (Kueue's keys are absent from the spec's, so they
    stay)."""
    out = copy.deepcopy(dict(patch))
    if current is None or is_suspended(current):
        return out
    live = _replica_templates(current)
    for name, template in _replica_templates(out).items():
        pod = template.get("spec")
        live_pod = (live.get(name) or {}).get("spec") or {}
        if not isinstance(pod, dict) or "tolerations" not in pod:
            continue  # not in the patch: the live list stays as it is
        wanted = list(pod["tolerations"])
        seen = {toleration_key(t) for t in wanted}
        wanted += [t for t in live_pod.get("tolerations") or [] if toleration_key(t) not in seen]
        pod["tolerations"] = wanted
    return out


# ---- the Workload Kueue creates for a job ----


def owned_workloads(
    workloads: Sequence[Mapping[str, Any]], job_uid: str
) -> list[Mapping[str, Any]]:
    """The Workloads among ``workloads`` whose controller is the job with ``job_uid``."""
    out = []
    for wl in workloads:
        refs = (wl.get("metadata") or {}).get("ownerReferences") or []
        if any(r.get("controller") and r.get("uid") == job_uid for r in refs):
            out.append(wl)
    return out


def _conditions(wl: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {str(c.get("type")): c for c in (wl.get("status") or {}).get("conditions") or []}


def _current(workloads: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The Workload that speaks for the job: the newest one not Finished, else the newest
    (a resized job gets a new Workload slice; the old one finishes)."""

    def created(wl: Mapping[str, Any]) -> str:
        return str((wl.get("metadata") or {}).get("creationTimestamp") or "")

    def newest(wls: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
        return max(wls, key=created) if wls else None

    running = [
        wl for wl in workloads if _conditions(wl).get("Finished", {}).get("status") != "True"
    ]
    return newest(running) or newest(workloads)


def workload_state(workloads: Sequence[Mapping[str, Any]], queue: str) -> dict[str, Any]:
    """The Experiment's ``Admitted`` condition (status, reason, message) from the job's
    Workloads (Kueue v0.19.2 apis/kueue/v1beta2/workload_types.go conditions):

    * ``Admitted`` True → True, :data:`ADMITTED` (quota reserved in the ClusterQueue and every
      admission check passed: the job runs);
    * ``Evicted`` True → False, :data:`EVICTED` (preempted, PodsReady timeout, queue stopped...;
      Kueue suspended the job and queues it again), with the ``Preempted`` detail if any;
    * otherwise → False, :data:`QUEUED` with Kueue's message: ``QuotaReserved`` False (waiting
      for quota: ``WaitingForQuota``, ``Inadmissible``...), or reserved but ``Admitted`` not
      yet (admission checks);
    * no Workload (Kueue has not seen the job, or does not manage its kind) → False,
      :data:`QUEUED`, saying so.
    """
    wl = _current(workloads)
    if wl is None:
        return condition(
            "Admitted",
            "False",
            QUEUED,
            f"no Kueue Workload for the job yet (queue {queue!r}); if this lasts, check that "
            "Kueue manages the job's kind (its integrations.frameworks) and the LocalQueue exists",
        )
    conds = _conditions(wl)
    name = (wl.get("metadata") or {}).get("name")
    admitted, evicted = conds.get("Admitted", {}), conds.get("Evicted", {})
    if admitted.get("status") == "True":
        cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
        where = f" by ClusterQueue {cq!r}" if cq else ""
        return condition(
            "Admitted", "True", ADMITTED, f"Workload {name} admitted{where} (queue {queue!r})"
        )
    if evicted.get("status") == "True":
        parts = [str(evicted.get("reason") or ""), str(evicted.get("message") or "")]
        preempted = conds.get("Preempted", {})
        if preempted.get("status") == "True":
            parts.append(str(preempted.get("message") or ""))
        text = ": ".join(p for p in parts if p)
        return condition("Admitted", "False", EVICTED, f"Workload {name} evicted ({text})")
    reserved = conds.get("QuotaReserved", {})
    why = reserved if reserved.get("status") != "True" else admitted
    detail = str(why.get("message") or why.get("reason") or "waiting for quota")
    return condition("Admitted", "False", QUEUED, f"Workload {name} in queue {queue!r}: {detail}")


def kueue_unavailable(queue: str) -> dict[str, Any]:
    """``Admitted`` False when the job has a queue but the cluster serves no Workload API: Kueue
    is not installed, and nothing will ever unsuspend the job."""
    message = (
        f"the job waits for Kueue (queue {queue!r}) but the cluster serves no "
        f"{WORKLOAD_KIND} ({WORKLOAD_API_VERSION}): install Kueue v0.19 or later, or unset "
        "spec.resources.queue and the platform's kueue.defaultQueue"
    )
    return condition("Admitted", "False", KUEUE_UNAVAILABLE, message)
