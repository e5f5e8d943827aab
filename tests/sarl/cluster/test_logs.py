"""ClusterClient.logs: the training pod is found by the Training Operator's labels (falling
back to sarl's pod-template labels and the pod name) and its log is read over HTTP from the
in-memory API server (tests.support.kube_server, ``set_log``; see conftest). That server ignores
label selectors, so decoy pods check the client's own choice; the request log checks what was
asked of the API server."""

from __future__ import annotations

from typing import Any

import kmock
import pytest
from kubernetes import client as k8s
from kubernetes import config

from sarl.cluster import ClusterClient, ExperimentNotFound, NoPod
from tests.sarl.cluster.conftest import experiment_doc, set_status
from tests.support.kube_server import KubeServer
from tests.support.waiting import wait_until


def _pod(server: KubeServer, kubeconfig: Any, ns: str, name: str, labels: dict[str, str]) -> None:
    api = config.new_client_from_config(config_file=str(kubeconfig))
    body = {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "pytorch"}]},
    }
    k8s.CoreV1Api(api).create_namespaced_pod(ns, body)
    server.set_log(ns, name, f"log of {name}\nsecond line of {name}\n")


def _operator_labels(job: str, replica: str, index: int) -> dict[str, str]:
    return {
        "training.kubeflow.org/job-name": job,
        "training.kubeflow.org/replica-type": replica,
        "training.kubeflow.org/replica-index": str(index),
        "sarl.dev/experiment": job,
        "app.kubernetes.io/component": "trainer",
    }


@pytest.fixture
def job(client: ClusterClient, server: KubeServer, kubeconfig: Any, ns: str) -> str:
    """Experiment ``job`` with a master, a worker and an unrelated pod (a decoy)."""
    client.submit(experiment_doc("job"))
    _pod(server, kubeconfig, ns, "decoy", {"app": "other"})
    _pod(server, kubeconfig, ns, "job-worker-0", _operator_labels("job", "worker", 0))
    _pod(server, kubeconfig, ns, "job-master-0", _operator_labels("job", "master", 0))
    return "job"


def test_logs_of_the_master_pod(
    client: ClusterClient, server: KubeServer, job: str, ns: str
) -> None:
    assert list(client.logs(job)) == ["log of job-master-0", "second line of job-master-0"]
    selectors = server.call(
        lambda em: [
            r.params["labelSelector"]
            for r in em[kmock.namespace(ns)]
            if "labelSelector" in r.params
        ]
    )
    assert selectors == [
        "training.kubeflow.org/job-name=job,training.kubeflow.org/replica-type=master,"
        "training.kubeflow.org/replica-index=0"
    ]


def test_logs_of_a_worker_with_tail(
    client: ClusterClient, server: KubeServer, job: str, ns: str
) -> None:
    lines = list(client.logs(job, replica="worker", index=0, tail=5))
    assert lines[0] == "log of job-worker-0"
    params = server.call(lambda em: dict(em[kmock.subresource("log")][-1].params))
    assert params["tailLines"] == "5" and params.get("follow") in (None, "false", "False")


def test_follow_streams_until_the_server_closes(client: ClusterClient, job: str) -> None:
    assert list(client.logs(job, follow=True))[-1] == "second line of job-master-0"


def test_fallback_to_sarl_labels_and_pod_name(
    client: ClusterClient, server: KubeServer, kubeconfig: Any, ns: str
) -> None:
    client.submit(experiment_doc("plain"))
    trainer = {"sarl.dev/experiment": "plain", "app.kubernetes.io/component": "trainer"}
    embed = {"sarl.dev/experiment": "plain", "app.kubernetes.io/component": "embedding"}
    _pod(server, kubeconfig, ns, "plain-master-0", trainer)
    _pod(server, kubeconfig, ns, "plain-embedding-abc", embed)
    assert next(iter(client.logs("plain"))) == "log of plain-master-0"


