"""A finished trainer PyTorchJob frees its GPUs: the operator's ``cleanPodPolicy`` checked
against what the Training Operator does with it.

Contract test, read from kubeflow/training-operator (now kubeflow/trainer) at tag ``v1.9.4``:
``pkg/apis/kubeflow.org/v1/pytorch_defaults.go`` defaults ``cleanPodPolicy`` to None;
``pkg/controller.v1/common/job.go`` ``DeletePodsAndServices`` deletes nothing of a finished job
under None, its Running and Pending pods under Running, every pod under All; and ``ReconcileJobs``
sets the Failed condition *before* that cleanup when the backoff limit is passed (trainer#3419),
so under None a job failed past its backoff limit keeps its pods — a crash-looping pod keeps its
GPUs until someone deletes the job. The decision is encoded once, in the PyTorchJob emulator's
:func:`deleted_when_finished`; the last test runs it (the emulator stands in for the API server,
the controller and the kubelet, which cannot run here).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sarl_operator import builders
from tests.jobs.pytorchjob_emulator import (
    PodNetwork,
    deleted_when_finished,
    namespaces_unavailable,
    pod_network,
    running_pytorchjob,
)
from tests.operators.cases import CASES, IMAGE, NAMESPACE, RUN_ID, TRACKING_URI, experiment


@pytest.mark.parametrize(
    ("policy", "phase", "deleted"),
    [
        ("None", "Running", False),
        ("None", "Failed", False),
        ("Running", "Running", True),
        ("Running", "Pending", True),
        ("Running", "Failed", False),
        ("Running", "Succeeded", False),
        ("All", "Succeeded", True),
        ("All", "Running", True),
    ],
)
def test_v1_9_4_cleanup_by_policy(policy: str, phase: str, deleted: bool) -> None:
    assert deleted_when_finished(policy, phase) is deleted


def trainer_job(case: str) -> dict[str, Any]:
    job = builders.pytorchjob(
        experiment(case), NAMESPACE, image=IMAGE, mlflow_run_id=RUN_ID, tracking_uri=TRACKING_URI
    )
    return job


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_finished_job_frees_running_pods_and_keeps_ended_ones_for_their_logs(case: str) -> None:
    policy = trainer_job(case)["spec"]["runPolicy"]["cleanPodPolicy"]
    assert deleted_when_finished(policy, "Running"), f"cleanPodPolicy {policy} keeps GPUs"
    assert not deleted_when_finished(policy, "Failed"), "ended pods keep their logs"


#: Master: fails at once (exit 3). Worker: blocks, holding its node (as `ray start --block`).
FAIL = ["python", "-c", "import sys; sys.exit(3)"]
BLOCK = ["python", "-c", "import time; time.sleep(600)"]


@pytest.fixture
def loopback() -> Iterator[PodNetwork]:
    if (reason := namespaces_unavailable()) is not None:
        pytest.skip(f"container namespaces unavailable: {reason}")
    with pod_network("loopback") as net:
        yield net


@pytest.mark.slow
def test_past_the_backoff_limit_the_blocking_worker_is_stopped(
    loopback: PodNetwork, tmp_path: Path
) -> None:
    job = copy.deepcopy(trainer_job("sarl-grpo-math-2node"))
    job["spec"]["runPolicy"]["backoffLimit"] = 1
    for rtype, command in (("Master", FAIL), ("Worker", BLOCK)):
        pod = job["spec"]["pytorchReplicaSpecs"][rtype]["template"]["spec"]
        (container,) = pod["containers"]
        container.update(command=command, args=[], env=[], volumeMounts=[])
        pod["volumes"] = []
    with running_pytorchjob(job, loopback, root=tmp_path) as run:
        run.wait_until(lambda: run.condition == "Failed", timeout_s=60)
        worker_running = run.running("sarl-grpo-math-2node-worker-0")
    assert not worker_running, "the failed job's worker still holds its node"
