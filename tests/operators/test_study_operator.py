"""The whole operator on Studies: ``kopf run -A --standalone -m sarl_operator.handlers`` as a
subprocess, against an in-memory Kubernetes API server and a real MLflow server.

No real Kubernetes API server can run here, so the operator talks (over real HTTP, through kopf
and the kubernetes client) to kmock's emulator via :mod:`tests.support.kube_server`, with the
``studies`` resource declared (:data:`STUDIES`). The emulator stores objects, serves discovery,
watches and merge patches, but has no admission, no schema validation, **no garbage
collector** and no controllers: these tests assert the owner references that make deletion
cascade (checked on a real cluster by ``tests/e2e/test_study.py``) and play the Training
Operator by writing PyTorchJob and Job statuses themselves. Each Study's Experiments are run by
the operator's own Experiment handlers (ConfigMap, PyTorchJob, MLflow run), so a run finishes
when its PyTorchJob is marked Succeeded. MLflow is the real server (``mlflow_server``); the
status timers run every second (``SARL_STATUS_INTERVAL_S=1``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kmock")
from kubernetes import dynamic

from tests.operators.operator_process import (
    Operator,
    client_for,
    condition,
    create,
    merge,
    running_operator,
    wait_for,
)
from tests.operators.study_cases import small_doc
from tests.support.kube_server import (
    CONFIGMAPS,
    EVENTS,
    EXPERIMENTS,
    ISVCS,
    JOBS,
    PYTORCHJOBS,
    SARL_RESOURCES,
    KubeServer,
    Resource,
    kube_server,
)

STUDIES = Resource("sarl.dev", "v1alpha1", "studies", "Study", subresources=("status",))
NAMESPACE = "team-s"
SUCCEEDED = {"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    with kube_server((*SARL_RESOURCES, STUDIES)) as ks:
        yield ks


@pytest.fixture(scope="module")
def operator(
    server: KubeServer, mlflow_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    env = {
        "SARL_MLFLOW_TRACKING_URI": mlflow_server.url,
        "SARL_MLFLOW_UI_URL": "https://mlflow.example.com",
        "SARL_STATUS_INTERVAL_S": "1",
        "SARL_TRAINER_IMAGE": "ghcr.io/sarl-dev/sarl-verl:test",
        "SARL_S3_BUCKET": "sarl",
    }
    with running_operator(server, NAMESPACE, tmp_path_factory.mktemp("study-operator"), env) as op:
        yield op


@pytest.fixture(scope="module")
def kube(server: KubeServer, tmp_path_factory: pytest.TempPathFactory) -> dynamic.DynamicClient:
    return client_for(server, NAMESPACE, tmp_path_factory)


def _resource(kube: dynamic.DynamicClient, api_version: str, kind: str) -> Any:
    return kube.resources.get(api_version=api_version, kind=kind)


def _create(kube: dynamic.DynamicClient, doc: dict[str, Any]) -> dict[str, Any]:
    return create(kube, NAMESPACE, "Study", doc)


def _merge(kube: dynamic.DynamicClient, api_version: str, kind: str, name: str, body: Any) -> None:
    merge(kube, NAMESPACE, api_version, kind, name, body)


def _status(server: KubeServer, name: str) -> dict[str, Any]:
    return dict(server.objects(STUDIES, NAMESPACE).get(name, {}).get("status") or {})


def _condition(server: KubeServer, name: str, type_: str) -> dict[str, Any]:
    return condition(_status(server, name), type_) or {}


def _runs(server: KubeServer, study: str) -> dict[str, dict[str, Any]]:
    """The Experiments labelled with ``study``, by name."""
    return {
        name: obj
        for name, obj in server.objects(EXPERIMENTS, NAMESPACE).items()
        if (obj["metadata"].get("labels") or {}).get("sarl.dev/study") == study
    }


def _events(server: KubeServer, name: str, kind: str = "Study") -> list[str]:
    """Messages of the Events about ``kind`` ``name``, oldest first."""
    events = [
        e
        for e in server.objects(EVENTS, NAMESPACE).values()
        if (e.get("involvedObject") or {}).get("name") == name
        and (e.get("involvedObject") or {}).get("kind") == kind
    ]
    events.sort(key=lambda e: int(e["metadata"].get("resourceVersion") or 0))
    return [f"{e.get('reason')}: {e.get('message')}" for e in events]


def _counts(server: KubeServer, name: str) -> tuple[int, ...]:
    status = _status(server, name)
    return tuple(status.get(k, -1) for k in ("total", "pending", "running", "succeeded", "failed"))


def _finish_training(server: KubeServer, kube: dynamic.DynamicClient, run: str) -> None:
    """Play the Training Operator: the run's PyTorchJob (made by the Experiment handlers)
    Succeeded; the Experiment's own timer then reports phase Succeeded."""
    wait_for(f"PyTorchJob {run}", lambda: server.objects(PYTORCHJOBS, NAMESPACE).get(run))
    _merge(kube, "kubeflow.org/v1", "PyTorchJob", run, SUCCEEDED)


