"""Stand-ins for the controllers of a shared GPU cluster that cannot run here: Kubeflow Trainer
v2's TrainJob controller (status only) and Kueue's admission, over the in-memory API server.

Used by ``tests/operators/test_trainer_v2_operator.py``, which runs the real operator (``kopf
run``) against :mod:`tests.support.kube_server`. Each stand-in is a thread that polls the
server's objects and answers with merge patches, as the controllers' reconcilers would (only
the parts our operator reads are reproduced):

* :class:`TrainerV2`, after Kubeflow Trainer v2.3.0 (``pkg/apis/trainer/v1alpha1/
  trainjob_types.go``: conditions ``Suspended`` (reasons ``Suspended``/``Resumed``), ``Complete``,
  ``Failed``; ``pkg/controller/trainjob_controller.go``): a suspended TrainJob gets
  ``Suspended=True``; an unsuspended one "runs" for ``run_s`` seconds (no pods: the jobs' own
  behaviour under Trainer v2 is ``tests/jobs/test_trl_trainjob.py``'s subject), then gets
  ``Complete=True``. It records how many TrainJobs ran at once.
* :class:`Kueue`, after Kueue v0.19.2: for every job carrying the ``kueue.x-k8s.io/queue-name``
  label (``pkg/controller/constants/constants.go`` ``QueueLabel``), a Workload named as
  ``pkg/controller/jobframework/workload_names.go`` names it (``<kind>-<name>-<hash5>``),
  controlled by the job and labelled with ``kueue.x-k8s.io/job-uid``; a ClusterQueue of
  ``quota`` jobs admitted at once in creation order (``StrictFIFO``): an admitted Workload gets
  ``QuotaReserved=True`` and ``Admitted=True`` (``apis/kueue/v1beta2/workload_types.go``) and
  its job is unsuspended (``jobframework/reconciler.go`` starts a job by clearing
  ``spec.suspend``); a waiting one ``QuotaReserved=False``, reason ``Pending``, with the
  "insufficient unused quota" message Kueue's scheduler writes. A finished job's Workload gets
  ``Finished=True`` and frees its quota. It records the most jobs unsuspended at once.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes import dynamic

from tests.support.kube_server import TRAINJOBS, KubeServer, Resource

WORKLOADS: Final = Resource(
    "kueue.x-k8s.io", "v1beta2", "workloads", "Workload", subresources=("status",)
)
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL: Final = "kueue.x-k8s.io/job-uid"
TRAINJOB_API: Final = "trainer.kubeflow.org/v1alpha1"
WORKLOAD_API: Final = "kueue.x-k8s.io/v1beta2"
POLL_S: Final = 0.2


def _conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def _true(obj: dict[str, Any], type_: str) -> bool:
    return _conditions(obj).get(type_, {}).get("status") == "True"


def _finished(obj: dict[str, Any]) -> bool:
    return _true(obj, "Complete") or _true(obj, "Failed")


def _condition(type_: str, status: bool, reason: str, message: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-11-26T00:00:00Z",
    }


def workload_name(kind: str, name: str, uid: str) -> str:
    """``<kind>-<name>-<hash5>`` as Kueue v0.19.2's ``GenerateWorkloadNameWithExtra`` builds it
    (the hash's input differs in detail; only its shape matters to the operator)."""
    digest = hashlib.sha1(f"{name}{uid}{kind}".encode()).hexdigest()[:5]
    return f"{kind.lower()}-{name}-{digest}"


@dataclass
class _Loop:
    server: KubeServer
    kube: dynamic.DynamicClient
    namespace: str
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def _patch(self, api_version: str, kind: str, name: str, body: dict[str, Any]) -> None:
        self.kube.resources.get(api_version=api_version, kind=kind).patch(
            body=body,
            name=name,
            namespace=self.namespace,
            content_type="application/merge-patch+json",
        )

    def step(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        while not self.stop.wait(POLL_S):
            try:
                self.step()
            except Exception as e:  # the test reads these: a stand-in must not die silently
                self.errors.append(f"{type(e).__name__}: {e}")


@dataclass
class TrainerV2(_Loop):
    """Kubeflow Trainer v2.3.0's TrainJob status (see the module docstring)."""

    run_s: float = 1.0
    started: dict[str, float] = field(default_factory=dict)
    running_peak: int = 0
    clock: float = 0.0

    def step(self) -> None:
        self.clock += POLL_S
        jobs = self.server.objects(TRAINJOBS, self.namespace)
        running = 0
        for name, job in jobs.items():
            if _finished(job):
                continue
            suspended = bool(job["spec"].get("suspend"))
            if suspended:
                if not _true(job, "Suspended"):
                    cond = _condition("Suspended", True, "Suspended", "TrainJob is suspended")
                    self._patch(TRAINJOB_API, "TrainJob", name, {"status": {"conditions": [cond]}})
                continue
            running += 1
            start = self.started.setdefault(name, self.clock)
            if self.clock - start >= self.run_s:
                done = [
                    _condition("Suspended", False, "Resumed", "TrainJob is resumed"),
                    _condition("Complete", True, "JobsCompleted", "TrainJob is completed"),
                ]
                self._patch(TRAINJOB_API, "TrainJob", name, {"status": {"conditions": done}})
        self.running_peak = max(self.running_peak, running)


@dataclass
class Kueue(_Loop):
    """Kueue v0.19.2's admission of TrainJobs against one ClusterQueue of ``quota`` jobs."""

    quota: int = 2
    admitted: set[str] = field(default_factory=set)
    admitted_peak: int = 0
    queues_seen: set[str] = field(default_factory=set)
    order: list[str] = field(default_factory=list)

    def step(self) -> None:
        jobs = self.server.objects(TRAINJOBS, self.namespace)
        workloads = self.server.objects(WORKLOADS, self.namespace)
        for name, job in jobs.items():  # first seen, first served (StrictFIFO, one priority)
            if QUEUE_LABEL in (job["metadata"].get("labels") or {}) and name not in self.order:
                self.order.append(name)
        for name in self.order:
            job = jobs.get(name)
            if job is None:
                continue
            self.queues_seen.add(job["metadata"]["labels"][QUEUE_LABEL])
            wl_name = workload_name("TrainJob", name, job["metadata"]["uid"])
            if wl_name not in workloads:
                self.server.put(WORKLOADS, self.namespace, self._workload(wl_name, job))
            if _finished(job):
                if name in self.admitted:
                    self.admitted.discard(name)
                    done = _condition("Finished", True, "Succeeded", "Job finished")
                    self._patch(
                        WORKLOAD_API, "Workload", wl_name, {"status": {"conditions": [done]}}
                    )
                continue
            if name in self.admitted:
                continue
            if len(self.admitted) < self.quota:
                self.admitted.add(name)
                conditions = [
                    _condition(
                        "QuotaReserved",
                        True,
                        "QuotaReserved",
                        "Quota reserved in ClusterQueue gpus",
                    ),
                    _condition("Admitted", True, "Admitted", "The workload is admitted"),
                ]
                self._patch(
                    WORKLOAD_API, "Workload", wl_name, {"status": {"conditions": conditions}}
                )
                self._patch(TRAINJOB_API, "TrainJob", name, {"spec": {"suspend": False}})
            elif not _conditions(workloads.get(wl_name, {})).get("QuotaReserved"):
                waiting = _condition(
                    "QuotaReserved",
                    False,
                    "Pending",
                    "couldn't assign flavors to pod set node: insufficient unused quota for "
                    "nvidia.com/gpu in flavor default-flavor, 8 more needed",
                )
                self._patch(
                    WORKLOAD_API, "Workload", wl_name, {"status": {"conditions": [waiting]}}
                )
        self.admitted_peak = max(self.admitted_peak, len(self.admitted))

    def _workload(self, name: str, job: dict[str, Any]) -> dict[str, Any]:
        meta = job["metadata"]
        return {
            "apiVersion": WORKLOAD_API,
            "kind": "Workload",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {JOB_UID_LABEL: meta["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": TRAINJOB_API,
                        "kind": "TrainJob",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {"queueName": meta["labels"][QUEUE_LABEL]},
        }


@contextmanager
def running(*loops: _Loop) -> Iterator[None]:
    """Run the stand-ins' threads for the duration of the block."""
    threads = [threading.Thread(target=loop.run, daemon=True) for loop in loops]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        for loop in loops:
            loop.stop.set()
        for thread in threads:
            thread.join(timeout=5)
