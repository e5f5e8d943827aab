"""Pure builder of the Kubeflow Trainer v2 ``TrainJob`` that runs an Experiment's training.

Called by ``experiment_handlers`` (through :class:`TrainJobBuilder`, the
:class:`~sarl_operator.builders.JobBuilder` chosen when ``spec.resources.job_kind`` resolves to
``TrainJob``) and by the tests; like :mod:`sarl_operator.builders`, nothing here talks to a cluster.

The TrainJob ``<name>`` (``trainer.kubeflow.org/v1alpha1``, Kubeflow Trainer v2.3.0) runs
against the ClusterTrainingRuntime :data:`RUNTIME_NAME` that the sarl-platform chart ships
(charts/sarl-platform/templates/trainingruntime.yaml): one replicated job :data:`NODE` whose
container :data:`NODE` the Trainer fills from ``spec.trainer`` (image, command, args, env,
``resourcesPerNode``) and runs on ``numNodes`` indexed pods. Its torch plugin (v2.3.0
``pkg/runtime/framework/plugins/torch/torch.go``) adds the ``PET_*`` rendezvous variables
(:data:`TORCH_RESERVED_ENV`) to that container, from which the job code takes its node rank (the
verl trainer starts its Ray head on rank 0); its webhook refuses a TrainJob that sets them.

Everything else a training pod needs that ``spec.trainer`` has no field for (the config and
scratch volumes and their mounts, the pod's and container's securityContext, node selector,
tolerations, service account, image pull secrets, pod labels and annotations) goes in
``spec.runtimePatches``, v2.3.0's per-TrainJob override of the runtime's JobSet template
(``trainjob_types.go``: ``RuntimePatch``, keyed by a domain-prefixed ``manager``,
:data:`PATCH_MANAGER`), strategic-merged into the runtime template by the Trainer
(``pkg/runtime/core/trainingruntime.go``, ``mergeRuntimePatches``). The pod pieces are those of
:func:`sarl_operator.job_pods.job_pod`, the PyTorchJob's, so both kinds run the same pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sarl.spec.experiment import Experiment
from sarl_operator import child_meta, job_pods, scheduling
from sarl_operator.platform_settings import DEFAULT_PLATFORM, Platform

API_VERSION: Final = "trainer.kubeflow.org/v1alpha1"
KIND: Final = "TrainJob"
#: The ClusterTrainingRuntime of charts/sarl-platform/templates/trainingruntime.yaml.
RUNTIME_NAME: Final = "sarl-torch-distributed"
RUNTIME_KIND: Final = "ClusterTrainingRuntime"
#: Name of the runtime's trainer replicated job and of its container: the Trainer applies
#: ``spec.trainer`` and the torch plugin its PET_* variables to the container of this name only
#: (v2.3.0 ``pkg/constants/constants.go``: ``Node = "node"``).
NODE: Final = "node"
#: ``manager`` of the operator's entry in ``spec.runtimePatches`` (a domain-prefixed path, as
#: the v2.3.0 jobset plugin's validation requires); Kueue adds its own entry beside it.
PATCH_MANAGER: Final = "sarl.dev/operator"
#: The variables the torch plugin sets on the ``node`` container and its webhook refuses in
#: ``spec.trainer.env`` (v2.3.0 ``pkg/constants/constants.go``: ``TorchRunReservedEnvNames``).
TORCH_RESERVED_ENV: Final = frozenset(
    {"PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR", "PET_MASTER_PORT"}
)


def cannot_carry(exp: Experiment) -> str:
    """Why a TrainJob cannot run ``exp`` as its spec asks (empty: it can); ``job_kind: auto``
    picks a PyTorchJob instead where the cluster serves one.

    ``spec.resources.priority_class``: v2.3.0's ``PodSpecPatch`` (trainjob_types.go) has no
    ``priorityClassName`` (nor ``schedulerName``: a gang scheduler's name is the runtime's, set by
    the chart), and ``spec.trainer`` none either, so a TrainJob cannot give its pods a priority of
    their own; the pods get the runtime's. Nor can Kueue v0.19.2 take the PriorityClass from the
    TrainJob: its TrainJob integration (pkg/controller/jobs/trainjob) has no ``PriorityClass()``,
    so ``jobframework.ExtractPriority`` reads the ``kueue.x-k8s.io/priority-class`` label (a
    WorkloadPriorityClass, another kind of object) or the runtime's pod templates."""
    res = exp.spec.resources
    if scheduling.pod_priority(exp):
        return (
            f"spec.resources.priority_class={res.priority_class!r}: a TrainJob (Kubeflow Trainer "
            "v2.3.0) cannot set its pods' priorityClassName (runtimePatches have no such field); "
            "set spec.resources.job_kind: PyTorchJob to use it"
        )
    return ""


