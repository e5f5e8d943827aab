"""The platform chart's MLflow authentication (issue 36, item 3): the basic-auth app, its
config written by an init container, the admin from mlflow.auth.existingSecret, the hook Job
that creates each tenant's MLflow user, and the operator's Role on the tenants' platform copies.

Rendered with the real Helm engine (tests/charts/rendering.py). The init container's script is
run here as written and its file read by MLflow 3.17.2's own ``read_auth_config``; the hook
Job's pods pass PSS restricted (tests/support/pod_security.py; test_pod_security.py checks every
rendered pod as well).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.charts.rendering import PLATFORM, Case, objects
from tests.charts.rendering import render_templates as _render
from tests.support.pod_security import violations

pytest.importorskip("helm_python")

TENANTS = {"tenants": [{"namespace": "team-a"}, {"namespace": "team-b"}]}


def _objects(values: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        doc
        for path, text in sorted(_render(PLATFORM, values).items())
        if not path.endswith("NOTES.txt")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def _one(objs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    [found] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    return found


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def _secret_ref(name: str, key: str) -> dict[str, Any]:
    return {"secretKeyRef": {"name": name, "key": key}}


def test_mlflow_runs_the_basic_auth_app_with_the_admin_from_a_secret() -> None:
    """On by default whenever tenants are listed (``mlflow.auth.enabled: auto``)."""
    mlflow = _one(_objects(TENANTS), "Deployment", "-mlflow")
    pod = mlflow["spec"]["template"]["spec"]
    [server] = pod["containers"]
    assert "--app-name=basic-auth" in server["args"]
    env = _env(server)
    assert env["MLFLOW_AUTH_CONFIG_PATH"] == "/etc/mlflow-auth/basic_auth.ini"
    assert env["MLFLOW_AUTH_ADMIN_USERNAME"] == _secret_ref(
        "sarl-mlflow-auth", "MLFLOW_TRACKING_USERNAME"
    )
    assert env["MLFLOW_AUTH_ADMIN_PASSWORD"] == _secret_ref(
        "sarl-mlflow-auth", "MLFLOW_TRACKING_PASSWORD"
    )
    assert env["MLFLOW_FLASK_SERVER_SECRET_KEY"] == _secret_ref(
        "sarl-mlflow-auth", "MLFLOW_FLASK_SERVER_SECRET_KEY"
    )
    [init] = pod["initContainers"]
    # SQLite beside the backend store, on the same volume.
    assert _env(init)["AUTH_DATABASE_URI"] == "sqlite:////mlflow/basic_auth.db"
    operator = _one(_objects(TENANTS), "Deployment", "-operator")
    op_env = _env(operator["spec"]["template"]["spec"]["containers"][0])
    assert op_env["MLFLOW_TRACKING_USERNAME"] == _secret_ref(
        "sarl-mlflow-auth", "MLFLOW_TRACKING_USERNAME"
    )


def test_with_a_database_the_auth_tables_go_into_it() -> None:
    values = {"mlflow": {"backendStore": {"existingSecret": "mlflow-db", "key": "uri"}}}
    mlflow = _one(_objects({**values, **TENANTS}), "Deployment", "-mlflow")
    [init] = mlflow["spec"]["template"]["spec"]["initContainers"]
    assert _env(init)["AUTH_DATABASE_URI"] == _secret_ref("mlflow-db", "uri")


@pytest.mark.parametrize(
    "values",
    [{"mlflow": {"auth": {"enabled": False}}, **TENANTS}, {}],
    ids=["off", "auto-without-tenants"],
)
def test_auth_off_renders_the_open_server(values: dict[str, Any]) -> None:
    """Off, or auto on a single-team install (whose job pods have no MLflow user)."""
    objs = _objects(values)
    pod = _one(objs, "Deployment", "-mlflow")["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    assert not any(a.startswith("--app-name") for a in pod["containers"][0]["args"])
    operator = _one(objs, "Deployment", "-operator")
    assert "MLFLOW_TRACKING_USERNAME" not in _env(
        operator["spec"]["template"]["spec"]["containers"][0]
    )


def test_auth_without_a_secret_fails_naming_the_value() -> None:
    import helm_python as helm

    with pytest.raises(helm.HelmError, match=r"mlflow\.auth\.existingSecret: name the Secret"):
        _render(PLATFORM, {"mlflow": {"auth": {"existingSecret": ""}}, **TENANTS})


def test_the_init_container_writes_what_mlflow_reads(tmp_path: Path) -> None:
    """The script as rendered, with a database URI holding a URL-encoded "%", read back by
    MLflow's own read_auth_config (mlflow/server/auth/config.py; configparser would refuse a
    lone "%"), in a process of its own as the server reads it."""
    mlflow = _one(_objects(TENANTS), "Deployment", "-mlflow")
    [init] = mlflow["spec"]["template"]["spec"]["initContainers"]
    script = init["args"][0].replace("/etc/mlflow-auth", str(tmp_path))
    uri = "postgresql+psycopg2://mlflow:p%40ss@db:5432/mlflow"
    env = {**os.environ, "AUTH_DATABASE_URI": uri}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)
    config_env = {**os.environ, "MLFLOW_AUTH_CONFIG_PATH": str(tmp_path / "basic_auth.ini")}
    code = (
        "from mlflow.server.auth.config import read_auth_config as r; c = r(); "
        "print(c.default_permission); print(c.database_uri)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=config_env, check=True, timeout=120, capture_output=True
    ).stdout.decode()
    assert out.split() == ["NO_PERMISSIONS", uri]


def test_the_hook_job_creates_each_tenants_user_from_its_platform_copy() -> None:
    job = _one(_objects(TENANTS), "Job", "-mlflow-tenant-users")
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "post-install,post-upgrade"
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    [container] = pod["containers"]
    assert container["command"] == ["python", "-m", "sarl.cluster.mlflow_users"]
    assert container["args"] == [
        "--tracking-uri=http://sarl-platform-mlflow.sarl.svc.cluster.local:5000",
        "--tenants-dir=/etc/sarl-tenants",
    ]
    assert container["image"].startswith("ghcr.io/sarl-dev/sarl-operator")
    assert _env(container)["MLFLOW_TRACKING_PASSWORD"] == _secret_ref(
        "sarl-mlflow-auth", "MLFLOW_TRACKING_PASSWORD"
    )
    secrets = {v["secret"]["secretName"]: v["secret"] for v in pod["volumes"]}
    assert set(secrets) == {"sarl-tenant-team-a", "sarl-tenant-team-b"}
    assert all(s["optional"] for s in secrets.values())
    assert {i["key"] for i in secrets["sarl-tenant-team-a"]["items"]} == {
        "MLFLOW_TRACKING_USERNAME",
        "MLFLOW_TRACKING_PASSWORD",
    }
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"/etc/sarl-tenants/team-a", "/etc/sarl-tenants/team-b"}
    assert violations(job) == []
    default_names = {o["metadata"]["name"] for o in objects(Case(PLATFORM))}
    assert "sarl-platform-mlflow-tenant-users" not in default_names  # no tenants, no Job


def test_the_operator_may_read_the_tenants_platform_copies_only() -> None:
    objs = _objects(TENANTS)
    role = _one(objs, "Role", "-operator-tenant-mlflow")
    assert role["metadata"]["namespace"] == "sarl"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["sarl-tenant-team-a", "sarl-tenant-team-b"],
            "verbs": ["get"],
        }
    ]
    binding = _one(objs, "RoleBinding", "-operator-tenant-mlflow")
    assert binding["subjects"][0]["name"].endswith("-operator")
