"""Tenancy, MLflow: team-b cannot read, log into or close team-a's runs (issue 36, attacks 3, 6).

Against a REAL MLflow 3.17 tracking server running its basic-auth app
(``tests.support.mlflow_server.running_mlflow_server(auth=...)``: ``--app-name basic-auth``,
``default_permission = NO_PERMISSIONS`` as the platform chart sets it). The users team-a and
team-b are created by the chart hook Job's own function
(:func:`sarl.cluster.mlflow_users.provision`) from directories laid out as the hook mounts the
platform copy Secrets; the operator's side is the real handlers' code
(``study_handlers.ensure_parent_run`` with ``tenant_mlflow.authenticated``), reading the
tenants' credentials through a dict-backed stand-in for the Kubernetes API (the Secret read is
one ``get``; tests/operators covers the real operator against the in-memory API server).
Team-b's requests are MLflow's own client (``MlflowClient``, what a trainer pod or ``sarl
compare`` uses) with team-b's credentials in its environment, as its pods get them.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

pytest.importorskip("flask_wtf")  # MLflow's basic-auth app needs it (mlflow[auth])

import sarl.cli.study
from sarl.cluster.mlflow_users import MlflowUser, UsersApi, provision
from sarl.cluster.tenancy import (
    Tenancy,
    TenantKeys,
    TenantPolicy,
    platform_copy_name,
)
from sarl.spec.study import TAG_PARENT, Study
from sarl.tracking.compare import compare_runs
from sarl.tracking.store import TrackingError
from sarl.tracking.tracker import Tracker
from sarl_operator import study_handlers, tenant_mlflow
from sarl_operator.platform_settings import Platform
from sarl_operator.reconcile import Settings
from sarl_operator.tracking import MlflowTracking
from tests.sarl.study.conftest import STEPS, make_study, plausible
from tests.support.mlflow_server import MlflowAuth, running_mlflow_server

ADMIN = MlflowAuth()
PLATFORM_NS = "sarl"
PASSWORDS = {"team-a": "team-a-password-0001", "team-b": "team-b-password-0001"}
PLATFORM = Platform(
    tenancy=Tenancy(tenants=(TenantPolicy(namespace="team-a"), TenantPolicy(namespace="team-b")))
)


class SecretsApi:
    """The platform copy Secrets ``sarl-tenant-<ns>`` in the operator's namespace (``get``
    only: all the operator's MLflow identity reads)."""

    def __init__(self, passwords: dict[str, str]) -> None:
        self.passwords = passwords

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        for tenant, password in self.passwords.items():
            if (kind, namespace, name) == ("Secret", PLATFORM_NS, platform_copy_name(tenant)):
                values = {TenantKeys.MLFLOW_USERNAME: tenant, TenantKeys.MLFLOW_PASSWORD: password}
                data = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
                return {"metadata": {"name": name, "namespace": namespace}, "data": data}
        return None


def mount_secrets(root: Path, passwords: dict[str, str]) -> Path:
    """The hook Job's /tenants: one directory per tenant, a file per Secret key."""
    for tenant, password in passwords.items():
        (root / tenant).mkdir(parents=True, exist_ok=True)
        (root / tenant / TenantKeys.MLFLOW_USERNAME).write_text(tenant)
        (root / tenant / TenantKeys.MLFLOW_PASSWORD).write_text(password)
    return root


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("mlflow-auth")
    with running_mlflow_server(root / "server", auth=ADMIN) as server:
        api = UsersApi(server.url, MlflowUser(ADMIN.admin_username, ADMIN.admin_password))
        lines, errors = provision(api, mount_secrets(root / "tenants", PASSWORDS))
        assert not errors, errors
        assert lines == [
            "team-a: MLflow user 'team-a' created",
            "team-b: MLflow user 'team-b' created",
        ]
        yield server.url