def _runtime_patch(exp: Experiment, pod: dict[str, Any]) -> dict[str, Any]:
    """The operator's ``runtimePatches`` entry: ``pod``'s settings other than the container's
    image, command, args, env and resources (those are ``spec.trainer``'s), on the ``node``
    replicated job's pod template."""
    container = pod["containers"][0]
    # The jobset plugin refuses env on the node container here (v2.3.0 jobset.go, Validate):
    # it comes from spec.trainer.env.
    # securityContext of pod and container: PodSpecPatch and ContainerPatch carry them (v2.3.0
    # trainjob_types.go); automountServiceAccountToken it has not: the chart's runtime sets it.
    node = {
        "name": NODE,
        "volumeMounts": container["volumeMounts"],
        "securityContext": container["securityContext"],
    }
    pod_patch: dict[str, Any] = {
        "securityContext": pod["securityContext"],
        "volumes": pod["volumes"],
        "containers": [node],
    }
    for key in ("serviceAccountName", "imagePullSecrets", "nodeSelector", "tolerations"):
        if key in pod:
            pod_patch[key] = pod[key]
    node_template = {
        "metadata": job_pods.trainer_pod_metadata(exp),
        "spec": pod_patch,
    }
    replicated_job = {"name": NODE, "template": {"spec": {"template": node_template}}}
    return {
        "manager": PATCH_MANAGER,
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [replicated_job]}}},
    }


def trainjob(
    exp: Experiment,
    namespace: str,
    *,
    image: str,
    mlflow_run_id: str,
    tracking_uri: str,
    platform: Platform = DEFAULT_PLATFORM,
) -> dict[str, Any]:
    """TrainJob ``<name>``: ``nodes`` nodes of ``gpus_per_node`` processes each, with the
    PyTorchJob's container, environment and pod settings (:func:`builders.pytorchjob`), and
    Kueue's queue label and ``spec.suspend`` (:mod:`sarl_operator.scheduling`).

    Raises ValueError for what a TrainJob cannot carry (:func:`cannot_carry`)."""
    res = exp.spec.resources
    refused = cannot_carry(exp)
    if refused:
        raise ValueError(refused)
    env = job_pods.job_env(exp, namespace, mlflow_run_id, tracking_uri, platform)
    pod = job_pods.job_pod(exp, job_pods.trainer_container(exp, NODE, image, env))
    container = pod["containers"][0]
    trainer = {
        "image": container["image"],
        "command": container["command"],
        "args": container["args"],
        # job_env plus what the scratch volume needs (TMPDIR..., POD_NAME for a claim).
        "env": container["env"],
        "numNodes": res.nodes,
        # As the PyTorchJob's nprocPerNode; an int, where the Trainer's default "auto" would
        # count CPUs on a node without GPUs.
        "numProcPerNode": max(res.gpus_per_node, 1),
        "resourcesPerNode": container["resources"],
    }
    metadata = child_meta.meta(exp, exp.name, namespace, "trainer")
    metadata["labels"].update(scheduling.job_labels(exp, platform))
    spec: dict[str, Any] = {
        "runtimeRef": {
            "name": RUNTIME_NAME,
            "apiGroup": API_VERSION.split("/")[0],
            "kind": RUNTIME_KIND,
        },
        "trainer": trainer,
        "runtimePatches": [_runtime_patch(exp, pod)],
    }
    if scheduling.starts_suspended(exp, platform):  # Kueue unsuspends it on admission
        spec["suspend"] = True
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def existing_patch(job: dict[str, Any]) -> dict[str, Any]:
    """What reconcile merge-patches onto a TrainJob that exists already: its metadata only.

    ``spec.runtimeRef``, ``spec.trainer`` and ``spec.managedBy`` are immutable (v2.3.0 CRD
    rules ``self == oldSelf``), ``spec.runtimePatches`` may change only while the TrainJob is
    suspended (jobset plugin, ``checkRuntimePatchesImmutability``) and a merge patch of that list
    would drop Kueue's entry, and ``spec.suspend`` and the queue label belong to Kueue once it
    manages the job (:func:`sarl_operator.scheduling.creation_only`). A spec update therefore
    shapes the next run (after the TrainJob is deleted), not this one."""
    meta = job["metadata"]
    return scheduling.creation_only(
        {
            "apiVersion": job["apiVersion"],
            "kind": job["kind"],
            "metadata": {k: meta[k] for k in ("name", "namespace", "labels") if k in meta},
        }
    )


