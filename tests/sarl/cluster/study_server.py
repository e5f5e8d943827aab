"""Shared by the cluster-client Study tests: the in-memory API server's ``studies`` resource, a
small valid Study, and writing a Study's status as the operator would.

The Kubernetes API server in these tests is kmock's in-memory emulation
(:mod:`tests.support.kube_server`, see conftest.py), here with ``studies.sarl.dev`` declared: it
stores and serves objects but validates nothing against the CRD and has no garbage collector.
"""

from __future__ import annotations

from typing import Any, Final

from tests.support.kube_server import SARL_RESOURCES, KubeServer, Resource

STUDIES: Final = Resource("sarl.dev", "v1alpha1", "studies", "Study", subresources=("status",))
WITH_STUDIES: Final = (*SARL_RESOURCES, STUDIES)


def study_doc(name: str, **spec: Any) -> dict[str, Any]:
    """2 arms x 2 seeds of a small valid base (built-in tiny model)."""
    body: dict[str, Any] = {
        "base": {"preset": "local-grpo-arithmetic"},
        "arms": [
            {"name": "low", "override": {"algorithm": {"learning_rate": 1e-5}}},
            {"name": "high", "override": {"algorithm": {"learning_rate": 1e-4}}},
        ],
        "seeds": [0, 1],
        **spec,
    }
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Study",
        "metadata": {"name": name},
        "spec": body,
    }


def set_study_status(server: KubeServer, ns: str, name: str, status: dict[str, Any]) -> None:
    """Write ``status`` as the operator would (merge into the stored Study)."""
    import kmock

    def patch(emulator: Any) -> None:
        emulator.objects[kmock.resource(STUDIES.key), ns, name].patch({"status": status})

    server.call(patch)


RUNNING: Final = {
    "phase": "Running",
    "total": 4,
    "pending": 1,
    "running": 2,
    "succeeded": 1,
    "failed": 0,
    "mlflowParentRunId": "p1",
    "mlflowRunUrl": "http://mlflow.local/#/experiments/3/runs/p1",
    "conditions": [{"type": "TrackingReady", "status": "True", "reason": "RunReady"}],
}
