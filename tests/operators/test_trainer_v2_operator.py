"""The whole operator on a cluster where only Kubeflow Trainer v2 is installed, with Kueue:
``sarl submit`` of an Experiment and of a Study runs to completion as TrainJobs.

No real Kubernetes API server or controllers can run here. The operator (``kopf run`` of
``sarl_operator.handlers``, a subprocess) talks over real HTTP to kmock's in-memory API server
(:mod:`tests.support.kube_server`) that serves TrainJobs and Kueue's Workloads but **no
PyTorchJob** (Training Operator v1 not installed), so ``job_kind: auto`` must choose TrainJob.
Trainer v2's controller and Kueue are the stand-ins of :mod:`tests.operators.standins` (status
and admission only, after Trainer v2.3.0 and Kueue v0.19.2; what the jobs do inside a TrainJob is
``tests/jobs/test_trl_trainjob.py``'s subject). MLflow is the real server; the status timers
run every second. ``sarl submit`` is the real CLI over the kubeconfig.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("kmock")
from kubernetes import config, dynamic
from typer.testing import CliRunner

from sarl.cli.main import app
from tests.jobs.trainjob_emulator.sarl import chart_runtime
from tests.operators.operator_process import Operator, wait_for
from tests.operators.standins import QUEUE_LABEL, WORKLOADS, Kueue, TrainerV2, running
from tests.operators.study_cases import small_doc
from tests.support.kube_server import (
    CLUSTER_TRAINING_RUNTIMES,
    EXPERIMENTS,
    PYTORCHJOBS,
    SARL_RESOURCES,
    TRAINER_V2_RESOURCES,
    TRAINJOBS,
    KubeServer,
    Resource,
    kube_server,
)

STUDIES = Resource("sarl.dev", "v1alpha1", "studies", "Study", subresources=("status",))
NAMESPACE = "team-k"
QUEUE = "team-k-gpus"


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    trainer_v2_only = [r for r in SARL_RESOURCES if r != PYTORCHJOBS]
    with kube_server((*trainer_v2_only, *TRAINER_V2_RESOURCES, WORKLOADS, STUDIES)) as ks:
        # What installing the platform chart puts there: its ClusterTrainingRuntime.
        ks.put(CLUSTER_TRAINING_RUNTIMES, None, chart_runtime())
        yield ks


@pytest.fixture(scope="module")
def kubeconfig(server: KubeServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return server.kubeconfig(tmp_path_factory.mktemp("client") / "kubeconfig", NAMESPACE)


@pytest.fixture(scope="module")
def kube(kubeconfig: Path) -> dynamic.DynamicClient:
    return dynamic.DynamicClient(config.new_client_from_config(config_file=str(kubeconfig)))


@pytest.fixture(scope="module")
def operator(
    server: KubeServer, mlflow_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Operator]:
    tmp = tmp_path_factory.mktemp("trainer-v2-operator")
    env = {
        **os.environ,
        "KUBECONFIG": str(server.kubeconfig(tmp / "kubeconfig", NAMESPACE)),
        "SARL_MLFLOW_TRACKING_URI": mlflow_server.url,
        "SARL_STATUS_INTERVAL_S": "1",
        "SARL_TRAINER_IMAGE": "ghcr.io/sarl-dev/sarl-verl:test",
        "SARL_TRL_TRAINER_IMAGE": "ghcr.io/sarl-dev/sarl-trl:test",
        "SARL_S3_BUCKET": "sarl",
        # The platform chart's kueue.defaultQueue: every job of the namespace goes through Kueue.
        "SARL_DEFAULT_QUEUE": QUEUE,
    }
    op = Operator(env=env, log_path=tmp / "operator.log")
    op.start()
    yield op
    op.stop()


def _submit(kubeconfig: Path, doc: dict[str, Any], tmp_path: Path) -> str:
    path = tmp_path / f"{doc['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = CliRunner().invoke(app, ["submit", str(path), "--kubeconfig", str(kubeconfig)])
    assert result.exit_code == 0, result.stderr
    return str(result.stdout)


def _status(server: KubeServer, resource: Resource, name: str) -> dict[str, Any]:
    return dict(server.objects(resource, NAMESPACE).get(name, {}).get("status") or {})


def _experiment_doc(name: str) -> dict[str, Any]:
    """A CPU-sized Experiment (the Study cases' base) on the TRL backend."""
    base = small_doc(name)["spec"]["base"]
    base["resources"]["backend"] = "trl"
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": base,
    }


