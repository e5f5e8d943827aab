"""Handlers called directly, with an in-memory fake of the Kubernetes API (:class:`FakeApi`).

No real API server can run here. These unit tests call :func:`reconcile` and
:func:`refresh_status` with a fake implementing :class:`~sarl_operator.kube.KubeApi`, a plain
dict as kopf's patch and a list collecting the events; MLflow is either absent (no tracking URI)
or a fake :class:`Tracker` that records calls or fails. The whole operator (kopf, HTTP to an API
server, a real MLflow server) is exercised in ``test_operator.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import kopf
import pytest

from sarl_operator import builders, experiment_handlers, handlers
from sarl_operator.kube import MissingApiError, VersionConflictError
from sarl_operator.reconcile import (
    STATUS_WRITE_TRIES,
    TRACKING_DOWN,
    TRACKING_RETRY_DELAY_S,
    Settings,
    status_interval_s,
)
from sarl_operator.tracking import Progress, RunRef, TrackingError
from tests.operators.cases import CASES, IMAGE, NAMESPACE, PLATFORM

SETTINGS = Settings(verl_image=IMAGE, platform=PLATFORM)


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
    """Objects keyed by (apiVersion, kind, namespace, name); records every write.

    Starts with what a prepared namespace has: the platform's S3 credentials Secret. KServe is
    emulated only as far as ``ready_isvcs``: InferenceServices report Ready when created.
    Kinds in ``missing_kinds`` raise MissingApiError, as the dynamic client does for a kind
    whose CRD is not installed; so do Kubeflow Trainer v2's unless ``trainer_v2`` (by default a
    Training Operator v1 cluster, where ``job_kind: auto`` means PyTorchJob). Status writes
    (:meth:`patch_status`, :meth:`put_status`) give the object a new ``resourceVersion``."""

    def __init__(
        self,
        *,
        secret: bool = True,
        ready_isvcs: bool = True,
        missing_kinds: frozenset[str] = frozenset(),
        trainer_v2: bool = False,
    ) -> None:
        self.objects: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []
        self.versions = 0
        self.ready_isvcs = ready_isvcs
        v2_kinds = frozenset() if trainer_v2 else frozenset({"TrainJob", "ClusterTrainingRuntime"})
        self.missing_kinds = missing_kinds | v2_kinds
        if secret:
            data = {"AWS_ACCESS_KEY_ID": "a2V5", "AWS_SECRET_ACCESS_KEY": "c2VjcmV0"}
            self.objects[("v1", "Secret", NAMESPACE, PLATFORM.s3_credentials_secret)] = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": PLATFORM.s3_credentials_secret, "namespace": NAMESPACE},
                "data": data,
            }

    def _check(self, kind: str) -> None:
        if kind in self.missing_kinds:
            raise MissingApiError("v1", kind)

    @staticmethod
    def _key(obj: Mapping[str, Any]) -> tuple[str, str, str, str]:
        meta = obj["metadata"]
        return (obj["apiVersion"], obj["kind"], meta["namespace"], meta["name"])

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self._check(kind)
        found = self.objects.get((api_version, kind, namespace, name))
        return copy.deepcopy(found)

    def create(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        self._check(obj["kind"])
        stored = copy.deepcopy(dict(obj))
        if obj["kind"] == "InferenceService" and self.ready_isvcs:
            stored["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
        self.objects[self._key(obj)] = stored
        self.writes.append(("create", obj["kind"]))
        return dict(obj)

    def patch(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        self._check(obj["kind"])
        self.objects[self._key(obj)].update(copy.deepcopy(dict(obj)))
        self.writes.append(("patch", obj["kind"]))
        return dict(obj)

    def patch_status(self, obj: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
        """Refused when the stored object's resourceVersion is not ``obj``'s, as the API server
        refuses a merge patch carrying another one."""
        self._check(obj["kind"])
        stored = self.objects[self._key(obj)]
        if stored["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
            raise VersionConflictError(obj)
        self.writes.append(("patch_status", obj["kind"]))
        return self.put_status(self._key(obj), status)

    def put_status(
        self, key: tuple[str, str, str, str], status: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Merge ``status`` into the stored object's status, unguarded: what kopf does with the
        ``patch`` a handler filled (a merge patch; a list such as ``conditions`` is replaced)."""
        stored = self.objects[key]
        merged = {**(stored.get("status") or {}), **copy.deepcopy(dict(status))}
        stored["status"] = {k: v for k, v in merged.items() if v is not None}
        self.versions += 1
        stored["metadata"]["resourceVersion"] = str(self.versions)
        return copy.deepcopy(stored)

    def delete(self, api_version: str, kind: str, namespace: str, name: str) -> bool:
        self._check(kind)
        self.writes.append(("delete", kind))
        return self.objects.pop((api_version, kind, namespace, name), None) is not None

    def list(
        self, api_version: str, kind: str, namespace: str, label_selector: str = ""
    ) -> list[dict[str, Any]]:
        """Objects of the kind in ``namespace`` matching ``label_selector`` (``k=v,...``)."""
        self._check(kind)
        wanted = dict(term.split("=", 1) for term in label_selector.split(",") if term)
        out = []
        for (version, knd, ns, _), obj in self.objects.items():
            labels = obj.get("metadata", {}).get("labels") or {}
            if (version, knd, ns) == (api_version, kind, namespace) and all(
                labels.get(k) == v for k, v in wanted.items()
            ):
                out.append(copy.deepcopy(obj))
        return out


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
    settings: Settings = SETTINGS,
    tracker: FakeTracker | None = None,
) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    experiment_handlers.reconcile(
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


#: The trainer's and the served models' NetworkPolicies (sarl_operator.network_policies).
_POLICIES = ["NetworkPolicy", "NetworkPolicy"]


@pytest.mark.parametrize(
    ("case", "kinds"),
    [
        ("sarl-grpo-math", [*_POLICIES, "ConfigMap", "InferenceService", "PyTorchJob"]),
        ("sarl-grpo-math-2node", [*_POLICIES, "ConfigMap", "InferenceService", "PyTorchJob"]),
        ("sarl-grpo-judge", [*_POLICIES, "ConfigMap", "InferenceService", "PyTorchJob"]),
    ],
)
def test_creates_owned_children_and_pending_status(case: str, kinds: list[str]) -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _body(case)
    patch = _reconcile(body, api, events)
    assert [k for _, k in api.writes] == kinds
    for obj in api.objects.values():
        if obj["kind"] == "Secret":
            continue  # the user's, not a child
        ref = obj["metadata"]["ownerReferences"][0]
        assert (ref["kind"], ref["uid"], ref["controller"]) == ("Experiment", "uid-1", True)
    assert patch["status"]["phase"] == "Pending"
    assert ("Normal", "PhasePending", "phase None -> Pending") in events


def test_second_reconcile_patches_children_and_not_status() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math")
    body["status"] = _reconcile(body, api, events)["status"]
    created = len(api.writes)
    events.clear()
    patch = _reconcile(body, api, events)
    assert all(op == "patch" for op, _ in api.writes[created:])
    assert "status" not in patch
    assert events == []


def test_timer_refresh_follows_job_conditions() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math")
    body["status"] = _reconcile(body, api, events)["status"]
    exp = experiment_handlers.experiment_from_body(body)
    job = api.objects[("kubeflow.org/v1", "PyTorchJob", NAMESPACE, exp.name)]
    job["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    patch: dict[str, Any] = {}
    experiment_handlers.refresh_status(
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
        experiment_handlers.reconcile(
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
    """verl cannot give a reward the policy's hidden states (its rollouts come from vLLM):
    refused before any child or run, not in a restarting pod."""
    spec = copy.deepcopy(CASES["sarl-grpo-math"]()["spec"])
    policy = {"embedder": {"kind": "policy"}}
    spec["reward"] = [{"name": "ground_truth"}, {"name": "structure", "settings": policy}]
    api, events, tracker = FakeApi(), list[tuple[str, ...]](), FakeTracker()
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.PermanentError, match=r"spec\.reward\[1\]\.settings\.embedder"):
        experiment_handlers.reconcile(
            _body("sarl-grpo-math", spec),
            patch,
            api,
            settings=SETTINGS,
            post_event=lambda _obj, *event: events.append(event),
            tracker_factory=lambda _uri: tracker,
        )
    assert api.writes == [] and tracker.calls == []
    assert patch["status"]["phase"] == "Failed"


def test_job_builders_by_kind() -> None:
    """Each builder is found under the kind it builds (``spec.resources.job_kind``)."""
    assert {k: (b.kind, b.api_version) for k, b in experiment_handlers.JOB_BUILDERS.items()} == {
        "PyTorchJob": ("PyTorchJob", builders.PyTorchJobBuilder().api_version),
        "TrainJob": ("TrainJob", "trainer.kubeflow.org/v1alpha1"),
    }


def test_run_created_once_and_passed_to_the_job() -> None:
    api, events, tracker = FakeApi(), list[tuple[str, ...]](), FakeTracker()
    settings = Settings(
        verl_image=IMAGE,
        platform=PLATFORM,
        tracking_uri="http://mlflow:5000",
        ui_url="https://mlflow.example.com",
    )
    body = _body("sarl-grpo-math")
    body["status"] = _reconcile(body, api, events, settings, tracker)["status"]
    assert body["status"]["mlflowRunId"] == "run-1"
    assert body["status"]["mlflowRunUrl"] == (
        "https://mlflow.example.com/#/experiments/7/runs/run-1?workflowType=machine_learning"
    )
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
    settings = Settings(verl_image=IMAGE, platform=PLATFORM, tracking_uri="http://x")
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.TemporaryError) as err:
        experiment_handlers.reconcile(
            _body("sarl-grpo-math"),
            patch,
            api,
            settings=settings,
            post_event=lambda _obj, *event: events.append(event),
            tracker_factory=lambda _uri: FakeTracker(down=True),
        )
    assert err.value.delay == TRACKING_RETRY_DELAY_S and str(err.value) == TRACKING_DOWN
    assert api.writes == []
    tracking = next(c for c in patch["status"]["conditions"] if c["type"] == "TrackingReady")
    # A fixed text: the server's errors and replies stay in the operator's log (issue 36).
    assert tracking["status"] == "False" and tracking["message"] == TRACKING_DOWN
    assert ("Warning", "TrackingUnavailable") in [e[:2] for e in events]


def test_succeeded_training_creates_the_eval_job_once() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math")
    body["status"] = _reconcile(body, api, events)["status"]
    exp = experiment_handlers.experiment_from_body(body, PLATFORM)
    job = api.objects[("kubeflow.org/v1", "PyTorchJob", NAMESPACE, exp.name)]
    job["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    for _ in range(2):
        patch: dict[str, Any] = {}
        experiment_handlers.refresh_status(
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
    assert status_interval_s(env) == expected


@pytest.mark.parametrize("raw", ["soon", "0", "-3"])
def test_bad_status_interval_names_the_variable(raw: str) -> None:
    with pytest.raises(ValueError, match=f"SARL_STATUS_INTERVAL_S='{raw}'"):
        status_interval_s({"SARL_STATUS_INTERVAL_S": raw})


def test_settings_pick_the_image_per_backend() -> None:
    settings = Settings.from_env(
        {"SARL_TRAINER_IMAGE": "verl:1", "SARL_TRL_TRAINER_IMAGE": "trl:1", "SARL_S3_BUCKET": "b"}
    )
    doc = CASES["sarl-grpo-math"]()
    assert settings.image_of(experiment_handlers.experiment_from_body(doc)) == "verl:1"
    doc["spec"]["resources"] = {"backend": "trl"}
    assert settings.image_of(experiment_handlers.experiment_from_body(doc)) == "trl:1"
    doc["spec"]["resources"]["image"] = "mine:2"
    assert settings.image_of(experiment_handlers.experiment_from_body(doc)) == "mine:2"
    assert settings.platform.data_uri == "s3://b/data"


def _conditions(patch: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The written conditions by type; each type at most once (the CRD's conditions list is a
    map keyed by type, and a client reading it takes the first)."""
    types = [c["type"] for c in patch["status"]["conditions"]]
    assert len(types) == len(set(types)), f"a condition type written twice: {types}"
    return {c["type"]: c for c in patch["status"]["conditions"]}


def _kinds(api: FakeApi) -> set[str]:
    return {kind for _, kind, _, _ in api.objects}


def test_missing_credentials_secret_waits_naming_the_command() -> None:
    """Finding: pods in another namespace than the platform's referenced a Secret that was not
    there (CreateContainerConfigError). Now no job is created until it exists."""
    api, events = FakeApi(secret=False), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math")
    with pytest.raises(kopf.TemporaryError, match="Secret 'sarl-s3-credentials' not found"):
        _reconcile(body, api, events)
    assert "PyTorchJob" not in _kinds(api) and "ConfigMap" not in _kinds(api)
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.TemporaryError) as info:
        experiment_handlers.reconcile(
            body, patch, api, settings=SETTINGS,
            post_event=lambda _obj, *event: events.append(event),
            tracker_factory=lambda _uri: FakeTracker(),
        )  # fmt: skip
    storage = _conditions(patch)["StorageReady"]
    assert storage["status"] == "False" and storage["reason"] == "SecretMissing"
    assert f"kubectl create secret generic sarl-s3-credentials -n {NAMESPACE}" in str(info.value)
    assert ("Warning", "SecretMissing") in {e[:2] for e in events}


def test_credentials_secret_without_a_key_is_named() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    secret = api.objects[("v1", "Secret", NAMESPACE, "sarl-s3-credentials")]
    del secret["data"]["AWS_SECRET_ACCESS_KEY"]
    with pytest.raises(kopf.TemporaryError, match="has no key 'AWS_SECRET_ACCESS_KEY'"):
        _reconcile(_body("sarl-grpo-math"), api, events)


def test_secret_found_creates_the_job_and_reports_storage_ready() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    patch = _reconcile(_body("sarl-grpo-math"), api, events)
    assert _conditions(patch)["StorageReady"]["status"] == "True"
    assert "PyTorchJob" in _kinds(api)


@pytest.mark.parametrize("case", ["sarl-grpo-math-2node", "sarl-grpo-judge"])
def test_training_waits_for_the_inference_services(case: str) -> None:
    """Finding: training started without waiting for the services its reward calls."""
    api, events = FakeApi(ready_isvcs=False), list[tuple[str, ...]]()
    body = _body(case)
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.TemporaryError, match="waiting for InferenceService"):
        experiment_handlers.reconcile(
            body, patch, api, settings=SETTINGS,
            post_event=lambda _obj, *event: events.append(event),
            tracker_factory=lambda _uri: FakeTracker(),
        )  # fmt: skip
    assert "InferenceService" in _kinds(api) and "PyTorchJob" not in _kinds(api)
    assert _conditions(patch)["InferenceReady"]["status"] == "False"
    body["status"] = patch["status"]
    for key, obj in api.objects.items():  # KServe reports the predictor Ready
        if key[1] == "InferenceService":
            obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    patch = _reconcile(body, api, events)
    assert "PyTorchJob" in _kinds(api)
    assert _conditions(patch)["InferenceReady"]["status"] == "True"


def test_a_running_job_is_not_stopped_by_a_service_that_is_not_ready() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math-2node")
    body["status"] = _reconcile(body, api, events)["status"]
    for key, obj in api.objects.items():
        if key[1] == "InferenceService":
            obj["status"] = {"conditions": [{"type": "Ready", "status": "False", "message": "x"}]}
    patch = _reconcile(body, api, events)  # no TemporaryError: the job exists
    assert _conditions(patch)["InferenceReady"]["status"] == "False"


def _old_job(name: str, uid: str = "uid-0") -> dict[str, Any]:
    """The finished PyTorchJob of a deleted Experiment of the same name (GC not done yet)."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "deletionTimestamp": "2026-11-24T00:00:00Z",
            "ownerReferences": [
                {"apiVersion": "sarl.dev/v1alpha1", "kind": "Experiment", "name": name,
                 "uid": uid, "controller": True}
            ],
        },
        "status": {"conditions": [{"type": "Succeeded", "status": "True"}]},
    }  # fmt: skip


def test_a_previous_experiments_job_is_never_adopted() -> None:
    """Finding: re-submitting a name right after a background delete adopted the old finished
    PyTorchJob (merge patch replaced ownerReferences) and reported its Succeeded phase."""
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math")
    name = body["metadata"]["name"]
    old = _old_job(name)
    api.objects[("kubeflow.org/v1", "PyTorchJob", NAMESPACE, name)] = copy.deepcopy(old)
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.TemporaryError, match="controlled by Experiment uid uid-0"):
        experiment_handlers.reconcile(
            body, patch, api, settings=SETTINGS,
            post_event=lambda _obj, *event: events.append(event),
            tracker_factory=lambda _uri: FakeTracker(),
        )  # fmt: skip
    assert api.objects[("kubeflow.org/v1", "PyTorchJob", NAMESPACE, name)] == old  # untouched
    assert ("patch", "PyTorchJob") not in api.writes
    assert patch["status"]["phase"] == "Pending"  # not the old job's Succeeded
    assert _conditions(patch)["ChildrenReady"]["reason"] == "NameInUse"
    # The garbage collector removes it: the next attempt creates this Experiment's job.
    del api.objects[("kubeflow.org/v1", "PyTorchJob", NAMESPACE, name)]
    body["status"] = patch["status"]
    patch = _reconcile(body, api, events)
    job = api.objects[("kubeflow.org/v1", "PyTorchJob", NAMESPACE, name)]
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    assert _conditions(patch)["ChildrenReady"]["status"] == "True"


def test_timer_ignores_a_job_of_another_owner() -> None:
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math")
    name = body["metadata"]["name"]
    api.objects[("kubeflow.org/v1", "PyTorchJob", NAMESPACE, name)] = _old_job(name)
    patch: dict[str, Any] = {}
    experiment_handlers.refresh_status(
        body, patch, api, exp=experiment_handlers.experiment_from_body(body), settings=SETTINGS,
        post_event=lambda _obj, *event: events.append(event),
    )  # fmt: skip
    assert patch["status"]["phase"] == "Pending"


EXPERIMENT = ("sarl.dev/v1alpha1", "Experiment")


def _stored(api: FakeApi, body: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """``body`` as the API server holds it (the status timer reads it there); its key."""
    key = (*EXPERIMENT, NAMESPACE, body["metadata"]["name"])
    api.objects[key] = copy.deepcopy(dict(body))
    return key


def _tick(
    body: Mapping[str, Any],
    api: FakeApi,
    events: list[tuple[str, ...]],
    settings: Settings = SETTINGS,
) -> dict[str, Any]:
    """One status timer tick given kopf's ``body``; kopf's patch is then applied as kopf applies
    it (an unguarded merge patch of the status)."""
    patch: dict[str, Any] = {}
    experiment_handlers.refresh(
        body, patch, api, settings=settings, post_event=lambda _obj, *event: events.append(event)
    )
    if patch.get("status"):
        api.put_status((*EXPERIMENT, NAMESPACE, body["metadata"]["name"]), patch["status"])
    return patch


class _WritesDuringTick(FakeApi):
    """Runs the next of ``during`` at each read of a PyTorchJob: a write to the Experiment that
    lands after the tick read the Experiment and before it writes the status."""

    def __init__(self) -> None:
        super().__init__()
        self.during: list[Callable[[], object]] = []

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if kind == "PyTorchJob" and self.during:
            self.during.pop(0)()
        return super().get(api_version, kind, namespace, name)


def _running(api: FakeApi, name: str) -> None:
    """What the Training Operator writes once the job's pods run."""
    job = api.objects[("kubeflow.org/v1", "PyTorchJob", NAMESPACE, name)]
    job["status"] = {"conditions": [{"type": "Running", "status": "True"}]}


def test_a_tick_on_a_stale_body_keeps_the_condition_reconcile_wrote_since() -> None:
    """The CI race (test_operator's MLflow-down test taking ~34 s): kopf hands a timer the body
    of the last watch event it processed (kopf 1.45.2 ``_core/engines/daemons.py``,
    ``DaemonsMemory.live_fresh_body``, replaced in ``_core/reactor/processing.py``), so a tick
    can start from a copy older than the status reconcile has just patched. Here it holds the
    Experiment as created while the API holds reconcile's ``TrackingReady=False`` (MLflow
    down). kopf merge-patches what a handler puts in ``patch`` and a merge patch replaces a list
    whole: a tick computing ``conditions`` from the stale copy erased TrackingReady until the
    next tracking retry (30 s). Kubernetes API: the in-memory fake."""
    api, events = FakeApi(), list[tuple[str, ...]]()
    settings = Settings(verl_image=IMAGE, platform=PLATFORM, tracking_uri="http://x")
    created = _body("sarl-grpo-math")
    key = _stored(api, created)
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.TemporaryError):
        experiment_handlers.reconcile(
            copy.deepcopy(created),
            patch,
            api,
            settings=settings,
            post_event=lambda _obj, *event: events.append(event),
            tracker_factory=lambda _uri: FakeTracker(down=True),
        )
    api.put_status(key, patch["status"])  # kopf applies reconcile's patch
    events.clear()
    _tick(created, api, events, settings)  # the timer still holds the body as created
    status = api.objects[key]["status"]
    tracking = next((c for c in status.get("conditions") or [] if c["type"] == "TrackingReady"), {})
    assert (tracking.get("status"), tracking.get("reason")) == ("False", "TrackingUnavailable")
    assert status["phase"] == "Pending" and events == []


def test_a_status_written_while_a_tick_runs_is_kept_and_the_tick_recomputes() -> None:
    """A write landing after the tick read the Experiment and before its own write: the tick's
    write carries the resourceVersion it read, is refused (409), and the tick reads the
    Experiment again and recomputes. Kubernetes API: the in-memory fake, which refuses a stale
    resourceVersion as the API server does."""
    api, events = _WritesDuringTick(), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math")
    key = _stored(api, body)
    api.put_status(key, _reconcile(copy.deepcopy(body), api, events)["status"])
    kopf_body = copy.deepcopy(api.objects[key])  # StorageReady=True, phase Pending
    # The Secret is deleted; the next reconcile (a spec update) reports it. Its patch lands while
    # the timer reads the job, which has started running meanwhile.
    del api.objects[("v1", "Secret", NAMESPACE, PLATFORM.s3_credentials_secret)]
    newer: dict[str, Any] = {}
    with pytest.raises(kopf.TemporaryError):
        experiment_handlers.reconcile(
            copy.deepcopy(kopf_body), newer, api, settings=SETTINGS, post_event=lambda *_: None
        )
    _running(api, "sarl-grpo-math")
    api.during.append(lambda: api.put_status(key, newer["status"]))
    events.clear()
    patch = _tick(kopf_body, api, events)
    status = api.objects[key]["status"]
    storage = next(c for c in status["conditions"] if c["type"] == "StorageReady")
    assert (storage["status"], storage["reason"]) == ("False", "SecretMissing")
    assert status["phase"] == "Running"
    assert events == [("Normal", "PhaseRunning", "phase Pending -> Running")]
    assert patch == {}  # written by the tick itself, not through kopf's unguarded patch


def test_a_tick_that_loses_every_race_writes_nothing_and_leaves_it_to_the_next() -> None:
    """Another writer at each try: no status written, no error (the next tick tries again).
    Kubernetes API: the in-memory fake."""
    api, events = _WritesDuringTick(), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math")
    key = _stored(api, body)
    api.put_status(key, _reconcile(copy.deepcopy(body), api, events)["status"])
    _running(api, "sarl-grpo-math")
    api.during.extend(lambda: api.put_status(key, {}) for _ in range(10))
    events.clear()
    _tick(copy.deepcopy(api.objects[key]), api, events)
    assert len(api.during) == 10 - STATUS_WRITE_TRIES
    assert ("patch_status", "Experiment") not in api.writes
    assert api.objects[key]["status"]["phase"] == "Pending" and events == []


def test_a_tick_for_a_deleted_experiment_writes_nothing() -> None:
    """kopf may tick once more after the object is gone. Kubernetes API: the in-memory fake."""
    api, events = FakeApi(), list[tuple[str, ...]]()
    body = _body("sarl-grpo-math")
    body["status"] = _reconcile(body, api, events)["status"]
    _running(api, "sarl-grpo-math")
    assert _tick(body, api, events) == {}
    assert ("patch_status", "Experiment") not in api.writes


@pytest.mark.parametrize(
    ("case", "kind", "install"),
    [
        ("sarl-grpo-math", "PyTorchJob", "Kubeflow Training Operator v1.7 or later"),
        ("sarl-grpo-judge", "InferenceService", "KServe v0.17 or later"),
    ],
)
def test_missing_operator_fails_once_naming_what_to_install(
    case: str, kind: str, install: str
) -> None:
    """Finding: the dynamic client's ResourceNotFoundError escaped and kopf retried forever."""
    api, events = FakeApi(missing_kinds=frozenset({kind})), list[tuple[str, ...]]()
    body = _body(case)
    patch: dict[str, Any] = {}
    with pytest.raises(kopf.PermanentError, match=install):
        experiment_handlers.reconcile(
            body, patch, api, settings=SETTINGS,
            post_event=lambda _obj, *event: events.append(event),
            tracker_factory=lambda _uri: FakeTracker(),
        )  # fmt: skip
    assert patch["status"]["phase"] == "Failed"
    ready = _conditions(patch)["Ready"]
    assert ready["reason"] == f"{kind}Unavailable" and install in ready["message"]
    assert [e for e in events if e[1] == "PhaseFailed"] == [
        ("Warning", "PhaseFailed", "phase None -> Failed")
    ]


def test_only_warnings_of_the_log_become_events_and_explicit_events_still_post() -> None:
    """kopf 1.45 ``_core/engines/posting.py``: ``K8sPoster.filter`` posts a log record when
    ``record.levelno >= settings.posting.level``; ``event()`` enqueues without that check."""
    import inspect
    import logging

    from kopf._core.engines import posting

    settings = kopf.OperatorSettings()
    assert settings.posting.level == logging.INFO  # kopf's default: every INFO line is an Event
    handlers.post_only_warnings_as_events(settings=settings)
    assert settings.posting.level == logging.WARNING
    assert "settings.posting.level" in inspect.getsource(posting.K8sPoster.filter)
    assert "posting.level" not in inspect.getsource(posting.event)


@pytest.mark.parametrize(
    ("phase", "reads"),
    [("Queued", False), ("Pending", True), ("Running", True), ("Succeeded", True), (None, True)],
)
def test_a_queued_experiment_is_not_polled_in_mlflow(phase: str | None, reads: bool) -> None:
    assert experiment_handlers.reads_progress({"phase": phase} if phase else {}) is reads
