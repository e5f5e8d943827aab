"""The TrainJob emulator does what Kubeflow Trainer v2.3.0, JobSet v0.12.0 and the Job
controller do.

The expected values are upstream's, read from kubeflow/trainer v2.3.0
(``pkg/runtime/framework/plugins/torch/torch.go``, ``plugins/jobset/builder.go`` and
``jobset.go``, ``pkg/runtime/core/trainingruntime.go``, ``pkg/constants/constants.go``) and
kubernetes-sigs/jobset v0.12.0 (``pkg/controllers/jobset_controller.go``,
``failure_policy.go``, ``pkg/webhooks/jobset_webhook.go``), written out per case rather than
recomputed. The runtime tests start short ``python -c`` containers in real namespaces and are
skipped, with the reason, where this machine does not allow them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.jobs.pytorchjob_emulator import (
    EmulationError,
    PodNetwork,
    namespaces_unavailable,
    pod_network,
)
from tests.jobs.trainjob_emulator import jobset, pod_name, pods, running_trainjob
from tests.jobs.trainjob_emulator.sarl import upstream_shaped_runtime

TORCH_VARS = ["PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR"]


def trainjob(
    *, name: str = "exp", nodes: int | None = 2, command: list[str] | None = None, **trainer: Any
) -> dict[str, Any]:
    """A TrainJob as a user (or sarl's operator) writes it: no defaults filled in."""
    spec: dict[str, Any] = {
        "runtimeRef": {"name": "sarl-torch-distributed", "kind": "ClusterTrainingRuntime"},
        "trainer": {"command": command or ["python", "-m", "train"], **trainer},
    }
    if nodes is not None:
        spec["trainer"]["numNodes"] = nodes
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "team"},
        "spec": spec,
    }


def runtime(**job_spec: Any) -> dict[str, Any]:
    """sarl's runtime with ``job_spec`` on the node Job (``backoffLimit``...) and
    ``failurePolicy``/``restartPolicy`` where given."""
    out = upstream_shaped_runtime()
    failure = job_spec.pop("failurePolicy", None)
    restart = job_spec.pop("restartPolicy", None)
    (rjob,) = out["spec"]["template"]["spec"]["replicatedJobs"]
    rjob["template"]["spec"].update(job_spec)
    if restart:
        rjob["template"]["spec"]["template"]["spec"]["restartPolicy"] = restart
    if failure is not None:
        out["spec"]["template"]["spec"]["failurePolicy"] = failure
    return out


def torch_env(job: dict[str, Any], rt: dict[str, Any] | None = None) -> list[dict[str, str]]:
    return [
        {k: p.env[k] for k in [*TORCH_VARS, "PET_MASTER_PORT"]}
        for p in pods(jobset(job, rt or runtime()))
    ]


def test_each_node_gets_the_torch_plugin_environment() -> None:
    """torch.go: PET_NODE_RANK is the completion index, the master the first pod's hostname in
    the JobSet's headless Service, port 29500; numProcPerNode as given."""
    assert torch_env(trainjob(name="grpo", nodes=2, numProcPerNode=8)) == [
        {
            "PET_NNODES": "2",
            "PET_NPROC_PER_NODE": "8",
            "PET_NODE_RANK": str(rank),
            "PET_MASTER_ADDR": "grpo-node-0-0.grpo",
            "PET_MASTER_PORT": "29500",
        }
        for rank in (0, 1)
    ]


@pytest.mark.parametrize(
    ("trainer", "expected"),
    [
        ({}, "1"),  # no resources: auto -> max(1, 0 CPUs)
        ({"resourcesPerNode": {"requests": {"cpu": "3"}}}, "3"),
        ({"resourcesPerNode": {"limits": {"cpu": "1500m"}}}, "2"),  # Value() rounds up
        ({"resourcesPerNode": {"limits": {"nvidia.com/gpu": "4"}}}, "auto"),
        ({"numProcPerNode": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "4"}}}, "2"),
    ],
)
def test_nproc_per_node_auto_follows_the_resources(trainer: dict[str, Any], expected: str) -> None:
    envs = torch_env(trainjob(nodes=1, **trainer))
    assert [e["PET_NPROC_PER_NODE"] for e in envs] == [expected]


