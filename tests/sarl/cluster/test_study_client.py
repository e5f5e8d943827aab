"""ClusterClient and Studies: submit (dispatch on ``kind``, client-side validation of every
arm x seed), get, list, runs, wait, replace and delete, against the in-memory Kubernetes API
server (kmock's emulation with ``studies`` declared; no real cluster here, see conftest and
study_server.py)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sarl.cluster import (
    AlreadyExists,
    ClusterClient,
    ClusterError,
    CrdNotInstalled,
    StudyInfo,
    StudyNotFound,
)
from sarl.spec.loader import SpecError, load_study
from tests.sarl.cluster.conftest import experiment_doc, set_status
from tests.sarl.cluster.study_server import (
    RUNNING,
    STUDIES,
    WITH_STUDIES,
    set_study_status,
    study_doc,
)
from tests.support.kube_server import EXPERIMENTS, KubeServer, kube_server

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "studies" / "sarl-math.yaml"


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    with kube_server(WITH_STUDIES) as ks:
        yield ks


def test_submit_dispatches_on_kind_and_stores_the_validated_study(
    client: ClusterClient, server: KubeServer, ns: str, tmp_path: Path
) -> None:
    """The Kubernetes API server is an in-memory emulation."""
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study_doc("cmp")))
    info = client.submit(path)
    assert isinstance(info, StudyInfo)
    assert (info.name, info.namespace, info.generation) == ("cmp", ns, 1)
    stored = server.objects(STUDIES, ns)["cmp"]
    assert (stored["apiVersion"], stored["kind"]) == ("sarl.dev/v1alpha1", "Study")
    assert stored["spec"] == load_study(path).spec.model_dump(mode="json")
    assert server.objects(EXPERIMENTS, ns) == {}  # the operator creates the runs, not the client
    # A Study object and a dict go the same way.
    assert isinstance(client.submit(load_study(study_doc("obj"))), StudyInfo)
    assert isinstance(client.submit(study_doc("raw")), StudyInfo)


def test_the_paper_example_passes_client_side_validation(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    """The Kubernetes API server is an in-memory emulation."""
    info = client.submit_study(EXAMPLE)
    assert info.name == "sarl-math"
    assert len(server.objects(STUDIES, ns)["sarl-math"]["spec"]["arms"]) == 6


@pytest.mark.parametrize(
    ("arm_override", "message"),
    [
        (
            {"algorithm": {"learning_rate": -1}},
            r"spec\.arms\[1\]\.override\.algorithm\.learning_rate",
        ),
        # What the verl trainer would refuse: named with the arm and seed, before any request.
        (
            {"reward": [{"name": "structure", "settings": {"embedder": {"kind": "policy"}}}]},
            r"spec\.arms\[1\] \(high, seed 0\): spec\.reward\[0\]\.settings\.embedder",
        ),
    ],
)
def test_an_invalid_arm_never_reaches_the_api(
    client: ClusterClient, server: KubeServer, ns: str, arm_override: dict, message: str
) -> None:
    """The Kubernetes API server is an in-memory emulation."""
    doc = study_doc("bad")
    doc["spec"]["arms"][1]["override"] = arm_override
    with pytest.raises(SpecError, match=message):
        client.submit(doc)
    assert server.objects(STUDIES, ns) == {}


def test_get_list_runs_and_status_show_the_operators_counts(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    """The Kubernetes API server is an in-memory emulation; the test writes the status and the
    labelled Experiments the operator would."""
    client.submit(study_doc("b-study"))
    client.submit(study_doc("a-study"))
    set_study_status(server, ns, "a-study", RUNNING)
    for name, labels in [
        ("a-study-low-s0", {"sarl.dev/study": "a-study", "sarl.dev/arm": "low"}),
        ("a-study-high-s0", {"sarl.dev/study": "a-study", "sarl.dev/arm": "high"}),
        ("other", {}),
    ]:
        doc = experiment_doc(name)
        doc["metadata"]["labels"] = labels
        client.submit(doc)
    set_status(server, ns, "a-study-low-s0", {"phase": "Running"})
    assert [s.name for s in client.list_studies()] == ["a-study", "b-study"]
    st = client.get_study("a-study").status
    assert (st.phase, st.total, st.pending, st.running, st.succeeded, st.failed) == (
        "Running",
        4,
        1,
        2,
        1,
        0,
    )
    assert st.mlflow_run_url.endswith("/runs/p1") and st.mlflow_parent_run_id == "p1"
    assert st.summary() == "Running, 1/4 succeeded, 2 running, 1 pending"
    runs = client.study_runs("a-study")
    assert [(r.name, r.phase) for r in runs] == [
        ("a-study-high-s0", ""),
        ("a-study-low-s0", "Running"),
    ]
    assert client.get_study("b-study").status.summary() == "no phase yet"


def test_second_submit_is_refused_and_replace_updates_the_spec(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    """The Kubernetes API server is an in-memory emulation."""
    client.submit(study_doc("dup"))
    with pytest.raises(AlreadyExists, match=rf"study dup already exists in namespace {ns}"):
        client.submit(study_doc("dup"))
    set_study_status(server, ns, "dup", RUNNING)
    info = client.submit(study_doc("dup", seeds=[0, 1, 2], parallelism=2), replace=True)
    assert info.generation == 2
    stored = server.objects(STUDIES, ns)["dup"]
    assert stored["spec"]["seeds"] == [0, 1, 2] and stored["spec"]["parallelism"] == 2
    assert stored["status"]["phase"] == "Running"  # replace never touches the operator's status


def test_wait_for_a_study(client: ClusterClient, server: KubeServer, ns: str) -> None:
    """The Kubernetes API server is an in-memory emulation; the test writes the phases."""
    client.submit(study_doc("waited"))
    set_study_status(server, ns, "waited", {**RUNNING, "phase": "Succeeded"})
    seen: list[str] = []
    info = client.wait_study("waited", poll_interval=0.01, on_poll=lambda i: seen.append(i.phase))
    assert info.phase == "Succeeded" and seen == ["Succeeded"]
    failed = {**RUNNING, "phase": "Failed"}
    failed["conditions"] = [
        {"type": "Reported", "status": "False", "reason": "ReportFailed", "message": "boom"}
    ]
    set_study_status(server, ns, "waited", failed)
    with pytest.raises(ClusterError, match=r"study waited in namespace .* ended Failed.*: boom"):
        client.wait_study("waited", until="Succeeded", poll_interval=0.01)


def test_delete_removes_the_study_and_a_second_delete_is_not_found(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    """The Kubernetes API server is an in-memory emulation (no garbage collector: the
    Experiments a real cluster would delete with the Study are the e2e test's to check)."""
    client.submit(study_doc("gone"))
    client.delete_study("gone", wait=True, timeout=5)
    assert server.objects(STUDIES, ns) == {}
    with pytest.raises(StudyNotFound, match=f"study gone not found in namespace {ns}"):
        client.delete_study("gone")
    with pytest.raises(StudyNotFound):
        client.get_study("gone")


def test_a_cluster_without_the_study_crd_says_so(tmp_path: Path) -> None:
    """An in-memory API server serving only the Experiment CRD (an older platform chart)."""
    with kube_server() as old:
        client = ClusterClient(kubeconfig=old.kubeconfig(tmp_path / "kc", "t"), retries=0)
        with pytest.raises(CrdNotInstalled, match=r"studies\.sarl\.dev"):
            client.submit(study_doc("nocrd"))
        client.submit(experiment_doc("still-fine"))  # Experiments are unaffected


def test_experiments_are_unaffected_by_the_dispatch(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    """The Kubernetes API server is an in-memory emulation."""
    info = client.submit(copy.deepcopy(experiment_doc("plain")))
    assert not isinstance(info, StudyInfo) and info.name == "plain"
    assert server.objects(STUDIES, ns) == {}
