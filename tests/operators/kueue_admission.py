"""Emulation of what Kueue writes into a training job's pod templates when it admits the job and
when it suspends it again, for tests of how the operator's patches and reports treat them.

No Kueue can run here. What is reproduced, read at Kueue v0.19.2:

* PyTorchJob admission (``pkg/controller/jobframework/reconciler.go`` ``startJob`` →
  ``pkg/controller/jobs/kubeflow/kubeflowjob/kubeflowjob_controller.go`` ``RunWithPodSetsInfo``):
  ``runPolicy.suspend`` false and, for each replica type's pod template, ``pkg/podset/podset.go``
  ``Merge`` of the assigned flavor's info (``FromAssignment``: the ResourceFlavor's
  ``nodeLabels`` and ``tolerations``, and the ``kueue.x-k8s.io/podset`` label,
  ``getPodSetsInfoFromStatus``): nodeSelector keys added (a conflicting value is an error),
  tolerations appended unless an equal one is there (``pkg/util/tolerations`` ``Equal``), labels
  added. Kueue writes it as a merge patch of the changed object (``clientutil.Patch``), in
  which a changed list is sent whole.
* suspension (``stopJob`` → ``RestorePodSetsInfo`` → ``podset.RestorePodSpec``): suspend true
  and each template's labels, nodeSelector and tolerations set back to those the Workload
  recorded from the job before admission.
* TrainJob (``pkg/controller/jobs/trainjob``): the webhook appends an empty entry of Kueue's to
  ``spec.runtimePatches``; admission fills it with the flavor's info alone and unsuspends; and
  how Kubeflow Trainer v2.3.0 then applies the entries to the pods' tolerations.

Used by ``tests/operators/test_kueue_admission.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

PODSET_LABEL: Final = "kueue.x-k8s.io/podset"


@dataclass(frozen=True)
class Flavor:
    """A ResourceFlavor's ``spec.nodeLabels`` and ``spec.tolerations``."""

    node_labels: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """``pkg/util/tolerations.Equal``: key, operator (empty = Equal), value and effect."""

    def norm(t: Mapping[str, Any]) -> tuple[Any, ...]:
        return (t.get("key"), t.get("operator") or "Equal", t.get("value"), t.get("effect"))

    return norm(a) == norm(b)


def _merge(template: dict[str, Any], replica: str, flavor: Flavor) -> None:
    """``podset.Merge`` of the flavor's info into one pod template, in place."""
    meta, pod = template.setdefault("metadata", {}), template.setdefault("spec", {})
    selector = pod.setdefault("nodeSelector", {})
    for key, value in flavor.node_labels.items():
        if selector.get(key, value) != value:
            raise ValueError(f"conflict for nodeSelector: {key}")  # BadPodSetsUpdateError
        selector[key] = value
    tolerations = pod.setdefault("tolerations", [])
    for t in flavor.tolerations:
        if not any(_same(t, have) for have in tolerations):
            tolerations.append(copy.deepcopy(t))
    meta.setdefault("labels", {})[PODSET_LABEL] = replica.lower()


def admission_patch(job: Mapping[str, Any], flavor: Flavor) -> dict[str, Any]:
    """The merge patch Kueue writes when it admits the suspended PyTorchJob ``job`` to
    ``flavor``: unsuspended, the flavor merged into every replica's pod template."""
    replicas = copy.deepcopy(job["spec"]["pytorchReplicaSpecs"])
    for name, replica in replicas.items():
        _merge(replica["template"], name, flavor)
    return _patch(job, replicas, suspend=False)


