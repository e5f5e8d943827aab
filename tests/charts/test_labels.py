"""Every rendered object (and every pod template) carries the standard Kubernetes labels."""

from __future__ import annotations

import pytest

from tests.charts.rendering import CASES, PLATFORM, Case, chart_crds, objects

STANDARD = (
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/component",
    "app.kubernetes.io/part-of",
    "app.kubernetes.io/managed-by",
    "helm.sh/chart",
)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_standard_labels_on_every_object(case: Case) -> None:
    for obj in objects(case):
        labels = obj["metadata"].get("labels", {})
        missing = [k for k in STANDARD if not labels.get(k)]
        assert not missing, f"{obj['kind']}/{obj['metadata']['name']} lacks {missing}"
        assert labels["app.kubernetes.io/part-of"] == "sarl"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert labels["app.kubernetes.io/instance"] == case.chart


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_pod_templates_and_selectors(case: Case) -> None:
    for obj in objects(case):
        template = obj.get("spec", {}).get("template")
        # A ClusterTrainingRuntime's template is a JobSet's: its pods are labelled per TrainJob
        # by the operator (tests/operators/test_trainjob.py).
        if template is None or obj["kind"] == "ClusterTrainingRuntime":
            continue
        pod_labels = template["metadata"]["labels"]
        assert all(pod_labels.get(k) for k in STANDARD), obj["metadata"]["name"]
        selector = obj["spec"].get("selector", {}).get("matchLabels")
        if selector:  # selectors must be a stable subset: no version/chart labels
            assert selector.items() <= pod_labels.items()
            assert "app.kubernetes.io/version" not in selector
    for svc in (o for o in objects(case) if o["kind"] == "Service"):
        component = svc["metadata"]["labels"]["app.kubernetes.io/component"]
        assert svc["spec"]["selector"]["app.kubernetes.io/component"] == component


def test_common_labels_are_added() -> None:
    import yaml

    from tests.charts.rendering import render_templates

    for chart in ("sarl-inference", PLATFORM):
        docs = [
            d
            for path, text in render_templates(chart, {"commonLabels": {"team": "rl"}}).items()
            if not path.endswith("NOTES.txt")
            for d in yaml.safe_load_all(text)
            if d
        ]
        assert docs and all(d["metadata"]["labels"]["team"] == "rl" for d in docs)


def test_crd_labels() -> None:
    """The CRDs are generated (not templated), so they carry the release-independent labels
    only."""
    crds = chart_crds(PLATFORM)
    assert len(crds) == 2
    for crd in crds:
        labels = crd["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "sarl"
        assert labels["app.kubernetes.io/component"] == "crd"