def test_node_count_defaults_to_the_runtime_ml_policy() -> None:
    rt = runtime()
    rt["spec"]["mlPolicy"]["numNodes"] = 3
    assert [e["PET_NODE_RANK"] for e in torch_env(trainjob(nodes=None), rt)] == ["0", "1", "2"]


def test_jobset_shape_and_webhook_defaults() -> None:
    rt = runtime()
    del rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "restartPolicy"
    ]
    js = jobset(trainjob(name="grpo", nodes=4, image="img:1", args=["a"]), rt)
    (rjob,) = js["spec"]["replicatedJobs"]
    spec = rjob["template"]["spec"]
    assert (rjob["name"], rjob["replicas"]) == ("node", 1)
    assert (spec["parallelism"], spec["completions"], spec["completionMode"]) == (4, 4, "Indexed")
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure"
    (node,) = pod["containers"]
    assert (node["name"], node["image"], node["args"]) == ("node", "img:1", ["a"])
    assert node["ports"] == [{"containerPort": 29500}]
    assert js["spec"]["successPolicy"] == {"operator": "All"}
    assert js["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}


def test_pods_hostnames_labels_and_env_order() -> None:
    job = trainjob(name="grpo", nodes=2, env=[{"name": "A", "value": "1"}])
    replicas = pods(jobset(job, runtime()), restarts=2)
    assert [(p.name, p.host, p.subdomain, p.rank) for p in replicas] == [
        ("grpo-node-0-0", "grpo-node-0-0", "grpo", 0),
        ("grpo-node-0-1", "grpo-node-0-1", "grpo", 1),
    ]
    second = replicas[1]
    assert second.labels["batch.kubernetes.io/job-completion-index"] == "1"
    assert second.labels["jobset.sigs.k8s.io/jobset-name"] == "grpo"
    assert second.labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
    assert second.labels["jobset.sigs.k8s.io/job-index"] == "0"
    assert second.labels["jobset.sigs.k8s.io/restart-attempt"] == "2"
    # trainer.env first (upserted before the torch variables), JOB_COMPLETION_INDEX last.
    assert list(second.env) == ["A", *TORCH_VARS, "PET_MASTER_PORT", "JOB_COMPLETION_INDEX"]
    assert second.env["JOB_COMPLETION_INDEX"] == "1"
    assert pod_name("grpo-node-0-1", 2).startswith("grpo-node-0-1-")


def test_runtime_patches_merge_by_name_and_mount_path() -> None:
    patch = {
        "manager": "sarl.dev/operator",
        "trainingRuntimeSpec": {
            "template": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "volumes": [{"name": "v", "emptyDir": {}}],
                                            "containers": [
                                                {
                                                    "name": "node",
                                                    "volumeMounts": [
                                                        {"name": "v", "mountPath": "/data"}
                                                    ],
                                                }
                                            ],
                                        }
                                    }
                                }
                            },
                        }
                    ]
                },
            }
        },
    }
    job = trainjob()
    job["spec"]["runtimePatches"] = [patch]
    js = jobset(job, runtime())
    pod = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    (node,) = pod["containers"]
    assert node["image"] == "sarl-trainer:placeholder"  # the runtime's, kept by the merge
    # Appended after the runtime's own (dshm), by mountPath and by name.
    assert [m["mountPath"] for m in node["volumeMounts"]] == ["/dev/shm", "/data"]
    assert [v["name"] for v in pod["volumes"]] == ["dshm", "v"]
    assert js["metadata"]["labels"]["team"] == "a"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"env": [{"name": "PET_NNODES", "value": "9"}]}, "reserved envs"),
        ({"runtimeRef": {"name": "torch-distributed"}}, "no such runtime"),
        ({"runtimePatches": [{"manager": "me"}]}, "manager"),
    ],
)
def test_webhook_refusals(change: dict[str, Any], message: str) -> None:
    job = trainjob()
    if "runtimeRef" in change:
        job["spec"]["runtimeRef"] = change["runtimeRef"]
    elif "runtimePatches" in change:
        job["spec"]["runtimePatches"] = change["runtimePatches"]
    else:
        job["spec"]["trainer"].update(change)
    with pytest.raises(EmulationError, match=message):
        jobset(job, runtime())


