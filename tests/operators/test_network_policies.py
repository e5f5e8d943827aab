"""The operator's per-Experiment NetworkPolicies (:mod:`sarl_operator.network_policies`) and the
served models' API key under tenancy; golden renders in tests/operators/golden, their effect on
two tenants in tests/tenancy/test_network.py."""

from __future__ import annotations

from sarl.cluster.tenancy import Tenancy, TenantPolicy
from sarl_operator import served_models
from sarl_operator.network_policies import KNATIVE_NAMESPACES, network_policies
from sarl_operator.platform_settings import Platform
from tests.operators.cases import NAMESPACE, experiment, experiment_of, judge_doc

TENANCY = Platform(tenancy=Tenancy(tenants=(TenantPolicy(namespace=NAMESPACE),)))


def test_trainer_policy_admits_only_the_same_experiments_trainers() -> None:
    (policy,) = network_policies(experiment("sarl-grpo-math"), NAMESPACE, Platform(), False)
    spec = policy["spec"]
    assert policy["metadata"]["name"] == "sarl-grpo-math-trainer"
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert "ports" not in rule  # Ray's worker ports are not fixed
    assert rule["from"] == [{"podSelector": spec["podSelector"]}]  # its own namespace only
    assert spec["podSelector"]["matchLabels"] == {"sarl.dev/experiment": "sarl-grpo-math"}


def test_served_models_admit_trainer_and_evaluation_and_knative_when_serverless() -> None:
    doc = judge_doc()
    raw = experiment_of(doc)
    _, served = network_policies(raw, NAMESPACE, Platform(), True)
    (rule,) = served["spec"]["ingress"]
    assert len(rule["from"]) == 1
    assert rule["from"][0]["podSelector"]["matchExpressions"][0]["values"] == [
        "trainer",
        "evaluation",
    ]
    doc["spec"]["serving"] = {"deployment_mode": "Serverless"}
    _, serverless = network_policies(experiment_of(doc), NAMESPACE, Platform(), True)
    namespaces = [
        peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for peer in serverless["spec"]["ingress"][0]["from"][1:]
    ]
    assert namespaces == list(KNATIVE_NAMESPACES)


def test_none_when_the_platform_ships_no_policies() -> None:
    platform = Platform.from_env({"SARL_NETWORK_POLICIES": "false"})
    assert not platform.network_policies
    assert network_policies(experiment("sarl-grpo-judge"), NAMESPACE, platform, True) == []
    assert Platform.from_env({}).network_policies


def _env(isvc: dict[str, object]) -> list[dict[str, object]]:
    return isvc["spec"]["predictor"]["model"].get("env", [])  # type: ignore[index,no-any-return]


def test_served_models_get_the_tenants_api_key_from_its_secret() -> None:
    exp = experiment("sarl-grpo-judge")
    (isvc,) = served_models.inference_services(exp, NAMESPACE, TENANCY)
    ref = {"secretKeyRef": {"name": "sarl-tenant", "key": "SARL_SERVING_API_KEY"}}
    keyed = [e for e in _env(isvc) if e.get("valueFrom") == ref]
    assert [e["name"] for e in keyed] == ["SARL_SERVING_API_KEY", "VLLM_API_KEY"]
    (plain,) = served_models.inference_services(exp, NAMESPACE, Platform())
    assert not [e for e in _env(plain) if "API_KEY" in str(e["name"])]
