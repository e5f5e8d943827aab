"""Two replicas of a verl PyTorchJob form one Ray cluster, and the driver sees both nodes.

Real: the operator's builders (``configmap`` and ``pytorchjob`` of an Experiment with
``resources: {backend: verl, nodes: 2, gpus_per_node: 0}``), the trainer entrypoint
``sarl_jobs.verl_trainer`` on both replicas (rank 0: ``ray start --head``, wait for the
``PET_NNODES`` nodes, data and the built-in model, verl's config composed; the other rank:
``ray start --address=<job>-master-0:6379 --block``), Ray 2.x and verl 0.9.1's config.

Replaced: verl's ``main_ppo.main`` (the GPU work). The container command is wrapped as
``python -c PROBE /etc/sarl/experiment.yaml``: PROBE swaps ``main_ppo.main`` for a function
printing the live Ray nodes and the ``trainer.nnodes``/``n_gpus_per_node`` it was handed, then
runs ``sarl_jobs.verl_trainer`` as ``__main__`` exactly as ``python -m`` does; the trainer's code
is unchanged and nothing is patched in the test process.

Emulated (``pytorchjob_emulator``): the Kubernetes API server, the Training Operator v1.9.0
controller and the kubelet, with each pod in its own network namespace when root may create them
(else both on the loopback, where Ray still forms a 2-node cluster). There is no cluster DNS:
names resolve from the pods' /etc/hosts, and Ray's GCS client (gRPC with c-ares) did not resolve
``<job>-master-0`` that way, hence ``GRPC_DNS_RESOLVER=native`` in the image environment (on a
cluster the DNS answers). Runs in the
``.venv-verl`` environment (``make test-verl``), which installs the operator package without its
dependencies (its pure ``builders`` module).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("verl")
pytest.importorskip("ray")

from sarl.spec.experiment import Experiment
from tests.jobs.pytorchjob_emulator import (
    PodNetwork,
    namespaces_unavailable,
    pod_network,
    running_pytorchjob,
)

pytestmark = pytest.mark.slow

NAMESPACE = "research"
MARK = "SARL-PROBE "
PROBE = f"""
import json, runpy
from verl.trainer import main_ppo

def report(config):
    import ray
    ray.init(address="auto")
    alive = [n for n in ray.nodes() if n["Alive"]]
    print({MARK!r} + json.dumps({{
        "addresses": sorted(n["NodeManagerAddress"] for n in alive),
        "nnodes": config.trainer.nnodes,
        "n_gpus_per_node": config.trainer.n_gpus_per_node,
    }}), flush=True)
    ray.shutdown()

main_ppo.main = report
runpy.run_module("sarl_jobs.verl_trainer", run_name="__main__", alter_sys=True)
"""
#: What the verl image's Dockerfile sets, no Hugging Face Hub, and gRPC name resolution through
#: /etc/hosts (see the module docstring).
IMAGE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1", "GRPC_DNS_RESOLVER": "native"}


@pytest.fixture(scope="module")
def builders() -> ModuleType:
    """``sarl_operator.builders`` (pure: no kopf needed)."""
    from sarl_operator import builders as module

    return module


@pytest.fixture(scope="module")
def network() -> Iterator[PodNetwork]:
    if (reason := namespaces_unavailable()) is not None:
        pytest.skip(f"replicas need private mount and PID namespaces: {reason}")
    with pod_network("auto") as net:
        yield net


def test_both_replicas_join_one_ray_cluster(
    builders: ModuleType, network: PodNetwork, tmp_path: Path
) -> None:
    spec = {
        "preset": "local-grpo-arithmetic",
        "model": {"warm_start": {"steps": 2}},
        "data": {"train_size": 16, "eval_size": 4},
        "resources": {"backend": "verl", "nodes": 2, "gpus_per_node": 0},
    }
    exp = Experiment.model_validate({"metadata": {"name": "verl-ray"}, "spec": spec})
    job = builders.pytorchjob(
        exp, NAMESPACE, image="sarl-verl:test", mlflow_run_id="", tracking_uri=""
    )
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        (container,) = replica["template"]["spec"]["containers"]
        assert container["command"] == ["python", "-m", "sarl_jobs.verl_trainer"]
        container["command"] = ["python", "-c", PROBE]  # the args stay: the mounted config
    master, worker = "verl-ray-master-0", "verl-ray-worker-0"
    with running_pytorchjob(
        job,
        network,
        root=tmp_path / "pods",
        configmaps=[builders.configmap(exp, NAMESPACE)],
        image_env=IMAGE_ENV,
    ) as run:
        # The worker's `ray start --block` ends once its raylet gives up on the stopped head
        # (Ray's 60 s GCS reconnect timeout): the worker pod does not outlive the job.
        result = run.wait(timeout_s=300)
        addresses = [run.address(master), run.address(worker)]
        logs = run.logs(master)
    assert result.condition == "Succeeded", run.describe()
    assert result.exit_codes == {master: 0, worker: 0}
    assert result.restarts == {master: 0, worker: 0}
    (line,) = [x for x in logs.splitlines() if x.startswith(MARK)]
    seen = json.loads(line.removeprefix(MARK))
    assert (seen["nnodes"], seen["n_gpus_per_node"]) == (2, 0)
    assert len(seen["addresses"]) == 2
    if network.mode == "netns":  # each node at its own pod address
        assert seen["addresses"] == sorted(addresses)
