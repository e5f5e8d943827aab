"""Two nodes of a verl Kubeflow Trainer v2 TrainJob form one Ray cluster, and the driver sees
both: the TrainJob twin of ``test_verl_multinode.py`` (its probe, image environment and pod
network; see there what is real and what replaces verl's GPU work).

Real: the operator's builders (``configmap`` and ``sarl_operator.trainjob.trainjob`` of an
Experiment with ``resources: {backend: verl, nodes: 2, gpus_per_node: 0}``), the platform chart's
ClusterTrainingRuntime (rendered by Helm's engine), the trainer entrypoint on both pods: node
rank 0 (``PET_NODE_RANK``, from the pod's completion index) runs ``ray start --head``, the other
joins ``<name>-node-0-0.<name>:6379`` from ``PET_MASTER_ADDR``. Emulated
(``trainjob_emulator``): Kubeflow Trainer v2.3.0 resolving the TrainJob into a JobSet, JobSet
v0.12.0, the Job controller and the kubelet. Runs in ``.venv-verl`` (``make test-verl``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("verl")
pytest.importorskip("ray")

from sarl.spec.experiment import Experiment
from sarl_operator import builders
from sarl_operator.trainjob import trainjob
from tests.jobs import test_verl_multinode as twin
from tests.jobs.pytorchjob_emulator import PodNetwork
from tests.jobs.trainjob_emulator import running_trainjob
from tests.jobs.trainjob_emulator.sarl import sarl_runtime

pytestmark = pytest.mark.slow

network = twin.network  # the twin's module-scoped pod network fixture


def test_both_nodes_join_one_ray_cluster_as_a_trainjob(network: PodNetwork, tmp_path: Path) -> None:
    spec = {
        "preset": "local-grpo-arithmetic",
        "model": {"warm_start": {"steps": 2}},
        "data": {"train_size": 16, "eval_size": 4},
        "resources": {"backend": "verl", "nodes": 2, "gpus_per_node": 0},
    }
    exp = Experiment.model_validate({"metadata": {"name": "verl-tj"}, "spec": spec})
    job = trainjob(exp, twin.NAMESPACE, image="sarl-verl:test", mlflow_run_id="", tracking_uri="")
    trainer = job["spec"]["trainer"]
    assert trainer["command"] == ["python", "-m", "sarl_jobs.verl_trainer"]
    trainer["command"] = ["python", "-c", twin.PROBE]  # the args stay: the mounted config
    head, other = "verl-tj-node-0-0", "verl-tj-node-0-1"
    with running_trainjob(
        job,
        sarl_runtime(),
        network,
        root=tmp_path / "pods",
        configmaps=[builders.configmap(exp, twin.NAMESPACE)],
        image_env=twin.IMAGE_ENV,
    ) as run:
        # The other node's `ray start --block` ends once its raylet gives up on the stopped head
        # (Ray's 60 s GCS reconnect timeout).
        result = run.wait(timeout_s=300)
        addresses = [run.address(head), run.address(other)]
        logs = run.logs(head)
    assert result.condition == "Complete", run.describe()
    assert result.exit_codes == {head: 0, other: 0}
    assert result.restarts == {head: 0, other: 0}
    (line,) = [x for x in logs.splitlines() if x.startswith(twin.MARK)]
    seen = json.loads(line.removeprefix(twin.MARK))
    assert (seen["nnodes"], seen["n_gpus_per_node"]) == (2, 0)
    assert len(seen["addresses"]) == 2
    if network.mode == "netns":  # each node at its own pod address
        assert seen["addresses"] == sorted(addresses)
