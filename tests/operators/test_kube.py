"""``sarl_operator.kube`` against kmock's API-server emulator (no real API server can run here):
the real kubernetes dynamic client, so discovery of a kind the cluster does not serve fails as
it would on a cluster without the Training Operator or KServe installed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kmock")

from sarl_operator.kube import (
    DynamicKubeApi,
    ForeignOwnerError,
    MissingApiError,
    VersionConflictError,
    apply,
    controlled_by,
)
from tests.support.kube_server import (
    CONFIGMAPS,
    EXPERIMENTS,
    PYTORCHJOBS,
    SARL_RESOURCES,
    WORKLOADS,
    KubeServer,
    kube_server,
)

NAMESPACE = "team-a"


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    """A cluster without the Training Operator: no pytorchjobs.kubeflow.org."""
    with kube_server(tuple(r for r in SARL_RESOURCES if r is not PYTORCHJOBS)) as ks:
        yield ks


@pytest.fixture
def api(server: KubeServer, tmp_path: Path) -> DynamicKubeApi:
    path = server.kubeconfig(tmp_path / "kubeconfig", NAMESPACE)
    return DynamicKubeApi(timeout_s=10, kubeconfig=str(path))


def _configmap(name: str, owner_uid: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if owner_uid:
        meta["ownerReferences"] = [
            {"apiVersion": "sarl.dev/v1alpha1", "kind": "Experiment", "name": "x",
             "uid": owner_uid, "controller": True, "blockOwnerDeletion": True}
        ]  # fmt: skip
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}


def test_a_kind_the_cluster_does_not_serve_raises_missing_api(api: DynamicKubeApi) -> None:
    with pytest.raises(MissingApiError, match=r"PyTorchJob \(kubeflow.org/v1\) is not served"):
        api.get("kubeflow.org/v1", "PyTorchJob", NAMESPACE, "job")
    with pytest.raises(MissingApiError):
        api.create({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                    "metadata": {"name": "job", "namespace": NAMESPACE}})  # fmt: skip


def test_apply_creates_then_patches_its_own_child(api: DynamicKubeApi, server: KubeServer) -> None:
    assert apply(api, _configmap("mine", "uid-1")) == "created"
    assert apply(api, {**_configmap("mine", "uid-1"), "data": {"k": "w"}}) == "patched"
    stored = server.objects(CONFIGMAPS, NAMESPACE)["mine"]
    assert stored["data"] == {"k": "w"} and controlled_by(stored, "uid-1")


@pytest.mark.parametrize("holder", ["uid-old", None])
def test_apply_never_adopts_an_object_of_another_owner(
    api: DynamicKubeApi, server: KubeServer, holder: str | None
) -> None:
    name = f"taken-{holder or 'none'}"
    api.create(_configmap(name, holder))
    with pytest.raises(ForeignOwnerError, match=f"ConfigMap '{name}' already exists"):
        apply(api, {**_configmap(name, "uid-new"), "data": {"k": "new"}})
    stored = server.objects(CONFIGMAPS, NAMESPACE)[name]
    assert stored["data"] == {"k": "v"}  # untouched
    assert not controlled_by(stored, "uid-new")


def test_list_returns_the_namespaces_objects(api: DynamicKubeApi, server: KubeServer) -> None:
    """``list`` as the handlers use it for Kueue Workloads (kmock ignores the label selector,
    so the handlers also check each Workload's owner)."""
    wl = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "pytorchjob-x-1a2b3", "namespace": NAMESPACE,
                     "labels": {"kueue.x-k8s.io/job-uid": "u"}},
    }  # fmt: skip
    server.put(WORKLOADS, NAMESPACE, wl)
    found = api.list("kueue.x-k8s.io/v1beta2", "Workload", NAMESPACE, "kueue.x-k8s.io/job-uid=u")
    assert [w["metadata"]["name"] for w in found] == ["pytorchjob-x-1a2b3"]
    assert api.list("kueue.x-k8s.io/v1beta2", "Workload", "elsewhere") == []
    with pytest.raises(MissingApiError):
        api.list("kubeflow.org/v1", "PyTorchJob", NAMESPACE)


def test_patch_status_is_refused_once_the_object_changed(
    api: DynamicKubeApi, server: KubeServer
) -> None:
    """A status write guarded by the resourceVersion read (the status timers' write): refused,
    as VersionConflictError, once another write changed the object (kmock's emulator checks the
    precondition as the API server does, 409 Conflict)."""
    exp = {"apiVersion": "sarl.dev/v1alpha1", "kind": "Experiment",
           "metadata": {"name": "guarded", "namespace": NAMESPACE}, "spec": {}}  # fmt: skip
    api.create(exp)
    read = api.get("sarl.dev/v1alpha1", "Experiment", NAMESPACE, "guarded")
    assert read is not None
    ready = [{"type": "Ready", "status": "True", "reason": "SpecValid"}]
    written = api.patch_status(read, {"phase": "Pending", "conditions": ready})
    assert written["status"] == {"phase": "Pending", "conditions": ready}
    assert written["metadata"]["resourceVersion"] != read["metadata"]["resourceVersion"]
    with pytest.raises(VersionConflictError, match="Experiment team-a/guarded changed since"):
        api.patch_status(read, {"phase": "Running", "conditions": []})  # read before that write
    assert server.objects(EXPERIMENTS, NAMESPACE)["guarded"]["status"]["conditions"] == ready
    assert api.patch_status(written, {"phase": "Running"})["status"]["phase"] == "Running"
    with pytest.raises(ValueError, match="no metadata.resourceVersion"):
        api.patch_status(exp, {"phase": "Failed"})
