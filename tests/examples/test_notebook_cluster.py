"""``examples/notebooks/03-cluster.ipynb`` runs top to bottom against a cluster with the sarl
operator: submit, watch until Running, read the training log, list, delete.

No Kubernetes cluster can run here, so the parts of one are stand-ins:

- the Kubernetes API server is kmock's in-memory emulation (:mod:`tests.support.kube_server`: real
  HTTP, the Experiment and Study resources declared as the platform chart's CRDs do; no
  admission, no schema validation, no garbage collector, so the deleted Experiment's children
  stay behind here);
- the Kubeflow Training Operator and the kubelet are :class:`TrainingOperator` below: for each
  PyTorchJob it stores the pods upstream's controller would create (names, labels and the
  environment from :mod:`tests.jobs.pytorchjob_emulator`, which follows upstream v1.9.0),
  running and printing a few lines, and reports the job ``Running``;
- KServe's controller is :func:`tests.operators.test_operator.kserve_standin`: the default
  Experiment (a paper preset) has the operator serve its embedding model, and the stand-in marks
  that InferenceService Ready; no MLflow: the operator runs without a tracking server
  (``TrackingReady=False``), its MLflow runs are covered by ``tests/operators/test_operator.py``.

Real: the notebook, executed cell by cell in a Jupyter kernel (``tests/examples/notebooks.py``);
the sarl SDK in it (``sarl.Client()``, validation, the ``kubernetes`` client over HTTP); the sarl
operator, ``kopf run`` of ``sarl_operator.handlers`` in its own process, which validates the
Experiment, checks the namespace's S3 Secret, creates the ConfigMap and PyTorchJob and writes the
status the notebook watches. The notebook gets a kubeconfig for the in-memory server and short
poll intervals; everything else is its defaults (``examples/sarl-grpo-math.yaml``). A cell that
raises fails the test, e.g. the watch cell timing out if the operator never reports Running.
"""

from __future__ import annotations

import base64
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

pytest.importorskip("kmock")
pytest.importorskip("nbclient")
from kubernetes import client as k8s
from kubernetes import config

from tests.examples.notebooks import NOTEBOOKS, execute, outputs_text
from tests.jobs.pytorchjob_emulator import Replica, replica_envs
from tests.operators.operator_process import Operator
from tests.operators.test_operator import kserve_standin
from tests.sarl.cluster.study_server import WITH_STUDIES
from tests.support.kube_server import (
    CONFIGMAPS,
    EXPERIMENTS,
    PODS,
    PYTORCHJOBS,
    SECRETS,
    KubeServer,
    kube_server,
)

NAMESPACE: Final = "team-nb"
NAME: Final = "nb-grpo-math"
S3_SECRET: Final = "sarl-s3-credentials"  # the chart's default objectStore.credentials name
#: Generous for a busy 2-core machine; a cell waiting longer fails the test.
CELL_TIMEOUT_S: Final = 300


class TrainingOperator:
    """Stand-in for the Kubeflow Training Operator (and the kubelet): every PyTorchJob in
    ``namespace`` gets its pods, stored ``Running`` with a log, then the job's conditions
    ``Created`` and ``Running`` (upstream's reasons), patched over HTTP as the controller does.
    What it could not do is kept in ``errors`` (a job upstream's webhook would refuse, say)."""

    def __init__(self, server: KubeServer, namespace: str, kubeconfig: Path) -> None:
        self.server, self.namespace = server, namespace
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.errors: list[Exception] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="training-operator", daemon=True)

    def __enter__(self) -> TrainingOperator:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.2) and not self.errors:
            try:
                for job in self.server.objects(PYTORCHJOBS, self.namespace).values():
                    if not (job.get("status") or {}).get("conditions"):
                        self._start(job)
            except Exception as e:  # reported by the test, which would otherwise just time out
                self.errors.append(e)

    def _start(self, job: dict[str, Any]) -> None:
        secrets = {
            name: {k: base64.b64decode(v).decode() for k, v in (s.get("data") or {}).items()}
            for name, s in self.server.objects(SECRETS, self.namespace).items()
        }
        configmaps = {
            name: dict(c.get("data") or {})
            for name, c in self.server.objects(CONFIGMAPS, self.namespace).items()
        }
        for replica in replica_envs(job, secrets=secrets, configmaps=configmaps):
            self.server.put(PODS, self.namespace, _pod(job, replica))
            self.server.set_log(self.namespace, replica.name, _log(replica))
        name = job["metadata"]["name"]
        conditions = [
            _condition("Created", "PyTorchJobCreated", f"PyTorchJob {name} is created."),
            _condition(
                "Running", "PyTorchJobRunning", f"PyTorchJob {self.namespace}/{name} is running."
            ),
        ]
        k8s.CustomObjectsApi(self.api).patch_namespaced_custom_object(
            "kubeflow.org",
            "v1",
            self.namespace,
            "pytorchjobs",
            name,
            {"status": {"conditions": conditions}},
        )


def _condition(type_: str, reason: str, message: str) -> dict[str, str]:
    return {"type": type_, "status": "True", "reason": reason, "message": message}


def _pod(job: dict[str, Any], replica: Replica) -> dict[str, Any]:
    meta = job["metadata"]
    owner = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": replica.name,
            "namespace": meta["namespace"],
            "labels": replica.labels,
            "ownerReferences": [owner],
        },
        "spec": {"containers": [{"name": "pytorch", "command": list(replica.command)}]},
        "status": {"phase": "Running"},
    }


