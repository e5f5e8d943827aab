"""The verl plan of every pod of the TrainJob the operator builds, from the environment Kubeflow
Trainer v2.3.0 gives each one (``pkg/runtime/framework/plugins/torch/torch.go``: ``PET_*`` only,
``PET_NODE_RANK`` from the pod's ``batch.kubernetes.io/job-completion-index``, the master
``<name>-node-0-0.<name>:29500``), as ``trainjob_emulator`` resolves it: the Ray head on node
rank 0, every other node joining it, for 1x8, 2x8 and 4x1 layouts (nodes x GPUs per node).
Pure: nothing is launched (the Ray cluster forming across pods is ``test_verl_multinode.py``'s,
over the PyTorchJob, whose pods run the same command).
"""

from __future__ import annotations

import pytest

pytest.importorskip("sarl_operator")  # the builders (not in the verl environment)

from sarl.spec.experiment import Experiment
from sarl_jobs import verl_trainer
from sarl_jobs.cluster import RAY_PORT
from sarl_operator.platform_settings import Platform
from sarl_operator.trainjob import trainjob
from tests.jobs.trainjob_emulator import jobset, pods
from tests.jobs.trainjob_emulator.sarl import sarl_runtime

PLATFORM = Platform(
    s3_endpoint_url="http://minio:9000", s3_bucket="sarl", s3_credentials_secret="s3"
)
SECRETS = {"s3": {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}}


@pytest.mark.parametrize(("nodes", "gpus"), [(1, 8), (2, 8), (4, 1)])
def test_ray_head_on_rank_zero_and_workers_join_it(nodes: int, gpus: int) -> None:
    exp = Experiment.model_validate(
        {
            "metadata": {"name": "layout", "namespace": "team-a"},
            "spec": {
                "preset": "paper-grpo-math",
                "resources": {"nodes": nodes, "gpus_per_node": gpus, "backend": "verl"},
            },
        }
    )
    job = trainjob(
        exp, "team-a", image="img", mlflow_run_id="run", tracking_uri="http://mlflow",
        platform=PLATFORM,
    )  # fmt: skip
    replicas = pods(jobset(job, sarl_runtime()), secrets=SECRETS)
    assert len(replicas) == nodes
    plans = [verl_trainer.plan(exp, pod.env, workdir="/tmp/w") for pod in replicas]
    assert [p["node_rank"] for p in plans] == list(range(nodes))
    assert [p["role"] for p in plans] == ["head"] + ["worker"] * (nodes - 1)
    for plan in plans:
        assert (plan["nnodes"], plan["n_gpus_per_node"]) == (nodes, gpus)
        assert plan["master"] == "layout-node-0-0.layout:29500"
    head = plans[0]
    assert f"trainer.nnodes={nodes}" in head["verl_overrides"]
    assert f"trainer.n_gpus_per_node={gpus}" in head["verl_overrides"]
    if nodes == 1:
        assert head["ray"] is None  # verl starts its own local Ray
        return
    assert head["ray"]["start"][:3] == ["ray", "start", "--head"]
    assert head["ray"]["wait_for_nodes"] == nodes
    for worker in plans[1:]:
        start = worker["ray"]["start"]
        assert f"--address=layout-node-0-0.layout:{RAY_PORT}" in start and "--block" in start
        assert f"--num-gpus={gpus}" in start
        # JobSet publishes the head's address before it is ready: wait for its Ray port first.
        assert worker["ray"]["wait_for_head"] == f"layout-node-0-0.layout:{RAY_PORT}"
