"""PyTorchJob Workers and the Training Operator's init container (issue 35, item 10).

The Training Operator v1.9 appends ``init-pytorch`` to every Worker of a job with a Master
(v1.9.0 pkg/controller.v1/pytorch/initcontainer.go, ``setInitContainer``), from a Go template
whose built-in form asks requests 50m/10Mi below limits 100m/20Mi, or from the file
``--pytorch-init-container-template-file`` (default /etc/config/initContainer.yaml) when it
exists. Kubernetes' QoS class sums the cpu and memory requests and limits over the containers
and init containers (kubernetes pkg/apis/core/helper/qos/qos.go ``ComputePodQOS``, read at
commit 0fafce48): unequal sums make the Worker Burstable. The platform chart ships the
template with requests equal to limits; with it the Worker built by the operator is Guaranteed.

No Training Operator runs here: its append is emulated (Go template fields filled, the
container appended after the operator's own init containers), and the QoS rule is restated.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Final

import pytest
import yaml

from sarl_operator import builders
from tests.charts.rendering import PLATFORM, render_templates
from tests.operators.cases import (
    CASES,
    IMAGE,
    NAMESPACE,
    RUN_ID,
    TRACKING_URI,
    experiment_of,
)
from tests.operators.cases import PLATFORM as OPERATOR_PLATFORM

TEMPLATE: Final = f"{PLATFORM}/templates/training-operator-init-container.yaml"
#: The built-in template's resources (v1.9.0 initcontainer.go, ``initContainerTemplate``).
UPSTREAM_RESOURCES: Final = {
    "requests": {"cpu": "50m", "memory": "10Mi"},
    "limits": {"cpu": "100m", "memory": "20Mi"},
}
#: The fields the Training Operator fills (v1.9.0 ``GetInitContainer``), with its defaults
#: (pkg/config/config.go: alpine:3.10, 100 tries).
FIELDS: Final = {"InitContainerImage": "alpine:3.10", "MaxTries": "100", "MasterAddr": ""}
_SUFFIX: Final = {"m": Fraction(1, 1000), "": Fraction(1), "k": Fraction(10**3)}
_SUFFIX.update({s: Fraction(1024**i) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti"), 1)})
_SUFFIX.update({s: Fraction(1000**i) for i, s in enumerate(("M", "G", "T"), 2)})


def quantity(text: str) -> Fraction:
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(text))
    assert match, text
    return Fraction(match[1]) * _SUFFIX[match[2]]


def qos_class(pod: dict[str, Any]) -> str:
    """Kubernetes' rule without pod-level resources: BestEffort with no cpu/memory anywhere;
    Guaranteed when every container sets both limits and the summed requests equal the summed
    limits; Burstable otherwise."""
    sums: dict[str, dict[str, Fraction]] = {"requests": {}, "limits": {}}
    guaranteed = True
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        resources = container.get("resources") or {}
        for kind, total in sums.items():
            for name, value in (resources.get(kind) or {}).items():
                if name in ("cpu", "memory") and quantity(value) > 0:
                    total[name] = total.get(name, Fraction(0)) + quantity(value)
        limits = {n for n, v in (resources.get("limits") or {}).items() if quantity(v) > 0}
        guaranteed = guaranteed and {"cpu", "memory"} <= limits
    if not sums["requests"] and not sums["limits"]:
        return "BestEffort"
    if guaranteed and sums["requests"] == sums["limits"]:
        return "Guaranteed"
    return "Burstable"


def fill(template: str, master: str) -> list[dict[str, Any]]:
    """The Training Operator's rendering of the template for one job: its three fields, then
    YAML (a template using anything else would fail there too)."""
    fields = {**FIELDS, "MasterAddr": master}

    def field(match: re.Match[str]) -> str:
        assert match[1] in fields, f"unknown template field {match[1]}"
        return fields[match[1]]

    text = re.sub(r"\{\{\s*\.(\w+)\s*\}\}", field, template)
    assert "{{" not in text
    containers: list[dict[str, Any]] = yaml.safe_load(text)
    return containers


def _worker_pod() -> dict[str, Any]:
    doc = CASES["sarl-grpo-math-2node"]()
    job = builders.pytorchjob(
        experiment_of(doc), NAMESPACE, image=IMAGE, mlflow_run_id=RUN_ID,
        tracking_uri=TRACKING_URI, platform=OPERATOR_PLATFORM,
    )  # fmt: skip
    specs = job["spec"]["pytorchReplicaSpecs"]
    assert "Master" in specs  # the Training Operator adds init-pytorch only with a Master
    pod: dict[str, Any] = specs["Worker"]["template"]["spec"]
    return pod


def _chart_template() -> str:
    values = {"trainingOperator": {"guaranteedInitContainer": {"enabled": True}}}
    (config_map,) = [d for d in yaml.safe_load_all(render_templates(PLATFORM, values)[TEMPLATE])]
    assert config_map["kind"] == "ConfigMap"
    assert config_map["metadata"]["namespace"] == "kubeflow"
    text: str = config_map["data"]["initContainer.yaml"]
    return text


def _with(pod: dict[str, Any], init: dict[str, Any]) -> dict[str, Any]:
    return {**pod, "initContainers": [*(pod.get("initContainers") or []), init]}


def test_the_operators_worker_alone_is_guaranteed() -> None:
    assert qos_class(_worker_pod()) == "Guaranteed"


def test_the_built_in_init_container_makes_the_worker_burstable() -> None:
    init = {"name": "init-pytorch", "image": "alpine:3.10", "resources": UPSTREAM_RESOURCES}
    assert qos_class(_with(_worker_pod(), init)) == "Burstable"


def test_the_charts_template_keeps_the_worker_guaranteed() -> None:
    (init,) = fill(_chart_template(), "sarl-grpo-math-2node-master-0")
    assert init["name"] == "init-pytorch" and init["image"] == "alpine:3.10"
    assert init["resources"]["requests"] == init["resources"]["limits"]
    assert "sarl-grpo-math-2node-master-0" in init["command"][-1]
    assert "seq 100" in init["command"][-1]
    assert qos_class(_with(_worker_pod(), init)) == "Guaranteed"


def test_the_template_is_off_by_default() -> None:
    assert not render_templates(PLATFORM).get(TEMPLATE, "").strip()


EQUAL: Final = {"cpu": "1", "memory": "1Gi"}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        ({"containers": [{"name": "a"}]}, "BestEffort"),
        ({"containers": [{"resources": {"requests": EQUAL, "limits": EQUAL}}]}, "Guaranteed"),
        ({"containers": [{"resources": {"requests": {"cpu": "1"}}}]}, "Burstable"),
        (  # no memory limit
            {"containers": [{"resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]},
            "Burstable",
        ),
    ],
)
def test_the_qos_rule(pod: dict[str, Any], expected: str) -> None:
    """Guard: the restated rule tells the three classes apart."""
    assert qos_class(pod) == expected
