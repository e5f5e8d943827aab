"""Contract: every InferenceService the operator builds and the sarl-inference chart renders names
its KServe deployment mode, and in Serverless mode carries no pod-spec field that Knative Serving's
default feature flags make its webhook refuse.

Upstream behaviour relied on, each read at a named tag:

* Knative Serving's default feature flags and the fields they gate:
  ``fixtures/knative/knative-v1.21.1/features.yaml``, copied from knative/serving's
  ``config/core/configmaps/features.yaml`` and ``pkg/apis/serving/fieldmask.go`` at tag
  knative-v1.21.1 (the release KServe v0.17.0 installs). The Knative webhook is not run here (no
  Knative control plane can run in the suite); :func:`knative_refusals` emulates its masks.
* KServe's deployment-mode annotation: ``pkg/constants/constants.go`` (``DeploymentMode`` =
  ``serving.kserve.io/deploymentMode``) at v0.15.0, v0.17.0 and v0.20.0;
  ``config/configmap/inferenceservice.yaml`` (``defaultDeploymentMode: "Serverless"``) at the
  same tags; ``pkg/controller/v1beta1/inferenceservice/utils/utils.go`` (``GetDeploymentMode``:
  v0.15.0 knows Serverless/RawDeployment/ModelMesh and falls back to the default for anything
  else, so "Standard" would silently mean Serverless there) and
  ``pkg/apis/serving/v1beta1/inference_service_defaults.go`` (from v0.17.0 the mutating webhook
  rewrites RawDeployment to Standard before ``validateDeploymentMode`` compares it with the
  status). Hence the operator writes "RawDeployment": it means a Deployment at every tag.
* The pod KServe builds from a predictor: ``tests/operators/kserve_merge.py`` (its own sources).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from sarl.spec.experiment import Experiment
from sarl.spec.presets import PRESETS
from sarl_operator import knative, served_models
from tests.charts.rendering import CASES as CHART_CASES
from tests.charts.rendering import INFERENCE, Case, objects_of_kind, render_templates
from tests.operators.cases import NAMESPACE, PLATFORM, experiment_of, judge_doc, two_node_doc
from tests.operators.kserve_merge import RELEASES, predictor_pod

FIXTURE: Final = (
    Path(__file__).resolve().parent / "fixtures" / "knative" / "knative-v1.21.1" / "features.yaml"
)
ANNOTATION: Final = "serving.kserve.io/deploymentMode"
#: Annotation values each KServe tag takes as a Deployment / a Knative Service (constants.go,
#: GetDeploymentMode, DefaultInferenceService at that tag).
_LEGACY: Final = {"RawDeployment": "raw", "Serverless": "knative"}
_RENAMED: Final = {**_LEGACY, "Standard": "raw", "Knative": "knative"}
KSERVE_MODES: Final[Mapping[str, Mapping[str, str]]] = {
    "v0.15.0": _LEGACY,
    "v0.17.0": _RENAMED,
    "v0.20.0": _RENAMED,
}
SERVERLESS_MODES: Final = frozenset({"Serverless", "Knative"})
#: Fields of a chart predictor that are KServe's ComponentExtensionSpec, not the pod's.
_COMPONENT_FIELDS: Final = frozenset({"minReplicas", "maxReplicas", "labels", "annotations"})


def _fixture() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(FIXTURE.read_text(encoding="utf-8"))
    return loaded


def _set(value: Any) -> bool:
    return value not in (None, False, "", [], {})


def knative_refusals(pod: Mapping[str, Any], enabled: Iterable[str] = ()) -> list[str]:
    """What Knative Serving's webhook would refuse in a Knative Service's pod spec ``pod``, with
    the fixture's default flags plus ``enabled``: "<field> (<flag>)" or "<field> (never)"."""
    fx = _fixture()
    flags = {**fx["defaults"], **dict.fromkeys(enabled, "enabled")}
    out: list[str] = []

    def gate(field: str, flag: str, need: tuple[str, ...] = ("enabled", "allowed")) -> None:
        if flags.get(flag) not in need:
            out.append(f"{field} ({flag})")

    for key, value in pod.items():
        if key in fx["podSpecFields"]:
            if _set(value):
                gate(key, fx["podSpecFields"][key])
        elif key == "automountServiceAccountToken":
            if value is not False:
                out.append(f"{key} (never)")
        elif key not in fx["allowed"] and _set(value):
            out.append(f"{key} (never)")
    for volume in pod.get("volumes") or []:
        for source in set(volume) - {"name"} - set(fx["alwaysAllowedVolumeSources"]):
            field = f"volumes[{volume['name']}].{source}"
            if source in fx["volumeSources"]:
                gate(field, fx["volumeSources"][source])
            else:
                out.append(f"{field} (never)")
    for container in pod.get("containers") or []:
        for var in container.get("env") or []:
            source = var.get("valueFrom") or {}
            if source.get("fieldRef") or source.get("resourceFieldRef"):
                gate(f"env[{var['name']}]", fx["fieldRef"])
        if ((container.get("securityContext") or {}).get("capabilities") or {}).get("add"):
            gate("capabilities.add", fx["addCapabilities"], need=("enabled",))
    return out


