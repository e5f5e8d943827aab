"""The InferenceServices the operator builds, and those the sarl-inference chart renders, still say
what they mean once KServe has merged them into its ``kserve-huggingfaceserver`` runtime
(emulated by ``tests/operators/kserve_merge.py``, with the runtime YAML of each release in
``fixtures/kserve/``): the resources of the spec or values (not the runtime's 1 CPU / 2Gi), the
vLLM flags once each, the placement, the environment, and no template left unfilled.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import pytest
import yaml
from kubernetes.utils import parse_quantity

from sarl.spec.cluster_fields import ServedModelSpec
from sarl.spec.experiment import Experiment
from sarl_operator import job_pods, served_models
from tests.charts.rendering import CHARTS_DIR, INFERENCE, Case, objects_of_kind
from tests.operators.cases import NAMESPACE, PLATFORM, experiment, experiment_of, judge_doc
from tests.operators.kserve_merge import (
    RELEASES,
    Release,
    effective_flags,
    flag_values,
    merge_runtime_container,
    predictor_pod,
    replace_placeholders,
)

TAGS = sorted(RELEASES)
GPU = job_pods.GPU_RESOURCE
#: Environment the runtime itself adds, per release (LMCACHE from the runtime YAML, the name
#: from the controller).
RUNTIME_ENV = {
    "v0.15.0": [],
    "v0.17.0": ["LMCACHE_USE_EXPERIMENTAL", "INFERENCE_SERVICE_NAME"],
    "v0.20.0": ["LMCACHE_USE_EXPERIMENTAL", "INFERENCE_SERVICE_NAME"],
}


def _served_both_doc() -> dict[str, Any]:
    """An embedder and a judge, both served, with serving settings that differ from the
    defaults and from each other (own placement for one, inherited for the other)."""
    doc = judge_doc()
    doc["metadata"]["name"] = "sarl-served"
    doc["spec"]["reward"].append(
        {
            "name": "structure",
            "settings": {"embedder": {"kind": "openai", "model": "Qwen/Qwen3-Embedding-0.6B"}},
        }
    )
    doc["spec"]["resources"] = {
        "node_selector": {"pool": "train"},
        "tolerations": [{"key": "train", "operator": "Exists", "effect": "NoSchedule"}],
    }
    doc["spec"]["serving"] = {
        "embedding": {"gpus": 2, "memory": "24Gi", "node_selector": {"pool": "serve"}},
        "judge": {
            "cpu": "6",
            "memory": "48Gi",
            "max_model_len": 32768,
            "extra_args": ["--gpu-memory-utilization=0.85"],
        },
    }
    return doc


def _operator_cases() -> dict[str, Experiment]:
    return {
        "2node-embedding": experiment("sarl-grpo-math-2node"),
        "judge": experiment("sarl-grpo-judge"),
        "served-both": experiment_of(_served_both_doc()),
    }


OPERATOR_ISVCS = [
    pytest.param(
        exp, isvc, id=f"{case}-{isvc['metadata']['labels']['app.kubernetes.io/component']}"
    )
    for case, exp in _operator_cases().items()
    for isvc in served_models.inference_services(exp, NAMESPACE, PLATFORM)
]


def _served(exp: Experiment, isvc: Mapping[str, Any]) -> ServedModelSpec:
    component = isvc["metadata"]["labels"]["app.kubernetes.io/component"]
    return exp.spec.serving.embedding if component == "embedding" else exp.spec.serving.judge


def shortfalls(resources: Mapping[str, Any], need: Mapping[str, Any]) -> list[str]:
    """Each ``requests``/``limits`` amount of ``need`` that ``resources`` does not reach."""
    out = []
    for kind, amounts in need.items():
        for name, amount in amounts.items():
            got = resources.get(kind, {}).get(name)
            if got is None or parse_quantity(got) < parse_quantity(amount):
                out.append(f"{kind}.{name}: {got} < {amount}")
    return out


def _container(isvc: Mapping[str, Any], tag: str) -> dict[str, Any]:
    container: dict[str, Any] = predictor_pod(isvc, RELEASES[tag])["containers"][0]
    return container


def _check_flags(args: list[str], isvc_name: str, want: Mapping[str, str | None]) -> None:
    """``want`` (flag -> value, None: absent) is what takes effect, and the only flag given twice
    is --model_name: the runtime's (the ISVC name) first, then the ISVC's, which argparse keeps."""
    flags = effective_flags(args)
    for flag, value in want.items():
        assert flags.get(flag) == value, (flag, args)
    repeated = {f: v for f, v in flag_values(args).items() if len(v) > 1}
    assert repeated == {"--model-name": [isvc_name, want["--model-name"]]}, args


@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize(("exp", "isvc"), OPERATOR_ISVCS)
def test_operator_isvc_keeps_its_resources(tag: str, exp: Experiment, isvc: dict[str, Any]) -> None:
    served = _served(exp, isvc)
    amounts = {"cpu": served.cpu, "memory": served.memory, GPU: str(served.gpus)}
    resources = _container(isvc, tag)["resources"]
    assert shortfalls(resources, {"requests": amounts, "limits": amounts}) == []
    for kind in ("requests", "limits"):  # the spec's values, not more: requests == limits
        assert {k: parse_quantity(v) for k, v in resources[kind].items()} == {
            k: parse_quantity(v) for k, v in amounts.items()
        }


@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize(("exp", "isvc"), OPERATOR_ISVCS)
def test_operator_isvc_flags(tag: str, exp: Experiment, isvc: dict[str, Any]) -> None:
    served = _served(exp, isvc)
    embedding = isvc["metadata"]["name"].endswith("-embedding")
    container = _container(isvc, tag)
    args = container["args"]
    want: dict[str, str | None] = {
        "--model-name": "embedding" if embedding else "judge",
        "--backend": "vllm",
        "--max-model-len": str(served.max_model_len),
        "--runner": "pooling" if embedding else None,
        "--tensor-parallel-size": str(served.gpus) if served.gpus > 1 else None,
    }
    _check_flags(args, isvc["metadata"]["name"], want)
    model_id = effective_flags(args)["--model-id"]
    assert model_id and model_id.startswith("Qwen/")
    if served.extra_args:  # last, after the flags the operator sets
        assert args[-len(served.extra_args) :] == served.extra_args


@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize(("exp", "isvc"), OPERATOR_ISVCS)
def test_operator_isvc_placement(tag: str, exp: Experiment, isvc: dict[str, Any]) -> None:
    """The served model's own node selector/tolerations, else the training pods'; the runtime's
    memory-backed /dev/shm (vLLM's workers share tensors through it) survives the merge."""
    served, res = _served(exp, isvc), exp.spec.resources
    pod = predictor_pod(isvc, RELEASES[tag])
    assert pod.get("nodeSelector", {}) == (served.node_selector or res.node_selector)
    assert pod.get("tolerations", []) == (served.tolerations or res.tolerations)
    assert {"name": "devshm", "emptyDir": {"medium": "Memory"}} in pod["volumes"]
    assert {"name": "devshm", "mountPath": "/dev/shm"} in pod["containers"][0]["volumeMounts"]


@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize(("exp", "isvc"), OPERATOR_ISVCS)
def test_operator_isvc_env_and_placeholders(
    tag: str, exp: Experiment, isvc: dict[str, Any]
) -> None:
    container = _container(isvc, tag)
    env = container.get("env", [])
    assert [e["name"] for e in env] == RUNTIME_ENV[tag]
    assert all("value" in e and "valueFrom" not in e for e in env)
    assert "{{" not in json.dumps(container)
    # The runtime's --model_name={{.Name}} is filled with the InferenceService's name.
    assert container["args"][0] == f"--model_name={isvc['metadata']['name']}"


@pytest.mark.parametrize("tag", TAGS)
def test_operator_isvc_identity_token_and_gpu_name_reach_the_pod(tag: str) -> None:
    """Contract: KServe's ``PredictorSpec`` inlines a ``PodSpec`` (``PodSpec `json:",inline"```
    in ``pkg/apis/serving/v1beta1/predictor.go`` at v0.15.0, v0.17.0 and v0.20.0, whose
    ``pkg/apis/serving/v1beta1/podspec.go`` has ``serviceAccountName`` and
    ``imagePullSecrets``), so those sit on the predictor itself and reach the pod through
    ``MergePodSpec``; ``HF_TOKEN`` in ``predictor.model.env`` is merged by name next to the
    runtime's variables; the GPU resource name replaces ``nvidia.com/gpu`` as request and
    limit."""
    doc = _served_both_doc()
    doc["spec"]["resources"].update(
        service_account="serve-sa",
        image_pull_secrets=["regcred"],
        gpu_resource="amd.com/gpu",
        hf_token={"secret_name": "hf-token"},
    )
    doc["spec"]["serving"]["embedding"]["gpu_resource"] = "nvidia.com/mig-1g.10gb"
    exp = experiment_of(doc)
    gpus = {"embedding": "nvidia.com/mig-1g.10gb", "judge": "amd.com/gpu"}
    for isvc in served_models.inference_services(exp, NAMESPACE, PLATFORM):
        component = isvc["metadata"]["labels"]["app.kubernetes.io/component"]
        pod = predictor_pod(isvc, RELEASES[tag])
        assert pod["serviceAccountName"] == "serve-sa"
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
        container = pod["containers"][0]
        env = {e["name"]: e for e in container["env"]}
        assert set(env) == {*RUNTIME_ENV[tag], "HF_TOKEN"}
        assert env["HF_TOKEN"]["valueFrom"] == {
            "secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}
        }
        gpu = gpus[component]
        count = str(_served(exp, isvc).gpus)
        for side in ("requests", "limits"):
            assert container["resources"][side][gpu] == count
            assert GPU not in container["resources"][side]


@pytest.mark.parametrize("tag", TAGS)
def test_gpu_only_predictor_runs_with_the_runtime_cpu_and_memory(tag: str) -> None:
    """Finding 4: the builders' old predictor (1 GPU and nothing else) keeps the runtime's 1 CPU
    and 2Gi, far below what a judge needs; the checks above would have failed on it."""
    exp = experiment("sarl-grpo-judge")
    (isvc,) = served_models.inference_services(exp, NAMESPACE, PLATFORM)
    old = copy.deepcopy(isvc)
    old["spec"]["predictor"]["model"]["resources"] = {
        "requests": {GPU: "1"},
        "limits": {GPU: "1"},
    }
    resources = _container(old, tag)["resources"]
    assert resources["limits"] == {"cpu": "1", "memory": "2Gi", GPU: "1"}
    served = exp.spec.serving.judge
    need = {"cpu": served.cpu, "memory": served.memory}
    assert len(shortfalls(resources, {"requests": need, "limits": need})) == 4


# --- the sarl-inference chart -------------------------------------------------------------------

#: The chart's vLLM InferenceServices (the sarl-cpu embedding is a custom container, not merged).
CHART_ISVCS = [
    pytest.param(Case(INFERENCE, values), component, id=f"{values}-{component}")
    for values, components in {
        "default": ("embedding", "judge"),
        "gpu": ("embedding", "judge"),
        "judge-disabled": ("embedding",),
    }.items()
    for component in components
]


def _deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        if isinstance(old, Mapping) and isinstance(value, Mapping):
            out[key] = _deep_merge(old, value)
        else:
            out[key] = value
    return out


def _chart_values(case: Case) -> dict[str, Any]:
    """The values Helm renders ``case`` with: the chart's values.yaml under the ci file's."""
    path = CHARTS_DIR / case.chart / "values.yaml"
    return _deep_merge(yaml.safe_load(path.read_text(encoding="utf-8")), case.load_values())


def _chart_model(values: Mapping[str, Any], isvc: Mapping[str, Any]) -> dict[str, Any]:
    """The values of the model an ISVC serves: name, id, gpus, maxModelLen, resources, env."""
    if isvc["metadata"]["name"].endswith("-embedding"):
        emb = values["embedding"]
        return {**emb["vllm"], "modelName": emb["modelName"], "embedding": True}
    return {**values["judge"], "embedding": False}


@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize(("case", "component"), CHART_ISVCS)
def test_chart_isvc_after_merge(tag: str, case: Case, component: str) -> None:
    (isvc,) = (
        obj
        for obj in objects_of_kind(case, "InferenceService")
        if obj["metadata"]["name"].endswith(f"-{component}")
    )
    values = _chart_values(case)
    model = _chart_model(values, isvc)
    pod = predictor_pod(isvc, RELEASES[tag])
    container = pod["containers"][0]
    gpu = {values["gpu"]["resourceName"]: str(model["gpus"])}
    need = {kind: {**model["resources"][kind], **gpu} for kind in ("requests", "limits")}
    assert shortfalls(container["resources"], need) == []
    want: dict[str, str | None] = {
        "--model-name": model["modelName"],
        "--model-id": model["modelId"],
        "--backend": "vllm",
        "--max-model-len": str(model["maxModelLen"]),
        "--runner": "pooling" if model["embedding"] else None,
        "--tensor-parallel-size": str(model["gpus"]) if model["gpus"] > 1 else None,
    }
    _check_flags(container["args"], isvc["metadata"]["name"], want)
    assert pod.get("nodeSelector", {}) == values["gpu"]["nodeSelector"]
    assert pod.get("tolerations", []) == values["gpu"]["tolerations"]
    env = {e["name"]: e for e in container.get("env", [])}
    secret = values["huggingface"]["tokenSecret"]
    token = {"secretKeyRef": {"name": secret["name"], "key": secret["key"]}}
    assert set(env) == set(RUNTIME_ENV[tag]) | ({"HF_TOKEN"} if secret["name"] else set())
    if secret["name"]:  # a Secret reference only, never a value next to it
        assert env["HF_TOKEN"] == {"name": "HF_TOKEN", "valueFrom": token}
    assert "{{" not in json.dumps(container)


# --- the emulation itself -------------------------------------------------------------------------


@pytest.mark.parametrize("tag", TAGS)
def test_env_merge_order_and_value_conflicts(tag: str) -> None:
    """apimachinery's mergeSlice order (a new ISVC item before the runtime's leftovers, a shared
    one where the ISVC puts it) and, from v0.20.0, MergeContainerWithPatch's conflict rule."""
    runtime = {"name": "kserve-container", "env": [{"name": "A", "value": "1"}, {"name": "B"}]}
    ref = {"secretKeyRef": {"name": "s", "key": "k"}}
    isvc = {"env": [{"name": "C", "value": "3"}, {"name": "A", "valueFrom": ref}]}
    merged = merge_runtime_container(runtime, isvc, RELEASES[tag])
    assert [e["name"] for e in merged["env"]] == ["C", "A", "B"]
    a = merged["env"][1]
    if RELEASES[tag].reconciles_env_conflicts:
        assert a == {"name": "A", "valueFrom": ref}
    else:  # both kept: the API server refuses such a pod
        assert a == {"name": "A", "value": "1", "valueFrom": ref}


def test_merge_replaces_lists_and_merges_maps() -> None:
    runtime = {
        "name": "kserve-container",
        "args": ["--a"],
        "command": ["serve"],
        "securityContext": {"runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
        "resources": {"limits": {"cpu": "1", "memory": "2Gi"}},
    }
    isvc = {
        "args": ["--b"],
        "command": ["other"],
        "securityContext": {"capabilities": {"add": ["X"]}},
        "resources": {"limits": {"memory": "8Gi"}},
    }
    merged = merge_runtime_container(runtime, isvc, Release("test", (), False, False))
    assert merged == {
        "name": "kserve-container",
        "args": ["--a", "--b"],  # concatenated by KServe, not by the patch
        "command": ["other"],
        "securityContext": {"runAsNonRoot": True, "capabilities": {"drop": ["ALL"], "add": ["X"]}},
        "resources": {"limits": {"cpu": "1", "memory": "8Gi"}},
    }


@pytest.mark.parametrize(
    ("template", "filled"),
    [
        ("--model_name={{.Name}}", "--model_name=judge"),
        ("{{ .Namespace }}/{{.Labels.app}}", "research/sarl"),
        ('{{index .Annotations "a/b"}}', "c"),
    ],
)
def test_placeholders(template: str, filled: str) -> None:
    meta = {"name": "judge", "namespace": "research", "labels": {"app": "sarl"}}
    assert replace_placeholders(template, {**meta, "annotations": {"a/b": "c"}}) == filled


@pytest.mark.parametrize("template", ["{{.Labels.missing}}", "{{.Spec.Predictor}}"])
def test_placeholders_kserve_would_not_fill_are_refused(template: str) -> None:
    with pytest.raises(ValueError, match="placeholder"):
        replace_placeholders(template, {"name": "x", "labels": {}})


def test_runtime_fixtures_are_the_upstream_runtime() -> None:
    """Each fixture is a ClusterServingRuntime for huggingface whose only template is {{.Name}}."""
    for release in RELEASES.values():
        runtime = release.runtime()
        assert runtime["kind"] == "ClusterServingRuntime"
        assert runtime["metadata"]["name"] == "kserve-huggingfaceserver"
        (container,) = runtime["spec"]["containers"]
        assert container["args"] == ["--model_name={{.Name}}"]
        assert container["resources"]["limits"] == {"cpu": "1", "memory": "2Gi"}


def test_documented_kserve_minimum() -> None:
    """The charts' docs name KServe 0.17 as the minimum (--runner=pooling needs its vLLM)."""
    docs = {
        "charts/README.md": CHARTS_DIR / "README.md",
        "values.yaml": CHARTS_DIR / INFERENCE / "values.yaml",
    }
    for name, path in docs.items():
        text = path.read_text(encoding="utf-8")
        assert ">= 0.17" in text and "--runner=pooling" in text, name
        assert ">= 0.15" not in text, name