def suspension_patch(job: Mapping[str, Any], recorded: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch Kueue writes when it suspends the admitted ``job`` (eviction,
    preemption): suspended, and each template's labels, nodeSelector and tolerations those of
    ``recorded`` (the job as it was when its Workload was made)."""
    replicas = copy.deepcopy(job["spec"]["pytorchReplicaSpecs"])
    for name, replica in replicas.items():
        before = recorded["spec"]["pytorchReplicaSpecs"][name]["template"]
        template = replica["template"]
        # A key absent before is deleted (null in a merge patch); lists are sent whole.
        labels = template["metadata"].get("labels") or {}
        template["metadata"]["labels"] = {
            k: (before["metadata"].get("labels") or {}).get(k) for k in labels
        } | dict(before["metadata"].get("labels") or {})
        selector = template["spec"].get("nodeSelector") or {}
        template["spec"]["nodeSelector"] = {
            k: (before["spec"].get("nodeSelector") or {}).get(k) for k in selector
        } | dict(before["spec"].get("nodeSelector") or {})
        template["spec"]["tolerations"] = copy.deepcopy(before["spec"].get("tolerations"))
    return _patch(job, replicas, suspend=True)


def _patch(job: Mapping[str, Any], replicas: dict[str, Any], *, suspend: bool) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": job["apiVersion"],
        "kind": job["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "spec": {"runPolicy": {"suspend": suspend}, "pytorchReplicaSpecs": replicas},
    }


# ---- TrainJob (Kueue's runtimePatches entry, and how Kubeflow Trainer v2.3.0 applies it) ----

#: v0.19.2 pkg/controller/jobs/trainjob/trainjob_controller.go ``runtimePatchManagerName``.
KUEUE_MANAGER: Final = "kueue.x-k8s.io/manager"


def trainjob_created(job: Mapping[str, Any]) -> dict[str, Any]:
    """The TrainJob as stored after Kueue's mutating webhook (trainjob_webhook.go ``Default``):
    an empty entry of Kueue's appended to ``spec.runtimePatches``, after the operator's."""
    out = copy.deepcopy(dict(job))
    empty = {"manager": KUEUE_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}}
    out["spec"].setdefault("runtimePatches", []).append(empty)
    return out


def trainjob_admitted(job: Mapping[str, Any], flavor: Flavor, node: str) -> dict[str, Any]:
    """The TrainJob after Kueue admits it (trainjob_controller.go ``RunWithPodSetsInfo``): its
    entry's replicated job ``node`` set to the flavor's info alone (node labels, tolerations,
    the podset label), and unsuspended."""
    out = copy.deepcopy(dict(job))
    pod: dict[str, Any] = {"nodeSelector": dict(flavor.node_labels)}
    if flavor.tolerations:  # Go's omitempty: no list at all when the flavor has none
        pod["tolerations"] = copy.deepcopy(flavor.tolerations)
    template = {"metadata": {"labels": {PODSET_LABEL: node}}, "spec": pod}
    rjob = {"name": node, "template": {"spec": {"template": template}}}
    for entry in out["spec"]["runtimePatches"]:
        if entry["manager"] == KUEUE_MANAGER:
            entry["trainingRuntimeSpec"]["template"]["spec"] = {"replicatedJobs": [rjob]}
    out["spec"]["suspend"] = False
    return out


def trainer_pod_tolerations(job: Mapping[str, Any], node: str) -> list[dict[str, Any]]:
    """The tolerations the ``node`` pods get (the runtime's own taken as none): Trainer v2.3.0
    ``pkg/runtime/core/trainingruntime.go`` ``mergeRuntimePatches`` strategic-merges each entry
    in list order, and ``PodSpec.tolerations`` has no patch strategy, so the last entry that
    sets the list replaces it whole."""
    out: list[dict[str, Any]] = []
    for entry in job["spec"].get("runtimePatches") or []:
        spec = entry["trainingRuntimeSpec"]["template"]["spec"]
        for rjob in spec.get("replicatedJobs") or []:
            pod = rjob["template"]["spec"]["template"].get("spec") or {}
            if rjob["name"] == node and pod.get("tolerations"):
                out = copy.deepcopy(pod["tolerations"])
    return out