def _trainjob_labels(job: str, rank: int) -> dict[str, str]:
    """What JobSet v0.12.0 (``labelAndAnnotateObject``) and the Indexed Job controller put on the
    pod of node rank ``rank`` of the TrainJob ``job`` (Kubeflow Trainer v2.3.0 names its JobSet
    after the TrainJob and its trainer replicated job ``node``), plus sarl's template labels."""
    return {
        "jobset.sigs.k8s.io/jobset-name": job,
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "jobset.sigs.k8s.io/job-index": "0",
        "batch.kubernetes.io/job-completion-index": str(rank),
        "sarl.dev/experiment": job,
        "app.kubernetes.io/component": "trainer",
    }


def test_logs_of_a_trainjob_by_node_rank(
    client: ClusterClient, server: KubeServer, kubeconfig: Any, ns: str
) -> None:
    """Pods of a Trainer v2 TrainJob (names ``<job>-node-0-<rank>-<suffix>``, no Training
    Operator labels): the master is node rank 0, worker i node rank i + 1."""
    client.submit(experiment_doc("tj"))
    _pod(server, kubeconfig, ns, "tj-node-0-1-x7k2p", _trainjob_labels("tj", 1))
    _pod(server, kubeconfig, ns, "tj-node-0-0-q9d4m", _trainjob_labels("tj", 0))
    _pod(server, kubeconfig, ns, "other-node-0-0-aaaaa", _trainjob_labels("other", 0))
    assert next(iter(client.logs("tj"))) == "log of tj-node-0-0-q9d4m"
    assert next(iter(client.logs("tj", replica="worker", index=0))) == "log of tj-node-0-1-x7k2p"


def test_no_pod_yet_names_the_phase(client: ClusterClient, server: KubeServer, ns: str) -> None:
    client.submit(experiment_doc("early"))
    set_status(server, ns, "early", {"phase": "Pending"})
    with pytest.raises(NoPod) as err:
        client.logs("early", replica="worker", index=1)
    assert str(err.value) == (
        f"no worker pod (index 1) of experiment early in namespace {ns} yet (phase: Pending)"
    )


def test_logs_of_an_unknown_experiment(client: ClusterClient) -> None:
    with pytest.raises(ExperimentNotFound):
        client.logs("nobody")


def test_wait_for_the_pod_to_start_then_read(
    client: ClusterClient, server: KubeServer, kubeconfig: Any, ns: str
) -> None:
    """Right after submit there is no pod: with ``wait`` the client polls until the Training
    Operator's pod exists and left Pending (a thread plays the cluster)."""
    import threading

    client.submit(experiment_doc("late"))
    set_status(server, ns, "late", {"phase": "Pending"})
    seen: list[str | None] = []

    def cluster() -> None:
        api = config.new_client_from_config(config_file=str(kubeconfig))
        core = k8s.CoreV1Api(api)
        body = {
            "metadata": {"name": "late-master-0", "labels": _operator_labels("late", "master", 0)},
            "spec": {"containers": [{"name": "pytorch"}]},
            "status": {"phase": "Pending"},
        }
        core.create_namespaced_pod(ns, body)
        server.set_log(ns, "late-master-0", "started\n")
        # The pod starts once the client has polled it Pending at least once (a fixed delay
        # raced a slow first poll on a loaded machine).
        wait_until(lambda: seen)
        core.patch_namespaced_pod("late-master-0", ns, {"status": {"phase": "Running"}})

    timer = threading.Timer(0.5, cluster)
    timer.start()
    try:
        lines = list(client.logs("late", wait=30, poll=0.1, on_wait=lambda i: seen.append(i.phase)))
    finally:
        timer.join()
    assert lines == ["started"]
    assert seen and set(seen) == {"Pending"}


def test_wait_gives_up_when_the_experiment_ended_without_a_pod(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    client.submit(experiment_doc("gone"))
    set_status(server, ns, "gone", {"phase": "Failed"})
    with pytest.raises(NoPod, match=r"phase: Failed"):
        client.logs("gone", wait=30, poll=0.1)
