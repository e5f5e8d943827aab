"""Pure scheduling logic (:mod:`sarl_operator.scheduling`): the effective Kueue queue, the fields
jobs get for it, pod priority, the gang scheduling policy, what a patch of an existing job leaves
to Kueue, and the ``Admitted`` condition from Kueue v0.19.2 Workloads."""

from __future__ import annotations

from typing import Any

import pytest

from sarl.spec.experiment import Experiment
from sarl_operator import scheduling
from sarl_operator.platform_settings import Platform
from tests.operators.cases import CASES, experiment_of


def _exp(**resources: Any) -> Experiment:
    doc = CASES["sarl-grpo-math"]()
    doc["spec"]["resources"] = {**(doc["spec"].get("resources") or {}), **resources}
    return experiment_of(doc)


@pytest.mark.parametrize(
    ("spec_queue", "default", "expected"),
    [
        (None, "", None),
        ("team-a", "", "team-a"),
        (None, "shared", "shared"),
        ("team-a", "shared", "team-a"),  # the spec wins over the platform default
    ],
)
def test_queue_and_what_follows(spec_queue: str | None, default: str, expected: str | None) -> None:
    exp, platform = _exp(queue=spec_queue), Platform(default_queue=default)
    assert scheduling.queue_name(exp, platform) == expected
    assert scheduling.starts_suspended(exp, platform) is (expected is not None)
    labels = scheduling.job_labels(exp, platform)
    assert labels == ({scheduling.QUEUE_LABEL: expected} if expected else {})


@pytest.mark.parametrize(("priority", "expected"), [(None, {}), ("research-high", None)])
def test_pod_priority(priority: str | None, expected: dict[str, str] | None) -> None:
    out = scheduling.pod_priority(_exp(priority_class=priority))
    assert out == (expected if expected is not None else {"priorityClassName": priority})


@pytest.mark.parametrize(
    ("nodes", "gang", "scheduler", "policy"),
    [
        (1, "volcano", None, None),  # one pod: no gang
        (2, "none", None, None),
        (2, "volcano", "volcano", {"minAvailable": 2}),
        (4, "scheduler-plugins", "scheduler-plugins-scheduler", {"minAvailable": 4}),
    ],
)
def test_gang(nodes: int, gang: str, scheduler: str | None, policy: dict[str, Any] | None) -> None:
    exp, platform = _exp(nodes=nodes), Platform(gang_scheduler=gang)
    assert scheduling.scheduler_name(exp, platform) == (
        {"schedulerName": scheduler} if scheduler else {}
    )
    assert scheduling.pytorchjob_scheduling_policy(exp, platform) == policy


def test_gang_policy_carries_the_priority_class_and_never_a_volcano_queue() -> None:
    exp = _exp(nodes=2, queue="team-a", priority_class="research-high")
    policy = scheduling.pytorchjob_scheduling_policy(exp, Platform(gang_scheduler="volcano"))
    # A Kueue LocalQueue is not a Volcano queue: the PodGroup keeps Volcano's "default".
    assert policy == {"minAvailable": 2, "priorityClass": "research-high"}


@pytest.mark.parametrize(
    ("env", "queue", "gang"),
    [
        ({}, "", "none"),
        ({"SARL_DEFAULT_QUEUE": "shared", "SARL_GANG_SCHEDULER": "volcano"}, "shared", "volcano"),
        ({"SARL_GANG_SCHEDULER": ""}, "", "none"),
    ],
)
def test_platform_from_env(env: dict[str, str], queue: str, gang: str) -> None:
    platform = Platform.from_env(env)
    assert (platform.default_queue, platform.gang_scheduler) == (queue, gang)


def test_platform_refuses_an_unknown_gang_scheduler() -> None:
    with pytest.raises(ValueError, match="SARL_GANG_SCHEDULER='yunikorn'"):
        Platform.from_env({"SARL_GANG_SCHEDULER": "yunikorn"})


def _job(kind: str, suspend: bool | None, queue: str | None = "team-a") -> dict[str, Any]:
    labels = {"app": "x", **({scheduling.QUEUE_LABEL: queue} if queue else {})}
    spec: dict[str, Any] = {"backoffLimit": 0}
    holder = spec
    if kind == "PyTorchJob":
        spec["runPolicy"] = holder = {"backoffLimit": 3}
    if suspend is not None:
        holder["suspend"] = suspend
    return {"kind": kind, "metadata": {"name": "j", "labels": labels}, "spec": spec}


