"""The whole operator: ``kopf run -A --standalone -m sarl_operator.handlers`` as a subprocess,
against an in-memory Kubernetes API server and a real MLflow server.

No real Kubernetes API server can run here, so the operator talks (over real HTTP, through kopf
and the kubernetes client) to kmock's emulator via :mod:`tests.support.kube_server`: it stores
objects, serves discovery, watches and merge patches, but has no admission, no schema validation
and **no garbage collector** and no controllers. So these tests assert the owner references that
make deletion cascade, and play the Training Operator by writing the PyTorchJob's status
themselves; deletion cascading is checked by the ``e2e`` tests on a real cluster only. MLflow is
the real server (``mlflow_server`` fixture); the trainer's metrics are logged with mlflow's
client, as the trainer does. The status timer runs every second (``SARL_STATUS_INTERVAL_S=1``).
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("kmock")
from kubernetes import dynamic

from sarl_operator.reconcile import TRACKING_DOWN
from tests.operators.cases import example_doc
from tests.operators.operator_process import (
    Operator,
    client_for,
    condition,
    create,
    merge,
    running_operator,
    wait_for,
)
from tests.support.kube_server import (
    CONFIGMAPS,
    EVENTS,
    EXPERIMENTS,
    ISVCS,
    JOBS,
    PYTORCHJOBS,
    KubeServer,
    kube_server,
)
from tests.support.mlflow_server import free_port

NAMESPACE = "team-a"


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    with kube_server() as ks:
        yield ks


@pytest.fixture(scope="module")
def operator(
    server: KubeServer, mlflow_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    env = {
        "SARL_MLFLOW_TRACKING_URI": mlflow_server.url,
        "SARL_MLFLOW_UI_URL": "https://mlflow.example.com",
        "SARL_STATUS_INTERVAL_S": "1",
        "SARL_RETRY_DELAY_S": "1",
        "SARL_TRAINER_IMAGE": "ghcr.io/sarl-dev/sarl-verl:test",
        "SARL_S3_BUCKET": "sarl",
    }
    with running_operator(server, NAMESPACE, tmp_path_factory.mktemp("operator"), env) as op:
        yield op


@contextlib.contextmanager
def kserve_standin(server: KubeServer, namespace: str) -> Iterator[None]:
    """Stand-in for KServe's controller (none can run here): every InferenceService in
    ``namespace`` reports ``Ready`` a moment after it is created, so the operator's wait for its
    services ends."""
    stop = threading.Event()

    def mark_ready() -> None:
        while not stop.wait(0.2):
            for isvc in server.objects(ISVCS, namespace).values():
                if not (isvc.get("status") or {}).get("conditions"):
                    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
                    server.put(ISVCS, namespace, {**isvc, "status": ready})

    thread = threading.Thread(target=mark_ready, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)


@pytest.fixture(scope="module", autouse=True)
def kserve(server: KubeServer) -> Iterator[None]:
    """:func:`kserve_standin` for the tests' namespace."""
    with kserve_standin(server, NAMESPACE):
        yield


@pytest.fixture(scope="module")
def kube(server: KubeServer, tmp_path_factory: pytest.TempPathFactory) -> dynamic.DynamicClient:
    return client_for(server, NAMESPACE, tmp_path_factory)


def _resource(kube: dynamic.DynamicClient, api_version: str, kind: str) -> Any:
    return kube.resources.get(api_version=api_version, kind=kind)


def _doc(name: str) -> dict[str, Any]:
    """The example, renamed, with an embedder the operator serves (url empty -> an ISVC)."""
    doc = copy.deepcopy(example_doc())
    doc["metadata"] = {"name": name}
    doc["spec"]["reward"] = [
        {
            "name": "structure",
            "settings": {
                "clustering": "kmeans",
                "embedder": {"kind": "openai", "model": "Qwen/Qwen3-Embedding-0.6B", "url": ""},
            },
        }
    ]
    return doc


def _create(kube: dynamic.DynamicClient, doc: dict[str, Any]) -> dict[str, Any]:
    return create(kube, NAMESPACE, "Experiment", doc)


