"""A 2-node CPU TRL job, as the operator builds it, trains, logs, checkpoints and resumes.

Real: the operator's builders (``configmap`` and ``pytorchjob`` of an Experiment with
``resources: {backend: trl, nodes: 2, gpus_per_node: 0}``), the trainer entrypoint
(``python -m sarl_jobs.trl_trainer /etc/sarl/experiment.yaml``, torchrun + DDP over gloo across
the two replicas), an MLflow tracking server with the run created beforehand through the
operator's REST client (``MlflowTracking.ensure_run``), and an S3 server (moto) holding the
checkpoints, read back with ``sarl.storage.open_store``.

Emulated (``pytorchjob_emulator``): the Kubernetes API server, the Training Operator v1.9.0
controller (defaults, per-replica environment, OnFailure restarts) and the kubelet (Secret
references, the ConfigMap mounted at /etc/sarl, a fresh /tmp per container start). As root each
replica has its own network namespace on a host bridge where MLflow and S3 listen; without root
the module is skipped (the trainers write fixed paths under /tmp, which replicas would share).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("moto")  # the S3 server (dev extra; not in the verl environment)

from sarl.spec.experiment import Experiment
from sarl.storage import CheckpointStore, open_store
from sarl_operator import builders, job_pods
from sarl_operator.platform_settings import Platform
from sarl_operator.tracking import MlflowTracking
from tests.jobs.pytorchjob_emulator import (
    JobRun,
    PodNetwork,
    namespaces_unavailable,
    pod_network,
    running_pytorchjob,
)

pytestmark = pytest.mark.slow

NAMESPACE = "research"
SECRET = "sarl-s3"
ACCESS_KEY, SECRET_KEY = "sarl-test-access", "sarl-test-secret"
EVERY = 2  # storage.every_n_steps
#: What the TRL image's Dockerfile sets (jobs/docker/trl.Dockerfile), plus no Hugging Face Hub.
IMAGE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1"}
JOB_TIMEOUT_S = 400.0


@pytest.fixture(scope="module")
def network() -> Iterator[PodNetwork]:
    if (reason := namespaces_unavailable()) is not None:
        pytest.skip(f"replicas need private mount and PID namespaces: {reason}")
    with pod_network("auto") as net:
        yield net


@pytest.fixture(scope="module")
def s3(network: PodNetwork) -> Iterator[str]:
    """A moto S3 server where the pods reach it (the bridge's host address), with a bucket."""
    import logging

    from minio import Minio
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address=network.host_address, port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    Minio(f"{host}:{port}", access_key=ACCESS_KEY, secret_key=SECRET_KEY, secure=False).make_bucket(
        "sarl"
    )
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def mlflow_url(network: PodNetwork, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.support.mlflow_server import running_mlflow_server

    tmp = tmp_path_factory.mktemp("mlflow-multinode")
    with running_mlflow_server(tmp, host=network.host_address) as server:
        yield server.url


@pytest.fixture(autouse=True)
def _s3_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test reads the store with the same dummy credentials the pods get from the Secret."""
    for name in ("AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)


def experiment(name: str, max_steps: int) -> Experiment:
    """The local GRPO preset cut to seconds: 2 prompts x 2 rollouts a step, 16-token answers,
    a 2-step warm start, and a length-shaped reward so groups differ and gradients flow."""
    spec = {
        "preset": "local-grpo-arithmetic",
        "model": {"warm_start": {"steps": 2, "max_response_tokens": 24}},
        "data": {"train_size": 32, "eval_size": 4, "difficulty": 1},
        "algorithm": {
            "rollouts_per_prompt": 2,
            "train_batch_size": 2,
            "mini_batch_size": 2,
            "micro_batch_size_per_gpu": 1,
            "max_prompt_length": 48,
            "max_response_length": 16,
            "max_steps": max_steps,
        },
        "reward": [{"name": "format_length", "settings": {"max_length": 48}}],
        "storage": {"every_n_steps": EVERY},
        "resources": {"backend": "trl", "nodes": 2, "gpus_per_node": 0},
    }
    return Experiment.model_validate({"metadata": {"name": name}, "spec": spec})


def platform(s3: str) -> Platform:
    return Platform(s3_endpoint_url=s3, s3_bucket="sarl", s3_credentials_secret=SECRET)


def launch(
    exp: Experiment, network: PodNetwork, s3: str, mlflow_url: str, root: Path
) -> tuple[str, AbstractContextManager[JobRun]]:
    """The MLflow run (as the operator creates it) and the job's emulator context."""
    run_id = (
        MlflowTracking(mlflow_url)
        .ensure_run(exp.name, run_name=exp.name, namespace=NAMESPACE, uid=str(uuid.uuid4()))
        .run_id
    )
    job = builders.pytorchjob(
        exp,
        NAMESPACE,
        image="sarl-trl:test",
        mlflow_run_id=run_id,
        tracking_uri=mlflow_url,
        platform=platform(s3),
    )
    context = running_pytorchjob(
        job,
        network,
        root=root,
        configmaps=[builders.configmap(exp, NAMESPACE, platform(s3))],
        secrets={SECRET: {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}},
        image_env=IMAGE_ENV,
    )
    return run_id, context


def store_of(exp: Experiment, s3: str) -> CheckpointStore:
    return open_store(job_pods.checkpoint_uri(exp, NAMESPACE, platform(s3)), endpoint_url=s3)


def history(mlflow_url: str, run_id: str, key: str) -> list[tuple[int, int]]:
    """(step, timestamp in ms) of every value of metric ``key``, by step."""
    from mlflow import MlflowClient

    values = MlflowClient(mlflow_url).get_metric_history(run_id, key)
    return sorted((m.step, m.timestamp) for m in values)


def test_two_cpu_nodes_train_log_each_step_once_and_upload_checkpoints(
    network: PodNetwork, s3: str, mlflow_url: str, tmp_path: Path
) -> None:
    exp = experiment("trl-two-nodes", max_steps=4)
    run_id, context = launch(exp, network, s3, mlflow_url, tmp_path / "pods")
    with context as run:
        result = run.wait(timeout_s=JOB_TIMEOUT_S)
        assert result.condition == "Succeeded", run.describe()
    worker = "trl-two-nodes-worker-0"
    assert result.exit_codes["trl-two-nodes-master-0"] == 0
    # A worker still tearing down when the master succeeded is deleted (cleanPodPolicy Running).
    assert result.exit_codes[worker] == 0 or worker in result.deleted_running, result
    assert result.restarts == {"trl-two-nodes-master-0": 0, "trl-two-nodes-worker-0": 0}
    for key in ("reward", "loss", "grad_norm"):  # rank 0 logs, once per optimizer step
        assert [step for step, _ in history(mlflow_url, run_id, key)] == [1, 2, 3, 4], key
    checkpoints = store_of(exp, s3).list()
    assert [c.step for c in checkpoints] == [2, 4]
    assert all(c.metadata == {"backend": "trl"} for c in checkpoints)
    weights = [{f.path: f.sha256 for f in c.files}["model.safetensors"] for c in checkpoints]
    assert weights[0] != weights[1]  # the two nodes' updates between step 2 and step 4


def _kill_after_first_upload(run: JobRun, store: CheckpointStore, master: str) -> tuple[int, int]:
    """Kill the master as soon as a checkpoint is in the store: (its step, kill time in ms)."""
    run.wait_until(lambda: store.latest() is not None, timeout_s=JOB_TIMEOUT_S, poll_s=0.2)
    run.kill(master)
    killed_ms = int(time.time() * 1000)
    latest = store.latest()
    assert latest is not None
    return latest.step, killed_ms


def test_killed_master_restarts_and_resumes_from_the_last_upload(
    network: PodNetwork, s3: str, mlflow_url: str, tmp_path: Path
) -> None:
    exp = experiment("trl-resume", max_steps=4)
    master, worker = "trl-resume-master-0", "trl-resume-worker-0"
    store = store_of(exp, s3)
    run_id, context = launch(exp, network, s3, mlflow_url, tmp_path / "pods")
    with context as run:
        uploaded, killed_ms = _kill_after_first_upload(run, store, master)
        result = run.wait(timeout_s=JOB_TIMEOUT_S)
        assert result.condition == "Succeeded", run.describe()
    assert 0 < uploaded < 4, "the master must die mid-run, after an upload"
    # OnFailure: the same pods, started again; the worker's collective failed with its peer.
    assert result.restarts == {master: 1, worker: 1}
    # The job succeeds when the master exits 0; a worker still tearing down then is deleted by
    # cleanPodPolicy Running (training-operator v1.9.4), its exit code the kill's (137).
    assert result.exit_codes[master] == 0
    assert result.exit_codes[worker] == 0 or worker in result.deleted_running, result
    steps = history(mlflow_url, run_id, "reward")
    after = [step for step, at in steps if at > killed_ms]
    # The restarted master went on from a stored step: the one seen at the kill, or a later one
    # whose upload was in flight then and completed as the master died (a loaded machine).
    resumed = min(after) - 1
    assert uploaded <= resumed < 4, (uploaded, steps)
    assert max(after) == 4
    logged = [step for step, _ in steps]
    assert [s for s in logged if s <= resumed] == list(range(1, resumed + 1))  # never re-run
    latest = store.latest()
    assert latest is not None and latest.step == 4
