"""``--dry-run`` of both trainers under the environment the Training Operator v1.9 gives each
replica of the PyTorchJob the operator builds (computed by ``pytorchjob_emulator``, which reads
upstream's ``envvar.go``): the plan names the right role, nodes and GPUs per node.

The Training Operator sets ``WORLD_SIZE`` = replicas x ``nprocPerNode`` (processes); reading it
as the node count made a 1 x 8 verl job wait for 8 Ray nodes. These tests fail on that.
No Kubernetes API server or GPU is involved: the plans are computed, nothing is launched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("sarl_operator")  # the builders (not in the verl environment)

from sarl.spec.experiment import Experiment
from sarl_jobs import trl_trainer, verl_trainer
from sarl_operator import builders
from sarl_operator.platform_settings import Platform
from tests.jobs.pytorchjob_emulator import Replica, replica_envs

LAYOUTS = [(1, 8), (2, 8), (4, 1)]
PLATFORM = Platform(
    s3_endpoint_url="http://minio:9000", s3_bucket="sarl", s3_credentials_secret="s3"
)
SECRETS = {"s3": {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}}


def experiment(nodes: int, gpus: int, backend: str = "verl") -> Experiment:
    return Experiment.model_validate(
        {
            "metadata": {"name": "layout", "namespace": "team-a"},
            "spec": {
                "preset": "paper-grpo-math",
                "resources": {"nodes": nodes, "gpus_per_node": gpus, "backend": backend},
            },
        }
    )


def replicas(exp: Experiment) -> list[Replica]:
    job = builders.pytorchjob(
        exp, "team-a", image="img", mlflow_run_id="run", tracking_uri="http://mlflow",
        platform=PLATFORM,
    )  # fmt: skip
    return replica_envs(job, secrets=SECRETS)


@pytest.mark.parametrize(("nodes", "gpus"), LAYOUTS)
def test_verl_plan_for_each_replica(nodes: int, gpus: int) -> None:
    exp = experiment(nodes, gpus)
    pods = replicas(exp)
    assert len(pods) == nodes
    assert {p.env["WORLD_SIZE"] for p in pods} == {str(nodes * gpus)}  # processes, not nodes
    for pod in pods:
        plan = verl_trainer.plan(exp, pod.env, workdir="/tmp/w")
        assert (plan["nnodes"], plan["n_gpus_per_node"]) == (nodes, gpus)
        assert plan["node_rank"] == pod.rank
        assert plan["master"] == "layout-master-0:23456"
        if pod.rank == 0:
            assert plan["role"] == "head"
            overrides = plan["verl_overrides"]
            assert f"trainer.nnodes={nodes}" in overrides
            assert f"trainer.n_gpus_per_node={gpus}" in overrides
            if nodes == 1:
                assert plan["ray"] is None  # verl starts its own local Ray
            else:
                assert plan["ray"]["start"][:3] == ["ray", "start", "--head"]
                assert plan["ray"]["wait_for_nodes"] == nodes
        else:
            assert plan["role"] == "worker" and "verl_overrides" not in plan
            start = plan["ray"]["start"]
            assert "--address=layout-master-0:6379" in start and "--block" in start
            assert f"--num-gpus={gpus}" in start


@pytest.mark.parametrize(("nodes", "gpus"), [*LAYOUTS, (2, 0)])
def test_trl_plan_for_each_replica(nodes: int, gpus: int) -> None:
    exp = experiment(nodes, gpus, backend="trl")
    per_node = max(gpus, 1)
    for pod in replicas(exp):
        plan = trl_trainer.plan(exp, pod.env, "/etc/sarl/experiment.yaml")
        command = plan["command"]
        assert plan["role"] == ("main" if pod.rank == 0 else "worker")
        assert (plan["nnodes"], plan["processes_per_node"]) == (nodes, per_node)
        if gpus:
            assert plan["launcher"] == "accelerate"
            flags = dict(zip(command[3::2], command[4::2], strict=False))
            assert flags["--num_machines"] == str(nodes)
            assert flags["--num_processes"] == str(nodes * gpus)
            assert flags["--machine_rank"] == str(pod.rank)
            assert flags["--main_process_ip"] == "layout-master-0"
            config = plan["accelerate_config"]
            assert (config["num_machines"], config["num_processes"]) == (nodes, nodes * gpus)
        else:  # CPU-only nodes: torchrun, DDP over gloo
            assert plan["launcher"] == "torchrun" and plan["accelerate_config"] is None
            assert f"--nnodes={nodes}" in command and f"--node_rank={pod.rank}" in command
            assert plan["training_args"]["use_cpu"] is True
        assert command[-2:] == ["--worker", "/etc/sarl/experiment.yaml"]


def _dry_run(module: str, cfg: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, "--config", str(cfg), "--dry-run"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("module", ["sarl_jobs.verl_trainer", "sarl_jobs.trl_trainer"])
def test_the_command_prints_the_plan_as_json(module: str, tmp_path: Path) -> None:
    backend = module.split(".")[1].split("_")[0]
    exp = experiment(2, 8, backend=backend)
    cfg = tmp_path / "experiment.yaml"
    cfg.write_text(yaml.safe_dump(exp.model_dump(mode="json")))
    worker = replicas(exp)[1]
    done = _dry_run(module, cfg, worker.env)
    assert done.returncode == 0, done.stderr
    plan: dict[str, Any] = json.loads(done.stdout)
    assert (plan["backend"], plan["role"], plan["nnodes"]) == (backend, "worker", 2)


@pytest.mark.parametrize("module", ["sarl_jobs.verl_trainer", "sarl_jobs.trl_trainer"])
def test_a_job_that_disagrees_with_the_spec_exits_2_naming_both(
    module: str, tmp_path: Path
) -> None:
    backend = module.split(".")[1].split("_")[0]
    cfg = tmp_path / "experiment.yaml"
    cfg.write_text(yaml.safe_dump(experiment(1, 8, backend=backend).model_dump(mode="json")))
    env = replicas(experiment(2, 8, backend=backend))[0].env  # a 2-node job, a 1-node spec
    done = _dry_run(module, cfg, env)
    assert done.returncode == 2
    assert "PET_NNODES=2 but spec.resources.nodes=1" in done.stderr
    assert "Traceback" not in done.stderr