@pytest.fixture
def as_tenant(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Switch MLflow's client to a tenant's user, as that tenant's pods get it."""

    def switch(tenant: str) -> None:
        monkeypatch.setenv(TenantKeys.MLFLOW_USERNAME, tenant)
        monkeypatch.setenv(TenantKeys.MLFLOW_PASSWORD, PASSWORDS[tenant])

    return switch


def operator_parent_run(url: str, study: Study, namespace: str, uid: str) -> str:
    """The Study's parent run, created as the operator does (as the tenant's MLflow user)."""
    settings = Settings(tracking_uri=url, platform=PLATFORM, operator_namespace=PLATFORM_NS)
    tenant_mlflow.CACHE.clear()
    api: Any = SecretsApi(PASSWORDS)
    factory = tenant_mlflow.authenticated(MlflowTracking, api, namespace, settings)
    body = {"metadata": {"name": study.name, "namespace": namespace, "uid": uid}}
    run_id, _, _ = study_handlers.ensure_parent_run(body, study, settings, factory)
    return run_id


def log_arms(url: str, study: Study, namespace: str, parent_id: str) -> None:
    """Every arm x seed run of ``study`` FINISHED under its parent, as the tenant's trainers
    log them (their ConfigMap names the scoped experiment)."""
    experiment = tenant_mlflow.scoped_name(study.mlflow_experiment, namespace, PLATFORM)
    for run in study.runs(parent_id):
        tags = run.experiment.spec.tracking.tags
        tracker = Tracker.start(url, experiment, run.name, tags=tags, spec_yaml="")
        for step in range(STEPS + 1):
            tracker.log_metrics(plausible(run.arm, run.seed, step), step=step)
        tracker.finish("FINISHED")


@pytest.fixture(scope="module")
def same_name_studies(server_url: str) -> tuple[Study, str, str]:
    """(study, team-a's parent run, team-b's newer parent run of the same Study name)."""
    study = make_study()
    env = pytest.MonkeyPatch()
    try:
        for tenant in ("team-a", "team-b"):
            env.setenv(TenantKeys.MLFLOW_USERNAME, tenant)
            env.setenv(TenantKeys.MLFLOW_PASSWORD, PASSWORDS[tenant])
            parent = operator_parent_run(server_url, study, tenant, f"uid-{tenant}")
            log_arms(server_url, study, tenant, parent)
            if tenant == "team-a":
                parent_a = parent
        return study, parent_a, parent
    finally:
        env.undo()


def test_the_users_are_kept_in_step_with_their_secrets(server_url: str, tmp_path: Path) -> None:
    """The hook Job again: unchanged users are left alone, a rotated password is updated (the
    old one then refused), and a tenant Secret naming an MLflow admin is refused."""
    api = UsersApi(server_url, MlflowUser(ADMIN.admin_username, ADMIN.admin_password))
    lines, errors = provision(api, mount_secrets(tmp_path / "same", PASSWORDS))
    assert (lines, errors) == (
        ["team-a: MLflow user 'team-a' unchanged", "team-b: MLflow user 'team-b' unchanged"],
        [],
    )
    rotated = {"team-a": PASSWORDS["team-a"] + "-new", "team-b": PASSWORDS["team-b"]}
    lines, _ = provision(api, mount_secrets(tmp_path / "rotated", rotated))
    assert lines[0] == "team-a: MLflow user 'team-a' updated"
    lines, _ = provision(api, mount_secrets(tmp_path / "back", PASSWORDS))
    assert lines[0] == "team-a: MLflow user 'team-a' updated"
    hijack = {"team-c": ADMIN.admin_password}
    root = mount_secrets(tmp_path / "admin", hijack)
    (root / "team-c" / TenantKeys.MLFLOW_USERNAME).write_text(ADMIN.admin_username)
    _, errors = provision(api, root)
    assert errors == [
        "tenant team-c: MLflow user 'admin' is an MLflow admin; a tenant's user never is: set "
        "another MLFLOW_TRACKING_USERNAME in its Secret"
    ]


def test_team_b_cannot_read_log_into_or_close_team_a_runs(
    server_url: str, same_name_studies: tuple[Study, str, str], as_tenant: Any
) -> None:
    """Attack 3/6: team-b, with its own MLflow user, reads, logs into and terminates team-a's
    parent run by id. MLflow answers 403 to each; the run is untouched."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    _, parent_a, _ = same_name_studies
    as_tenant("team-b")
    client = MlflowClient(server_url)
    attempts = {
        "read": lambda: client.get_run(parent_a),
        "log": lambda: client.log_metric(parent_a, "study/sarl/planted", 1.0),
        "close": lambda: client.set_terminated(parent_a, "KILLED"),
    }
    for what, attempt in attempts.items():
        with pytest.raises(MlflowException) as refused:
            attempt()
        assert refused.value.get_http_status_code() == 403, what
    as_tenant("team-a")
    run = MlflowClient(server_url).get_run(parent_a)
    assert run.info.status == "RUNNING"
    assert "study/sarl/planted" not in run.data.metrics
    experiment = MlflowClient(server_url).get_experiment(run.info.experiment_id)
    assert experiment.name.startswith("team-a/")


def test_compare_lists_only_the_callers_runs(
    server_url: str, same_name_studies: tuple[Study, str, str], as_tenant: Any
) -> None:
    """Attack 6 (reading): team-b's ``sarl compare`` of the Study name both teams use shows
    team-b's runs only; team-a's experiment is not even listed to it."""
    study, _, parent_b = same_name_studies
    as_tenant("team-b")
    comparison = compare_runs(server_url, run_ids=[study.name], namespace="team-b")
    assert {r.parent_run_id for r in comparison.runs} == {parent_b}
    assert all(r.experiment.startswith("team-b/") for r in comparison.runs)
    with pytest.raises(TrackingError, match="unknown experiment 'team-b/team-a/"):
        compare_runs(server_url, experiments=[f"team-a/{study.name}"], namespace="team-b")
    with pytest.raises(TrackingError, match=r"no runs of namespace team-a \(experiments team-a/"):
        compare_runs(server_url, run_ids=[study.name], namespace="team-a")


def test_report_logs_into_and_closes_its_own_run_only(
    server_url: str,
    same_name_studies: tuple[Study, str, str],
    as_tenant: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Attack 6: team-a's Study report Job runs while team-b has a NEWER parent run of the same
    Study name. The Job names its parent run by id (``$(MLFLOW_RUN_ID)``), so the report is
    logged into and closes team-a's run; team-b's stays RUNNING without a report. Closing a
    run found by name is refused outright."""
    from mlflow import MlflowClient

    monkeypatch.setattr("sarl.study.plot.plot_curves", _stub_plot)
    study, parent_a, parent_b = same_name_studies
    as_tenant("team-a")
    by_name = ["report", study.name, "--tracking-uri", server_url, "--out", str(tmp_path)]
    refused = CliRunner().invoke(sarl.cli.study.app, [*by_name, "--finish"])
    assert refused.exit_code == 2
    assert "--finish closes one run: pass the parent run's MLflow id" in refused.output
    args = ["report", parent_a, "--tracking-uri", server_url, "--out", str(tmp_path), "--finish"]
    result = CliRunner().invoke(sarl.cli.study.app, args)
    assert result.exit_code == 0, result.output
    run_a = MlflowClient(server_url).get_run(parent_a)
    assert run_a.info.status == "FINISHED"
    assert any(key.startswith("study/") for key in run_a.data.metrics)
    as_tenant("team-b")
    run_b = MlflowClient(server_url).get_run(parent_b)
    assert run_b.info.status == "RUNNING"
    assert not any(key.startswith("study/") for key in run_b.data.metrics)
    assert run_b.data.tags.get(TAG_PARENT) is None


def _stub_plot(histories: object, arms: object, out_path: Path, **_: object) -> Path:
    out_path.write_bytes(b"\x89PNG\r\n\x1a\n")
    return out_path


def test_a_name_claimed_or_shared_by_team_b_is_refused(server_url: str, as_tenant: Any) -> None:
    """Name squatting: MLflow has no permission on experiment names, so team-b creates
    ``team-a/<name>`` first. As it stands (team-a has no permission) and once team-b also
    grants team-a access (team-a's runs would land where team-b reads them), the operator
    refuses to log team-a's runs there, naming the fix; nothing is created in it."""
    from mlflow import MlflowClient

    from sarl_operator.tracking import TrackingError as OperatorTrackingError

    name = "team-a/squatted"
    as_tenant("team-b")
    squatted = MlflowClient(server_url).create_experiment(name)
    settings = Settings(tracking_uri=server_url, platform=PLATFORM, operator_namespace=PLATFORM_NS)
    tenant_mlflow.CACHE.clear()
    api: Any = SecretsApi(PASSWORDS)
    factory = tenant_mlflow.authenticated(MlflowTracking, api, "team-a", settings)
    with pytest.raises(OperatorTrackingError, match="HTTP 403"):
        factory(server_url).experiment_id(name)
    # team-b grants team-a MANAGE (the strongest), through MLflow 3's own per-user grant API:
    # team-a's lookup now succeeds, and the operator still refuses (team-b reads it).
    import httpx

    granted = httpx.post(
        f"{server_url}/api/3.0/mlflow/users/permissions/grant",
        json={
            "username": "team-a",
            "resource_type": "experiment",
            "resource_id": squatted,
            "permission": "MANAGE",
        },
        auth=("team-b", PASSWORDS["team-b"]),
        timeout=10,
    )
    assert granted.status_code == 200, granted.text
    with pytest.raises(OperatorTrackingError, match="readable by another tenant's user 'team-b'"):
        factory(server_url).experiment_id(name)
    as_tenant("team-b")
    assert MlflowClient(server_url).search_runs([squatted]) == []


def test_team_as_own_experiment_passes_the_ownership_check(server_url: str) -> None:
    """The control: an experiment team-a's user created itself is used (and found again)."""
    settings = Settings(tracking_uri=server_url, platform=PLATFORM, operator_namespace=PLATFORM_NS)
    tenant_mlflow.CACHE.clear()
    api: Any = SecretsApi(PASSWORDS)
    factory = tenant_mlflow.authenticated(MlflowTracking, api, "team-a", settings)
    first = factory(server_url).experiment_id("team-a/own-experiment")
    assert factory(server_url).experiment_id("team-a/own-experiment") == first
