"""The PyTorchJob environment (as the Training Operator v1.7/v1.9 sets it), the TrainJob
environment (as Kubeflow Trainer v2.3.0's torch plugin sets it), each node's Ray command and a
worker's wait for the head's Ray port."""

from __future__ import annotations

import logging
import socket
import threading
import time

import pytest

from sarl_jobs.cluster import (
    DEFAULT_MASTER_PORT,
    HEAD_WAIT_S,
    RAY_PORT,
    ClusterEnv,
    HeadUnreachable,
    head_wait_s,
    ray_start_command,
    wait_for_head,
)


def operator_env(node_rank: int, nnodes: int, nproc: str) -> dict[str, str]:
    """What Training Operator v1.9's ``setPodEnv`` gives replica ``node_rank`` of a job with
    ``nnodes`` replicas and ``nprocPerNode=nproc`` (envvar.go, master.go)."""
    per_node = int(nproc) if nproc.isdigit() else 1
    return {
        "PYTHONUNBUFFERED": "1",
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "MASTER_ADDR": "job-master-0",
        "PET_MASTER_ADDR": "job-master-0",
        "WORLD_SIZE": str(nnodes * per_node),
        "RANK": str(node_rank),
        "PET_NODE_RANK": str(node_rank),
        "PET_NPROC_PER_NODE": nproc,
        "PET_NNODES": str(nnodes),
    }


def trainjob_env(node_rank: int, nnodes: int, nproc: str, name: str = "job") -> dict[str, str]:
    """What Kubeflow Trainer v2.3.0 gives pod ``node_rank`` of a TrainJob ``name`` with
    ``numNodes`` ``nnodes`` (``pkg/runtime/framework/plugins/torch/torch.go``, ``EnforceMLPolicy``;
    ``PET_NODE_RANK`` is the fieldRef to the job-completion-index annotation, resolved; the Job
    controller adds ``JOB_COMPLETION_INDEX``). No MASTER_ADDR, MASTER_PORT, RANK or WORLD_SIZE."""
    return {
        "PET_NNODES": str(nnodes),
        "PET_NPROC_PER_NODE": nproc,
        "PET_NODE_RANK": str(node_rank),
        "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
        "PET_MASTER_PORT": "29500",
        "JOB_COMPLETION_INDEX": str(node_rank),
    }


@pytest.mark.parametrize(("nnodes", "nproc"), [(1, "8"), (2, "8"), (4, "1"), (2, "auto")])
def test_trainjob_environment(nnodes: int, nproc: str) -> None:
    """The master port is PET_MASTER_PORT (29500), not the PyTorchJob default 23456."""
    for rank in range(nnodes):
        env = ClusterEnv.from_env(trainjob_env(rank, nnodes, nproc))
        assert (env.node_rank, env.nnodes, env.is_head) == (rank, nnodes, rank == 0)
        assert env.nproc_per_node == (int(nproc) if nproc.isdigit() else None)
        assert (env.master_addr, env.master_port) == ("job-node-0-0.job", 29500)


def test_trainjob_workers_join_the_head_by_its_dns_name() -> None:
    command = ray_start_command(ClusterEnv.from_env(trainjob_env(1, 2, "8")), num_gpus=8)
    assert f"--address=job-node-0-0.job:{RAY_PORT}" in command and "--block" in command


def test_defaults_are_one_node() -> None:
    env = ClusterEnv.from_env({})
    assert (env.node_rank, env.nnodes, env.is_head) == (0, 1, True)
    assert env.master_port == DEFAULT_MASTER_PORT


@pytest.mark.parametrize(("nnodes", "nproc"), [(1, "8"), (2, "8"), (4, "1"), (2, "auto")])
def test_nodes_come_from_pet_variables_not_world_size(nnodes: int, nproc: str) -> None:
    """The 1-node x 8-GPU job: WORLD_SIZE is 8 (processes), the job has one node."""
    for rank in range(nnodes):
        env = ClusterEnv.from_env(operator_env(rank, nnodes, nproc))
        assert (env.node_rank, env.nnodes) == (rank, nnodes)
        assert env.nproc_per_node == (int(nproc) if nproc.isdigit() else None)
        assert env.is_head == (rank == 0)
        assert (env.master_addr, env.master_port) == ("job-master-0", 23456)


def test_without_pet_variables_world_size_counts_processes() -> None:
    env = ClusterEnv.from_env({"WORLD_SIZE": "16", "PET_NPROC_PER_NODE": "8", "RANK": "1"})
    assert (env.nnodes, env.node_rank) == (2, 1)


