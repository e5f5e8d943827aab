"""A TrainJob survives as many node failures as its PyTorchJob twin, whatever its node count.

The PyTorchJob's ``backoffLimit`` is 3 x nodes (``sarl_operator.builders.RESTARTS``): losing one
node of a multi-node verl job restarts every node, so a job survives 3 failures. A TrainJob can
set neither a Job ``backoffLimit`` nor a JobSet ``failurePolicy`` (Trainer v2.3.0
``pkg/apis/trainer/v1alpha1/trainjob_types.go``: ``JobSetSpecPatch``, ``JobSpecPatch``), so the
platform chart's runtime, which serves every node count, fails a Job at its first failed pod and
has JobSet recreate every node up to ``trainer.v2.runtime.maxRestarts`` times (JobSet v0.12.0
``pkg/controllers/failure_policy.go``). Before, it had one ``backoffLimit: 6`` with restarts in
place: a 2-node job that lost a node 3 times failed, a 4-node one after 2.

Real: the operator's TrainJob builder, the chart's ClusterTrainingRuntime (Helm's engine).
Emulated (``trainjob_emulator``): the Trainer, JobSet, the Job controller and the kubelet. The
trainer command is replaced by a probe in which the last node fails while the JobSet's
``restart-attempt`` is below a number: a node lost at each of the first attempts.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("sarl_operator")  # the builders (not in the verl environment)

from sarl.spec.experiment import Experiment
from sarl_operator import builders
from sarl_operator.trainjob import trainjob
from tests.jobs.pytorchjob_emulator import PodNetwork, namespaces_unavailable, pod_network
from tests.jobs.trainjob_emulator import RESTARTS_KEY, running_trainjob
from tests.jobs.trainjob_emulator.sarl import chart_runtime, sarl_runtime

NAMESPACE = "team-a"
LOSE_NODE = """
import os, sys, time
attempt, rank = int(os.environ["RESTART_ATTEMPT"]), int(os.environ["PET_NODE_RANK"])
if attempt < int(os.environ["FAILED_ATTEMPTS"]):
    if rank == int(os.environ["PET_NNODES"]) - 1:
        sys.exit(1)  # this node is lost
    time.sleep(60)  # the others run on until JobSet deletes them
print("attempt", attempt, "rank", rank, "done", flush=True)
"""


@pytest.fixture(scope="module")
def network() -> Iterator[PodNetwork]:
    if (reason := namespaces_unavailable()) is not None:
        pytest.skip(f"pods need private mount and PID namespaces: {reason}")
    with pod_network("auto") as net:
        yield net


def test_the_chart_allows_as_many_restarts_as_the_pytorchjob_per_failure() -> None:
    spec = chart_runtime()["spec"]["template"]["spec"]
    assert spec["failurePolicy"] == {"maxRestarts": builders.RESTARTS}
    (rjob,) = spec["replicatedJobs"]
    assert rjob["template"]["spec"]["backoffLimit"] == 0
    assert rjob["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize("nodes", [1, 2, 4])
@pytest.mark.parametrize(
    ("failed_attempts", "condition", "reason"),
    [
        (builders.RESTARTS, "Complete", "AllJobsCompleted"),
        (builders.RESTARTS + 1, "Failed", "ReachedMaxRestarts"),
    ],
)
def test_a_trainjob_survives_three_node_losses_whatever_its_node_count(
    network: PodNetwork,
    tmp_path: Path,
    nodes: int,
    failed_attempts: int,
    condition: str,
    reason: str,
) -> None:
    exp = Experiment.model_validate(
        {
            "metadata": {"name": "lossy"},
            "spec": {
                "preset": "local-grpo-arithmetic",
                "resources": {"backend": "verl", "nodes": nodes, "gpus_per_node": 0},
            },
        }
    )
    job = trainjob(exp, NAMESPACE, image="img", mlflow_run_id="", tracking_uri="")
    trainer = job["spec"]["trainer"]
    trainer["command"] = [sys.executable, "-c", LOSE_NODE]
    trainer["env"] += [
        {"name": "FAILED_ATTEMPTS", "value": str(failed_attempts)},
        {
            "name": "RESTART_ATTEMPT",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{RESTARTS_KEY}']"}},
        },
    ]
    with running_trainjob(
        job,
        sarl_runtime(),
        network,
        root=tmp_path,
        configmaps=[builders.configmap(exp, NAMESPACE)],
    ) as run:
        result = run.wait(timeout_s=120)
    assert (result.condition, result.reason) == (condition, reason), run.describe()
    assert result.jobset_restarts == builders.RESTARTS