def _log(replica: Replica) -> str:
    """What the stand-in pod prints: its command and place in the job, then two steps."""
    env = replica.env
    return (
        f"$ {' '.join(replica.command)}\n"
        f"stand-in pod {replica.name}: RANK={env.get('RANK')} WORLD_SIZE={env.get('WORLD_SIZE')} "
        f"PET_NNODES={env.get('PET_NNODES')} (nothing runs here)\n"
        "step 1 reward 0.1250\n"
        "step 2 reward 0.1875\n"
    )


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    with kube_server(WITH_STUDIES) as ks:
        yield ks


@pytest.fixture(scope="module")
def kubeconfig(server: KubeServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's kubeconfig: the in-memory server, context namespace ``team-nb``."""
    return server.kubeconfig(tmp_path_factory.mktemp("user") / "kubeconfig", NAMESPACE)


@pytest.fixture(scope="module")
def operator(server: KubeServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Operator]:
    """The sarl operator with the platform's settings the notebook meets (trainer image, S3
    bucket and credentials Secret name), no MLflow, and the status refreshed every second."""
    tmp = tmp_path_factory.mktemp("operator")
    env = {
        **os.environ,
        "KUBECONFIG": str(server.kubeconfig(tmp / "kubeconfig", NAMESPACE)),
        "SARL_STATUS_INTERVAL_S": "1",
        "SARL_RETRY_DELAY_S": "1",
        "SARL_TRAINER_IMAGE": "ghcr.io/sarl-dev/sarl-verl:test",
        "SARL_S3_BUCKET": "sarl",
        "SARL_S3_CREDENTIALS_SECRET": S3_SECRET,
    }
    env.pop("SARL_MLFLOW_TRACKING_URI", None)
    op = Operator(env=env, log_path=tmp / "operator.log")
    op.start()
    yield op
    op.stop()


@pytest.fixture(scope="module")
def namespace_setup(server: KubeServer) -> None:
    """The per-namespace prerequisite the notebook names: the S3 credentials Secret."""
    data = {
        k: base64.b64encode(b"test").decode()
        for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    }
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": S3_SECRET, "namespace": NAMESPACE},
        "data": data,
    }
    server.put(SECRETS, NAMESPACE, secret)


@pytest.fixture(scope="module")
def executed(
    server: KubeServer, kubeconfig: Path, operator: Operator, namespace_setup: None
) -> Any:
    """The notebook, run with the in-memory cluster's kubeconfig, while the stand-in Training
    Operator runs; the executed notebook."""
    parameters = {
        "kubeconfig": str(kubeconfig),
        "name": NAME,
        "running_timeout_s": 180.0,
        "poll_interval_s": 0.5,
        "pod_timeout_s": 60.0,
        "follow_s": 10.0,
        "delete_timeout_s": 60.0,
    }
    with (
        kserve_standin(server, NAMESPACE),
        TrainingOperator(server, NAMESPACE, kubeconfig) as training_operator,
    ):
        try:
            return execute("03-cluster.ipynb", parameters, cwd=NOTEBOOKS, timeout_s=CELL_TIMEOUT_S)
        except Exception as e:
            raise AssertionError(
                f"{e}\n--- stand-in Training Operator errors ---\n{training_operator.errors}"
                f"\n--- sarl operator log ---\n{operator.log()}"
            ) from e


def test_the_experiment_is_validated_and_submitted(executed: Any) -> None:
    built = outputs_text(executed, "build")
    assert f"Experiment {NAME}: preset paper-grpo-math, model Qwen/Qwen3-4B" in built
    assert "1 node(s) x 8 GPU(s), backend verl" in built
    assert f"submitted experiment {NAME} to namespace {NAMESPACE}" in outputs_text(
        executed, "submit"
    )


def test_the_watch_shows_the_operators_conditions_until_running(executed: Any) -> None:
    watched = outputs_text(executed, "watch")
    for line in [
        "  Ready=True SpecValid",
        f"  StorageReady=True SecretFound: Secret '{S3_SECRET}'",
        "  ChildrenReady=True Applied",
        f"  Running=True PyTorchJobRunning: PyTorchJob {NAMESPACE}/{NAME} is running.",
        "phase Running",
        f"experiment {NAME} is Running",
    ]:
        assert line in watched, watched


def test_the_log_is_the_master_pod_of_the_operators_job(executed: Any) -> None:
    logged = outputs_text(executed, "logs").splitlines()
    # The command of the operator's PyTorchJob (the verl trainer on the mounted ConfigMap).
    assert logged[0].startswith("$ python -m sarl_jobs.verl_trainer "), logged
    assert "/etc/sarl/experiment.yaml" in logged[0]
    assert f"stand-in pod {NAME}-master-0: RANK=0 WORLD_SIZE=8 PET_NNODES=1" in logged[1]
    assert logged[-1] == "step 2 reward 0.1875"


def test_the_list_shows_the_running_experiment(executed: Any) -> None:
    listed = outputs_text(executed, "list")
    assert re.search(rf"{NAME}\s+Running", listed), listed  # the DataFrame's text/plain row


def test_the_experiment_is_deleted_and_gone(executed: Any, server: KubeServer) -> None:
    deleted = outputs_text(executed, "delete")
    assert f"experiment {NAME} deleted from namespace {NAMESPACE}" in deleted
    assert "Experiments left: none" in deleted
    assert server.objects(EXPERIMENTS, NAMESPACE) == {}


def test_the_operator_made_the_job_the_log_came_from(executed: Any, server: KubeServer) -> None:
    """The PyTorchJob is the operator's (owned by the notebook's Experiment), not the test's."""
    job = server.objects(PYTORCHJOBS, NAMESPACE)[NAME]  # left behind: no garbage collector here
    (owner,) = job["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Experiment", NAME, True)