@pytest.mark.parametrize("kind", ["PyTorchJob", "TrainJob", "Job"])
@pytest.mark.parametrize(
    ("suspend", "queue", "waiting"),
    [
        (True, "team-a", True),
        (False, "team-a", False),
        (None, "team-a", False),
        (True, None, False),
    ],
)
def test_waiting_for_admission(
    kind: str, suspend: bool | None, queue: str | None, waiting: bool
) -> None:
    job = _job(kind, suspend, queue)
    assert scheduling.is_suspended(job) is (suspend is True)
    assert scheduling.waiting_for_admission(job) is waiting


@pytest.mark.parametrize("kind", ["PyTorchJob", "TrainJob", "Job"])
def test_creation_only_leaves_suspend_and_queue_to_kueue(kind: str) -> None:
    job = _job(kind, True)
    out = scheduling.creation_only(job)
    assert not scheduling.is_suspended(out)
    assert "suspend" not in out["spec"] and "suspend" not in out["spec"].get("runPolicy", {})
    assert out["metadata"]["labels"] == {"app": "x"}
    assert scheduling.is_suspended(job), "the input is not modified"


# ---- Workloads as Kueue v0.19.2 writes them ----

JOB_UID = "job-uid-1"


def _wl(
    name: str,
    *conditions: tuple[str, str, str, str],
    owner: str = JOB_UID,
    created: str = "2025-01-01T00:00:00Z",
    cluster_queue: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions
        ]
    }
    if cluster_queue:
        status["admission"] = {"clusterQueue": cluster_queue}
    ref = {"kind": "PyTorchJob", "name": "j", "uid": owner, "controller": True}
    meta = {"name": name, "creationTimestamp": created, "ownerReferences": [ref]}
    return {"metadata": meta, "status": status}


WAITING = (
    "QuotaReserved",
    "False",
    "Pending",
    "couldn't assign flavors to pod set master: insufficient unused quota for nvidia.com/gpu "
    "in flavor h100, 8 more needed",
)
ADMITTED = ("Admitted", "True", "Admitted", "The workload is admitted")
RESERVED = ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue gpu")
CHECKS = (
    "Admitted",
    "False",
    "UnsatisfiedAdmissionChecks",
    "The workload has not all checks ready",
)
EVICTED = ("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: 9)")
PREEMPTED = ("Preempted", "True", "InClusterQueue", "Preempted by a higher-priority workload")
FINISHED = ("Finished", "True", "Succeeded", "Job finished successfully")


@pytest.mark.parametrize(
    ("workloads", "status", "reason", "fragments"),
    [
        ([], "False", "Queued", ["no Kueue Workload", "integrations.frameworks"]),
        ([_wl("w", WAITING)], "False", "Queued", ["'team-a'", "8 more needed"]),
        ([_wl("w", RESERVED, CHECKS)], "False", "Queued", ["not all checks ready"]),
        ([_wl("w", RESERVED, ADMITTED, cluster_queue="gpu")], "True", "Admitted", ["'gpu'"]),
        (
            [_wl("w", EVICTED, PREEMPTED, WAITING)],
            "False",
            "Evicted",
            ["Preempted to accommodate", "higher-priority"],
        ),
        # A resized job's old Workload finished; the newest unfinished one speaks for it.
        (
            [
                _wl("new", WAITING, created="2025-01-02T00:00:00Z"),
                _wl("old", ADMITTED, FINISHED),
            ],
            "False",
            "Queued",
            ["Workload new"],
        ),
    ],
)
def test_workload_state(
    workloads: list[dict[str, Any]], status: str, reason: str, fragments: list[str]
) -> None:
    cond = scheduling.workload_state(workloads, "team-a")
    assert (cond["type"], cond["status"], cond["reason"]) == ("Admitted", status, reason)
    for fragment in fragments:
        assert fragment in cond["message"]


def test_owned_workloads_keeps_only_the_jobs() -> None:
    ours, other = _wl("a"), _wl("b", owner="someone-else")
    assert scheduling.owned_workloads([ours, other], JOB_UID) == [ours]


def test_kueue_unavailable_names_what_to_install() -> None:
    cond = scheduling.kueue_unavailable("team-a")
    assert (cond["status"], cond["reason"]) == ("False", "KueueUnavailable")
    assert "install Kueue" in cond["message"] and "'team-a'" in cond["message"]
