"""``spec.resources`` and ``spec.serving.<model>`` pod fields: the GPU resource name, scratch
disk, service account, image pull secrets and the HF_TOKEN Secret reference — one-line errors
naming the field and the fix, and a token itself refused."""

from __future__ import annotations

from typing import Any

import pytest

from sarl.spec import SpecError, load_experiment
from sarl.spec.cluster_fields import ResourcesSpec


def _exp(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "x"}, "spec": spec}


@pytest.mark.parametrize(
    "name", ["nvidia.com/gpu", "amd.com/gpu", "nvidia.com/mig-1g.10gb", "habana.ai/gaudi"]
)
def test_extended_resource_names_are_accepted(name: str) -> None:
    assert ResourcesSpec(gpu_resource=name).gpu_resource == name


@pytest.mark.parametrize(
    "name",
    [
        "gpu",  # no domain: a native resource name (kubernetes.io/ implied)
        "kubernetes.io/gpu",  # the native namespace
        "example.kubernetes.io/gpu",
        "requests.nvidia.com/gpu",  # the quota prefix
        "NVIDIA.com/gpu",  # the domain must be a DNS-1123 subdomain
        "nvidia.com/",
        "nvidia.com/mig/1g",
        "nvidia.com/-gpu",
    ],
    ids=lambda name: f"name:{name}",  # a bare "gpu" id would mark the test as needing a GPU
)
def test_non_extended_resource_names_are_refused(name: str) -> None:
    """The rules of Kubernetes' ``IsExtendedResourceName`` and ``IsNativeResource``
    (kubernetes/kubernetes ``pkg/apis/core/helper/helpers.go``, read at commit 00010901c746),
    with apimachinery's ``IsQualifiedName`` for ``requests.<name>``: the API server refuses a
    pod whose container asks for anything else."""
    for spec in (
        {"resources": {"gpu_resource": name}},
        {"serving": {"judge": {"gpu_resource": name}}},
    ):
        with pytest.raises(SpecError) as err:
            load_experiment(_exp(spec))
        message = str(err.value)
        assert "\n" not in message and "gpu_resource" in message
        assert "'nvidia.com/gpu', 'amd.com/gpu' or 'nvidia.com/mig-1g.10gb'" in message


@pytest.mark.parametrize(
    ("resources", "field"),
    [
        ({"scratch_size": "lots"}, "scratch_size"),
        ({"cpu": "eight"}, "cpu"),
        ({"evaluation": {"memory": "64 GB"}}, "evaluation.memory"),
        ({"service_account": "Runner_SA"}, "service_account"),
        ({"image_pull_secrets": ["ok", "Not OK"]}, "image_pull_secrets"),
        ({"scratch_claim": "/mnt/x"}, "scratch_claim"),
        ({"hf_token": {"secret_name": "HF Token"}}, "hf_token.secret_name"),
        ({"hf_token": {"secret_name": "hf", "key": "a/b"}}, "hf_token.key"),
    ],
)
def test_bad_pod_fields_name_the_field(resources: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        load_experiment(_exp({"resources": resources}))
    message = str(err.value)
    assert "\n" not in message and f"spec.resources.{field}" in message


def test_an_hf_token_itself_is_refused_without_echoing_it() -> None:
    token = "hf_" + "aB3" * 12
    with pytest.raises(SpecError) as err:
        load_experiment(_exp({"resources": {"hf_token": token}}))
    assert token not in str(err.value) and "spec.resources.hf_token" in str(err.value)


def test_secret_reference_passes_and_defaults_its_key() -> None:
    exp = load_experiment(_exp({"resources": {"hf_token": {"secret_name": "hf-token"}}}))
    ref = exp.spec.resources.hf_token
    assert ref is not None and (ref.secret_name, ref.key) == ("hf-token", "HF_TOKEN")