def _merge(kube: dynamic.DynamicClient, api_version: str, kind: str, name: str, body: Any) -> None:
    merge(kube, NAMESPACE, api_version, kind, name, body)


def _status(server: KubeServer, name: str) -> dict[str, Any]:
    return dict(server.objects(EXPERIMENTS, NAMESPACE).get(name, {}).get("status") or {})


def _condition(server: KubeServer, name: str, type_: str) -> dict[str, Any] | None:
    return condition(_status(server, name), type_)


def _events(server: KubeServer, name: str) -> list[str]:
    """Reasons of the Events about Experiment ``name``, oldest first."""
    events = server.objects(EVENTS, NAMESPACE).values()
    ours = [e for e in events if (e.get("involvedObject") or {}).get("name") == name]
    ours.sort(key=lambda e: int(e["metadata"].get("resourceVersion") or 0))
    return [str(e.get("reason")) for e in ours]


def _master_env(job: dict[str, Any]) -> dict[str, str]:
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    return {e["name"]: e.get("value", "") for e in pod["containers"][0]["env"]}


def _reconciled(server: KubeServer, name: str) -> dict[str, Any] | None:
    """The PyTorchJob once the operator created it and recorded the run in the status."""
    job = server.objects(PYTORCHJOBS, NAMESPACE).get(name)
    return job if job and _status(server, name).get("mlflowRunId") else None


def test_children_are_owned_and_the_job_logs_into_the_experiments_run(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient, mlflow_server: Any
) -> None:
    from mlflow import MlflowClient

    uid = _create(kube, _doc("owned"))["metadata"]["uid"]
    job = wait_for("the PyTorchJob and run id", lambda: _reconciled(server, "owned"))
    children = [
        server.objects(CONFIGMAPS, NAMESPACE)["owned-config"],
        server.objects(ISVCS, NAMESPACE)["owned-embedding"],
        job,
    ]
    for child in children:
        refs = child["metadata"]["ownerReferences"]
        assert [(r["kind"], r["name"], r["uid"], r["controller"]) for r in refs] == [
            ("Experiment", "owned", uid, True)
        ]
    status = _status(server, "owned")
    run_id = status["mlflowRunId"]
    env = _master_env(job)
    assert env["MLFLOW_RUN_ID"] == run_id and env["MLFLOW_TRACKING_URI"] == mlflow_server.url
    run = MlflowClient(mlflow_server.url).get_run(run_id)
    assert run.data.tags["sarl.dev/experiment-uid"] == uid and run.info.run_name == "owned"
    eid = run.info.experiment_id
    assert status["mlflowRunUrl"] == (
        f"https://mlflow.example.com/#/experiments/{eid}/runs/{run_id}?workflowType=machine_learning"
    )
    assert status["phase"] == "Pending"
    assert _condition(server, "owned", "TrackingReady")["status"] == "True"  # type: ignore[index]