def _node_tolerations(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ``node`` pod tolerations a ``runtimePatches`` entry sets (empty: none)."""
    spec = ((entry.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}
    for rjob in spec.get("replicatedJobs") or []:
        if rjob.get("name") == NODE:
            pod = ((rjob.get("template") or {}).get("spec") or {}).get("template") or {}
            return list((pod.get("spec") or {}).get("tolerations") or [])
    return []


def replaced_tolerations(job: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tolerations of the operator's ``runtimePatches`` entry that the TrainJob's pods do
    not get, because a later entry sets its own (empty: none lost).

    The Trainer strategic-merges the entries onto the runtime's JobSet template in list order
    (v2.3.0 ``pkg/runtime/core/trainingruntime.go``, ``mergeRuntimePatches``), and a pod's
    ``tolerations`` has no patch strategy (``k8s.io/api/core/v1`` ``PodSpec``): the last entry
    that sets them wins whole. Kueue's TrainJob webhook appends its entry after the operator's at
    creation, and on admission fills it with the assigned ResourceFlavor's tolerations alone
    (v0.19.2 ``pkg/controller/jobs/trainjob``: ``Default``, ``RunWithPodSetsInfo``), not merged
    with the job's as its other integrations do (``pkg/podset/podset.go`` ``Merge``). So with a
    flavor that has tolerations the spec's are lost on the pods; runtimePatches cannot change
    while the TrainJob runs (jobset plugin, ``checkRuntimePatchesImmutability``), so the
    operator can only say so (the ``Admitted`` condition)."""
    entries = list((job.get("spec") or {}).get("runtimePatches") or [])
    mine = [i for i, e in enumerate(entries) if e.get("manager") == PATCH_MANAGER]
    if not mine:
        return []
    ours = _node_tolerations(entries[mine[0]])
    effective = ours
    for entry in entries[mine[0] + 1 :]:
        effective = _node_tolerations(entry) or effective
    kept = {scheduling.toleration_key(t) for t in effective}
    return [t for t in ours if scheduling.toleration_key(t) not in kept]


@dataclass(frozen=True)
class TrainJobBuilder:
    """:class:`~sarl_operator.builders.JobBuilder` for the Kubeflow Trainer v2 ``TrainJob``."""

    api_version: str = API_VERSION
    kind: str = KIND

    def build(
        self,
        exp: Experiment,
        namespace: str,
        *,
        image: str,
        mlflow_run_id: str,
        tracking_uri: str,
        platform: Platform,
    ) -> dict[str, Any]:
        return trainjob(
            exp,
            namespace,
            image=image,
            mlflow_run_id=mlflow_run_id,
            tracking_uri=tracking_uri,
            platform=platform,
        )

    def update(self, job: dict[str, Any]) -> dict[str, Any]:
        return existing_patch(job)
