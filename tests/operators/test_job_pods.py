"""The pods the operator runs (trainer replicas, evaluation Job, a Study's report Job) and the
served models' predictors: resources from the spec (never BestEffort), a sized scratch volume
for checkpoints and caches, the Istio annotation, identity (service account, image pull
secrets), the GPU resource name and HF_TOKEN from a Secret.

Pure builder checks: no Kubernetes API server or kubelet runs here, so what the scheduler and
kubelet do with these fields is stated, not exercised (the KServe merge of the predictor fields
is emulated in test_kserve_merge.py).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sarl.spec.experiment import Experiment
from sarl_operator import builders, evaluation, served_models, study_builders
from tests.operators import study_cases
from tests.operators.cases import (
    CASES,
    IMAGE,
    NAMESPACE,
    PLATFORM,
    RUN_ID,
    TRACKING_URI,
    experiment_of,
)


def _doc(**resources: Any) -> dict[str, Any]:
    """The example (preset paper-grpo-math) with an operator-served embedder and ``resources``
    merged over the preset's."""
    doc = CASES["sarl-grpo-math-2node"]()
    doc["spec"]["resources"] = {**doc["spec"]["resources"], **resources}
    return doc


def _templates(exp: Experiment) -> dict[str, dict[str, Any]]:
    """Pod template of each job pod the operator builds for ``exp``: Master, Worker, eval."""
    job = builders.pytorchjob(
        exp, NAMESPACE, image=IMAGE, mlflow_run_id=RUN_ID, tracking_uri=TRACKING_URI
    )
    out = {rtype: spec["template"] for rtype, spec in job["spec"]["pytorchReplicaSpecs"].items()}
    out["eval"] = evaluation.eval_job(
        exp, NAMESPACE, image=IMAGE, mlflow_run_id=RUN_ID, tracking_uri=TRACKING_URI
    )["spec"]["template"]
    return out


def _report_template(doc: dict[str, Any] | None = None) -> dict[str, Any]:
    study = study_cases.study(doc)
    job = study_builders.report_job(
        study, NAMESPACE, image=IMAGE, parent_run_id=RUN_ID, tracking_uri=TRACKING_URI
    )
    template: dict[str, Any] = job["spec"]["template"]
    return template


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_every_job_container_is_guaranteed_with_cpu_memory_and_disk() -> None:
    """Requests equal to limits for cpu, memory and ephemeral-storage (Guaranteed QoS, evicted
    last); the trainer's from spec.resources, the evaluation's from spec.resources.evaluation."""
    exp = experiment_of(_doc())
    res = exp.spec.resources
    templates = _templates(exp)
    for rtype in ("Master", "Worker"):
        resources = templates[rtype]["spec"]["containers"][0]["resources"]
        want = {"cpu": "32", "memory": "256Gi", "ephemeral-storage": "256Gi"}
        assert resources["requests"] == resources["limits"] == {**want, "nvidia.com/gpu": "4"}
    ev = res.evaluation
    resources = templates["eval"]["spec"]["containers"][0]["resources"]
    want = {"cpu": ev.cpu, "memory": ev.memory, "ephemeral-storage": ev.scratch_size}
    assert resources["requests"] == resources["limits"] == {**want, "nvidia.com/gpu": "1"}
    report = _report_template()["spec"]
    for container in [*report["containers"], *report["initContainers"]]:
        cpu, memory, disk = study_builders.REPORT_RESOURCES
        want = {"cpu": cpu, "memory": memory, "ephemeral-storage": disk}
        assert container["resources"] == {"requests": want, "limits": want}


@pytest.mark.parametrize(
    ("preset", "trainer", "scratch"),
    [
        ("paper-grpo-math", ("64", "512Gi"), "256Gi"),
        ("paper-ppo-math", ("64", "512Gi"), "400Gi"),
        ("local-grpo-arithmetic", ("1", "4Gi"), "10Gi"),
    ],
)
def test_presets_size_the_trainer_pod(preset: str, trainer: tuple[str, str], scratch: str) -> None:
    doc = CASES["sarl-grpo-math"]()
    doc["spec"] = {"preset": preset}
    pod = _templates(experiment_of(doc))["Master"]["spec"]
    requests = pod["containers"][0]["resources"]["requests"]
    assert (requests["cpu"], requests["memory"]) == trainer
    assert requests["ephemeral-storage"] == scratch
    assert {"name": "scratch", "emptyDir": {"sizeLimit": scratch}} in pod["volumes"]


def _all_pods() -> list[Any]:
    pods = [*_templates(experiment_of(_doc())).items(), ("report", _report_template())]
    return [pytest.param(name, template, id=name) for name, template in pods]


@pytest.mark.parametrize(("name", "template"), _all_pods())
def test_scratch_volume_holds_tmpdir_and_caches(name: str, template: dict[str, Any]) -> None:
    """Checkpoints and caches go to a sized emptyDir, not the container's writable layer: the
    jobs' work directories derive from TMPDIR, Hugging Face downloads from HF_HOME, vLLM's and
    other caches from XDG_CACHE_HOME (test_scratch_env_contract.py checks the readers)."""
    pod = template["spec"]
    container = pod["containers"][0]
    volume = next(v for v in pod["volumes"] if v["name"] == "scratch")
    assert volume["emptyDir"]["sizeLimit"] == container["resources"]["limits"]["ephemeral-storage"]
    assert {"name": "scratch", "mountPath": "/mnt/scratch"} in container["volumeMounts"]
    env = _env(container)
    assert env["TMPDIR"] == "/mnt/scratch"
    assert env["HF_HOME"].startswith("/mnt/scratch/")
    assert env["XDG_CACHE_HOME"].startswith("/mnt/scratch/")


