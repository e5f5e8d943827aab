"""The platform chart's exact MLflow server command line, run: an artifact logged through the
tracking server's proxy (``mlflow-artifacts:``) lands in the S3 bucket the chart names.

The container's ``command``, ``args`` and ``env`` come from the Deployment rendered with real
Helm; only what must be local is substituted: ``mlflow`` -> this interpreter's
``python -m mlflow``, ``--host``/``--port`` -> loopback and a free port, the SQLite path ->
a temporary directory (or, with ``backendStore.existingSecret``, a local SQLite URI for the
Secret's ``MLFLOW_BACKEND_STORE_URI``), ``MLFLOW_S3_ENDPOINT_URL`` -> the suite's S3 server
(moto, a real S3 HTTP server: ``s3_endpoint`` in tests/conftest.py) and the credentials'
``secretKeyRef`` -> dummy keys. The client gets no S3 endpoint or credentials, so the artifact
can only reach the bucket through the server. With ``mlflow.auth`` (the default) the server is
MLflow's basic-auth app: the init container's script writes its config into the temporary
directory (``/etc/mlflow-auth`` made local, the SQLite user database there), the admin and the
Flask key are dummies, the client logs in as that admin, and an anonymous request is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.charts.rendering import PLATFORM, Case, objects_of_kind

pytestmark = pytest.mark.slow

ACCESS_KEY, SECRET_KEY = "sarl-chart-key", "sarl-chart-secret"
ADMIN, ADMIN_PASSWORD = "admin", "sarl-chart-admin-password"
#: What the chart's Secret references stand for here (mlflow.auth.existingSecret).
AUTH_ENV = {
    "MLFLOW_AUTH_ADMIN_USERNAME": ADMIN,
    "MLFLOW_AUTH_ADMIN_PASSWORD": ADMIN_PASSWORD,
    "MLFLOW_FLASK_SERVER_SECRET_KEY": "sarl-chart-flask-key",
}
STARTUP_TIMEOUT_S = 120.0


def _container(case: Case) -> dict[str, Any]:
    (deployment,) = (
        d
        for d in objects_of_kind(case, "Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "mlflow"
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def write_auth_config(case: Case, state: Path) -> None:
    """Run the Deployment's ``auth-config`` init container script, its directory made local."""
    (deployment,) = (
        d
        for d in objects_of_kind(case, "Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "mlflow"
    )
    (init,) = deployment["spec"]["template"]["spec"]["initContainers"]
    assert init["command"] == ["python", "-c"], init["command"]
    script = init["args"][0].replace("/etc/mlflow-auth", str(state))
    env = {**os.environ, "AUTH_DATABASE_URI": f"sqlite:///{state / 'basic_auth.db'}"}
    subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=60)


def _arg(args: list[str], flag: str) -> str:
    (value,) = (a.split("=", 1)[1] for a in args if a.startswith(f"{flag}="))
    return value


def local_command(container: dict[str, Any], port: int, state: Path) -> list[str]:
    """The container's command line with host, port and the SQLite path made local."""
    assert container["command"] == ["mlflow", "server"], container["command"]
    args = []
    for arg in container["args"]:
        if arg.startswith("--host="):
            arg = "--host=127.0.0.1"
        elif arg.startswith("--port="):
            arg = f"--port={port}"
        elif arg.startswith("--backend-store-uri=sqlite:////mlflow/"):
            arg = "--backend-store-uri=sqlite:///" + str(state / arg.rsplit("/", 1)[1])
        args.append(arg)
    return [sys.executable, "-m", "mlflow", "server", *args]


