"""sarl_operator.tenant_credentials: the Secrets and credential variables a tenant's spec may name
(issue 36 item 4). Pure checks on validated Experiments."""

from __future__ import annotations

from typing import Any

import pytest

from sarl.cluster.tenancy import RESERVED_ENV_PREFIXES, TENANT_SECRET
from sarl.spec.loader import load_experiment
from sarl_operator import tenant_credentials
from tests.operators.tenant_cases import PLATFORM, ROOT_SECRET, TEAM_A, experiment_doc, judge

POLICY = PLATFORM.tenancy.policy(TEAM_A)
assert POLICY is not None


def _violations(patch: dict[str, Any]) -> list[str]:
    doc = experiment_doc("exp", patch)
    doc["metadata"]["namespace"] = TEAM_A
    assert POLICY is not None
    return tenant_credentials.check(load_experiment(doc), POLICY, PLATFORM)


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"storage": {"credentials_secret": ROOT_SECRET}}, "spec.storage.credentials_secret"),
        ({"resources": {"hf_token": {"secret_name": "x"}}}, "spec.resources.hf_token.secret_name"),
        ({"resources": {"image_pull_secrets": ["x"]}}, "spec.resources.image_pull_secrets[0]"),
        (
            {"serving": {"judge": {"hf_token": {"secret_name": "x"}}}},
            "spec.serving.judge.hf_token.secret_name",
        ),
        (
            {"serving": {"embedding": {"image_pull_secrets": ["ok-not", "x"]}}},
            "spec.serving.embedding.image_pull_secrets[0]",
        ),
    ],
)
def test_a_secret_outside_the_policy_is_refused_naming_field_and_allowed(
    patch: dict[str, Any], field: str
) -> None:
    (first, *_) = _violations(patch)
    assert first.startswith(f"{field}=")
    assert f"allowed: {TENANT_SECRET}, team-a-hf" in first and "tenants[].secrets" in first


@pytest.mark.parametrize(
    "patch",
    [
        {},
        {"storage": {"credentials_secret": TENANT_SECRET}},
        {"resources": {"hf_token": {"secret_name": "team-a-hf"}}},
        {"resources": {"image_pull_secrets": ["team-a-hf"]}},
        {"reward": [judge("TEAM_A_JUDGE_KEY")]},
    ],
)
def test_the_tenants_own_secrets_and_variables_pass(patch: dict[str, Any]) -> None:
    assert _violations(patch) == []


@pytest.mark.parametrize(
    "name", ["AWS_SECRET_ACCESS_KEY", "MLFLOW_TRACKING_PASSWORD", "sarl_checkpoint_key", "HF_TOKEN"]
)
def test_a_reserved_variable_is_refused_as_a_credential(name: str) -> None:
    (message,) = _violations({"reward": [judge(name)]})
    assert message.startswith(f"spec.reward[0].settings.decomposer.api_key_env={name!r}")
    assert all(prefix in message for prefix in RESERVED_ENV_PREFIXES)


def test_a_variable_outside_env_names_is_refused_and_the_judge_too() -> None:
    reward = judge("OTHER_KEY")
    reward["settings"]["judge"] = {"url": "http://x:1", "model": "m", "api_key_env": "TEAM_B_KEY"}
    messages = _violations({"reward": [reward]})
    assert [m.split("=")[0] for m in messages] == [
        "spec.reward[0].settings.decomposer.api_key_env",
        "spec.reward[0].settings.judge.api_key_env",
    ]
    assert "allowed: TEAM_A_JUDGE_KEY" in messages[0] and "tenants[].envNames" in messages[0]
