"""sarl_operator.tenant_tracking and the pinned tracking URI: under tenancy a spec's MLflow is the
platform's, and the operator never calls another (issue 36 item 5)."""

from __future__ import annotations

import dataclasses

import pytest

from sarl.cluster.tenancy import NO_TENANCY
from sarl.spec.experiment import Experiment
from sarl.spec.loader import load_experiment
from sarl_operator import tenant_tracking
from sarl_operator.platform_settings import Platform
from sarl_operator.reconcile import Settings
from tests.operators.tenant_cases import PLATFORM, TEAM_A, TRACKING_URI, experiment_doc


def _exp(uri: str | None) -> Experiment:
    doc = experiment_doc("exp", {"tracking": {"mlflow_uri": uri}} if uri else {})
    doc["metadata"]["namespace"] = TEAM_A
    return load_experiment(doc)


def _check(uri: str | None, platform: Platform = PLATFORM) -> list[str]:
    policy = platform.tenancy.policy(TEAM_A)
    assert policy is not None
    return tenant_tracking.check(_exp(uri), policy, platform)


@pytest.mark.parametrize("uri", [None, TRACKING_URI, TRACKING_URI + "/"])
def test_empty_or_the_platforms_uri_passes(uri: str | None) -> None:
    assert _check(uri) == []


@pytest.mark.parametrize(
    "uri", ["http://10.0.0.1:9000", "http://kubernetes.default.svc:443", "http://169.254.169.254"]
)
def test_another_uri_is_refused_naming_the_field_and_the_platforms(uri: str) -> None:
    (message,) = _check(uri)
    assert message.startswith(f"spec.tracking.mlflow_uri={uri!r}")
    assert f"platform's MLflow only ({TRACKING_URI})" in message


def test_without_a_platform_mlflow_every_uri_is_refused() -> None:
    (message,) = _check("http://mlflow:5000", dataclasses.replace(PLATFORM, tracking_uri=""))
    assert "(none configured)" in message


def test_the_operator_calls_the_platforms_mlflow_whatever_the_spec_says() -> None:
    """Under tenancy (an object admitted before tenancy was switched on, or the webhook
    bypassed): runs are created and progress read at the platform's MLflow only."""
    exp = _exp("http://10.0.0.1:9000")
    pinned = Settings(platform=PLATFORM, tracking_uri=TRACKING_URI, ui_url="https://ui")
    assert pinned.tracking_uri_of(exp) == TRACKING_URI and pinned.ui_url_of(exp) == "https://ui"
    single_team = dataclasses.replace(
        pinned, platform=dataclasses.replace(PLATFORM, tenancy=NO_TENANCY)
    )
    assert single_team.tracking_uri_of(exp) == "http://10.0.0.1:9000"
