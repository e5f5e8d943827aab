"""ClusterClient failures become one-line ClusterErrors: missing CRD, 401/403, 422, 5xx (reads
retried a bounded number of times, writes not), refused and silent servers, no kubeconfig,
no ``kubernetes`` package. Errors are served by the in-memory API server (see conftest) through
its reactions, over real HTTP."""

from __future__ import annotations

import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml

from sarl.cluster import (
    ClusterClient,
    ClusterExtraMissing,
    ClusterUnreachable,
    CrdNotInstalled,
    NotAllowed,
    Rejected,
)
from sarl.cluster.errors import ClusterError
from tests.sarl.cluster.conftest import experiment_doc
from tests.support.kube_server import EXPERIMENTS, SARL_RESOURCES, KubeServer, kube_server


def _react(server: KubeServer, ns: str, status: int, reason: str, message: str) -> None:
    """Every request in namespace ``ns`` is answered with that Kubernetes Status error."""
    error = kmock.KubernetesError(status=status, reason=reason, message=message)
    server.call(lambda emulator: emulator[kmock.namespace(ns)] << error)


def _requests(server: KubeServer, ns: str, method: str) -> int:
    return server.call(lambda em: len([r for r in em[kmock.namespace(ns)] if r.method == method]))


@pytest.fixture(scope="module")
def no_crd_server() -> Iterator[KubeServer]:
    with kube_server(tuple(r for r in SARL_RESOURCES if r is not EXPERIMENTS)) as ks:
        yield ks


@pytest.mark.parametrize("call", ["submit", "get", "list", "delete", "status"])
def test_missing_crd_says_to_install_the_chart(
    no_crd_server: KubeServer, tmp_path: Path, call: str
) -> None:
    client = ClusterClient(kubeconfig=no_crd_server.kubeconfig(tmp_path / "kc"), retries=0)
    calls: dict[str, Any] = {
        "submit": lambda: client.submit(experiment_doc("x")),
        "get": lambda: client.get("x"),
        "list": client.list,
        "delete": lambda: client.delete("x"),
        "status": lambda: client.status("x"),
    }
    with pytest.raises(CrdNotInstalled) as err:
        calls[call]()
    assert str(err.value) == (
        "the Experiment CRD (experiments.sarl.dev) is not installed in this cluster: install the "
        "sarl platform chart (helm install sarl charts/sarl-platform)"
    )
    assert no_crd_server.objects(EXPERIMENTS) == {}  # discovery is checked before any write


@pytest.mark.parametrize("status", [401, 403])
def test_forbidden_names_the_verb_namespace_and_the_apis_reason(
    client: ClusterClient, server: KubeServer, ns: str, status: int
) -> None:
    reason = f'experiments.sarl.dev is forbidden: User "alice" cannot list resource in "{ns}"'
    _react(server, ns, status, "Forbidden", reason)
    with pytest.raises(NotAllowed) as err:
        client.list()
    assert str(err.value) == f"not allowed to list experiments in namespace {ns}: {reason}"
    with pytest.raises(NotAllowed, match=f"not allowed to create experiments in namespace {ns}"):
        client.submit(experiment_doc("y"))


def test_unprocessable_shows_the_api_servers_message(
    client: ClusterClient, server: KubeServer, ns: str
) -> None:
    msg = 'Experiment.sarl.dev "z" is invalid: spec.resources.nodes: Invalid value: 0'
    _react(server, ns, 422, "Invalid", msg)
    with pytest.raises(Rejected) as err:
        client.submit(experiment_doc("z"))
    assert str(err.value) == f"cannot create experiment z in namespace {ns}: {msg}"


def test_reads_are_retried_a_bounded_number_of_times_and_writes_never(
    server: KubeServer, kubeconfig: Path, ns: str
) -> None:
    client = ClusterClient(kubeconfig=kubeconfig, retries=2, backoff=0.01)
    _react(server, ns, 503, "ServiceUnavailable", "etcd is unhappy")
    with pytest.raises(
        ClusterError, match=r"failed to get experiment a .*HTTP 503 etcd is unhappy"
    ):
        client.get("a")
    assert _requests(server, ns, "GET") == 3
    with pytest.raises(ClusterError, match="HTTP 503"):
        client.submit(experiment_doc("a"))
    assert _requests(server, ns, "POST") == 1


def _kubeconfig_for(url: str, path: Path) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_refused_connection_is_reported_in_bounded_time(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    client = ClusterClient(kubeconfig=_kubeconfig_for(url, tmp_path / "kc"), backoff=0.05)
    start = time.monotonic()
    with pytest.raises(ClusterUnreachable) as err:
        client.list()
    assert time.monotonic() - start < 5
    assert str(err.value).startswith(f"cannot reach the Kubernetes API at {url} (")
    assert "refused" in str(err.value).lower()


def test_silent_server_times_out(tmp_path: Path) -> None:
    with socket.socket() as listener:  # accepts connections (backlog) but never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        client = ClusterClient(
            kubeconfig=_kubeconfig_for(url, tmp_path / "kc"),
            request_timeout=(0.5, 0.5),
            retries=1,
            backoff=0.05,
        )
        start = time.monotonic()
        with pytest.raises(ClusterUnreachable) as err:
            client.get("x")
        assert time.monotonic() - start < 5
    assert str(err.value) == f"cannot reach the Kubernetes API at {url} (timed out)"


def test_no_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nope"))
    with pytest.raises(ClusterUnreachable, match=r"no kubeconfig found \(.*nope does not exist"):
        ClusterClient()
    with pytest.raises(ClusterUnreachable, match="set KUBECONFIG or pass --kubeconfig"):
        ClusterClient(kubeconfig=tmp_path / "missing")


def test_unknown_context_and_broken_kubeconfig(server: KubeServer, tmp_path: Path) -> None:
    kc = server.kubeconfig(tmp_path / "kc")
    with pytest.raises(ClusterUnreachable, match=r"cannot use kubeconfig .*kc: .*nosuch"):
        ClusterClient(kubeconfig=kc, context="nosuch")
    broken = tmp_path / "broken"
    broken.write_text("clusters: [\n")
    with pytest.raises(ClusterUnreachable, match="cannot use kubeconfig"):
        ClusterClient(kubeconfig=broken)


def test_context_selects_server_and_namespace(server: KubeServer, tmp_path: Path) -> None:
    doc = yaml.safe_load(server.kubeconfig(tmp_path / "kc", namespace="ns-a").read_text())
    other = {"name": "other", "context": {"cluster": "kmock", "user": "kmock", "namespace": "ns-b"}}
    doc["contexts"].append(other)
    (tmp_path / "two").write_text(yaml.safe_dump(doc))
    assert ClusterClient(kubeconfig=tmp_path / "two").namespace == "ns-a"
    assert ClusterClient(kubeconfig=tmp_path / "two", context="other").namespace == "ns-b"
    assert ClusterClient(kubeconfig=tmp_path / "two", namespace="ns-c").namespace == "ns-c"


def test_without_the_kubernetes_package_the_extra_is_named(
    kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # import kubernetes -> ImportError
    with pytest.raises(ClusterExtraMissing, match=r"pip install 'sarl\[cluster\]'"):
        ClusterClient(kubeconfig=kubeconfig)
