"""ClusterClient: submit, get, list, status, replace and delete round-trip against the in-memory
API server (tests.support.kube_server, real HTTP through the kubernetes client; see conftest)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sarl.cluster import AlreadyExists, ClusterClient, ExperimentNotFound
from sarl.spec.loader import SpecError, load_experiment
from tests.sarl.cluster.conftest import experiment_doc, set_status
from tests.support.kube_server import EXPERIMENTS, KubeServer


def test_submit_stores_the_validated_spec_and_get_reads_it_back(
    client: ClusterClient, server: KubeServer, ns: str, tmp_path: Path
) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment_doc("alpha", preset="local-grpo-arithmetic")))
    info = client.submit(path)
    assert (info.name, info.namespace, info.generation) == ("alpha", ns, 1)
    assert info.uid and info.created is not None and info.phase == ""
    stored = server.objects(EXPERIMENTS, ns)["alpha"]
    assert stored["apiVersion"] == "sarl.dev/v1alpha1" and stored["kind"] == "Experiment"
    # The stored spec is the resolved one: loading it gives the same Experiment as the file.
    expected = load_experiment(path).spec.model_dump(mode="json")
    assert stored["spec"] == expected
    got = client.get("alpha")
    assert got.uid == info.uid and dict(got.spec) == expected


def test_list_and_status_show_the_operators_status(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    for name in ("b-exp", "a-exp"):
        client.submit(experiment_doc(name))
    set_status(
        server,
        ns,
        "a-exp",
        {
            "phase": "Running",
            "lastStep": 7,
            "lastReward": 0.25,
            "mlflowRunUrl": "http://mlflow/#/experiments/1/runs/abc",
            "mlflowRunId": "abc",
            "checkpointUri": "s3://b/ckpt/a-exp/step-5",
            "observedGeneration": 1,
            "conditions": [{"type": "TrainingRunning", "status": "True", "reason": "Running"}],
        },
    )
    infos = client.list()
    assert [i.name for i in infos] == ["a-exp", "b-exp"]
    st = client.status("a-exp")
    assert (st.phase, st.last_step, st.last_reward, st.mlflow_run_id) == ("Running", 7, 0.25, "abc")
    assert st.checkpoint_uri.endswith("step-5") and st.conditions[0].type == "TrainingRunning"
    assert client.status("b-exp").phase == ""


def test_list_all_namespaces_and_explicit_namespace(client: ClusterClient, ns: str) -> None:
    other = f"{ns}-other"
    client.submit(experiment_doc("here"))
    client.submit(experiment_doc("there"), namespace=other)
    assert [i.name for i in client.list()] == ["here"]
    assert [i.name for i in client.list(namespace=other)] == ["there"]
    everywhere = {(i.namespace, i.name) for i in client.list(all_namespaces=True)}
    assert {(ns, "here"), (other, "there")} <= everywhere


def test_second_submit_is_refused_with_a_hint_and_replace_updates_the_spec(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    client.submit(experiment_doc("dup"))
    with pytest.raises(AlreadyExists, match=rf"experiment dup already exists in namespace {ns}"):
        client.submit(experiment_doc("dup"))
    set_status(server, ns, "dup", {"phase": "Running"})
    changed = experiment_doc("dup", algorithm={"name": "grpo", "learning_rate": 0.002})
    info = client.submit(changed, replace=True)
    assert info.generation == 2
    stored = server.objects(EXPERIMENTS, ns)["dup"]
    assert stored["spec"]["algorithm"]["learning_rate"] == 0.002
    assert stored["status"]["phase"] == "Running"  # replace never touches the operator's status


def test_invalid_spec_never_reaches_the_api(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    bad = experiment_doc("bad", algorithm={"name": "grpo", "learning_rate": -1})
    with pytest.raises(SpecError, match=r"spec\.algorithm\.learning_rate=-1"):
        client.submit(bad)
    with pytest.raises(SpecError, match="DNS-1035"):
        client.submit(experiment_doc("Not_A_Name"))
    assert server.objects(EXPERIMENTS, ns) == {}


def test_what_the_trainer_would_refuse_never_reaches_the_api(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    twice = experiment_doc("two", reward=[{"name": "structure"}, {"name": "structure"}])
    with pytest.raises(SpecError, match=r"spec\.reward\[1\]\.name='structure'.*appear once"):
        client.submit(twice)
    assert server.objects(EXPERIMENTS, ns) == {}


def test_a_judge_without_url_is_left_for_the_operator_to_serve(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    judge = {"name": "structured_qa", "settings": {"judge_client": {"model": "Qwen/Qwen3-8B"}}}
    with pytest.raises(SpecError, match="judge_client"):
        load_experiment(experiment_doc("judge", reward=[judge]))  # the reward alone refuses it
    client.submit(experiment_doc("judge", reward=[judge]))
    stored = server.objects(EXPERIMENTS, ns)["judge"]["spec"]["reward"][0]["settings"]
    assert stored["judge_client"]["model"] == "Qwen/Qwen3-8B"
    assert not stored["judge_client"].get("url")  # the operator fills in its own service


def test_namespace_in_the_document_conflicting_with_the_argument_is_an_error(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    doc = experiment_doc("placed")
    doc["metadata"]["namespace"] = "elsewhere"
    with pytest.raises(SpecError, match="does not match the namespace"):
        client.submit(doc, namespace=ns)
    assert client.submit(doc).namespace == "elsewhere"  # no argument: the document's wins
    assert "placed" in server.objects(EXPERIMENTS, "elsewhere")


def test_delete_removes_the_experiment_and_a_second_delete_is_not_found(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    client.submit(experiment_doc("gone"))
    client.delete("gone", wait=True, timeout=5)
    assert server.objects(EXPERIMENTS, ns) == {}
    with pytest.raises(ExperimentNotFound, match=f"experiment gone not found in namespace {ns}"):
        client.delete("gone")
    with pytest.raises(ExperimentNotFound):
        client.get("gone")
