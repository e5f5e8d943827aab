"""Builders: golden YAML, idempotence, replica layout, the embedding and judge rules, owner
references.

The PyTorchJob is validated against the Kubeflow Training SDK's models (``kubeflow-training``,
``KubeflowOrgV1PyTorchJob``): deserializing through them rejects unknown shapes of the typed
fields; the test is skipped if that SDK is not installed.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from sarl.spec.loader import SpecError, load_experiment
from sarl_operator import builders, child_meta, served_models
from tests.operators import regenerate_golden
from tests.operators.cases import (
    CASES,
    IMAGE,
    NAMESPACE,
    PLATFORM,
    RUN_ID,
    TRACKING_URI,
    children,
    experiment,
    experiment_of,
    golden_path,
    golden_text,
)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    assert golden_path(case).read_text(encoding="utf-8") == golden_text(case), (
        "stale golden file: run python tests/operators/regenerate_golden.py and review the diff"
    )


def test_regenerate_check_passes() -> None:
    assert regenerate_golden.main(["--check"]) == 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_building_twice_gives_equal_objects(case: str) -> None:
    assert children(experiment(case)) == children(experiment(case))


def _job(case: str) -> dict[str, Any]:
    return builders.pytorchjob(
        experiment(case),
        NAMESPACE,
        image=IMAGE,
        mlflow_run_id=RUN_ID,
        tracking_uri=TRACKING_URI,
        platform=PLATFORM,
    )


@pytest.mark.parametrize(("case", "workers"), [("sarl-grpo-math", 0), ("sarl-grpo-math-2node", 1)])
def test_replicas_and_gpus(case: str, workers: int) -> None:
    exp = experiment(case)
    spec = _job(case)["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1
    assert replicas.get("Worker", {}).get("replicas", 0) == workers
    assert spec["nprocPerNode"] == str(exp.spec.resources.gpus_per_node)
    container = replicas["Master"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == str(
        exp.spec.resources.gpus_per_node
    )
    assert container["command"][-1] == "sarl_jobs.verl_trainer"
    assert container["args"] == ["/etc/sarl/experiment.yaml"]  # the entrypoint's one argument
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MLFLOW_RUN_ID"] == RUN_ID
    assert env["MLFLOW_TRACKING_URI"] == TRACKING_URI
    assert env["SARL_CHECKPOINT_URI"] == f"s3://sarl/checkpoints/{NAMESPACE}/{exp.name}"


def test_scheduling_from_resources() -> None:
    pod = _job("sarl-grpo-math-2node")["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_pytorchjob_matches_kubeflow_sdk_model() -> None:
    models = pytest.importorskip("kubeflow.training.models")
    from kubeflow.training.api_client import ApiClient

    class _Response:
        def __init__(self, obj: dict[str, Any]) -> None:
            self.data = json.dumps(obj)

    for case in CASES:
        job = _job(case)
        model = ApiClient().deserialize(_Response(job), models.KubeflowOrgV1PyTorchJob)
        assert model.kind == "PyTorchJob"
        assert model.spec.nproc_per_node == job["spec"]["nprocPerNode"]
        master = model.spec.pytorch_replica_specs["Master"]
        assert master.template.spec.containers[0].name == "pytorch"
        # Round trip: nothing the SDK models know about is lost or renamed.
        assert ApiClient().sanitize_for_serialization(model) == job


@pytest.mark.parametrize(("url", "created"), [("", 1), ("http://shared-embedding:8000", 0)])
def test_embedding_isvc_only_without_url(url: str, created: int) -> None:
    doc = CASES["sarl-grpo-math-2node"]()
    doc["spec"]["reward"][0]["settings"]["embedder"]["url"] = url
    exp = load_experiment(doc)
    isvcs = served_models.inference_services(exp, NAMESPACE)
    assert len(isvcs) == created
    rendered = yaml.safe_load(builders.configmap(exp, NAMESPACE)["data"]["experiment.yaml"])
    got_url = rendered["spec"]["reward"][0]["settings"]["embedder"]["url"]
    if created:
        assert "--runner=pooling" in isvcs[0]["spec"]["predictor"]["model"]["args"]
        assert got_url == served_models.embedding_url(exp, NAMESPACE)
    else:
        assert got_url == url


def _judge_doc(url: str | None, model: str = "Qwen/Qwen3-8B") -> dict[str, Any]:
    doc = CASES["sarl-grpo-judge"]()
    doc["spec"]["reward"][0]["settings"]["judge_client"] = {"model": model, "url": url}
    return doc


@pytest.mark.parametrize(("url", "created"), [(None, 1), ("", 1), ("http://judge:8000", 0)])
def test_judge_isvc_only_without_url(url: str | None, created: int) -> None:
    exp = experiment_of(_judge_doc(url))
    isvcs = served_models.inference_services(exp, NAMESPACE, PLATFORM)
    assert [i["metadata"]["name"] for i in isvcs] == ["sarl-grpo-judge-judge"] * created
    rendered = yaml.safe_load(
        builders.configmap(exp, NAMESPACE, PLATFORM)["data"]["experiment.yaml"]
    )
    client = rendered["spec"]["reward"][0]["settings"]["judge_client"]
    if created:
        assert "--model_id=Qwen/Qwen3-8B" in isvcs[0]["spec"]["predictor"]["model"]["args"]
        assert client == {
            **client,
            "url": served_models.judge_url(exp.name, NAMESPACE),
            "model": "judge",
        }
    else:
        assert (client["url"], client["model"]) == (url, "Qwen/Qwen3-8B")


def test_judge_off_serves_nothing() -> None:
    doc = _judge_doc(None)
    doc["spec"]["reward"][0]["settings"]["judge"] = False
    assert served_models.inference_services(experiment_of(doc), NAMESPACE, PLATFORM) == []


def test_rlkd_decomposer_and_judge_share_one_served_model() -> None:
    doc = CASES["sarl-grpo-judge"]()
    endpoint = {"model": "Qwen/Qwen3-8B"}
    doc["spec"]["reward"] = [
        {"name": "rlkd", "settings": {"decomposer": endpoint, "judge": endpoint}}
    ]
    exp = experiment_of(doc)
    assert [m for _, m in served_models.served_judges(exp, NAMESPACE, PLATFORM)] == [
        "Qwen/Qwen3-8B"
    ] * 2
    assert len(served_models.inference_services(exp, NAMESPACE, PLATFORM)) == 1


def test_two_served_judge_models_are_refused_naming_the_fields() -> None:
    doc = CASES["sarl-grpo-judge"]()
    doc["spec"]["reward"] = [
        {"name": "rlkd", "settings": {"decomposer": {"model": "a/b"}, "judge": {"model": "c/d"}}}
    ]
    with pytest.raises(ValueError, match=r"spec\.reward\[0\]\.settings\.decomposer.*'a/b', 'c/d'"):
        served_models.inference_services(experiment_of(doc), NAMESPACE, PLATFORM)


def test_without_fill_a_urlless_judge_is_a_spec_error_naming_the_field() -> None:
    with pytest.raises(SpecError, match="judge_client"):
        load_experiment(_judge_doc(None))


def test_configmap_holds_valid_spec_and_backend() -> None:
    exp = experiment("sarl-grpo-math")
    data = builders.configmap(exp, NAMESPACE)["data"]
    assert data["backend"] == "verl"
    # The preset's embedder has no URL: the trainer gets the served model's URL and name.
    expected = exp.spec.model_dump(mode="json")
    embedder = expected["reward"][0]["settings"]["embedder"]
    embedder.update(url=served_models.embedding_url(exp, NAMESPACE), model="embedding")
    assert load_experiment(data["experiment.yaml"]).spec.model_dump(mode="json") == expected


def test_owned_adds_one_controller_reference() -> None:
    obj = builders.configmap(experiment("sarl-grpo-math"), NAMESPACE)
    owner = {"name": "sarl-grpo-math", "uid": "u-1"}
    once = child_meta.owned(obj, owner)
    assert child_meta.owned(once, owner) == once
    assert once["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "sarl.dev/v1alpha1",
            "kind": "Experiment",
            "name": "sarl-grpo-math",
            "uid": "u-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert "ownerReferences" not in obj["metadata"]


def test_labels_carry_experiment() -> None:
    got = child_meta.labels(experiment("sarl-grpo-math"))
    assert got["sarl.dev/experiment"] == "sarl-grpo-math"
    assert got["app.kubernetes.io/managed-by"] == "sarl-operator"
