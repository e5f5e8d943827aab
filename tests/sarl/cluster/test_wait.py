"""ClusterClient.wait and delete(wait=True): polling until a phase, failures and timeouts.

The operator is played by a thread that writes the Experiment's status into the in-memory API
server (tests.support.kube_server; see conftest) while the client polls it over HTTP."""

from __future__ import annotations

import time

import pytest

from sarl.cluster import ClusterClient, ExperimentInfo, ExperimentNotFound, WaitTimeout
from sarl.cluster.errors import ClusterError
from tests.sarl.cluster.conftest import experiment_doc, set_status
from tests.support.kube_server import KubeServer


def test_wait_returns_when_the_operator_reports_succeeded(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    client.submit(experiment_doc("w"))
    set_status(server, ns, "w", {"phase": "Running", "lastStep": 3})
    done = {"phase": "Succeeded", "lastStep": 10, "lastReward": 0.5}
    seen: list[ExperimentInfo] = []

    def on_poll(info: ExperimentInfo) -> None:
        # The operator finishes the run once the client has seen it Running (a fixed timer
        # raced the client's first poll on a loaded machine).
        seen.append(info)
        if len(seen) == 1:
            set_status(server, ns, "w", done)

    info = client.wait("w", timeout=60, poll_interval=0.05, on_poll=on_poll)
    assert (info.phase, info.status.last_step, info.status.last_reward) == ("Succeeded", 10, 0.5)
    assert seen[0].phase == "Running" and seen[-1].phase == "Succeeded"


def test_wait_for_a_phase_that_can_no_longer_come_fails_with_the_reason(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    client.submit(experiment_doc("f"))
    failed = {
        "phase": "Failed",
        "conditions": [
            {"type": "Ready", "status": "False", "reason": "JobFailed", "message": "OOMKilled"}
        ],
    }
    set_status(server, ns, "f", failed)
    with pytest.raises(ClusterError, match="ended Failed while waiting for Running: OOMKilled"):
        client.wait("f", until="Running", timeout=5, poll_interval=0.05)
    assert client.wait("f", timeout=5).phase == "Failed"  # the default waits for either end


def test_wait_times_out_with_the_current_state(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    client.submit(experiment_doc("slow"))
    set_status(server, ns, "slow", {"phase": "Running", "lastStep": 2})
    start = time.monotonic()
    with pytest.raises(WaitTimeout, match=r"is Running, step 2 after 0.3s of waiting for"):
        client.wait("slow", timeout=0.3, poll_interval=0.05)
    assert time.monotonic() - start < 30  # ended at its timeout, not hung


@pytest.mark.parametrize("until", ["Done", ["Running", "Sleeping"], []])
def test_wait_rejects_unknown_phases(client: ClusterClient, until: object) -> None:
    with pytest.raises(ValueError, match="phases are Pending, Queued, Running, Succeeded, Failed"):
        client.wait("x", until=until)  # type: ignore[arg-type]


def test_wait_on_a_missing_experiment_is_not_found(client: ClusterClient) -> None:
    with pytest.raises(ExperimentNotFound):
        client.wait("never", timeout=1, poll_interval=0.05)


def test_delete_wait_times_out_while_a_finalizer_holds_the_experiment(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    client.submit(experiment_doc("held"))
    import kmock

    from tests.support.kube_server import EXPERIMENTS

    key = (kmock.resource(EXPERIMENTS.key), ns, "held")
    server.call(lambda em: em.objects[key].patch({"metadata": {"finalizers": ["x/y"]}}))
    with pytest.raises(WaitTimeout, match="still exists 0.3s after deletion"):
        client.delete("held", wait=True, timeout=0.3, poll_interval=0.05)
    server.call(lambda em: em.objects[key].patch({"metadata": {"finalizers": None}}))