def test_fan_out_is_owned_labelled_and_nested_under_the_parent_run(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient, mlflow_server: Any
) -> None:
    """2 arms x 2 seeds -> 4 Experiments (the Kubernetes API server is an in-memory emulation)."""
    from mlflow import MlflowClient

    uid = _create(kube, small_doc("fan"))["metadata"]["uid"]
    runs = wait_for(
        "4 Experiments", lambda: len(_runs(server, "fan")) == 4 and _runs(server, "fan")
    )
    parent = wait_for("the parent run", lambda: _status(server, "fan").get("mlflowParentRunId"))
    assert sorted(runs) == ["fan-high-s0", "fan-high-s1", "fan-low-s0", "fan-low-s1"]
    for name, obj in runs.items():
        meta = obj["metadata"]
        refs = [
            (r["kind"], r["name"], r["uid"], r["controller"], r["blockOwnerDeletion"])
            for r in meta["ownerReferences"]
        ]
        assert refs == [("Study", "fan", uid, True, True)]
        arm, seed = meta["labels"]["sarl.dev/arm"], meta["labels"]["sarl.dev/seed"]
        assert name == f"fan-{arm}-s{seed}"
        tags = obj["spec"]["tracking"]["tags"]
        assert tags == {
            "mlflow.runColor": {"low": "#0072B2", "high": "#E69F00"}[arm],  # issue 40 item 4
            "sarl.study": "fan",
            "arm": arm,
            "seed": seed,
            "sarl.role": "arm",
            "mlflow.parentRunId": parent,
        }
    config_refs = server.objects(CONFIGMAPS, NAMESPACE)["fan-config"]["metadata"]["ownerReferences"]
    assert [(r["kind"], r["uid"]) for r in config_refs] == [("Study", uid)]

    mlflow = MlflowClient(mlflow_server.url)
    parent_run = mlflow.get_run(parent)
    assert parent_run.data.tags["sarl.role"] == "study"
    assert parent_run.data.tags["sarl.study"] == "fan"
    assert parent_run.data.tags["mlflow.runColor"] == "#999999"  # grey: no arm's colour
    assert parent_run.data.tags["sarl.dev/experiment-uid"] == uid
    status = _status(server, "fan")
    eid = parent_run.info.experiment_id
    assert status["mlflowRunUrl"] == (
        f"https://mlflow.example.com/#/experiments/{eid}/runs/{parent}?workflowType=machine_learning"
    )
    assert _counts(server, "fan") == (4, 4, 0, 0, 0) and status["phase"] == "Pending"
    # The Experiment handlers create each run's MLflow run nested under the parent.
    child_run = wait_for(
        "the first run's MLflow run",
        lambda: (server.objects(EXPERIMENTS, NAMESPACE)["fan-low-s0"].get("status") or {}).get(
            "mlflowRunId"
        ),
    )
    nested = mlflow.get_run(child_run)
    assert nested.data.tags["mlflow.parentRunId"] == parent
    assert nested.info.experiment_id == eid and nested.data.tags["arm"] == "low"


