"""An Experiment with a Kueue queue, through the handlers (in-memory :class:`FakeApi`): its
PyTorchJob is created suspended with the queue label, the status is ``Queued`` with condition
``Admitted`` from the job's Workload (Kueue v0.19.2 conditions) until Kueue admits it, ``Running``
after, ``Queued`` again (``Evicted``) when Kueue suspends it; a later reconcile never suspends an
admitted job; without Kueue installed the condition says so; without a queue no Workload is
read."""

from __future__ import annotations

from typing import Any, Final

from sarl_operator import experiment_handlers, scheduling
from tests.operators.cases import NAMESPACE
from tests.operators.test_handlers import SETTINGS, FakeApi, _body, _reconcile

JOB_KEY: Final = ("kubeflow.org/v1", "PyTorchJob", NAMESPACE, "sarl-grpo-math")
JOB_UID: Final = "job-uid-1"


def _queued_body(queue: str = "team-a") -> dict[str, Any]:
    body = _body("sarl-grpo-math")
    body["spec"]["resources"] = {**(body["spec"].get("resources") or {}), "queue": queue}
    return body


def _start(api: FakeApi, events: list[tuple[str, ...]]) -> dict[str, Any]:
    """Reconcile a queued Experiment; the created job gets the uid the API server would give."""
    body = _queued_body()
    body["status"] = _reconcile(body, api, events)["status"]
    api.objects[JOB_KEY]["metadata"]["uid"] = JOB_UID
    return body


def _workload(*conditions: tuple[str, str, str, str], **status: Any) -> dict[str, Any]:
    ref = {"kind": "PyTorchJob", "name": "sarl-grpo-math", "uid": JOB_UID, "controller": True}
    return {
        "apiVersion": scheduling.WORKLOAD_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": "pytorchjob-sarl-grpo-math-1a2b3",
            "namespace": NAMESPACE,
            "labels": {scheduling.JOB_UID_LABEL: JOB_UID},
            "ownerReferences": [ref],
        },
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions
            ],
            **status,
        },
    }


def _put_workload(api: FakeApi, wl: dict[str, Any]) -> None:
    api.objects[(wl["apiVersion"], "Workload", NAMESPACE, wl["metadata"]["name"])] = wl


def _refresh(api: FakeApi, body: dict[str, Any], events: list[tuple[str, ...]]) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    experiment_handlers.refresh_status(
        body,
        patch,
        api,
        exp=experiment_handlers.experiment_from_body(body),
        settings=SETTINGS,
        post_event=lambda _obj, *event: events.append(event),
    )
    status = {**(body.get("status") or {}), **(patch.get("status") or {})}
    body["status"] = status
    return status


def _admitted(status: dict[str, Any]) -> dict[str, Any]:
    (cond,) = [c for c in status["conditions"] if c["type"] == "Admitted"]
    return cond


WAITING: Final = (
    "QuotaReserved",
    "False",
    "Pending",
    "couldn't assign flavors to pod set master: insufficient unused quota for nvidia.com/gpu",
)


def test_created_suspended_and_queued_until_kueue_admits_it() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _start(api, events)
    job = api.objects[JOB_KEY]
    assert job["spec"]["runPolicy"]["suspend"] is True
    assert job["metadata"]["labels"][scheduling.QUEUE_LABEL] == "team-a"
    assert body["status"]["phase"] == "Queued"
    assert _admitted(body["status"])["reason"] == "Queued"  # no Workload yet
    # Waiting in a queue is expected: a Normal Event, not a Warning.
    assert ("Normal", "Queued") in {e[:2] for e in events}
    assert ("Warning", "Queued") not in {e[:2] for e in events}

    _put_workload(api, _workload(WAITING))
    status = _refresh(api, body, events)
    assert status["phase"] == "Queued"
    cond = _admitted(status)
    assert (cond["status"], cond["reason"]) == ("False", "Queued")
    assert "insufficient unused quota for nvidia.com/gpu" in cond["message"]

    # Kueue admits: the Workload says so and the job is unsuspended and runs.
    admitted = ("Admitted", "True", "Admitted", "The workload is admitted")
    _put_workload(api, _workload(admitted, admission={"clusterQueue": "gpu"}))
    job["spec"]["runPolicy"]["suspend"] = False
    job["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    status = _refresh(api, body, events)
    assert status["phase"] == "Running"
    assert (_admitted(status)["status"], _admitted(status)["reason"]) == ("True", "Admitted")


def test_evicted_job_is_queued_again_with_kueues_reason() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _start(api, events)
    job = api.objects[JOB_KEY]
    admitted = ("Admitted", "True", "Admitted", "The workload is admitted")
    _put_workload(api, _workload(admitted))
    job["spec"]["runPolicy"]["suspend"] = False
    job["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    assert _refresh(api, body, events)["phase"] == "Running"
    # Kueue preempted it: job suspended again, its conditions still saying Running.
    job["spec"]["runPolicy"]["suspend"] = True
    evicted = ("Evicted", "True", "Preempted", "Preempted to accommodate a workload (UID: 9)")
    _put_workload(api, _workload(evicted, WAITING))
    events.clear()
    status = _refresh(api, body, events)
    assert status["phase"] == "Queued"
    cond = _admitted(status)
    assert (cond["status"], cond["reason"]) == ("False", "Evicted")
    assert "Preempted to accommodate" in cond["message"]
    assert ("Warning", "Evicted") in {e[:2] for e in events}


def test_reconcile_never_suspends_an_admitted_job() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _start(api, events)
    api.objects[JOB_KEY]["spec"]["runPolicy"]["suspend"] = False  # admitted by Kueue
    patches: list[dict[str, Any]] = []
    patch_once = api.patch

    def recording_patch(obj: Any) -> dict[str, Any]:
        patches.append(obj)
        return patch_once(obj)

    api.patch = recording_patch  # type: ignore[method-assign]
    _reconcile(body, api, events)
    (job_patch,) = [p for p in patches if p["kind"] == "PyTorchJob"]
    assert "suspend" not in job_patch["spec"]["runPolicy"]
    assert scheduling.QUEUE_LABEL not in job_patch["metadata"]["labels"]


def test_kueue_not_installed_is_named() -> None:
    api, events = FakeApi(missing_kinds=frozenset({"Workload"})), list[tuple[str, ...]]()
    body = _start(api, events)
    status = _refresh(api, body, events)
    assert status["phase"] == "Queued"
    cond = _admitted(status)
    assert (cond["status"], cond["reason"]) == ("False", "KueueUnavailable")
    assert "install Kueue" in cond["message"]


def test_without_a_queue_no_workload_is_read() -> None:
    # Workload missing from the cluster would raise if it were read.
    api, events = FakeApi(missing_kinds=frozenset({"Workload"})), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math")
    status = _reconcile(body, api, events)["status"]
    assert status["phase"] == "Pending"
    assert all(c["type"] != "Admitted" for c in status["conditions"])
    assert "suspend" not in api.objects[JOB_KEY]["spec"]["runPolicy"]
