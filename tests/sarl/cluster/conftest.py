"""Fixtures for the cluster-client tests: an in-memory Kubernetes API server per module.

No real API server can run where these tests run, so they talk over real HTTP, through the real
``kubernetes`` client, to :mod:`tests.support.kube_server` (kmock's emulator). It stores and
serves objects like an API server but validates nothing against the CRD, ignores label
selectors and has no garbage collector: tests/e2e/test_cluster.py re-checks on a real cluster.
Each test gets its own namespace, so tests sharing the module's server do not interfere.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kmock")

from sarl.cluster import ClusterClient
from tests.support.kube_server import EXPERIMENTS, KubeServer, kube_server


@pytest.fixture(scope="module")
def server() -> Iterator[KubeServer]:
    with kube_server() as ks:
        yield ks


@pytest.fixture
def ns() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def kubeconfig(server: KubeServer, tmp_path: Path, ns: str) -> Path:
    """A kubeconfig whose context namespace is this test's namespace."""
    return server.kubeconfig(tmp_path / "kubeconfig", namespace=ns)


@pytest.fixture
def client(kubeconfig: Path) -> ClusterClient:
    return ClusterClient(kubeconfig=kubeconfig, retries=0)


def experiment_doc(name: str, **spec: Any) -> dict[str, Any]:
    """A small valid Experiment (built-in tiny model, arithmetic task)."""
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {"algorithm": {"name": "grpo"}, **spec},
    }


def set_status(server: KubeServer, ns: str, name: str, status: dict[str, Any]) -> None:
    """Write ``status`` as the operator would (merge into the stored object)."""
    import kmock

    def patch(emulator: Any) -> None:
        emulator.objects[kmock.resource(EXPERIMENTS.key), ns, name].patch({"status": status})

    server.call(patch)