def _log_study_like_the_init_container(
    server: KubeServer, job: dict[str, Any], tracking_uri: str, tmp_path: Path
) -> None:
    """Run the report Job's init container command here, on the ConfigMap it mounts."""
    (init,) = job["spec"]["template"]["spec"]["initContainers"]
    env = {e["name"]: e.get("value", "") for e in init["env"]}
    study = job["metadata"]["labels"]["sarl.dev/study"]
    config = server.objects(CONFIGMAPS, NAMESPACE)[f"{study}-config"]
    local = tmp_path / "study.yaml"
    local.write_text(config["data"]["study.yaml"])
    args = [a.replace("$(MLFLOW_RUN_ID)", env["MLFLOW_RUN_ID"]) for a in init["args"]]
    args[args.index("--local-file") + 1] = str(local)
    command = [sys.executable, "-m", *init["command"], *args]
    assert init["command"][0] == "mlflow"
    subprocess.run(
        command, env={**os.environ, "MLFLOW_TRACKING_URI": tracking_uri}, check=True, timeout=120
    )


def test_parallelism_one_then_the_report_then_succeeded(
    operator: Operator,
    server: KubeServer,
    kube: dynamic.DynamicClient,
    mlflow_server: Any,
    tmp_path: Path,
) -> None:
    """With parallelism 1, the second run starts only once the first Succeeded; the report Job
    comes once both finished, and what it logs lets ``sarl study report seq`` find the Study
    (the Kubernetes API server is an in-memory emulation; the test plays the Training Operator
    and the Job controller, and runs the Job's init container command itself)."""
    from sarl.study.history import find_parent_run, load_study_runs

    _create(kube, small_doc("seq", seeds=1, parallelism=1))
    wait_for("the first Experiment", lambda: "seq-low-s0" in _runs(server, "seq"))
    wait_for("counts (2, 2, 0, 0, 0)", lambda: _counts(server, "seq") == (2, 2, 0, 0, 0))
    time.sleep(3)  # three timer intervals: a second run would have been created by now
    assert list(_runs(server, "seq")) == ["seq-low-s0"]
    assert _counts(server, "seq") == (2, 2, 0, 0, 0)

    _finish_training(server, kube, "seq-low-s0")
    wait_for("the second Experiment", lambda: "seq-high-s0" in _runs(server, "seq"))
    wait_for("succeeded 1", lambda: _counts(server, "seq") == (2, 1, 0, 1, 0))
    assert "seq-report" not in server.objects(JOBS, NAMESPACE)

    _finish_training(server, kube, "seq-high-s0")
    report = wait_for("the report Job", lambda: server.objects(JOBS, NAMESPACE).get("seq-report"))
    assert report["metadata"]["ownerReferences"][0]["kind"] == "Study"
    container = report["spec"]["template"]["spec"]["containers"][0]
    # The parent run by id, never found by the Study's name (issue 36: it may be another team's).
    assert container["args"][:3] == ["study", "report", "$(MLFLOW_RUN_ID)"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MLFLOW_RUN_ID"] == _status(server, "seq")["mlflowParentRunId"]
    assert _counts(server, "seq") == (2, 0, 0, 2, 0)
    assert _status(server, "seq")["phase"] == "Running"
    _log_study_like_the_init_container(server, report, mlflow_server.url, tmp_path)
    parent_id = find_parent_run(mlflow_server.url, "seq")
    assert parent_id == env["MLFLOW_RUN_ID"]
    document = load_study_runs(mlflow_server.url, parent_id)[0].document
    assert document is not None and document["metadata"]["name"] == "seq"

    complete = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    _merge(kube, "batch/v1", "Job", "seq-report", complete)
    wait_for("phase Succeeded", lambda: _status(server, "seq").get("phase") == "Succeeded")
    parent = _status(server, "seq")["mlflowParentRunId"]
    assert _status(server, "seq")["reportUri"] == f"runs:/{parent}/report/"
    assert _condition(server, "seq", "Reported")["status"] == "True"
    # kopf posts Events from a queue after the handler returns: the Event can trail the status.
    succeeded = "PhaseSucceeded: phase Running -> Succeeded"
    wait_for(succeeded, lambda: succeeded in _events(server, "seq"))
    events = _events(server, "seq")
    assert events.count("Created: created Experiment seq-low-s0") == 1
    assert events.count("Created: created Job seq-report") == 1


def test_restart_reuses_the_parent_run_and_creates_nothing_twice(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient, mlflow_server: Any
) -> None:
    """The Kubernetes API server is an in-memory emulation; the operator process restarts."""
    from mlflow import MlflowClient

    uid = _create(kube, small_doc("again", parallelism=2))["metadata"]["uid"]
    wait_for("2 Experiments", lambda: len(_runs(server, "again")) == 2)
    parent = wait_for("the parent run", lambda: _status(server, "again").get("mlflowParentRunId"))
    wait_for("both Created events", lambda: len(_created_experiments(server, "again")) == 2)
    config_version = server.objects(CONFIGMAPS, NAMESPACE)["again-config"]["metadata"]
    operator.stop()
    operator.start()

    def resumed() -> bool:
        cm = server.objects(CONFIGMAPS, NAMESPACE)["again-config"]["metadata"]
        return int(cm["resourceVersion"]) > int(config_version["resourceVersion"])

    wait_for(f"the resumed reconcile\n{operator.log()}", resumed)
    time.sleep(3)  # three timer intervals of the restarted operator
    assert sorted(_runs(server, "again")) == ["again-high-s0", "again-low-s0"]
    assert _status(server, "again")["mlflowParentRunId"] == parent
    mlflow = MlflowClient(mlflow_server.url)
    experiment = mlflow.get_experiment_by_name("again")
    assert experiment is not None
    parents = mlflow.search_runs(
        experiment_ids=[experiment.experiment_id],
        filter_string=f"tags.`sarl.dev/experiment-uid` = '{uid}'",
    )
    assert len(parents) == 1
    assert len(_created_experiments(server, "again")) == 2


def _created_experiments(server: KubeServer, study: str) -> list[str]:
    return [e for e in _events(server, study) if e.startswith("Created: created Experiment")]


def test_invalid_study_fails_once_naming_the_field(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient
) -> None:
    """The Kubernetes API server is an in-memory emulation (no CRD schema validation: the
    operator's own validation is what refuses the Study)."""
    doc = small_doc("invalid")
    doc["spec"]["arms"][0]["override"] = {"algorithm": {"learning_rate": -1}}
    _create(kube, doc)
    wait_for("phase Failed", lambda: _status(server, "invalid").get("phase") == "Failed")
    ready = _condition(server, "invalid", "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert "spec.arms[0].override.algorithm.learning_rate" in ready["message"]
    # kopf posts events apart from the status patch: wait until it is there, then give a retry
    # loop three timer intervals to post more.
    wait_for(
        "the PhaseFailed event",
        lambda: "PhaseFailed" in [e.split(":")[0] for e in _events(server, "invalid")],
    )
    time.sleep(3)
    events = _events(server, "invalid")
    assert [e.split(":")[0] for e in events].count("PhaseFailed") == 1, events
    assert _runs(server, "invalid") == {}
    assert "invalid-config" not in server.objects(CONFIGMAPS, NAMESPACE)


def test_deleting_the_study_leaves_its_children_to_the_garbage_collector(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient
) -> None:
    """Everything the Study creates is controlled by it (blockOwnerDeletion), so a real API
    server's garbage collector deletes it with the Study. The in-memory emulation here has no
    garbage collector: the test checks the owner references and that the deletion is accepted
    (kopf holds a finalizer on the Study for its timer and releases it once the timer stopped,
    which takes up to kopf's 60 s cancellation polling when the timer was running);
    tests/e2e/test_study.py checks the cascade on a cluster."""
    uid = _create(kube, small_doc("gone", seeds=1))["metadata"]["uid"]
    wait_for("2 Experiments", lambda: len(_runs(server, "gone")) == 2)
    children = [
        *_runs(server, "gone").values(),
        server.objects(CONFIGMAPS, NAMESPACE)["gone-config"],
    ]
    for child in children:
        (ref,) = child["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"], ref["blockOwnerDeletion"]) == (
            "Study",
            uid,
            True,
            True,
        )
    _resource(kube, "sarl.dev/v1alpha1", "Study").delete(name="gone", namespace=NAMESPACE)

    def deleting_or_gone() -> bool:
        study = server.objects(STUDIES, NAMESPACE).get("gone")
        return study is None or bool(study["metadata"].get("deletionTimestamp"))

    wait_for("the Study to be deleted", deleting_or_gone)


@pytest.fixture
def kserve(server: KubeServer) -> Iterator[None]:
    """Stand-in for KServe's controller (none can run here): every InferenceService reports
    ``Ready`` a moment after it is created."""
    import threading

    stop = threading.Event()

    def mark_ready() -> None:
        while not stop.wait(0.2):
            for isvc in server.objects(ISVCS, NAMESPACE).values():
                if not (isvc.get("status") or {}).get("conditions"):
                    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
                    server.put(ISVCS, NAMESPACE, {**isvc, "status": ready})

    thread = threading.Thread(target=mark_ready, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=5)


def _embedding_services(server: KubeServer, study: str) -> dict[str, dict[str, Any]]:
    return {
        name: isvc
        for name, isvc in server.objects(ISVCS, NAMESPACE).items()
        if isvc["metadata"]["labels"].get("sarl.dev/study") == study or name.startswith(f"{study}-")
    }


def test_runs_with_the_same_embedder_share_one_service_released_after_the_last(
    operator: Operator, server: KubeServer, kube: dynamic.DynamicClient, kserve: None
) -> None:
    """3 runs (parallelism 2) whose embedder the operator serves: one embedding ISVC, owned by
    the Study, which every run calls by URL; kept while a run is unfinished, deleted after the
    last one ends."""
    doc = small_doc("share", seeds=1, parallelism=2)
    doc["spec"]["base"]["reward"] = [
        {
            "name": "structure",
            "settings": {
                "clustering": "kmeans",
                "embedder": {"kind": "openai", "model": "Qwen/Qwen3-Embedding-0.6B", "url": ""},
            },
        }
    ]
    doc["spec"]["arms"].append({"name": "mid", "override": {"algorithm": {"learning_rate": 5e-5}}})
    uid = _create(kube, doc)["metadata"]["uid"]
    runs = ("share-low-s0", "share-high-s0", "share-mid-s0")
    _finish_training(server, kube, runs[0])
    [(name, isvc)] = _embedding_services(server, "share").items()
    assert name.startswith("share-emb-") and len(name) == len("share-emb-") + 8
    assert [(r["kind"], r["uid"]) for r in isvc["metadata"]["ownerReferences"]] == [("Study", uid)]
    _finish_training(server, kube, runs[1])
    _finish_training(server, kube, runs[2])
    url = f"http://{name}-predictor.{NAMESPACE}.svc.cluster.local/openai"
    for run in runs:
        embedder = _runs(server, "share")[run]["spec"]["reward"][0]["settings"]["embedder"]
        assert (embedder["url"], embedder["model"]) == (url, "embedding")
    wait_for("the shared ISVC deleted", lambda: not _embedding_services(server, "share"))
    released = f"Released: deleted InferenceService {name}"

    def released_events() -> list[str] | None:
        events = _events(server, "share")
        return events if released in events else None

    events = wait_for("the Released event", released_events)
    assert sum(e.startswith("Created: created InferenceService") for e in events) == 1
    for run in runs:
        assert not any("InferenceService" in e for e in _events(server, run, "Experiment"))
    # No run served its own model, and none was re-created after the release.
    time.sleep(2)
    assert not any(n.startswith("share") for n in server.objects(ISVCS, NAMESPACE))
    inference = _condition(server, "share", "InferenceReady")
    assert (inference["status"], inference["reason"]) == ("False", "Released")
