"""Every pod template the charts render passes the Pod Security Standard ``restricted`` (issue 36,
item 7), checked with ``tests/support/pod_security.py`` (pod-security-admission v0.31.0's
policy/check_*.go), for every rendering case (the charts' own values and each ``ci/`` file) and
the non-default values below.

Rendered with the real Helm engine. The vLLM InferenceServices are checked as KServe runs them:
merged into its Hugging Face runtime (tests/operators/kserve_merge.py, every release it
emulates; no KServe controller runs here); a custom predictor (sarl-cpu) is its own pod. The
Training Operator's init-container template (a ConfigMap the chart renders for the Training
Operator to add to PyTorchJob Workers) is checked as a container of a pod with no securityContext
of its own, the worst case of the pods it lands in.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

import pytest
import yaml

from tests.charts.rendering import API_SETS, CASES, INFERENCE, PLATFORM, Case, objects
from tests.charts.rendering import render_templates as _render
from tests.operators import kserve_merge
from tests.support.pod_security import pod_templates, violations

pytest.importorskip("helm_python")

#: Values other than the ci/ files': (chart, values, api set).
EXTRA: Final[dict[str, tuple[str, dict[str, Any], str]]] = {
    "platform-mlflow-emptydir-init-container": (
        PLATFORM,
        {
            "mlflow": {"persistence": {"enabled": False}},
            "trainingOperator": {"guaranteedInitContainer": {"enabled": True}},
        },
        "training-operator",
    ),
    "platform-mlflow-database": (
        PLATFORM,
        {"mlflow": {"backendStore": {"existingSecret": "mlflow-db"}, "replicas": 2}},
        "",
    ),
    "platform-volcano-trainer-v2": (PLATFORM, {"gangScheduler": "volcano"}, "trainer-v2"),
    "inference-service-account-s3-model": (
        INFERENCE,
        {
            "serviceAccountName": "models",
            "embedding": {"vllm": {"storageUri": "s3://models/qwen3-embedding"}},
        },
        "",
    ),
}


def _extra_objects(chart: str, values: dict[str, Any], apis: str) -> list[dict[str, Any]]:
    rendered = _render(chart, values, API_SETS[apis] if apis else ())
    return [
        doc
        for path, text in sorted(rendered.items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def _isvc_pods(
    isvc: Mapping[str, Any],
) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    name = f"InferenceService/{isvc['metadata']['name']}"
    predictor = isvc["spec"]["predictor"]
    if "model" in predictor:
        for tag, release in kserve_merge.RELEASES.items():
            yield f"{name}@kserve-{tag}", kserve_merge.predictor_pod(isvc, release), {}
    else:  # a custom predictor: its inline PodSpec is the pod
        pod = {
            k: v for k, v in predictor.items() if k not in ("minReplicas", "maxReplicas", "labels")
        }
        yield name, pod, {"labels": predictor.get("labels", {})}


def _init_container_pods(
    cm: Mapping[str, Any],
) -> Iterator[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    for container in yaml.safe_load(
        cm["data"]["initContainer.yaml"].replace("{{", "x").replace("}}", "x")
    ):
        yield f"ConfigMap/{cm['metadata']['name']}", {"containers": [container]}, {}


def _pods(objs: list[dict[str, Any]]) -> list[tuple[str, Mapping[str, Any], Mapping[str, Any]]]:
    out: list[tuple[str, Mapping[str, Any], Mapping[str, Any]]] = []
    for obj in objs:
        if obj["kind"] == "InferenceService":
            out.extend(_isvc_pods(obj))
        elif obj["kind"] == "ConfigMap" and "initContainer.yaml" in obj.get("data", {}):
            out.extend(_init_container_pods(obj))
        else:
            out.extend(pod_templates(obj))
    return out


def _assert_restricted(pods: list[tuple[str, Mapping[str, Any], Mapping[str, Any]]]) -> None:
    found = {where: violations(pod, meta) for where, pod, meta in pods}
    assert {w: v for w, v in found.items() if v} == {}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_rendered_pod_is_restricted(case: Case) -> None:
    pods = _pods(objects(case))
    assert pods
    _assert_restricted(pods)


@pytest.mark.parametrize("name", sorted(EXTRA))
def test_every_pod_with_non_default_values_is_restricted(name: str) -> None:
    pods = _pods(_extra_objects(*EXTRA[name]))
    assert pods
    _assert_restricted(pods)


def test_the_cases_reach_every_kind_of_pod() -> None:
    """Every pod-bearing template is covered by some case above (none passes by absence)."""
    kinds = {
        where.split("/")[0] + ("/" + where.split("/")[1] if where.startswith("ConfigMap") else "")
        for objs in [*(objects(c) for c in CASES), *(_extra_objects(*v) for v in EXTRA.values())]
        for where, _, _ in _pods(objs)
    }
    assert {"Deployment", "Job", "ClusterTrainingRuntime", "InferenceService"} <= kinds
    assert "ConfigMap/sarl-training-operator-init-container" in kinds
    names = {
        where
        for objs in [*(objects(c) for c in CASES), *(_extra_objects(*v) for v in EXTRA.values())]
        for where, _, _ in _pods(objs)
    }
    for component in (
        "operator",
        "mlflow",
        "minio",
        "minio-bucket",
        "reward",
        "embedding",
        "judge",
    ):
        assert any(component in n for n in names), component


def test_mlflow_runs_as_a_non_root_user_that_owns_its_volume() -> None:
    """MLflow's image runs as root: the chart names a numeric user, and fsGroup gives it the
    SQLite volume; HOME is a writable emptyDir."""
    (mlflow,) = [
        o
        for o in objects(Case(PLATFORM))
        if o["kind"] == "Deployment" and "mlflow" in o["metadata"]["name"]
    ]
    pod = mlflow["spec"]["template"]["spec"]
    ctx = pod["securityContext"]
    assert (
        ctx["runAsNonRoot"] is True and ctx["runAsUser"] > 0 and ctx["fsGroup"] == ctx["runAsGroup"]
    )
    (container,) = pod["containers"]
    home = next(e["value"] for e in container["env"] if e["name"] == "HOME")
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts[home]]
    assert pod["automountServiceAccountToken"] is False