def test_scratch_claim_mounts_one_directory_per_pod_and_requests_no_disk() -> None:
    templates = _templates(experiment_of(_doc(scratch_claim="sarl-scratch")))
    for template in templates.values():
        pod = template["spec"]
        container = pod["containers"][0]
        volume = next(v for v in pod["volumes"] if v["name"] == "scratch")
        assert volume == {"name": "scratch", "persistentVolumeClaim": {"claimName": "sarl-scratch"}}
        mount = next(m for m in container["volumeMounts"] if m["name"] == "scratch")
        assert mount["subPathExpr"] == "$(POD_NAME)" and mount["mountPath"] == "/mnt/scratch"
        assert _env(container)["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
        assert "ephemeral-storage" not in container["resources"]["limits"]


@pytest.mark.parametrize(("name", "template"), _all_pods())
def test_job_pods_opt_out_of_istio_injection(name: str, template: dict[str, Any]) -> None:
    """Kubeflow: "PyTorchJob doesn't work in a user namespace by default because of Istio
    automatic sidecar injection ... it needs the annotation sidecar.istio.io/inject: "false""
    (kubeflow.org/docs/components/training/pytorch/; the Training Operator's own e2e jobs carry
    it since kubeflow/training-operator#1778). A Job with a sidecar never completes either."""
    assert template["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false"


def _isvcs(exp: Experiment) -> dict[str, dict[str, Any]]:
    """Predictor of each served model, by component (the judge case adds a judge)."""
    return {
        isvc["metadata"]["labels"]["app.kubernetes.io/component"]: isvc["spec"]["predictor"]
        for isvc in served_models.inference_services(exp, NAMESPACE, PLATFORM)
    }


def _with_judge(doc: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    judge = {"name": "structured_qa", "settings": {"judge_client": {"model": "Qwen/Qwen3-8B"}}}
    doc["spec"]["reward"].append(judge)
    return doc


def _served(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Predictors of ``doc`` as the handlers build them (judge URLs filled before validation)."""
    doc = copy.deepcopy(doc)
    name = doc["metadata"]["name"]
    doc["spec"] = served_models.fill_judge_urls(doc["spec"], name, NAMESPACE, PLATFORM)
    return _isvcs(experiment_of(doc))


def test_service_account_and_pull_secrets_reach_trainer_eval_and_served_pods() -> None:
    doc = _with_judge(_doc(service_account="sarl-runner", image_pull_secrets=["regcred"]))
    doc["spec"]["serving"] = {"judge": {"service_account": "judge-sa"}}
    for template in _templates(experiment_of(doc)).values():
        assert template["spec"]["serviceAccountName"] == "sarl-runner"
        assert template["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    predictors = _served(doc)
    assert predictors["embedding"]["serviceAccountName"] == "sarl-runner"
    assert predictors["judge"]["serviceAccountName"] == "judge-sa"  # the served model's own
    for predictor in predictors.values():
        assert predictor["imagePullSecrets"] == [{"name": "regcred"}]


def test_gpu_resource_name_is_used_for_every_gpu_pod() -> None:
    doc = _with_judge(_doc(gpu_resource="amd.com/gpu"))
    doc["spec"]["serving"] = {"embedding": {"gpu_resource": "nvidia.com/mig-1g.10gb"}}
    for template in _templates(experiment_of(doc)).values():
        limits = template["spec"]["containers"][0]["resources"]["limits"]
        assert "amd.com/gpu" in limits and "nvidia.com/gpu" not in limits
    predictors = _served(doc)
    embedding = predictors["embedding"]["model"]["resources"]
    assert embedding["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    assert embedding["requests"]["nvidia.com/mig-1g.10gb"] == "1"
    judge = predictors["judge"]["model"]["resources"]["limits"]
    assert judge["amd.com/gpu"] == "1" and "nvidia.com/gpu" not in judge


def test_hf_token_comes_from_the_named_secret_key() -> None:
    doc = _with_judge(_doc(hf_token={"secret_name": "hf-token"}))
    doc["spec"]["serving"] = {"judge": {"hf_token": {"secret_name": "judge-hf", "key": "token"}}}
    want = {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}}
    for template in _templates(experiment_of(doc)).values():
        assert _env(template["spec"]["containers"][0])["HF_TOKEN"] == want
    predictors = _served(doc)
    assert _env(predictors["embedding"]["model"])["HF_TOKEN"] == want
    judge = {"secretKeyRef": {"name": "judge-hf", "key": "token"}}
    assert _env(predictors["judge"]["model"])["HF_TOKEN"] == judge


def test_without_the_new_fields_no_identity_token_or_extra_gpu_name_is_written() -> None:
    exp = experiment_of(_doc())
    for template in _templates(exp).values():
        pod = template["spec"]
        assert "serviceAccountName" not in pod and "imagePullSecrets" not in pod
        assert "HF_TOKEN" not in _env(pod["containers"][0])
    for predictor in _isvcs(exp).values():
        assert "serviceAccountName" not in predictor and "env" not in predictor["model"]
