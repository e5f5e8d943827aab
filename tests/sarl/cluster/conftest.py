"""Fixtures for the cluster-client tests: an in-memory Kubernetes API server per module.

No real API server can run where these tests run, so they talk over real HTTP, through the real
``kubernetes`` client, to :mod:`tests.support.kube_server` (kmock's emulator). It stores and
serves objects like an API server but validates nothing against the CRD, ignores label
selectors and has no garbage collector: tests/e2e/test_cluster.py re-checks on a real cluster.
Each test gets its own namespace, so tests sharing the module's server do not interfere.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("kmock")

from sarl.cluster import ClusterClient
from tests.support.kube_server import EXPERIMENTS, KubeServer, kube_server
from tests.support.waiting import wait_until


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


def set_status_once_created(
    server: KubeServer, ns: str, name: str, status: dict[str, Any], after_s: float = 0.3
) -> threading.Thread:
    """In a thread: once the Experiment exists, wait ``after_s`` and :func:`set_status`.

    For a command under test that creates the object itself: a fixed delay from the test's
    start raced it (on a loaded CI machine the CLI had not created it 0.3 s in, the patch
    failed with KeyError and the status was never written). Gives up after 60 s; join the
    thread after the command.
    """

    def later() -> None:
        if not wait_until(lambda: server.call(lambda emulator: _exists(emulator, ns, name))):
            return
        time.sleep(after_s)
        set_status(server, ns, name, status)

    thread = threading.Thread(target=later, daemon=True)
    thread.start()
    return thread


def _exists(emulator: Any, ns: str, name: str) -> bool:
    import kmock

    try:
        emulator.objects[kmock.resource(EXPERIMENTS.key), ns, name]
    except KeyError:
        return False
    return True
