"""Handlers called directly, with an in-memory fake of the Kubernetes API (:class:`FakeApi`).

No real API server can run here. These unit tests call :func:`reconcile` and
:func:`refresh_status` with a fake implementing :class:`~sarl_operator.kube.KubeApi`, a plain
dict as kopf's patch and a list collecting the events; MLflow is either absent (no tracking URI)
or a fake :class:`Tracker` that records calls or fails. The whole operator (kopf, HTTP to an API
server, a real MLflow server) is exercised in ``test_operator.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import kopf
import pytest

from sarl_operator import builders, handlers
from sarl_operator.tracking import Progress, RunRef, TrackingError
from tests.operators.cases import CASES, IMAGE, NAMESPACE, PLATFORM

SETTINGS = handlers.Settings(verl_image=IMAGE, platform=PLATFORM)


class FakeTracker:
    """Records ensure_run calls; fails with TrackingError when ``down``."""

    def __init__(self, down: bool = False) -> None:
        self.down = down
        self.calls: list[str] = []

    def ensure_run(self, experiment_name: str, **kwargs: Any) -> RunRef:
        self.calls.append(experiment_name)
        if self.down:
            raise TrackingError("MLflow http://mlflow/api: ConnectError (after 3 attempts)")
        return RunRef(run_id="run-1", experiment_id="7")

    def latest_progress(self, run_id: str) -> Progress | None:
        return None


class FakeApi:
    """Objects keyed by (apiVersion, kind, namespace, name); records every write."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
        meta = obj["metadata"]
        return (obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        found = self.objects.get((api_version, kind, namespace, name))
        return copy.deepcopy(found)

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        self.objects[self._key(obj)] = copy.deepcopy(dict(obj))
        self.writes.append(("create", obj["kind"]))
        return dict(obj)

    def patch(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        self.objects[self._key(obj)].update(copy.deepcopy(dict(obj)))
        self.writes.append(("patch", obj["kind"]))
        return dict(obj)


def _body(case: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = CASES[case]()
    return {
        "apiVersion": doc["apiVersion"],
        "kind": doc["kind"],
        "metadata": {
            "name": doc["metadata"]["name"],
            "namespace": NAMESPACE,
            "uid": "uid-1",
            "generation": 1,
        },
        "spec": spec if spec is not None else doc["spec"],
    }


def _reconcile(
    body: dict[str, Any],
    api: FakeApi,
    events: list[tuple[str, ...]],
    settings: handlers.Settings = SETTINGS,
    tracker: FakeTracker | None = None,
) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    handlers.reconcile(
        body,
        patch,
        api,
        settings=settings,
        post_event=lambda _obj, *event: events.append(event),
        tracker_factory=lambda _uri: tracker or FakeTracker(),
    )
    return patch


def _env(api: FakeApi, name: str) -> dict[str, str]:
    job = api.objects[("kubeflow.org/v1", "PyTorchJob", NAMESPACE, name)]
    container = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.mark.parametrize(
    ("case", "kinds"),
    [
        ("sarl-grpo-math", ["ConfigMap", "PyTorchJob"]),
        ("sarl-grpo-math-2node", ["ConfigMap", "InferenceService", "PyTorchJob"]),
        ("sarl-grpo-judge", ["ConfigMap", "InferenceService", "PyTorchJob"]),
    ],
)
def test_creates_owned_children_and_pending_status(case: str, kinds: list[str]) -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _body(case)
    patch = _reconcile(body, api, events)
    assert [k for _, k in api.writes] == kinds
    for obj in api.objects.values():
        ref = obj["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("Experiment", "uid-1", True)
    assert patch["status"]["phase"] == "Pending"
    assert ("Normal", "PhasePending", "phase None -> Pending") in events


def test_second_reconcile_patches_children_and_not_status() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math")
    body["status"] = _reconcile(body, api, events)["status"]
    events.clear()
    patch = _reconcile(body, api, events)
    assert all(op == "patch" for op, _ in api.writes[2:])
    assert "status" not in patch
    assert events == []


def test_timer_refresh_follows_job_conditions() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math")
    body["status"] = _reconcile(body, api, events)["status"]
    exp = handlers.experiment_from_body(body)
    job = api.objects[("kubeflow.org/v1", "PyTorchJob", NAMESPACE, exp.name)]
    job["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    patch: dict[str, Any] = {}
    handlers.refresh_status(
        body,
        patch,
        api,
        exp=exp,
        settings=SETTINGS,
        post_event=lambda _obj, *event: events.append(event),
    )
    assert patch["status"]["phase"] == "Running"
    assert events[-1] == ("Normal", "PhaseRunning", "phase Pending -> Running")


def test_invalid_spec_is_permanent_error_naming_field() -> None:
    spec = copy.deepcopy(CASES["sarl-grpo-math"]()["spec"])
    spec["algorithm"] = {"learning_rate": -1}
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math", spec)
    patch: dict[str, Any] = {}
    tracker = FakeTracker()
    with pytest.raises(kopf.PermanentError, match=r"spec\.algorithm\.learning_rate=-1"):
        handlers.reconcile(
            body,
            patch,
            api,
            settings=SETTINGS,
            post_event=lambda _obj, *event: events.append(event),
            tracker_factory=lambda _uri: tracker,
        )
    assert api.writes == [] and tracker.calls == []
    assert patch["status"]["phase"] == "Failed"
    assert "spec.algorithm.learning_rate" in patch["status"]["conditions"][0]["message"]
    assert events[0][:2] == ("Warning", "PhaseFailed")


def test_spec_the_trainer_refuses_fails_at_reconcile_naming_the_field() -> None:
    """verl takes one reward term: refused before any child or run, not in a restarting pod."""
    spec = copy.deepcopy(CASES["sarl-grpo-math"]()["spec"])
    spec["reward"] = [{"name": "structure"}, {"name": "ground_truth", "weight": 0.5}]
    api, events, tracker = FakeApi(), list[tuple[str, ...]](), FakeTracker()
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.PermanentError, match=r"spec\.reward: the verl trainer"):
        handlers.reconcile(
            _body("sarl-grpo-math", spec),
            patch,
            api,
            settings=SETTINGS,
            post_event=lambda _obj, *event: events.append(event),
            tracker_factory=lambda _uri: tracker,
        )
    assert api.writes == [] and tracker.calls == []
    assert patch["status"]["phase"] == "Failed"


def test_job_builder_protocol_is_pytorchjob() -> None:
    assert handlers.JOB_BUILDER.kind == builders.PyTorchJobBuilder().kind == "PyTorchJob"


def test_run_created_once_and_passed_to_the_job() -> None:
    api, events, tracker = FakeApi(), list[tuple[str, ...]](), FakeTracker()
    settings = handlers.Settings(
        verl_image=IMAGE,
        platform=PLATFORM,
        tracking_uri="http://mlflow:5000",
        ui_url="https://mlflow.example.com",
    )
    body = _body("sarl-grpo-math")
    body["status"] = _reconcile(body, api, events, settings, tracker)["status"]
    assert body["status"]["mlflowRunId"] == "run-1"
    assert body["status"]["mlflowRunUrl"] == "https://mlflow.example.com/#/experiments/7/runs/run-1"
    assert _env(api, "sarl-grpo-math")["MLFLOW_RUN_ID"] == "run-1"
    _reconcile(body, api, events, settings, tracker)
    assert tracker.calls == ["sarl-grpo-math"]  # the second reconcile reused the status


def test_no_tracking_uri_means_no_run_and_empty_run_id() -> None:
    api, events, tracker = FakeApi(), list[tuple[str, ...]](), FakeTracker()
    patch = _reconcile(_body("sarl-grpo-math"), api, events, SETTINGS, tracker)
    assert tracker.calls == [] and _env(api, "sarl-grpo-math")["MLFLOW_RUN_ID"] == ""
    tracking = [c for c in patch["status"]["conditions"] if c["type"] == "TrackingReady"]
    assert (tracking[0]["status"], tracking[0]["reason"]) == ("False", "TrackingNotConfigured")


def test_tracking_down_is_temporary_and_creates_no_job() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    settings = handlers.Settings(verl_image=IMAGE, platform=PLATFORM, tracking_uri="http://x")
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.TemporaryError) as err:
        handlers.reconcile(
            _body("sarl-grpo-math"),
            patch,
            api,
            settings=settings,
            post_event=lambda _obj, *event: events.append(event),
            tracker_factory=lambda _uri: FakeTracker(down=True),
        )
    assert err.value.delay == handlers.TRACKING_RETRY_DELAY_S
    assert api.writes == []
    tracking = next(c for c in patch["status"]["conditions"] if c["type"] == "TrackingReady")
    assert tracking["status"] == "False" and "ConnectError" in tracking["message"]
    assert ("Warning", "TrackingUnavailable") in [e[:2] for e in events]


def test_succeeded_training_creates_the_eval_job_once() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math")
    body["status"] = _reconcile(body, api, events)["status"]
    exp = handlers.experiment_from_body(body, PLATFORM)
    job = api.objects[("kubeflow.org/v1", "PyTorchJob", NAMESPACE, exp.name)]
    job["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    for _ in range(2):
        patch: dict[str, Any] = {}
        handlers.refresh_status(
            body,
            patch,
            api,
            exp=exp,
            settings=SETTINGS,
            post_event=lambda _obj, *event: events.append(event),
        )
        body["status"] = {**body["status"], **patch.get("status", {})}
    assert api.writes.count(("create", "Job")) == 1
    evaluated = next(c for c in body["status"]["conditions"] if c["type"] == "Evaluated")
    assert (evaluated["status"], evaluated["reason"]) == ("Unknown", "EvaluationPending")
    assert body["status"]["phase"] == "Succeeded"


@pytest.mark.parametrize(
    ("env", "expected"), [({}, 30.0), ({"SARL_STATUS_INTERVAL_S": "1.5"}, 1.5)]
)
def test_status_interval_from_env(env: dict[str, str], expected: float) -> None:
    assert handlers.status_interval_s(env) == expected


@pytest.mark.parametrize("raw", ["soon", "0", "-3"])
def test_bad_status_interval_names_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match=f"SARL_STATUS_INTERVAL_S='{raw}'"):
        handlers.status_interval_s({"SARL_STATUS_INTERVAL_S": raw})


def test_settings_pick_the_image_per_backend() -> None:
    settings = handlers.Settings.from_env(
        {"SARL_TRAINER_IMAGE": "verl:1", "SARL_TRL_TRAINER_IMAGE": "trl:1", "SARL_S3_BUCKET": "b"}
    )
    doc = CASES["sarl-grpo-math"]()
    assert settings.image_of(handlers.experiment_from_body(doc)) == "verl:1"
    doc["spec"]["resources"] = {"backend": "trl"}
    assert settings.image_of(handlers.experiment_from_body(doc)) == "trl:1"
    doc["spec"]["resources"]["image"] = "mine:2"
    assert settings.image_of(handlers.experiment_from_body(doc)) == "mine:2"
    assert settings.platform.data_uri == "s3://b/data"
