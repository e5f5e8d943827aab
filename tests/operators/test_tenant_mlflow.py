"""The operator's MLflow identity and experiment names under tenancy (sarl_operator.tenant_mlflow).

The Kubernetes API is a dict of Secrets (one ``get``); the MLflow client factory records the
credentials it was given. The real server's refusals are tests/tenancy/test_mlflow.py's.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from sarl.cluster.tenancy import Tenancy, TenantKeys, TenantPolicy
from sarl_operator import tenant_mlflow
from sarl_operator.platform_settings import Platform
from sarl_operator.reconcile import Settings
from sarl_operator.tracking import TrackingError

TENANTS = Platform(tenancy=Tenancy(tenants=(TenantPolicy(namespace="team-a"),)))


class Secrets:
    def __init__(self, data: dict[str, dict[str, str]]) -> None:
        self.data = data
        self.reads = 0

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        values = self.data.get(f"{namespace}/{name}")
        if values is None:
            return None
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
        return {"metadata": {"name": name}, "data": encoded}


def made(uri: str, auth: tuple[str, str] | None = None) -> tuple[str, tuple[str, str] | None]:
    return uri, auth


TEAM_A = {
    "sarl/sarl-tenant-team-a": {
        TenantKeys.MLFLOW_USERNAME: "team-a",
        TenantKeys.MLFLOW_PASSWORD: "pw-a-0123456789",
    }
}


@pytest.mark.parametrize(
    ("name", "platform", "expected"),
    [
        ("foo", TENANTS, "team-a/foo"),
        ("team-a/foo", TENANTS, "team-a/foo"),  # idempotent
        ("team-b/foo", TENANTS, "team-a/team-b/foo"),  # never another tenant's
        ("foo", Platform(), "foo"),  # single-team install
    ],
)
def test_experiment_names_are_scoped_to_the_namespace(
    name: str, platform: Platform, expected: str
) -> None:
    assert tenant_mlflow.scoped_name(name, "team-a", platform) == expected


def test_a_tenant_is_tracked_as_its_own_user_read_once_per_ttl() -> None:
    api = Secrets(TEAM_A)
    now = [0.0]
    cache = tenant_mlflow.CredentialCache(ttl_s=60, clock=lambda: now[0])
    settings = Settings(platform=TENANTS, operator_namespace="sarl", mlflow_auth=("admin", "x"))
    factory = tenant_mlflow.authenticated(made, api, "team-a", settings, cache)  # type: ignore[arg-type]
    assert factory("http://mlflow") == ("http://mlflow", ("team-a", "pw-a-0123456789"))
    factory("http://mlflow")
    assert api.reads == 1
    now[0] = 61.0
    factory("http://mlflow")
    assert api.reads == 2


def test_other_namespaces_use_the_operators_own_user() -> None:
    settings = Settings(platform=TENANTS, operator_namespace="sarl", mlflow_auth=("admin", "x"))
    factory = tenant_mlflow.authenticated(made, Secrets({}), "platform-jobs", settings)  # type: ignore[arg-type]
    assert factory("http://mlflow") == ("http://mlflow", ("admin", "x"))
    plain = tenant_mlflow.authenticated(made, Secrets({}), "ns", Settings())  # type: ignore[arg-type]
    assert plain is made


def test_a_missing_secret_names_it_and_the_fix_never_a_value() -> None:
    settings = Settings(platform=TENANTS, operator_namespace="sarl")
    cache = tenant_mlflow.CredentialCache()
    factory = tenant_mlflow.authenticated(made, Secrets({}), "team-a", settings, cache)  # type: ignore[arg-type]
    with pytest.raises(TrackingError) as error:
        factory("http://mlflow")
    assert str(error.value).startswith(
        "tenant team-a: Secret sarl-tenant-team-a in namespace sarl not found"
    )
    assert "sarl tenant credentials team-a" in str(error.value)
    partial = {"sarl/sarl-tenant-team-a": {TenantKeys.MLFLOW_USERNAME: "team-a"}}
    factory = tenant_mlflow.authenticated(made, Secrets(partial), "team-a", settings, cache)  # type: ignore[arg-type]
    with pytest.raises(TrackingError, match="has no MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING"):
        factory("http://mlflow")


def test_the_operators_credentials_come_from_its_environment() -> None:
    env = {"MLFLOW_TRACKING_USERNAME": "admin", "MLFLOW_TRACKING_PASSWORD": "secret-value"}
    settings = Settings.from_env({**env, "SARL_OPERATOR_NAMESPACE": "sarl"})
    assert settings.mlflow_auth == ("admin", "secret-value")
    assert settings.operator_namespace == "sarl"
    assert "secret-value" not in repr(settings)
    assert Settings.from_env({"MLFLOW_TRACKING_USERNAME": "admin"}).mlflow_auth is None


def test_tracking_sends_its_credentials_and_explains_a_refusal() -> None:
    import httpx

    from sarl_operator.tracking import MlflowTracking

    seen: list[str | None] = []

    def refuse(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(403, json={"error_code": "PERMISSION_DENIED"})

    tracking = MlflowTracking(
        "http://mlflow", transport=httpx.MockTransport(refuse), auth=("team-a", "pw-a")
    )
    with pytest.raises(TrackingError, match="another MLflow user created it"):
        tracking.latest_progress("r1")
    assert seen == ["Basic " + base64.b64encode(b"team-a:pw-a").decode()]
    assert "pw-a" not in repr(tracking)
