"""The PyTorchJob emulator does what Training Operator v1.9.0 and the kubelet do.

The expected values are the upstream behaviour read from kubeflow/training-operator v1.9.0
(``pkg/controller.v1/pytorch/envvar.go`` and ``master.go``, ``pkg/apis/kubeflow.org/v1/
pytorch_defaults.go``, ``pkg/webhooks/pytorch/pytorchjob_webhook.go``, ``pkg/core``), written
out per case rather than recomputed. Nothing here talks to Kubernetes: the API server, the
controller and the kubelet are the emulator's. The runtime tests start real processes (short
``python -c`` containers) in real mount/PID/network namespaces and are skipped, with the reason,
where this machine does not allow them (not root, no ``unshare`` or ``ip``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.jobs.pytorchjob_emulator import (
    ContainerConfigError,
    EmulationError,
    JobRun,
    PodNetwork,
    apply_defaults,
    namespaces_unavailable,
    netns_unavailable,
    pod_network,
    replica_envs,
    running_pytorchjob,
    should_restart,
)
from tests.jobs.pytorchjob_emulator.pods import host_paths_under_tmp

CONTROLLER_VARS = [
    "PYTHONUNBUFFERED",
    "MASTER_PORT",
    "PET_MASTER_PORT",
    "MASTER_ADDR",
    "PET_MASTER_ADDR",
    "WORLD_SIZE",
    "RANK",
    "PET_NODE_RANK",
    "PET_NPROC_PER_NODE",
    "PET_NNODES",
]


#: Top-level names in a pod's fresh /tmp: this checkout or venv when they live under /tmp.
CARRIED = sorted({Path(p).relative_to("/tmp").parts[0] for p in host_paths_under_tmp()})


def container(**extra: Any) -> dict[str, Any]:
    return {"name": "pytorch", "image": "trainer:1", "command": ["python", "-m", "train"], **extra}


def job(
    *,
    masters: int | None = 1,
    workers: int = 0,
    nproc: str | None = None,
    name: str = "exp",
    **pod: Any,
) -> dict[str, Any]:
    """A PyTorchJob as a user (or sarl's builders) writes it: no defaults filled in."""
    template = {"spec": {"containers": [container()], **pod}}
    replicas: dict[str, Any] = {}
    if masters is not None:
        replicas["Master"] = {"replicas": masters, "template": template}
    if workers:
        replicas["Worker"] = {"replicas": workers, "template": template}
    spec: dict[str, Any] = {"pytorchReplicaSpecs": replicas}
    if nproc is not None:
        spec["nprocPerNode"] = nproc
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "research"},
        "spec": spec,
    }


def operator_env(rank: int, world: str, nnodes: str, nproc: str) -> dict[str, str]:
    return {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "MASTER_ADDR": "exp-master-0",
        "PET_MASTER_ADDR": "exp-master-0",
        "WORLD_SIZE": world,
        "RANK": str(rank),
        "PET_NODE_RANK": str(rank),
        "PET_NPROC_PER_NODE": nproc,
        "PET_NNODES": nnodes,
    }


# ---- the controller: names, ranks, environment ----


@pytest.mark.parametrize(
    ("workers", "nproc", "world", "names"),
    [
        (0, "8", "8", ["exp-master-0"]),  # 1 node x 8 GPUs: WORLD_SIZE counts processes
        (1, "8", "16", ["exp-master-0", "exp-worker-0"]),
        (3, "1", "4", ["exp-master-0", "exp-worker-0", "exp-worker-1", "exp-worker-2"]),
        (1, "auto", "2", ["exp-master-0", "exp-worker-0"]),  # not a number: 1 per replica
    ],
)
def test_every_replica_gets_the_operator_environment(
    workers: int, nproc: str, world: str, names: list[str]
) -> None:
    replicas = replica_envs(job(workers=workers, nproc=nproc))
    assert [r.name for r in replicas] == names
    assert [r.rank for r in replicas] == list(range(len(names)))  # Worker i is rank i + 1
    nnodes = str(len(names))
    for rank, replica in enumerate(replicas):
        assert list(replica.env) == CONTROLLER_VARS  # setPodEnv's order
        assert replica.env == operator_env(rank, world, nnodes, nproc)
        assert replica.command == ("python", "-m", "train")