# --- the operator ----------------------------------------------------------------------------


def _docs() -> dict[str, dict[str, Any]]:
    """Experiments whose served models carry placement (inherited and their own) or none."""
    own = copy.deepcopy(judge_doc())
    own["metadata"]["name"] = "sarl-own-placement"
    own["spec"]["serving"] = {
        "judge": {
            "node_selector": {"pool": "serve"},
            "tolerations": [{"key": "serve", "operator": "Exists", "effect": "NoSchedule"}],
        }
    }
    presets = {
        f"preset-{name}": {
            "apiVersion": "sarl.dev/v1alpha1",
            "kind": "Experiment",
            "metadata": {"name": "paper"},
            "spec": {"preset": name},
        }
        for name in PRESETS
    }
    return {"2node": two_node_doc(), "judge": judge_doc(), "own-placement": own, **presets}


def _with_serving(doc: dict[str, Any], **serving: Any) -> Experiment:
    doc = copy.deepcopy(doc)
    doc["spec"].setdefault("serving", {}).update(serving)
    return experiment_of(doc)


def _isvcs(exp: Experiment) -> list[dict[str, Any]]:
    return served_models.inference_services(exp, NAMESPACE, PLATFORM)


def _refusals(isvcs: list[dict[str, Any]], enabled: Iterable[str] = ()) -> set[str]:
    return {
        refusal
        for isvc in isvcs
        for release in RELEASES.values()
        for refusal in knative_refusals(predictor_pod(isvc, release), tuple(enabled))
    }


def test_operator_table_is_knatives() -> None:
    """The operator's copy of the gates (sarl_operator.knative) is the fixture's."""
    fx = _fixture()
    assert dict(knative.POD_FIELD_FLAGS) == fx["podSpecFields"]
    assert dict(knative.VOLUME_FLAGS) == fx["volumeSources"]
    assert fx["fieldRef"] == knative.FIELDREF_FLAG
    assert fx["addCapabilities"] == knative.ADD_CAPABILITIES_FLAG
    gates = {*fx["podSpecFields"].values(), *fx["volumeSources"].values()}
    gates |= {fx["fieldRef"], fx["addCapabilities"]}
    on = {flag for flag in gates if fx["defaults"][flag] == "enabled"}
    assert on == knative.ENABLED_BY_DEFAULT
    # What issue 19 found: the two fields the operator copies into every predictor are off.
    assert fx["defaults"]["kubernetes.podspec-nodeselector"] == "disabled"
    assert fx["defaults"]["kubernetes.podspec-tolerations"] == "disabled"


@pytest.mark.parametrize("name", sorted(_docs()))
def test_default_mode_is_rawdeployment_everywhere(name: str) -> None:
    """Every InferenceService names its mode (KServe's default would be Serverless), with a
    value every KServe tag reads as a Deployment; placement stays as written."""
    exp = experiment_of(_docs()[name])
    isvcs = _isvcs(exp)
    for isvc in isvcs:
        mode = isvc["metadata"]["annotations"][ANNOTATION]
        assert mode == exp.spec.serving.deployment_mode == "RawDeployment"
        assert all(modes[mode] == "raw" for modes in KSERVE_MODES.values())
    if name in ("2node", "own-placement"):
        assert any("nodeSelector" in i["spec"]["predictor"] for i in isvcs)