def local_env(container: dict[str, Any], s3_endpoint: str, state: Path) -> dict[str, str]:
    """The container's env with the endpoint made local and Secret references filled in."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AWS_", "MLFLOW_"))  # nothing ambient may help the server
    }
    for var in container.get("env", []):
        name = var["name"]
        if name == "MLFLOW_S3_ENDPOINT_URL":
            env[name] = s3_endpoint
        elif name == "MLFLOW_BACKEND_STORE_URI":
            env[name] = f"sqlite:///{state / 'backend.db'}"
        elif name == "AWS_ACCESS_KEY_ID":
            env[name] = ACCESS_KEY
        elif name == "AWS_SECRET_ACCESS_KEY":
            env[name] = SECRET_KEY
        elif name == "MLFLOW_AUTH_CONFIG_PATH":
            env[name] = str(state / "basic_auth.ini")
        elif name in AUTH_ENV:
            env[name] = AUTH_ENV[name]
        elif "value" in var:
            env[name] = var["value"]
        else:
            raise AssertionError(f"{name}: a Secret reference this test does not substitute")
    # Not the chart's: skips the background job runner (a huey consumer) to save two processes.
    env["MLFLOW_SERVER_ENABLE_JOB_EXECUTION"] = "false"
    return env


@pytest.fixture
def chart_server(
    request: pytest.FixtureRequest, s3_endpoint: str, tmp_path: Path
) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(tracking URL, rendered container)`` of the chart's server, running until the test ends."""
    from tests.support.mlflow_server import free_port, stop_process_group

    container = _container(request.param)
    if "--app-name=basic-auth" in container["args"]:
        write_auth_config(request.param, tmp_path)
    port = free_port()
    log_path = tmp_path / "mlflow-server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            local_command(container, port, tmp_path),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=local_env(container, s3_endpoint, tmp_path),
            cwd=tmp_path,
            start_new_session=True,  # stop_process_group reaches the uvicorn workers
        )
    # localhost: a Host header the chart's --allowed-hosts must accept (MLflow 3 checks it).
    url = f"http://localhost:{port}"
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline and process.poll() is None:
            try:
                if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.3)
        else:
            raise RuntimeError(f"mlflow server did not start: {log_path.read_text()[-2000:]}")
        yield url, container
    finally:
        stop_process_group(process)


def _s3(endpoint: str) -> Any:
    boto3 = pytest.importorskip("boto3")
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
    )


@pytest.mark.parametrize(
    "chart_server",
    [Case(PLATFORM), Case(PLATFORM, "external-s3"), Case(PLATFORM, "tenants")],
    ids=lambda c: c.id,
    indirect=True,
)
def test_artifact_logged_through_the_proxy_lands_in_the_bucket(
    chart_server: tuple[str, dict[str, Any]],
    s3_endpoint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("mlflow")
    from mlflow import MlflowClient

    url, container = chart_server
    bucket, _, prefix = (
        _arg(container["args"], "--artifacts-destination").removeprefix("s3://").partition("/")
    )
    s3 = _s3(s3_endpoint)
    if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=bucket)  # what the chart's hook Job (or the S3 admin) does
    for name in ("MLFLOW_S3_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)  # the client reaches S3 only through the server
    anonymous = httpx.get(
        f"{url}/api/2.0/mlflow/experiments/get-by-name",
        params={"experiment_name": "Default"},
        timeout=10,
    ).status_code
    if "--app-name=basic-auth" in container["args"]:
        # Basic auth (on with tenants): nothing without a user; the client logs in as the admin.
        assert anonymous == 401
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", ADMIN)
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", ADMIN_PASSWORD)
    else:
        assert anonymous == 200  # a single-team install (mlflow.auth.enabled auto, no tenants)

    client = MlflowClient(url)
    experiment_id = client.create_experiment(f"chart-{uuid.uuid4().hex[:8]}")
    run = client.create_run(experiment_id)
    assert run.info.artifact_uri.startswith("mlflow-artifacts:/"), run.info.artifact_uri
    (tmp_path / "report.md").write_text("# report\n")
    client.log_artifact(run.info.run_id, str(tmp_path / "report.md"), artifact_path="report")

    key = f"{prefix}/{experiment_id}/{run.info.run_id}/artifacts/report/report.md"
    body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    assert body == b"# report\n"
    listed = [a.path for a in client.list_artifacts(run.info.run_id, "report")]
    assert listed == ["report/report.md"]