def test_defaults_fill_port_nproc_restart_policy_and_replica_types() -> None:
    raw = job(workers=1)
    raw["spec"]["pytorchReplicaSpecs"] = {
        "master": raw["spec"]["pytorchReplicaSpecs"].pop("Master"),  # any case is accepted
        "WORKER": raw["spec"]["pytorchReplicaSpecs"].pop("Worker"),
    }
    del raw["spec"]["pytorchReplicaSpecs"]["master"]["replicas"]
    done = apply_defaults(raw)
    spec = done["spec"]
    assert sorted(spec["pytorchReplicaSpecs"]) == ["Master", "Worker"]
    assert spec["nprocPerNode"] == "auto"
    assert spec["runPolicy"] == {"cleanPodPolicy": "None"}
    for rspec in spec["pytorchReplicaSpecs"].values():
        assert (rspec["replicas"], rspec["restartPolicy"]) == (1, "OnFailure")
        (ctr,) = rspec["template"]["spec"]["containers"]
        assert ctr["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]
    assert raw["spec"]["pytorchReplicaSpecs"]["master"].get("replicas") is None  # a copy
    master, worker = replica_envs(raw)
    assert (master.env["PET_NPROC_PER_NODE"], master.env["WORLD_SIZE"]) == ("auto", "2")
    assert worker.restart_policy == "OnFailure"


def test_a_named_port_on_the_pytorch_container_is_the_master_port() -> None:
    raw = job(workers=1)
    ctr = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    ctr["ports"] = [{"name": "pytorchjob-port", "containerPort": 29500}]
    master, worker = replica_envs(raw)
    assert master.env["MASTER_PORT"] == master.env["PET_MASTER_PORT"] == "29500"
    assert worker.env["MASTER_PORT"] == "29500"  # the Master's port, on every replica


def test_without_a_master_there_is_no_rank_but_v1_9_still_sets_nproc_and_nnodes() -> None:
    """v1.9 sets PET_NPROC_PER_NODE outside the Master block; v1.7 set it only inside it."""
    first, second = replica_envs(job(masters=None, workers=2, nproc="4"))
    assert first.env == {"PYTHONUNBUFFERED": "1", "PET_NPROC_PER_NODE": "4", "PET_NNODES": "2"}
    assert (first.rank, second.rank) == (None, None)
    assert first.labels["training.kubeflow.org/job-role"] == "master"  # IsMasterRole: worker 0
    assert "training.kubeflow.org/job-role" not in second.labels


def test_pod_labels() -> None:
    master, worker = replica_envs(job(workers=1))
    assert worker.labels == {
        "training.kubeflow.org/operator-name": "pytorchjob-controller",
        "training.kubeflow.org/job-name": "exp",
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": "0",
    }
    assert master.labels["training.kubeflow.org/job-role"] == "master"


# ---- the kubelet: env references, expansion ----


def with_env(env: list[dict[str, Any]], args: list[str] | None = None) -> dict[str, Any]:
    raw = job()
    ctr = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    ctr["env"] = env
    if args is not None:
        ctr["args"] = args
    return raw


SECRET_REF = {"valueFrom": {"secretKeyRef": {"name": "s3", "key": "AWS_ACCESS_KEY_ID"}}}


def test_secret_and_configmap_references_resolve() -> None:
    raw = with_env(
        [
            {"name": "AWS_ACCESS_KEY_ID", **SECRET_REF},
            {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ]
    )
    (master,) = replica_envs(
        raw,
        secrets={"s3": {"AWS_ACCESS_KEY_ID": "key-id"}},
        configmaps={"cfg": {"mode": "fast"}},
        pod_ips={"exp-master-0": "10.1.2.3"},
    )
    assert (master.env["AWS_ACCESS_KEY_ID"], master.env["MODE"]) == ("key-id", "fast")
    assert (master.env["POD"], master.env["IP"]) == ("exp-master-0", "10.1.2.3")


@pytest.mark.parametrize(
    ("secrets", "message"),
    [
        ({}, r"env AWS_ACCESS_KEY_ID: secret 's3' not found"),
        ({"s3": {"other": "x"}}, r"couldn't find key AWS_ACCESS_KEY_ID in secret 's3'"),
    ],
)
def test_a_missing_secret_or_key_is_a_container_config_error(
    secrets: dict[str, dict[str, str]], message: str
) -> None:
    with pytest.raises(ContainerConfigError, match=message):
        replica_envs(with_env([{"name": "AWS_ACCESS_KEY_ID", **SECRET_REF}]), secrets=secrets)


def test_an_optional_missing_secret_leaves_the_variable_unset() -> None:
    ref = {"secretKeyRef": {"name": "s3", "key": "k", "optional": True}}
    (master,) = replica_envs(with_env([{"name": "TOKEN", "valueFrom": ref}]))
    assert "TOKEN" not in master.env


def test_expansion_order_and_later_duplicates() -> None:
    env = [
        {"name": "BASE", "value": "/data"},
        {"name": "PATH_IN", "value": "$(BASE)/in $(LATER) $$(BASE)"},
        {"name": "LATER", "value": "x"},
        {"name": "RANK", "value": "99"},  # the controller's RANK comes after and wins
    ]
    (master,) = replica_envs(with_env(env, args=["$(PATH_IN)", "--rank=$(RANK)"]))
    assert master.env["PATH_IN"] == "/data/in $(LATER) $(BASE)"  # undefined-yet stays
    assert master.env["RANK"] == "0"
    assert master.command[-2:] == ("/data/in $(LATER) $(BASE)", "--rank=0")


# ---- refused jobs ----


def _two_masters() -> dict[str, Any]:
    return job(masters=2)


def _no_pytorch_container() -> dict[str, Any]:
    raw = job()
    raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["name"] = "x"
    return raw


def _no_image() -> dict[str, Any]:
    raw = job()
    del raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"]
    return raw


def _elastic() -> dict[str, Any]:
    raw = job(masters=None, workers=2)
    raw["spec"]["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 2}
    return raw


def _mount(path: str, **extra: Any) -> Any:
    def make() -> dict[str, Any]:
        raw = job()
        ctr = raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
        ctr["volumeMounts"] = [{"name": "v", "mountPath": path, **extra}]
        return raw

    return make


def _sidecar() -> dict[str, Any]:
    raw = job()
    raw["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"].append(
        {"name": "proxy", "image": "envoy"}
    )
    return raw


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (_two_masters, r"\[Master\]\.replicas: Forbidden: must be 1"),
        (_no_pytorch_container, r"a container named pytorch"),
        (_no_image, r"image: Required value"),
        (_elastic, r"elasticPolicy: elastic jobs are not emulated"),
        (_sidecar, r"sidecars and init containers are not emulated"),
        (_mount("/etc/sarl", subPath="a"), r"volumeMounts\[v\]: subPath is not emulated"),
        (_mount("/tmp/data"), r"below /tmp, which each container start replaces"),
    ],
)
def test_refused_jobs_name_the_field(make: Any, message: str) -> None:
    with pytest.raises(EmulationError, match=message):
        replica_envs(make())


@pytest.mark.parametrize(
    ("policy", "code", "restart"),
    [
        ("OnFailure", 0, False),
        ("OnFailure", 137, True),
        ("OnFailure", 1, True),
        ("Never", 137, False),
        ("Always", 0, True),
        ("ExitCode", 1, False),  # a permanent error
        ("ExitCode", 137, True),  # killed by a signal: retryable
    ],
)
def test_restart_policies(policy: str, code: int, restart: bool) -> None:
    assert should_restart(policy, code) is restart


# ---- runtime: processes in namespaces ----

#: A container that reports what it sees as JSON on stdout.
REPORT = """
import json, os, socket, sys
config = open(sys.argv[1]).read()
try:
    open(sys.argv[1], "a")
    writable = True
except OSError:
    writable = False
print(json.dumps({
    "hostname": socket.gethostname(),
    "master": socket.gethostbyname(os.environ["MASTER_ADDR"]),
    "config": config, "config_writable": writable, "tmp": os.listdir("/tmp"),
    "python": sys.executable, "pid": os.getpid(),
}))
"""


def report_job(**kw: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    raw = job(workers=1, **kw)
    for rspec in raw["spec"]["pytorchReplicaSpecs"].values():
        (ctr,) = rspec["template"]["spec"]["containers"]
        ctr["command"] = ["python", "-c", REPORT]
        ctr["args"] = ["/etc/sarl/experiment.yaml"]
        ctr["volumeMounts"] = [{"name": "config", "mountPath": "/etc/sarl", "readOnly": True}]
        rspec["template"]["spec"]["volumes"] = [{"name": "config", "configMap": {"name": "cfg"}}]
    cm = {"metadata": {"name": "cfg", "namespace": "research"}, "data": {"experiment.yaml": "a: 1"}}
    return raw, cm


def reports(run: JobRun) -> dict[str, dict[str, Any]]:
    return {name: json.loads(run.logs(name).splitlines()[-1]) for name in run.pods}


@pytest.fixture
def loopback() -> Iterator[PodNetwork]:
    """The loopback network, for containers in their own mount and PID namespaces."""
    if (reason := namespaces_unavailable()) is not None:
        pytest.skip(f"container namespaces unavailable: {reason}")
    with pod_network("loopback") as net:
        yield net


@pytest.fixture
def netns() -> Iterator[PodNetwork]:
    if (reason := netns_unavailable()) is not None:
        pytest.skip(f"network namespaces unavailable: {reason}")
    with pod_network("netns") as net:
        yield net


def netns_and_links() -> str:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return listed + links


def test_pods_in_network_namespaces_see_their_config_names_and_the_host(
    netns: PodNetwork, tmp_path: Path
) -> None:
    raw, cm = report_job(nproc="1")
    peers: list[str] = []
    with socket.create_server((netns.host_address, 0)) as server:
        port = server.getsockname()[1]
        for rspec in raw["spec"]["pytorchReplicaSpecs"].values():
            (ctr,) = rspec["template"]["spec"]["containers"]
            call_host = f"\nsocket.create_connection(({netns.host_address!r}, {port})).close()"
            ctr["command"] = ["python", "-c", REPORT + call_host]
        accept = threading.Thread(target=lambda: peers.extend(_accept(server, 2)), daemon=True)
        accept.start()
        with running_pytorchjob(raw, netns, root=tmp_path, configmaps=[cm]) as run:
            result = run.wait(timeout_s=60)
            addresses = {name: run.address(name) for name in run.pods}
            seen = reports(run)
        accept.join(timeout=10)
    assert result.condition == "Succeeded", run.describe()
    assert sorted(peers) == sorted(addresses.values())  # each pod from its own address
    assert len(set(addresses.values())) == 2
    for name, report in seen.items():
        assert report["hostname"] == name
        assert report["master"] == addresses["exp-master-0"]
        assert (report["config"], report["config_writable"]) == ("a: 1", False)
        assert report["tmp"] == CARRIED  # a fresh /tmp (plus a checkout that lives under /tmp)
        assert report["python"] == str(Path(sys.executable).parent / "python")
        assert report["pid"] == 1  # the container's own PID namespace
    assert not Path("/etc/sarl").exists()  # mounted in the pods only


def _accept(server: socket.socket, count: int) -> list[str]:
    server.settimeout(30)
    out = []
    for _ in range(count):
        conn, (address, _) = server.accept()
        conn.close()
        out.append(address)
    return out


def test_the_network_is_removed_even_when_the_test_fails(tmp_path: Path) -> None:
    if (reason := netns_unavailable()) is not None:
        pytest.skip(f"network namespaces unavailable: {reason}")
    raw, cm = report_job()
    with pytest.raises(RuntimeError, match="boom"), pod_network("netns") as net:
        bridge = net.bridge
        with running_pytorchjob(raw, net, root=tmp_path, configmaps=[cm]) as run:
            assert bridge in netns_and_links()
            names = [f"sarl-{bridge.removeprefix('sarlbr')}-{i}" for i in range(2)]
            assert all(n in netns_and_links() for n in names)
            pids = [pod.process.pid for pod in run.pods.values() if pod.process]
            raise RuntimeError("boom")
    left = netns_and_links()
    assert bridge not in left and not any(n in left for n in names)
    assert not _alive(pids)


#: A container that records its attempt in a pod volume (kept across restarts) and in /tmp
#: (lost), starts a child in a session of its own, and waits to be killed or exits $EXIT_CODE.
SURVIVOR = """
import os, subprocess, sys, time
with open("/var/sarl-data/attempts", "a") as f:
    f.write(f"{len(os.listdir('/tmp'))}\\n")
open("/tmp/started", "w").close()
child = subprocess.Popen(  # leaves the process group: only the PID namespace catches it
    [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
)
open("/var/sarl-data/child", "w").write(f"{os.getpid()} {child.pid}")
if os.environ.get("EXIT_CODE"):
    sys.exit(int(os.environ["EXIT_CODE"]))
time.sleep(600)
"""


def survivor_job(policy: str, exit_code: str = "", backoff: int | None = None) -> dict[str, Any]:
    raw = job(nproc="1")
    rspec = raw["spec"]["pytorchReplicaSpecs"]["Master"]
    rspec["restartPolicy"] = policy
    (ctr,) = rspec["template"]["spec"]["containers"]
    ctr["command"] = ["python", "-c", SURVIVOR]
    ctr["env"] = [{"name": "EXIT_CODE", "value": exit_code}]
    ctr["volumeMounts"] = [{"name": "data", "mountPath": "/var/sarl-data"}]
    rspec["template"]["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    if backoff is not None:
        raw["spec"]["runPolicy"] = {"backoffLimit": backoff}
    return raw


def test_a_killed_container_restarts_on_failure_with_its_volume_and_a_new_tmp(
    loopback: PodNetwork, tmp_path: Path
) -> None:
    with running_pytorchjob(survivor_job("OnFailure"), loopback, root=tmp_path) as run:
        data = run.pods["exp-master-0"].volume_dirs["data"]
        run.wait_until(lambda: (data / "child").exists(), timeout_s=120)
        first_env = dict(run.pods["exp-master-0"].replica.env)
        run.kill("exp-master-0")
        run.wait_until(lambda: run.restarts["exp-master-0"] == 1, timeout_s=120)
        run.wait_until(lambda: len((data / "attempts").read_text().split()) == 2, timeout_s=120)
        assert run.pods["exp-master-0"].exit_codes == [137]  # SIGKILL, as the kubelet says
        assert run.pods["exp-master-0"].replica.env == first_env
        run.restart("exp-master-0")  # by hand: the same, once more
        run.wait_until(lambda: len((data / "attempts").read_text().split()) == 3, timeout_s=120)
        assert run.restarts == {"exp-master-0": 2}
    # /tmp fresh each time (only a checkout under /tmp is carried in)
    assert (data / "attempts").read_text().split() == [str(len(CARRIED))] * 3


def test_every_process_of_a_killed_container_dies(loopback: PodNetwork, tmp_path: Path) -> None:
    with running_pytorchjob(survivor_job("Never"), loopback, root=tmp_path) as run:
        data = run.pods["exp-master-0"].volume_dirs["data"]
        run.wait_until(lambda: (data / "child").exists(), timeout_s=120)
        process = run.pods["exp-master-0"].process
        assert process is not None
        host_children = _descendants(process.pid)
        assert len(host_children) >= 2  # the container's main process and its child
        run.kill("exp-master-0")
        result = run.wait(timeout_s=120)
    assert (result.condition, result.exit_codes) == ("Failed", {"exp-master-0": 137})
    assert not _alive(host_children)


def _alive(pids: list[int], wait_s: float = 60.0) -> list[int]:
    """Those of ``pids`` still running (not zombies) after at most ``wait_s``: the kernel kills
    a dead PID namespace's processes asynchronously (a passing check returns at once; 60 s for
    a loaded machine)."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for pid in pids:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[0] != "Z":
                alive.append(pid)
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _descendants(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    kids = [int(p) for p in out.split()]
    return kids + [d for k in kids for d in _descendants(k)]


def test_the_job_fails_once_restarts_reach_the_backoff_limit(
    loopback: PodNetwork, tmp_path: Path
) -> None:
    failing = survivor_job("OnFailure", exit_code="3", backoff=2)
    with running_pytorchjob(failing, loopback, root=tmp_path) as run:
        result = run.wait(timeout_s=60)
    assert result.condition == "Failed"
    assert result.restarts == {"exp-master-0": 2}
    assert run.pods["exp-master-0"].exit_codes[:2] == [3, 3]


def test_without_namespaces_paths_and_pod_names_are_rewritten(tmp_path: Path) -> None:
    raw, cm = report_job()
    for rspec in raw["spec"]["pytorchReplicaSpecs"].values():
        (ctr,) = rspec["template"]["spec"]["containers"]
        ctr["command"] = [
            "python",
            "-c",
            "import os, sys; print(open(sys.argv[1]).read(), os.environ['MASTER_ADDR'])",
        ]
    with (
        pod_network("loopback") as net,
        running_pytorchjob(raw, net, root=tmp_path, configmaps=[cm], namespaces=False) as run,
    ):
        result = run.wait(timeout_s=60)
        logs = {name: run.logs(name).strip() for name in run.pods}
    assert result.condition == "Succeeded", run.describe()
    assert logs == {"exp-master-0": "a: 1 127.0.0.1", "exp-worker-0": "a: 1 127.0.0.1"}
