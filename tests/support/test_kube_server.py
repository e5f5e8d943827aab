"""tests.support.kube_server: the in-memory API server answers the kubernetes client as the operator
and cluster-client tests need (discovery, CRUD, lists with kind, generation, pod logs).

It is itself a stand-in for a real API server (none can run here); these tests pin the behaviour
the other tests rely on, through the real ``kubernetes`` client over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("kmock")
from kubernetes import client, config, dynamic
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError

from tests.support.kube_server import CONFIGMAPS, EXPERIMENTS, KubeServer, kube_server


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    with kube_server() as ks:
        yield ks


@pytest.fixture
def api(server: KubeServer, tmp_path: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(server.kubeconfig(tmp_path / "kc")))


def _exp(name: str) -> dict[str, object]:
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {"model": {"name": "m"}},
    }


def test_create_fills_server_fields_and_patch_bumps_generation_on_spec_only(
    server: KubeServer, api: client.ApiClient
) -> None:
    exps = dynamic.DynamicClient(api).resources.get(
        api_version="sarl.dev/v1alpha1", kind="Experiment"
    )
    made = exps.create(body=_exp("gen"), namespace="ns1").to_dict()
    meta = made["metadata"]
    assert meta["uid"] and meta["creationTimestamp"] and meta["namespace"] == "ns1"
    assert meta["generation"] == 1
    patch = {"status": {"phase": "Running"}}
    out = exps.patch(
        body=patch, name="gen", namespace="ns1", content_type="application/merge-patch+json"
    ).to_dict()
    assert out["metadata"]["generation"] == 1 and out["status"]["phase"] == "Running"
    out = exps.patch(
        body={"spec": {"model": {"name": "n"}}},
        name="gen",
        namespace="ns1",
        content_type="application/merge-patch+json",
    ).to_dict()
    assert out["metadata"]["generation"] == 2
    assert int(out["metadata"]["resourceVersion"]) > int(meta["resourceVersion"])
    assert server.objects(EXPERIMENTS, "ns1")["gen"]["spec"]["model"]["name"] == "n"


def test_list_has_kind_and_delete_removes(server: KubeServer, api: client.ApiClient) -> None:
    cms = dynamic.DynamicClient(api).resources.get(api_version="v1", kind="ConfigMap")
    cms.create(body={"metadata": {"name": "c1"}, "data": {"a": "b"}}, namespace="ns2")
    listed = cms.get(namespace="ns2").to_dict()
    assert listed["kind"] == "ConfigMapList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["c1"]
    cms.delete(name="c1", namespace="ns2")
    assert server.objects(CONFIGMAPS, "ns2") == {}
    with pytest.raises(NotFoundError):
        cms.get(name="c1", namespace="ns2")


def test_generate_name_and_pod_logs(server: KubeServer, api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    ev = {
        "metadata": {"generateName": "exp."},
        "involvedObject": {"kind": "Experiment", "name": "e", "namespace": "ns3"},
        "reason": "R",
        "message": "m",
    }
    made = core.create_namespaced_event("ns3", ev)
    assert made.metadata.name.startswith("exp.") and len(made.metadata.name) > 4
    core.create_namespaced_pod("ns3", {"metadata": {"name": "p"}, "spec": {"containers": []}})
    with pytest.raises(client.ApiException) as err:
        core.read_namespaced_pod_log("p", "ns3")
    assert err.value.status == 404
    server.set_log("ns3", "p", "line 1\nline 2\n")
    assert core.read_namespaced_pod_log("p", "ns3") == "line 1\nline 2\n"


def test_reactions_match_as_kmock_matches_them(server: KubeServer, api: client.ApiClient) -> None:
    """The emulator matches each request against the reactions alone (not the whole history,
    see ``ReactionPerRequest``) with kmock's outcome: a test's reaction on a filter answers
    before the emulation, a sliced one (kmock's own check) only its first request, and every
    request stays in the history the RBAC tests read."""
    import kmock

    core = client.CoreV1Api(api)
    core.create_namespaced_config_map("ns4", {"metadata": {"name": "c"}})
    core.create_namespaced_config_map("ns5", {"metadata": {"name": "c"}})
    before = server.call(lambda em: len(list(em)))
    server.call(lambda em: em[kmock.namespace("ns4"), "get"] << 418)
    server.call(lambda em: em[kmock.namespace("ns5"), "get"][:1] << 418)
    for namespace, statuses in (("ns4", [418, 418]), ("ns5", [418, 200])):
        got = []
        for _ in statuses:
            try:
                core.read_namespaced_config_map("c", namespace)
                got.append(200)
            except client.ApiException as e:
                got.append(e.status)
        assert got == statuses, namespace
    assert server.call(lambda em: len(list(em))) == before + 4


def test_status_writes_bump_the_version_and_a_stale_version_conflicts(
    server: KubeServer, api: client.ApiClient
) -> None:
    """Status writes get a new resourceVersion, and a patch naming another resourceVersion than
    the object's is refused with 409, as the API server does (optimistic concurrency)."""
    exps = dynamic.DynamicClient(api).resources.get(
        api_version="sarl.dev/v1alpha1", kind="Experiment"
    )
    made = exps.create(body=_exp("rv"), namespace="ns1").to_dict()
    version = made["metadata"]["resourceVersion"]
    merge = "application/merge-patch+json"
    guarded = {"metadata": {"resourceVersion": version}, "status": {"phase": "Pending"}}
    out = exps.status.patch(body=guarded, name="rv", namespace="ns1", content_type=merge)
    newer = out.to_dict()["metadata"]["resourceVersion"]
    assert int(newer) > int(version)
    with pytest.raises(ConflictError):
        exps.status.patch(body=guarded, name="rv", namespace="ns1", content_type=merge)
    with pytest.raises(ConflictError):
        exps.patch(body={**guarded, "spec": {}}, name="rv", namespace="ns1", content_type=merge)
    unguarded = {"status": {"phase": "Running"}}
    out = exps.status.patch(body=unguarded, name="rv", namespace="ns1", content_type=merge)
    assert out.to_dict()["status"]["phase"] == "Running"
    assert server.objects(EXPERIMENTS, "ns1")["rv"]["metadata"]["resourceVersion"] != newer
