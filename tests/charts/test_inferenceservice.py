"""The InferenceServices are valid KServe v1beta1 objects and carry the serving settings that
matter: every field is known to the KServe SDK's models (kserve.V1beta1InferenceService and the
Kubernetes models it nests), the vLLM embedding runs with --runner=pooling, GPUs are requested,
scheduling values reach the predictor, and the reward service points at the embedding predictor.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.charts.rendering import CASES, INFERENCE, NAMESPACE, Case, objects, objects_of_kind

ISVC_API = "serving.kserve.io/v1beta1"
_PRIMITIVES: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "float": (int, float),
    "bool": (bool,),
    "object": (object,),
    "datetime": (str,),
    "date": (str,),
}
_LIST = re.compile(r"^(?:list|List)\[(.*)\]$")
_DICT = re.compile(r"^(?:dict\(|Dict\[)[^,]+,\s*(.*)[)\]]$")


def _model_class(name: str) -> type | None:
    """A generated model class: KServe's own, else the Kubernetes client's (V1Container, ...)."""
    import kserve
    import kubernetes.client

    return getattr(kserve, name, None) or getattr(kubernetes.client, name, None)


def build(value: Any, type_name: str, path: str) -> Any:
    """Deserialize ``value`` as the SDK type ``type_name``, refusing unknown fields.

    Walks the models' ``openapi_types``/``attribute_map`` (the SDK's own ``deserialize`` cannot
    resolve the nested Kubernetes models and silently drops unknown keys) and constructs each
    model, so the models' client-side checks (required fields, enums) run too.
    """
    if (match := _LIST.match(type_name)) is not None:
        assert isinstance(value, list), f"{path}: expected a list"
        return [build(v, match.group(1), f"{path}[{i}]") for i, v in enumerate(value)]
    if (match := _DICT.match(type_name)) is not None:
        assert isinstance(value, dict), f"{path}: expected a mapping"
        return {k: build(v, match.group(1), f"{path}.{k}") for k, v in value.items()}
    if type_name in _PRIMITIVES:
        assert isinstance(value, _PRIMITIVES[type_name]), f"{path}: expected {type_name}"
        return value
    cls = _model_class(type_name)
    assert cls is not None, f"{path}: the SDK has no model {type_name}"
    assert isinstance(value, dict), f"{path}: expected a {type_name} mapping"
    by_json_name = {json_name: attr for attr, json_name in cls.attribute_map.items()}
    unknown = sorted(set(value) - set(by_json_name))
    assert not unknown, f"{path}: fields {unknown} are not in {type_name}"
    kwargs = {
        by_json_name[k]: build(v, cls.openapi_types[by_json_name[k]], f"{path}.{k}")
        for k, v in value.items()
    }
    return cls(**kwargs)


def _isvcs(case: Case) -> dict[str, dict[str, Any]]:
    return {
        o["metadata"]["labels"]["app.kubernetes.io/component"]: o
        for o in objects_of_kind(case, "InferenceService")
    }


INFERENCE_CASES = [c for c in CASES if c.chart == INFERENCE]


@pytest.mark.parametrize("case", INFERENCE_CASES, ids=lambda c: c.id)
def test_isvcs_deserialize_into_kserve_models(case: Case) -> None:
    import kserve

    isvcs = objects_of_kind(case, "InferenceService")
    assert isvcs
    for isvc in isvcs:
        assert isvc["apiVersion"] == ISVC_API
        model = build(isvc, "V1beta1InferenceService", isvc["metadata"]["name"])
        assert isinstance(model, kserve.V1beta1InferenceService)
        assert model.spec.predictor is not None


def test_walker_rejects_unknown_fields() -> None:
    """Guard: a misspelt or misplaced field fails the model walk."""
    isvc = _isvcs(Case(INFERENCE))["embedding"]
    typo = {**isvc, "spec": {"predictor": {**isvc["spec"]["predictor"], "nodeSelectors": {}}}}
    with pytest.raises(AssertionError, match="nodeSelectors"):
        build(typo, "V1beta1InferenceService", "isvc")
    misplaced = {**isvc, "spec": {"predictor": {"model": {"replicas": 1}}}}
    with pytest.raises(AssertionError, match="replicas"):
        build(misplaced, "V1beta1InferenceService", "isvc")


@pytest.mark.parametrize("case", INFERENCE_CASES, ids=lambda c: c.id)
def test_vllm_embedding_runs_as_pooling_model(case: Case) -> None:
    embedding = _isvcs(case)["embedding"]
    predictor = embedding["spec"]["predictor"]
    if case.values == "cpu-embedding":
        (container,) = predictor["containers"]
        assert container["name"] == "kserve-container"
        assert container["command"] == ["sarl", "serve", "embedding"]
        assert "model" not in predictor
        assert embedding["metadata"]["labels"]["sarl.dev/embedding-backend"] == "sarl-cpu"
        return
    model = predictor["model"]
    assert model["modelFormat"] == {"name": "huggingface"}
    assert "--runner=pooling" in model["args"]
    assert "--backend=vllm" in model["args"]
    assert "--model_id=Qwen/Qwen3-Embedding-0.6B" in model["args"]
    assert not any(a.startswith("--task") for a in model["args"])  # KServe ignores it with vLLM


@pytest.mark.parametrize("case", INFERENCE_CASES, ids=lambda c: c.id)
def test_judge_is_optional(case: Case) -> None:
    isvcs = _isvcs(case)
    if case.load_values().get("judge", {}).get("enabled", True):
        args = isvcs["judge"]["spec"]["predictor"]["model"]["args"]
        assert "--model_name=judge" in args and "--runner=pooling" not in args
    else:
        assert "judge" not in isvcs


def test_gpu_values_reach_the_predictors() -> None:
    case = Case(INFERENCE, "gpu")
    values = case.load_values()
    for component, gpus in (("embedding", "1"), ("judge", "2")):
        predictor = _isvcs(case)[component]["spec"]["predictor"]
        resources = predictor["model"]["resources"]
        assert resources["limits"]["nvidia.com/gpu"] == gpus
        assert resources["requests"]["nvidia.com/gpu"] == gpus
        assert predictor["nodeSelector"] == values["gpu"]["nodeSelector"]
        assert predictor["tolerations"] == values["gpu"]["tolerations"]
        env = {e["name"]: e for e in predictor["model"]["env"]}
        assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": "hf-token",
            "key": "HF_TOKEN",
        }
    judge_args = _isvcs(case)["judge"]["spec"]["predictor"]["model"]["args"]
    assert "--tensor-parallel-size=2" in judge_args
    assert "--model_id=Qwen/Qwen3-8B" in judge_args


def test_cpu_backend_requests_no_gpu() -> None:
    case = Case(INFERENCE, "cpu-embedding")
    text = "".join(str(o) for o in objects(case))
    assert "nvidia.com/gpu" not in text


@pytest.mark.parametrize(
    ("case", "mode", "host"),
    [
        (Case(INFERENCE), "RawDeployment", "sarl-inference-embedding-predictor"),
        (Case(INFERENCE, "serverless"), "Serverless", "sarl-inference-embedding"),
        (Case(INFERENCE, "raw-deployment"), "RawDeployment", "sarl-inference-embedding-predictor"),
    ],
    ids=["default", "serverless", "raw"],
)
def test_deployment_mode_and_reward_embedding_url(case: Case, mode: str, host: str) -> None:
    for isvc in objects_of_kind(case, "InferenceService"):
        assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == mode
    (reward,) = objects_of_kind(case, "Deployment")
    args = reward["spec"]["template"]["spec"]["containers"][0]["args"]
    url = f"http://{host}.{NAMESPACE}.svc.cluster.local/openai"
    assert f"--embedding-url={url}" in args
    assert "--embedder=openai" in args and "--embedding-model=embedding" in args


def test_reward_embedding_url_override() -> None:
    import yaml

    from tests.charts.rendering import render_templates

    text = render_templates(
        INFERENCE,
        {"embedding": {"enabled": False}, "reward": {"embeddingUrl": "http://tei.ml:8080"}},
    )
    docs = [
        d
        for p, t in text.items()
        if not p.endswith("NOTES.txt")
        for d in yaml.safe_load_all(t)
        if d
    ]
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["Deployment", "InferenceService", "Service"]  # judge, reward
    (reward,) = (d for d in docs if d["kind"] == "Deployment")
    assert (
        "--embedding-url=http://tei.ml:8080"
        in reward["spec"]["template"]["spec"]["containers"][0]["args"]
    )
