"""End to end on a real cluster: ``sarl.Client`` submits an Experiment, the operator makes its
ConfigMap and PyTorchJob (owned by the Experiment) and sets a phase, ``sarl status`` shows it,
and deleting the Experiment lets the garbage collector remove the children.

This re-checks on a real API server what tests/sarl/cluster checks against the in-memory one
(validation by the CRD schema, owner references, garbage collection, label selectors).

Setup (skipped unless KUBECONFIG is set; see tests/conftest.py):

* a cluster reachable through ``$KUBECONFIG`` (kind or k3d is enough: no GPU is needed, the
  test does not wait for training to finish), e.g. ``kind create cluster``;
* the Kubeflow Training Operator (PyTorchJob CRD), e.g. ``kubectl apply --server-side -k
  "github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.9.0"``
  (docs/tutorials/first-cluster-run.md walks through this with kind);
* the platform chart: ``helm install sarl charts/sarl-platform`` (CRD + operator);
* ``SARL_E2E_NAMESPACE`` (default ``default``): an existing namespace the kubeconfig user may
  create Experiments in and read ConfigMaps, PyTorchJobs and pods of (a RoleBinding to the
  built-in ``edit`` role is enough: the chart aggregates sarl's rules into it), holding the
  platform's S3 credentials Secret (``sarl-s3-credentials``; without it the operator waits with
  ``StorageReady=False`` and creates no PyTorchJob).

Run with ``pytest -m e2e tests/e2e``. Everything the test creates is deleted at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from tests.e2e.kube import TIMEOUT_S, fresh_name, gone, poll
from tests.e2e.kube import get as _child

pytestmark = pytest.mark.e2e


@pytest.fixture
def name(cluster: Any) -> Iterator[str]:
    from sarl.cluster import ExperimentNotFound

    yield from fresh_name(cluster.delete, ExperimentNotFound)


def _tiny(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name},
        "spec": {
            "preset": "local-grpo-arithmetic",
            "resources": {"nodes": 1, "gpus_per_node": 0, "cpu": "500m", "memory": "1Gi"},
        },
    }


def test_submit_children_status_and_garbage_collection(
    cluster: Any, name: str, namespace: str
) -> None:
    from kubernetes import config
    from typer.testing import CliRunner

    from sarl.cli.main import app

    api = config.new_client_from_config()
    info = cluster.submit(_tiny(name))
    assert info.uid and info.namespace == namespace

    children = [("v1", "ConfigMap", f"{name}-config"), ("kubeflow.org/v1", "PyTorchJob", name)]
    for api_version, kind, child in children:
        obj = poll(f"{kind} {child}", partial(_child, api, api_version, kind, namespace, child))
        owners = obj["metadata"].get("ownerReferences") or []
        assert [(o["kind"], o["uid"]) for o in owners] == [("Experiment", info.uid)]

    phase = poll("a phase", lambda: cluster.get(name).phase or None)
    assert phase in {"Pending", "Running", "Succeeded", "Failed"}

    shown = CliRunner().invoke(app, ["status", "-n", namespace])
    assert shown.exit_code == 0, shown.stderr
    row = next(line.split() for line in shown.stdout.splitlines() if line.startswith(name))
    assert row[1] in {"Pending", "Running", "Succeeded", "Failed"}

    cluster.delete(name, wait=True, timeout=TIMEOUT_S)
    for api_version, kind, child in children:
        poll(
            f"{kind} {child} to be garbage-collected",
            partial(gone, api, api_version, kind, namespace, child),
        )
