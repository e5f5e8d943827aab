"""The tenant policy's object-store check (operators/src/sarl_operator/tenant_store.py) and the
tenant pods' data location (``job_pods.data_uri``): a spec in team-a may name only team-a's
prefixes of the platform bucket (reads also shared/), refused naming the field and the allowed
prefixes. Pure checks of the spec; the attacks against a real store are in
tests/tenancy/test_store.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from sarl.cluster.tenancy import Tenancy, TenantPolicy
from sarl.spec.loader import load_experiment
from sarl_operator import job_pods, tenant_policy
from sarl_operator.platform_settings import Platform
from sarl_operator.tenant_store import store_violations

TENANTS = Tenancy(tenants=(TenantPolicy(namespace="team-a"), TenantPolicy(namespace="team-b")))
PLATFORM = Platform(s3_bucket="sarl", data_uri="s3://sarl/data", tenancy=TENANTS)
POLICY = TENANTS.tenants[0]


def _exp(spec: dict[str, Any]) -> Any:
    doc = {"apiVersion": "sarl.dev/v1alpha1", "kind": "Experiment", "metadata": {"name": "e"}}
    return load_experiment({**doc, "spec": spec})


def _embedder(model: str) -> dict[str, Any]:
    return {
        "reward": [
            {"name": "structure", "settings": {"embedder": {"kind": "openai", "model": model}}}
        ]
    }


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (
            {"storage": {"checkpoint_uri": "s3://sarl/checkpoints/team-b/x"}},
            "spec.storage.checkpoint_uri",
        ),
        ({"storage": {"checkpoint_uri": "s3://sarl/shared/ckpt"}}, "spec.storage.checkpoint_uri"),
        (
            {"data": {"task": "dataset", "dataset": "s3://sarl/data/team-b/train.parquet"}},
            "spec.data.dataset",
        ),
        ({"data": {"task": "dataset", "dataset": "../team-b/train.parquet"}}, "spec.data.dataset"),
        (
            {"evaluation": {"benchmarks": ["../../team-b/benchmarks/x"]}},
            "spec.evaluation.benchmarks[0]",
        ),
        (
            {"evaluation": {"benchmarks": ["s3://sarl/data/team-b/b.parquet"]}},
            "spec.evaluation.benchmarks[0]",
        ),
        ({"model": {"name": "s3://sarl/models/team-b/qwen"}}, "spec.model.name"),
        ({"model": {"name": "s3://sarl/mlflow/1/x/artifacts"}}, "spec.model.name"),
        (_embedder("s3://sarl/models/team-b/emb"), "spec.reward[0].settings.embedder.model"),
    ],
)
def test_outside_the_namespace_is_refused(spec: dict[str, Any], field: str) -> None:
    messages = store_violations(_exp(spec), POLICY, PLATFORM)
    assert len(messages) == 1
    assert messages[0].startswith(field)
    assert "checkpoints/team-a/" in messages[0] or "data location" in messages[0]


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"storage": {"checkpoint_uri": "s3://sarl/checkpoints/team-a/run"}},
        {"storage": {"checkpoint_uri": "s3://team-a-own/anything"}},
        {"data": {"task": "dataset", "dataset": "train/aime.parquet"}},
        {"data": {"task": "dataset", "dataset": "s3://sarl/shared/data/aime.parquet"}},
        {"model": {"name": "s3://sarl/shared/models/qwen"}},
        {"model": {"name": "s3://sarl/models/team-a/qwen"}},
        {"model": {"name": "hf://Qwen/Qwen3-0.6B"}},
        _embedder("s3://sarl/shared/models/emb"),
        {"evaluation": {"benchmarks": ["math500", "heldout"]}},
    ],
)
def test_inside_the_namespace_passes(spec: dict[str, Any]) -> None:
    assert store_violations(_exp(spec), POLICY, PLATFORM) == []


def test_registered_in_the_tenant_policy() -> None:
    exp = _exp({"storage": {"checkpoint_uri": "s3://sarl/checkpoints/team-b/x"}})
    assert any(
        m.startswith("spec.storage.checkpoint_uri")
        for m in tenant_policy.violations(exp, "team-a", PLATFORM)
    )
    single_team = Platform(s3_bucket="sarl")
    assert tenant_policy.violations(exp, "team-a", single_team) == []


def test_tenant_pods_get_their_own_data_location() -> None:
    """Under tenancy SARL_DATA_URI is the namespace's data prefix (its key reaches no other);
    a single-team platform keeps its own."""
    assert job_pods.data_uri("team-a", PLATFORM) == "s3://sarl/data/team-a"
    single_team = Platform(s3_bucket="sarl", data_uri="s3://sarl/data")
    assert job_pods.data_uri("team-a", single_team) == "s3://sarl/data"
    env = job_pods.job_env(_exp({}), "team-a", "run", "http://mlflow", PLATFORM)
    assert {"name": "SARL_DATA_URI", "value": "s3://sarl/data/team-a"} in env