# ---- runtime: real processes ----


@pytest.fixture(scope="module")
def network() -> Iterator[PodNetwork]:
    if (reason := namespaces_unavailable()) is not None:
        pytest.skip(f"pods need private mount and PID namespaces: {reason}")
    with pod_network("auto") as net:
        yield net


PROBE = """
import os, socket, sys
master = os.environ["PET_MASTER_ADDR"]
print("host", socket.gethostname(), os.environ["HOSTNAME"], flush=True)
print("master", socket.gethostbyname(master), flush=True)
other = "exp-node-0-1" if os.environ["PET_NODE_RANK"] == "0" else "exp-node-0-0"
names = {n for line in open("/etc/hosts") for n in line.split()[1:]}
print("bare", "known" if other in names else "unknown", f"{other}.exp" in names, flush=True)
"""


def test_hostnames_and_the_master_name_resolve_as_in_the_cluster(
    network: PodNetwork, tmp_path: Path
) -> None:
    job = trainjob(command=[sys.executable, "-c", PROBE])
    with running_trainjob(job, runtime(), network, root=tmp_path) as run:
        result = run.wait(timeout_s=60)
        logs = {name: run.logs(name) for name in run.pods}
        master_ip = run.address("exp-node-0-0")
    assert (result.condition, result.reason) == ("Complete", "AllJobsCompleted"), run.describe()
    for name, log in logs.items():
        assert f"host {name} {name}" in log
        assert f"master {master_ip}" in log
        assert "bare unknown True" in log  # another pod's bare hostname is not a DNS name


FAIL_ONCE = """
import os, sys
attempt = os.environ["RESTART_ATTEMPT"]
print("attempt", attempt, os.environ["PET_NODE_RANK"], flush=True)
sys.exit(3 if attempt == "0" and os.environ["PET_NODE_RANK"] == "1" else 0)
"""
RESTART_ENV = [
    {
        "name": "RESTART_ATTEMPT",
        "valueFrom": {
            "fieldRef": {"fieldPath": "metadata.annotations['jobset.sigs.k8s.io/restart-attempt']"}
        },
    }
]


@pytest.mark.parametrize(
    ("job_spec", "condition", "reason", "jobset_restarts", "restarts"),
    [
        # Never + backoffLimit 0: the Job fails; maxRestarts 1 recreates every pod once.
        (
            {"restartPolicy": "Never", "backoffLimit": 0, "failurePolicy": {"maxRestarts": 1}},
            "Complete",
            "AllJobsCompleted",
            1,
            {"exp-node-0-0": 1, "exp-node-0-1": 1},
        ),
        # maxRestarts 0: the first failed Job fails the JobSet.
        (
            {"restartPolicy": "Never", "backoffLimit": 0, "failurePolicy": {"maxRestarts": 0}},
            "Failed",
            "ReachedMaxRestarts",
            0,
            {"exp-node-0-0": 0, "exp-node-0-1": 0},
        ),
        # No failure policy: a failed Job fails the JobSet.
        (
            {"restartPolicy": "Never", "backoffLimit": 0},
            "Failed",
            "FailedJobs",
            0,
            {"exp-node-0-0": 0, "exp-node-0-1": 0},
        ),
        # OnFailure (the default) and the default backoffLimit 6: the kubelet restarts only the
        # failed container, with the same restart-attempt; it fails again (still attempt 0).
        ({}, "Failed", "FailedJobs", 0, {"exp-node-0-0": 0, "exp-node-0-1": 5}),
    ],
)
def test_failure_and_restart_policies(
    network: PodNetwork,
    tmp_path: Path,
    job_spec: dict[str, Any],
    condition: str,
    reason: str,
    jobset_restarts: int,
    restarts: dict[str, int],
) -> None:
    job = trainjob(command=[sys.executable, "-c", FAIL_ONCE], env=RESTART_ENV)
    with running_trainjob(job, runtime(**job_spec), network, root=tmp_path) as run:
        result = run.wait(timeout_s=60)
    assert (result.condition, result.reason) == (condition, reason), run.describe()
    assert result.jobset_restarts == jobset_restarts
    assert result.restarts == restarts