def test_rank_zero_starts_the_head() -> None:
    env = ClusterEnv.from_env(operator_env(0, 3, "8"))
    command = ray_start_command(env, num_gpus=8)
    assert command[:3] == ["ray", "start", "--head"] and f"--port={RAY_PORT}" in command
    assert "--num-gpus=8" in command and "--block" not in command


def test_other_ranks_join_the_head_and_block() -> None:
    env = ClusterEnv.from_env(operator_env(2, 3, "8"))
    command = ray_start_command(env, num_gpus=8)
    assert f"--address=job-master-0:{RAY_PORT}" in command and "--block" in command


def test_the_spec_node_count_is_checked() -> None:
    env = ClusterEnv.from_env(operator_env(0, 2, "8"))
    env.check_layout(nodes=2)
    with pytest.raises(ValueError, match=r"PET_NNODES=2 but spec\.resources\.nodes=1"):
        env.check_layout(nodes=1)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"PET_NODE_RANK": "3", "PET_NNODES": "3"},
            r"PET_NODE_RANK=3 is not in \[0, PET_NNODES=3\)",
        ),
        ({"RANK": "x"}, r"RANK='x' is not an integer"),
        ({"PET_NNODES": "1:4"}, r"PET_NNODES='1:4': an elastic node range"),
        ({"PET_NNODES": "0"}, r"PET_NNODES=0: must be >= 1"),
        ({"MASTER_PORT": "http"}, r"MASTER_PORT='http'"),
        ({"PET_MASTER_PORT": "http"}, r"PET_MASTER_PORT='http' is not an integer"),
        ({"PET_NNODES": "2", "PET_NODE_RANK": ""}, r"PET_NODE_RANK is empty"),
        (
            {"MASTER_ADDR": "a", "PET_MASTER_ADDR": "b"},
            r"MASTER_ADDR='a' but PET_MASTER_ADDR='b'",
        ),
        ({"MASTER_PORT": "1", "PET_MASTER_PORT": "2"}, r"MASTER_PORT='1' but PET_MASTER_PORT='2'"),
        (
            {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "8", "WORLD_SIZE": "2"},
            r"WORLD_SIZE=2 but PET_NNODES=2 x PET_NPROC_PER_NODE=8 = 16",
        ),
    ],
)
def test_bad_environment_is_refused(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ClusterEnv.from_env(env)


# ---- a worker waits for the head's Ray port (issue 35 item 7) ----


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_worker_waits_until_the_head_port_answers(caplog: pytest.LogCaptureFixture) -> None:
    """The name resolves (JobSet publishes not-ready addresses) but nothing listens yet: the
    worker backs off and returns once a real listener opens the port, logging each wait."""
    port = _free_port()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def open_later() -> None:
        time.sleep(0.6)
        server.bind(("127.0.0.1", port))
        server.listen()

    opener = threading.Thread(target=open_later)
    opener.start()
    try:
        with caplog.at_level(logging.INFO, logger="sarl_jobs.cluster"):
            waited = wait_for_head(
                "127.0.0.1", port, timeout_s=20, first_delay_s=0.1, max_delay_s=0.4
            )
    finally:
        opener.join()
        server.close()
    assert 0.5 < waited < 10
    waits = [r.getMessage() for r in caplog.records if "waiting for the Ray head" in r.message]
    assert waits and f"127.0.0.1:{port}" in waits[0]
    assert "answered after" in caplog.records[-1].getMessage()


def test_worker_gives_up_after_its_wait_naming_the_head_and_the_setting() -> None:
    pauses: list[float] = []
    now = [0.0]

    def refuse(host: str, port: int, timeout_s: float) -> None:
        raise ConnectionRefusedError(111, "Connection refused")

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    with pytest.raises(HeadUnreachable, match=r"job-node-0-0\.job:6379.*SARL_HEAD_WAIT_S"):
        wait_for_head(
            "job-node-0-0.job", RAY_PORT, timeout_s=100, connect=refuse, sleep=sleep,
            clock=lambda: now[0],
        )  # fmt: skip
    assert pauses[:6] == [1, 2, 4, 8, 16, 30]  # doubling, capped at HEAD_WAIT_MAX_S
    assert sum(pauses) == pytest.approx(100)  # the last pause ends at the deadline


@pytest.mark.parametrize(
    ("environ", "expected"), [({}, HEAD_WAIT_S), ({"SARL_HEAD_WAIT_S": "90"}, 90.0)]
)
def test_head_wait_setting(environ: dict[str, str], expected: float) -> None:
    assert head_wait_s(environ) == expected


@pytest.mark.parametrize("raw", ["soon", "0", "-5"])
def test_head_wait_setting_refuses_bad_values(raw: str) -> None:
    with pytest.raises(ValueError, match="SARL_HEAD_WAIT_S"):
        head_wait_s({"SARL_HEAD_WAIT_S": raw})
