"""Models without the Hub in the operator's children (``sarl_operator.model_sources`` through the
builders), as explicit dicts:

* an ``s3://`` or ``pvc://`` embedding or judge model is served from KServe's ``storageUri``
  with ``--model_dir=/mnt/models`` and no ``--model_id`` (the merged runtime container is checked
  with ``tests/operators/kserve_merge.py``, the emulation of KServe's merge at v0.15.0, v0.17.0
  and v0.20.0); an s3 one carries ``serving.kserve.io/storageSecretName`` naming the S3
  credentials Secret (KServe v0.17.0 pkg/credentials/service_account_credentials.go reads it
  from the pod's annotations); KServe itself is not run here (no cluster);
* a ``pvc://`` policy is mounted read-only in the trainer and evaluation pods where the jobs
  look for it;
* ``HF_ENDPOINT`` (spec, else the platform's ``SARL_HF_ENDPOINT``) reaches trainer, evaluation
  and served pods; without it, pods whose model is in the store get ``HF_HUB_OFFLINE=1``;
* a served model that is a local path, or a hostile URI, fails naming its field.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from sarl_operator import builders, evaluation, job_pods, served_models
from sarl_operator.platform_settings import Platform
from sarl_operator.trainjob import TrainJobBuilder
from tests.operators.cases import (
    IMAGE,
    NAMESPACE,
    PLATFORM,
    RUN_ID,
    TRACKING_URI,
    experiment_of,
    judge_doc,
    two_node_doc,
)
from tests.operators.kserve_merge import RELEASES, effective_flags, predictor_pod

MIRROR = "https://hf-mirror.internal"


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _with(doc: dict[str, Any], *, model: str | None = None, **resources: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    if model is not None:
        doc["spec"]["model"] = {**doc["spec"].get("model", {}), "name": model}
    doc["spec"].setdefault("resources", {}).update(resources)
    return doc


def _embedder(doc: dict[str, Any], model: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["spec"]["reward"][0]["settings"]["embedder"]["model"] = model
    return doc


def _kw(platform: Platform) -> dict[str, Any]:
    return {
        "image": IMAGE, "mlflow_run_id": RUN_ID, "tracking_uri": TRACKING_URI, "platform": platform
    }  # fmt: skip


def _pods(doc: dict[str, Any], platform: Platform = PLATFORM) -> list[dict[str, Any]]:
    """The pod specs of the trainer (PyTorchJob Master) and the evaluation Job."""
    exp = experiment_of(doc)
    job = builders.pytorchjob(exp, NAMESPACE, **_kw(platform))
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    evaluate = evaluation.eval_job(exp, NAMESPACE, **_kw(platform))["spec"]["template"]["spec"]
    return [master, evaluate]


def _isvc(doc: dict[str, Any], platform: Platform = PLATFORM) -> dict[str, Any]:
    (isvc,) = served_models.inference_services(experiment_of(doc), NAMESPACE, platform)
    return isvc


def test_s3_embedding_model_is_served_from_storage_uri() -> None:
    isvc = _isvc(_embedder(two_node_doc(), "s3://models/embed/Qwen3-Embedding-0.6B"))
    predictor = isvc["spec"]["predictor"]
    assert predictor["model"]["storageUri"] == "s3://models/embed/Qwen3-Embedding-0.6B/"
    annotations = isvc["metadata"]["annotations"]
    assert annotations["serving.kserve.io/storageSecretName"] == "sarl-s3-credentials"
    assert _env(predictor["model"])["HF_HUB_OFFLINE"] == "1"
    for release in RELEASES.values():
        container = predictor_pod(isvc, release)["containers"][0]
        flags = effective_flags([str(a) for a in container["args"]])
        assert flags["--model-dir"] == "/mnt/models", release.tag
        assert "--model-id" not in flags, release.tag
        assert flags["--model-name"] == "embedding" and flags["--runner"] == "pooling"


def test_pvc_judge_is_served_from_its_claim() -> None:
    doc = judge_doc()
    doc["spec"]["reward"][0]["settings"]["judge_client"]["model"] = "pvc://model-cache/Qwen3-8B"
    isvc = _isvc(doc)
    model = isvc["spec"]["predictor"]["model"]
    assert model["storageUri"] == "pvc://model-cache/Qwen3-8B"
    assert "--model_dir=/mnt/models" in model["args"]
    assert not any(a.startswith("--model_id") for a in model["args"])
    # KServe mounts a claim itself: no credentials Secret.
    assert "serving.kserve.io/storageSecretName" not in isvc["metadata"].get("annotations", {})


def test_hub_models_are_unchanged_and_get_the_mirror() -> None:
    """A Hub id is served by --model_id as before; the mirror (spec, else platform) is set."""
    doc = two_node_doc()
    isvc = _isvc(doc)
    model = isvc["spec"]["predictor"]["model"]
    assert "--model_id=Qwen/Qwen3-Embedding-0.6B" in model["args"]
    assert "storageUri" not in model and "env" not in model
    platform = dataclasses.replace(PLATFORM, hf_endpoint=MIRROR)
    assert _env(_isvc(doc, platform)["spec"]["predictor"]["model"]) == {"HF_ENDPOINT": MIRROR}
    spec_mirror = _with(doc, hf_endpoint="http://hf.lab:8080")
    served = _isvc(spec_mirror, platform)["spec"]["predictor"]["model"]
    assert _env(served) == {"HF_ENDPOINT": "http://hf.lab:8080"}


def test_pvc_policy_is_mounted_read_only_where_the_jobs_look() -> None:
    for pod in _pods(_with(two_node_doc(), model="pvc://model-cache/qwen/Qwen3-4B")):
        (volume,) = [v for v in pod["volumes"] if v["name"] == "policy-model"]
        assert volume["persistentVolumeClaim"] == {"claimName": "model-cache", "readOnly": True}
        container = pod["containers"][0]
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "policy-model"]
        assert mount == {
            "name": "policy-model", "mountPath": "/mnt/sarl-models/model-cache", "readOnly": True
        }  # fmt: skip
        assert _env(container)["HF_HUB_OFFLINE"] == "1"
        assert "HF_ENDPOINT" not in _env(container)


def test_pvc_policy_reaches_the_trainjob_pods() -> None:
    exp = experiment_of(_with(two_node_doc(), model="pvc://model-cache/qwen/Qwen3-4B"))
    text = repr(TrainJobBuilder().build(exp, NAMESPACE, **_kw(PLATFORM)))
    assert "'claimName': 'model-cache'" in text and "/mnt/sarl-models/model-cache" in text


@pytest.mark.parametrize(
    ("model", "resources", "platform_mirror", "expected"),
    [
        ("s3://models/qwen/Qwen3-4B", {}, "", {"HF_HUB_OFFLINE": "1"}),
        ("s3://models/qwen/Qwen3-4B", {}, MIRROR, {"HF_ENDPOINT": MIRROR}),
        ("Qwen/Qwen3-4B", {}, "", {}),
        ("Qwen/Qwen3-4B", {}, MIRROR, {"HF_ENDPOINT": MIRROR}),
        ("hf://Qwen/Qwen3-4B", {"hf_endpoint": "http://hf.lab"}, MIRROR,
         {"HF_ENDPOINT": "http://hf.lab"}),
    ],
)  # fmt: skip
def test_trainer_and_evaluation_hub_env(
    model: str, resources: dict[str, Any], platform_mirror: str, expected: dict[str, str]
) -> None:
    platform = dataclasses.replace(PLATFORM, hf_endpoint=platform_mirror)
    exp = experiment_of(_with(two_node_doc(), model=model, **resources))
    env = _env({"env": job_pods.job_env(exp, NAMESPACE, RUN_ID, TRACKING_URI, platform)})
    got = {k: v for k, v in env.items() if k in ("HF_ENDPOINT", "HF_HUB_OFFLINE")}
    assert got == expected
    for pod in _pods(_with(two_node_doc(), model=model, **resources), platform):
        pod_env = _env(pod["containers"][0])
        assert {k: v for k, v in pod_env.items() if k in expected} == expected


@pytest.mark.parametrize(
    ("model", "words"),
    [
        ("/data/models/embed", "the operator serves models from the Hub"),
        ("s3://models/../secrets", "'..' segment"),
        ("pvc://Bad_Claim/x", "not a PersistentVolumeClaim name"),
    ],
)
def test_bad_served_model_names_its_field(model: str, words: str) -> None:
    with pytest.raises(ValueError) as info:
        _isvc(_embedder(two_node_doc(), model))
    assert str(info.value).startswith("spec.reward[0].settings.embedder.model: ")
    assert words in str(info.value)


def test_platform_reads_sarl_hf_endpoint() -> None:
    assert Platform.from_env({"SARL_HF_ENDPOINT": MIRROR + "/"}).hf_endpoint == MIRROR
    assert Platform.from_env({}).hf_endpoint == ""
    with pytest.raises(ValueError, match="^SARL_HF_ENDPOINT: must be an http"):
        Platform.from_env({"SARL_HF_ENDPOINT": "hf-mirror"})


def test_extra_args_cannot_move_the_model_dir() -> None:
    doc = _embedder(two_node_doc(), "s3://models/embed/e")
    doc["spec"]["serving"] = {"embedding": {"extra_args": ["--model_dir=/tmp/other"]}}
    with pytest.raises(ValueError, match="sets --model_dir itself"):
        experiment_of(doc)
