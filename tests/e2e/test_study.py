"""End to end on a real cluster: ``sarl.Client`` submits a Study, the operator creates its first
arm x seed Experiment (owned by the Study; ``parallelism: 1`` holds back the second) and the
Study's status counts, ``sarl status NAME`` shows it, and deleting the Study lets the garbage
collector remove its Experiments (and, through them, their ConfigMaps and PyTorchJobs).

This re-checks on a real API server what tests/operators/test_study_operator.py and
tests/sarl/cluster/test_study_*.py check against the in-memory one (CRD schema validation of
the stored Study, owner references, garbage collection through two levels of owners).

Setup as for tests/e2e/test_cluster.py (skipped unless KUBECONFIG is set): a cluster with the
Kubeflow Training Operator and the platform chart installed (``helm install sarl
charts/sarl-platform``: both CRDs and the operator), ``SARL_E2E_NAMESPACE`` (default
``default``). No GPU is needed: the test does not wait for training. Run with
``pytest -m e2e tests/e2e``. Everything the test creates is deleted at the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest

from tests.e2e.kube import TIMEOUT_S, fresh_name, gone, poll
from tests.e2e.kube import get as _get

pytestmark = pytest.mark.e2e


@pytest.fixture
def name(cluster: Any) -> Iterator[str]:
    from sarl.cluster import StudyNotFound

    yield from fresh_name(cluster.delete_study, StudyNotFound)


def _tiny_study(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Study",
        "metadata": {"name": name},
        "spec": {
            "base": {
                "preset": "local-grpo-arithmetic",
                "resources": {"nodes": 1, "gpus_per_node": 0, "cpu": "500m", "memory": "1Gi"},
            },
            "arms": [
                {"name": "low", "override": {"algorithm": {"learning_rate": 1e-5}}},
                {"name": "high", "override": {"algorithm": {"learning_rate": 1e-4}}},
            ],
            "seeds": [0],
            "parallelism": 1,
        },
    }


def test_study_runs_are_owned_counted_and_garbage_collected(
    cluster: Any, name: str, namespace: str
) -> None:
    from kubernetes import config
    from typer.testing import CliRunner

    from sarl.cli.main import app

    api = config.new_client_from_config()
    info = cluster.submit(_tiny_study(name))
    assert info.uid and info.namespace == namespace

    first = f"{name}-low-s0"
    exp = poll(
        f"Experiment {first}",
        partial(_get, api, "sarl.dev/v1alpha1", "Experiment", namespace, first),
    )
    owners = exp["metadata"].get("ownerReferences") or []
    assert [(o["kind"], o["uid"], o["controller"]) for o in owners] == [("Study", info.uid, True)]
    assert exp["spec"]["tracking"]["tags"]["sarl.study"] == name
    job = poll(
        f"PyTorchJob {first}", partial(_get, api, "kubeflow.org/v1", "PyTorchJob", namespace, first)
    )
    assert job["metadata"]["ownerReferences"][0]["kind"] == "Experiment"

    status = poll("the Study's counts", lambda: cluster.get_study(name).status.total or None)
    assert status == 2
    # parallelism 1: the second run waits for the first, which this test never finishes.
    assert _get(api, "sarl.dev/v1alpha1", "Experiment", namespace, f"{name}-high-s0") is None

    shown = CliRunner().invoke(app, ["status", name, "-n", namespace])
    assert shown.exit_code == 0, shown.stderr
    assert "Runs:          2 total" in shown.stdout and first in shown.stdout

    cluster.delete_study(name, wait=True, timeout=TIMEOUT_S)
    for api_version, kind, child in [
        ("sarl.dev/v1alpha1", "Experiment", first),
        ("v1", "ConfigMap", f"{name}-config"),
        ("kubeflow.org/v1", "PyTorchJob", first),
    ]:
        poll(
            f"{kind} {child} to be garbage-collected",
            partial(gone, api, api_version, kind, namespace, child),
        )