@pytest.mark.parametrize("name", sorted(_docs()))
def test_serverless_refused_up_front_or_accepted_by_knative(name: str) -> None:
    """Serverless with Knative's default flags: the operator either refuses the spec, naming the
    flag, exactly when the webhook would refuse a predictor, or builds what it accepts."""
    doc = _docs()[name]
    raw = _isvcs(_with_serving(doc, deployment_mode="RawDeployment"))
    expected = _refusals(raw)
    exp = _with_serving(doc, deployment_mode="Serverless")
    if not expected:
        isvcs = _isvcs(exp)
        assert {i["metadata"]["annotations"][ANNOTATION] for i in isvcs} <= {"Serverless"}
        assert _refusals(isvcs) == set()
        return
    with pytest.raises(ValueError, match=r"^spec\.serving\.") as err:
        _isvcs(exp)
    assert any(refusal.split(" (")[1].rstrip(")") in str(err.value) for refusal in expected)
    assert "spec.serving.knative_features" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["2node", "own-placement"])
def test_serverless_with_the_flags_enabled(name: str) -> None:
    """Listing the enabled flags lets placement through, and Knative with them accepts it."""
    flags = ["kubernetes.podspec-nodeselector", "kubernetes.podspec-tolerations"]
    isvcs = _isvcs(
        _with_serving(_docs()[name], deployment_mode="Serverless", knative_features=flags)
    )
    assert isvcs and _refusals(isvcs) != set()  # the defaults alone would refuse them
    assert _refusals(isvcs, flags) == set()


def test_knative_feature_names_are_checked() -> None:
    with pytest.raises(ValueError, match="knative_features"):
        _with_serving(judge_doc(), knative_features=["nodeselector"])


# --- the sarl-inference chart ----------------------------------------------------------------


def _mode(case: Case) -> str:
    values = {"deploymentMode": "RawDeployment", **case.load_values()}
    return str(values["deploymentMode"])


@pytest.mark.parametrize(
    "case", [c for c in CHART_CASES if c.chart == INFERENCE], ids=lambda c: c.id
)
def test_chart_isvcs_name_their_mode_and_pass_knative(case: Case) -> None:
    isvcs = objects_of_kind(case, "InferenceService")
    mode = _mode(case)
    for isvc in isvcs:
        assert isvc["metadata"]["annotations"][ANNOTATION] == mode
        assert KSERVE_MODES["v0.17.0"][mode]  # the chart's minimum KServe reads it
    if mode in SERVERLESS_MODES:
        enabled = case.load_values().get("knativeFeatures", [])
        vllm = [i for i in isvcs if "model" in i["spec"]["predictor"]]
        assert _refusals(vllm, enabled) == set()
        custom = [i["spec"]["predictor"] for i in isvcs if "containers" in i["spec"]["predictor"]]
        for predictor in custom:  # KServe's own fields of the predictor are not pod fields
            pod = {k: v for k, v in predictor.items() if k not in _COMPONENT_FIELDS}
            assert knative_refusals(pod, enabled) == []


@pytest.mark.parametrize(
    ("values", "flag"),
    [
        ({"gpu": {"nodeSelector": {"pool": "gpu"}}}, "kubernetes.podspec-nodeselector"),
        (
            {"gpu": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}},
            "kubernetes.podspec-tolerations",
        ),
        (
            {"judge": {"env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]}},
            "kubernetes.podspec-fieldref",
        ),
        (
            {
                "embedding": {
                    "backend": "sarl-cpu",
                    "sarlCpu": {"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}},
                },
                "judge": {"enabled": False},
            },
            "kubernetes.containerspec-addcapabilities",
        ),
    ],
    ids=["nodeSelector", "tolerations", "fieldRef", "addCapabilities"],
)
def test_chart_refuses_gated_fields_in_serverless(values: dict[str, Any], flag: str) -> None:
    """A field Knative would refuse fails the render, naming its flag; RawDeployment and a listed
    flag render it."""
    import helm_python as helm

    with pytest.raises(helm.HelmError, match=flag.replace(".", r"\.")):
        render_templates(INFERENCE, {**values, "deploymentMode": "Serverless"})
    render_templates(INFERENCE, {**values, "deploymentMode": "RawDeployment"})
    render_templates(INFERENCE, {**values, "deploymentMode": "Knative", "knativeFeatures": [flag]})
