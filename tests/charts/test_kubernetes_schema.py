"""Every rendered core object, and the generated CRD, is valid against the Kubernetes OpenAPI
schema (kubernetes-validate, strict: unknown fields are errors)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.charts.rendering import CASES, KUBE_VERSION, PLATFORM, Case, chart_crds, objects

# Custom resources of other projects: checked field by field elsewhere (test_inferenceservice.py;
# the ClusterTrainingRuntime against Kubeflow Trainer's CRD in tests/operators/test_trainjob.py).
NOT_CORE = {"serving.kserve.io/v1beta1", "trainer.kubeflow.org/v1alpha1"}


def _validate(obj: dict[str, Any]) -> None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        where = ".".join(str(p) for p in e.path)
        pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {where}: {e.message}")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_core_objects_validate(case: Case) -> None:
    core = [obj for obj in objects(case) if obj["apiVersion"] not in NOT_CORE]
    assert core, f"{case.id} rendered no core objects"
    for obj in core:
        _validate(obj)


def test_crds_validate() -> None:
    crds = chart_crds(PLATFORM)
    names = sorted(c["metadata"]["name"] for c in crds)
    assert names == ["experiments.sarl.dev", "studies.sarl.dev"]
    for crd in crds:
        _validate(crd)


def test_validator_catches_a_bad_object() -> None:
    """Guard: the strict validator really rejects an unknown field and a wrong type."""
    import kubernetes_validate

    bad = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "x"},
        "spec": {"ports": [{"port": "eighty"}], "bogus": True},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, KUBE_VERSION, strict=True)


@pytest.mark.parametrize("case", [c for c in CASES if c.chart == PLATFORM], ids=lambda c: c.id)
def test_kinds_of_the_platform(case: Case) -> None:
    kinds = {obj["kind"] for obj in objects(case)}
    assert {"Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"} <= kinds
    if case.values == "default":
        assert {"PersistentVolumeClaim", "Job"} <= kinds