def test_status_follows_the_job_and_the_runs_metrics(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient, mlflow_server: Any
) -> None:
    from mlflow import MlflowClient

    _create(kube, _doc("progress"))
    wait_for("the PyTorchJob", lambda: _reconciled(server, "progress"))
    running = {"status": {"conditions": [{"type": "Running", "status": "True"}]}}
    _merge(kube, "kubeflow.org/v1", "PyTorchJob", "progress", running)
    wait_for("phase Running", lambda: _status(server, "progress").get("phase") == "Running")
    # kopf posts Events from a queue after the handler returns: the Event can trail the status.
    wait_for("the PhaseRunning event", lambda: "PhaseRunning" in _events(server, "progress"))

    run_id = _status(server, "progress")["mlflowRunId"]
    mlflow = MlflowClient(mlflow_server.url)
    for step, reward in [(1, 0.25), (2, 0.5)]:
        mlflow.log_metric(run_id, "reward/mean", reward, step=step)
    wait_for("lastStep 2", lambda: _status(server, "progress").get("lastStep") == 2)
    assert _status(server, "progress")["lastReward"] == 0.5

    done = {"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}
    _merge(kube, "kubeflow.org/v1", "PyTorchJob", "progress", done)
    evaluation = wait_for(
        "the eval Job", lambda: server.objects(JOBS, NAMESPACE).get("progress-eval")
    )
    assert evaluation["metadata"]["ownerReferences"][0]["name"] == "progress"
    pod = evaluation["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["MLFLOW_RUN_ID"] == run_id and env["SARL_DATA_URI"] == "s3://sarl/data"
    complete = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    _merge(kube, "batch/v1", "Job", "progress-eval", complete)
    wait_for(
        "Evaluated=True",
        lambda: (_condition(server, "progress", "Evaluated") or {}).get("status") == "True",
    )
    assert _status(server, "progress")["phase"] == "Succeeded"  # phase stays the training's


def test_invalid_spec_fails_once_naming_the_field(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient
) -> None:
    doc = _doc("invalid")
    doc["spec"]["algorithm"] = {"learning_rate": -1}
    _create(kube, doc)
    wait_for("phase Failed", lambda: _status(server, "invalid").get("phase") == "Failed")
    ready = _condition(server, "invalid", "Ready")
    assert ready is not None and ready["reason"] == "InvalidSpec"
    assert "spec.algorithm.learning_rate" in ready["message"]
    # kopf posts events apart from the status patch: wait until both are there, then give a
    # retry loop three timer intervals to post more.
    wait_for(
        "the events",
        lambda: {"PhaseFailed", "InvalidSpec"} <= set(_events(server, "invalid")),
    )
    time.sleep(3)
    events = _events(server, "invalid")
    assert events.count("PhaseFailed") == 1 and events.count("InvalidSpec") == 1, events
    assert "invalid" not in server.objects(PYTORCHJOBS, NAMESPACE)
    assert "invalid-config" not in server.objects(CONFIGMAPS, NAMESPACE)


def test_spec_update_patches_the_children(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient
) -> None:
    _create(kube, _doc("update"))
    job = wait_for("the PyTorchJob", lambda: _reconciled(server, "update"))
    _merge(kube, "sarl.dev/v1alpha1", "Experiment", "update", {"spec": {"resources": {"nodes": 2}}})

    def two_nodes() -> dict[str, Any] | None:
        found = server.objects(PYTORCHJOBS, NAMESPACE)["update"]
        return found if "Worker" in found["spec"]["pytorchReplicaSpecs"] else None

    updated = wait_for("a Worker replica", two_nodes)
    assert _master_env(updated)["MLFLOW_RUN_ID"] == _master_env(job)["MLFLOW_RUN_ID"]
    config_text = server.objects(CONFIGMAPS, NAMESPACE)["update-config"]["data"]["experiment.yaml"]
    assert "nodes: 2" in config_text


def test_restart_reuses_the_run_and_the_children(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient, mlflow_server: Any
) -> None:
    from mlflow import MlflowClient

    uid = _create(kube, _doc("restart"))["metadata"]["uid"]
    wait_for("the PyTorchJob", lambda: _reconciled(server, "restart"))
    wait_for("5 Created events", lambda: _events(server, "restart").count("Created") == 5)
    config_version = server.objects(CONFIGMAPS, NAMESPACE)["restart-config"]["metadata"]
    operator.stop()
    operator.start()

    def resumed() -> bool:
        cm = server.objects(CONFIGMAPS, NAMESPACE)["restart-config"]["metadata"]
        return int(cm["resourceVersion"]) > int(config_version["resourceVersion"])

    wait_for(f"the resumed reconcile\n{operator.log()}", resumed)
    mlflow = MlflowClient(mlflow_server.url)
    experiment = mlflow.get_experiment_by_name("restart")
    assert experiment is not None
    runs = mlflow.search_runs(
        experiment_ids=[experiment.experiment_id],
        filter_string=f"tags.`sarl.dev/experiment-uid` = '{uid}'",
    )
    assert len(runs) == 1
    # Two NetworkPolicies, ConfigMap, ISVC, PyTorchJob: each once.
    assert _events(server, "restart").count("Created") == 5


def test_mlflow_down_reports_tracking_and_creates_no_job(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient
) -> None:
    doc = _doc("nomlflow")
    doc["spec"]["tracking"] = {"mlflow_uri": f"http://127.0.0.1:{free_port()}"}
    _create(kube, doc)
    tracking = wait_for(
        "TrackingReady=False", lambda: _condition(server, "nomlflow", "TrackingReady")
    )
    # A fixed text, never the client's error (its message may carry what the URI answered).
    assert tracking["status"] == "False" and tracking["message"] == TRACKING_DOWN
    time.sleep(1.5)
    assert "nomlflow" not in server.objects(PYTORCHJOBS, NAMESPACE)
    assert _status(server, "nomlflow")["phase"] == "Pending"


def _embedding(server: KubeServer, name: str) -> dict[str, Any] | None:
    return server.objects(ISVCS, NAMESPACE).get(f"{name}-embedding")


def test_served_models_are_released_when_training_and_evaluation_end(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient
) -> None:
    """The embedding ISVC outlives training while the evaluation Job runs, is deleted once that
    ends (InferenceReady=False, Released), is not re-created by a reconcile (a spec update), and
    comes back when the job is gone and the run starts again."""
    _create(kube, _doc("release"))
    wait_for("the PyTorchJob", lambda: _reconciled(server, "release"))
    assert _embedding(server, "release") is not None
    done = {"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}
    _merge(kube, "kubeflow.org/v1", "PyTorchJob", "release", done)
    wait_for("the eval Job", lambda: server.objects(JOBS, NAMESPACE).get("release-eval"))
    time.sleep(2)  # two timer intervals: training alone ending releases nothing
    assert _embedding(server, "release") is not None
    complete = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    _merge(kube, "batch/v1", "Job", "release-eval", complete)
    wait_for("the ISVC deleted", lambda: _embedding(server, "release") is None)
    inference = wait_for(
        "InferenceReady Released",
        lambda: (
            (_condition(server, "release", "InferenceReady") or {}).get("reason") == "Released"
            and _condition(server, "release", "InferenceReady")
        ),
    )
    assert inference["status"] == "False" and "release-embedding" in inference["message"]
    wait_for("the Released event", lambda: "Released" in _events(server, "release"))

    # A spec update reconciles the finished run: every child but the released ISVC is applied.
    _merge(
        kube, "sarl.dev/v1alpha1", "Experiment", "release", {"spec": {"resources": {"nodes": 2}}}
    )
    wait_for(
        "the patched PyTorchJob",
        lambda: (
            "Worker"
            in server.objects(PYTORCHJOBS, NAMESPACE)["release"]["spec"]["pytorchReplicaSpecs"]
        ),
    )
    time.sleep(2)
    assert _embedding(server, "release") is None

    # The job deleted (to run again) and the run reconciled: the ISVC is served again, first.
    _resource(kube, "kubeflow.org/v1", "PyTorchJob").delete(name="release", namespace=NAMESPACE)
    _resource(kube, "batch/v1", "Job").delete(name="release-eval", namespace=NAMESPACE)
    _merge(
        kube, "sarl.dev/v1alpha1", "Experiment", "release", {"spec": {"resources": {"nodes": 1}}}
    )
    wait_for("the ISVC served again", lambda: _embedding(server, "release"))
    wait_for("the PyTorchJob again", lambda: server.objects(PYTORCHJOBS, NAMESPACE).get("release"))


def test_release_never_keeps_the_served_models(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient
) -> None:
    doc = _doc("keep")
    doc["spec"]["serving"] = {"release": "never"}
    _create(kube, doc)
    wait_for("the PyTorchJob", lambda: _reconciled(server, "keep"))
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True"}]}}
    _merge(kube, "kubeflow.org/v1", "PyTorchJob", "keep", failed)
    wait_for("phase Failed", lambda: _status(server, "keep").get("phase") == "Failed")
    time.sleep(3)  # three timer intervals: a release would have happened by now
    assert _embedding(server, "keep") is not None
    # Not "True": the timer and the handler write the condition list from their own snapshots.
    assert (_condition(server, "keep", "InferenceReady") or {}).get("reason") != "Released"
    assert "Released" not in _events(server, "keep")