def test_an_experiment_waits_queued_then_runs_as_a_trainjob(
    operator: Operator,
    server: KubeServer,
    kube: dynamic.DynamicClient,
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    """Kueue holds no quota at first: the TrainJob is created suspended with the namespace's
    queue, and the Experiment says Queued with Kueue's reason; once Kueue admits it the
    Experiment runs and succeeds (stand-ins for Trainer v2 and Kueue, in-memory API server)."""
    trainer = TrainerV2(server, kube, NAMESPACE, run_s=2.0)
    kueue = Kueue(server, kube, NAMESPACE, quota=0)
    with running(trainer, kueue):
        out = _submit(kubeconfig, _experiment_doc("tj-one"), tmp_path)
        assert "tj-one" in out
        job = wait_for(
            f"the TrainJob {_status(server, EXPERIMENTS, 'tj-one')}",
            lambda: server.objects(TRAINJOBS, NAMESPACE).get("tj-one"),
        )
        assert job["spec"]["suspend"] is True
        assert job["metadata"]["labels"][QUEUE_LABEL] == QUEUE
        wait_for(
            "phase Queued",
            lambda: _status(server, EXPERIMENTS, "tj-one").get("phase") == "Queued",
        )
        assert _status(server, EXPERIMENTS, "tj-one")["jobKind"] == "TrainJob"

        def kueues_reason() -> str:
            status = _status(server, EXPERIMENTS, "tj-one")
            return " ".join(c.get("message", "") for c in status.get("conditions") or [])

        wait_for(
            "Kueue's reason in the status", lambda: "insufficient unused quota" in kueues_reason()
        )
        assert _status(server, EXPERIMENTS, "tj-one")["phase"] == "Queued"
        kueue.quota = 1
        wait_for(
            "phase Succeeded",
            lambda: _status(server, EXPERIMENTS, "tj-one").get("phase") == "Succeeded",
        )
        # The operator never re-suspended the job Kueue had started.
        assert server.objects(TRAINJOBS, NAMESPACE)["tj-one"]["spec"]["suspend"] is False
    assert trainer.errors == [] and kueue.errors == []


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_study_of_18_runs_against_a_quota_of_2_finishes(
    operator: Operator,
    server: KubeServer,
    kube: dynamic.DynamicClient,
    kubeconfig: Path,
    tmp_path: Path,
) -> None:
    """18 runs (2 arms x 9 seeds) all created at once (parallelism 18) against a ClusterQueue
    of 2: Kueue runs 2 at a time, every run finishes and the Study with them — no deadlock
    between the Study's parallelism and the queue (stand-ins for Trainer v2 and Kueue)."""
    trainer = TrainerV2(server, kube, NAMESPACE, run_s=0.6)
    kueue = Kueue(server, kube, NAMESPACE, quota=2)
    with running(trainer, kueue):
        _submit(kubeconfig, small_doc("tj-study", seeds=9, parallelism=18), tmp_path)

        def counts() -> tuple[int, ...]:
            s = _status(server, STUDIES, "tj-study")
            return tuple(s.get(k, -1) for k in ("total", "succeeded", "failed"))

        # The operator's status timers (18 Experiments and the Study, every second) are what
        # takes the time on a loaded 2-core machine: ~3 minutes here.
        wait_for("18 runs succeeded", lambda: counts() == (18, 18, 0), timeout_s=560)
    jobs = {
        name: job
        for name, job in server.objects(TRAINJOBS, NAMESPACE).items()
        if name.startswith("tj-study-")
    }
    assert len(jobs) == 18
    assert trainer.running_peak <= 2 and kueue.admitted_peak == 2
    assert kueue.queues_seen == {QUEUE}
    assert trainer.errors == [] and kueue.errors == []
