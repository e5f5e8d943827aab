"""Start a real MLflow tracking server (``mlflow server``) as a subprocess, on loopback by default.

Used by the tracking, operator and job tests (one server per test session, see
``tests/conftest.py``), and by hand from the repository root:
``with running_mlflow_server(Path("/tmp/mlf")) as server: print(server.url)``. It is the real
server — the same REST API, SQLite backend and artifact proxy a team deployment runs — so
``MlflowClient`` does real HTTP against it.

The command (flags checked against MLflow 3.17's ``mlflow server --help``)::

    python -m mlflow server --backend-store-uri sqlite:///<tmp>/mlflow.db
        --artifacts-destination <tmp>/mlartifacts --serve-artifacts
        --host 127.0.0.1 --port <port> --workers 1

No ``--allowed-hosts`` is needed: MLflow's security middleware allows ``127.0.0.1:*`` and
``localhost:*`` by default (``get_default_allowed_hosts`` in ``mlflow/server/security_utils.py``).
``MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false`` skips the background job runner (a huey consumer
that tests never use), which saves processes and start-up time.

``auth=MlflowAuth(...)`` starts MLflow's basic-auth app instead (``--app-name basic-auth``, MLflow
3.17.2 ``mlflow/server/auth/``): its config file (``MLFLOW_AUTH_CONFIG_PATH``, keys of
``basic_auth.ini``: ``default_permission``, ``database_uri``, ``admin_username``), the admin's
password in ``MLFLOW_AUTH_ADMIN_PASSWORD`` (MLflow ships none and refuses to start without one)
and the static ``MLFLOW_FLASK_SERVER_SECRET_KEY`` its CSRF protection requires; the auth database
is SQLite next to the backend store, as the platform chart's default. It needs Flask-WTF
(``mlflow[auth]``).

The server runs in its own session (process group): on exit — normal or by exception — the whole
group (``mlflow`` plus its ``uvicorn`` worker) gets SIGTERM, then SIGKILL if it lingers, so no
process outlives the ``with`` block.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

_STOP_GRACE_S = 10.0


@dataclass(frozen=True)
class MlflowAuth:
    """Settings of MLflow's basic-auth app for :func:`running_mlflow_server`."""

    admin_username: str = "admin"
    admin_password: str = "admin-password-for-tests"
    #: NO_PERMISSIONS as the platform chart sets it: a user reads only what it was granted.
    default_permission: str = "NO_PERMISSIONS"

    def config(self, tmp_dir: Path) -> str:
        """``basic_auth.ini`` (MLflow 3.17.2 ``mlflow/server/auth/config.py`` reads these keys)."""
        return (
            "[mlflow]\n"
            f"default_permission = {self.default_permission}\n"
            f"database_uri = sqlite:///{tmp_dir / 'basic_auth.db'}\n"
            f"admin_username = {self.admin_username}\n"
            "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
        )

    def env(self, tmp_dir: Path) -> dict[str, str]:
        path = tmp_dir / "basic_auth.ini"
        path.write_text(self.config(tmp_dir))
        return {
            "MLFLOW_AUTH_CONFIG_PATH": str(path),
            "MLFLOW_AUTH_ADMIN_PASSWORD": self.admin_password,
            "MLFLOW_FLASK_SERVER_SECRET_KEY": "static-test-secret-key",
        }


@dataclass(frozen=True)
class MlflowServer:
    """A running server: ``url`` is its tracking URI, e.g. ``http://127.0.0.1:54321``."""

    url: str
    pid: int  # also the process-group id
    backend_store_uri: str
    artifacts_destination: Path
    log_path: Path  # the server's stdout and stderr


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (MLflow needs a number; it cannot report port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def running_mlflow_server(
    tmp_dir: Path,
    *,
    port: int = 0,
    host: str = "127.0.0.1",
    startup_timeout_s: float = 90.0,
    auth: MlflowAuth | None = None,
) -> Iterator[MlflowServer]:
    """Run ``mlflow server`` with its state in ``tmp_dir`` until the block exits.

    ``port=0`` picks a free port. ``host`` is the address it listens on (another local address,
    e.g. a bridge that test network namespaces reach; MLflow's default allowed hosts include
    the private ranges). Waits until ``GET /health`` answers (a cold start takes about
    10 s); raises ``RuntimeError`` with the log's tail if the server exits or does not get ready
    within ``startup_timeout_s``. ``auth``: the basic-auth app with these settings.
    """
    tmp_dir = Path(tmp_dir).resolve()
    tmp_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port(host)
    db_uri = f"sqlite:///{tmp_dir / 'mlflow.db'}"
    artifacts = tmp_dir / "mlartifacts"
    log_path = tmp_dir / "mlflow-server.log"
    command = [
        *(sys.executable, "-m", "mlflow", "server"),
        *("--backend-store-uri", db_uri),
        *("--artifacts-destination", str(artifacts), "--serve-artifacts"),
        *("--host", host, "--port", str(port), "--workers", "1"),
        *(("--app-name", "basic-auth") if auth else ()),
    ]
    env = {
        **os.environ,
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        **(auth.env(tmp_dir) if auth else {}),
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_dir,  # anything MLflow writes relative to the working directory stays here
            start_new_session=True,  # its own process group, so stopping reaches the workers
        )
    url = f"http://{host}:{port}"
    try:
        _wait_healthy(process, url, log_path, startup_timeout_s)
        yield MlflowServer(url, process.pid, db_uri, artifacts, log_path)
    finally:
        stop_process_group(process)


def _wait_healthy(
    process: subprocess.Popen[bytes], url: str, log_path: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        code = process.poll()
        if code is not None:
            raise RuntimeError(
                f"mlflow server exited with code {code} before serving: {_tail(log_path)}"
            )
        try:
            if httpx.get(f"{url}/health", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass  # not listening yet
        time.sleep(0.2)
    raise RuntimeError(
        f"mlflow server not healthy at {url} after {timeout_s:g} s: {_tail(log_path)}"
    )


def _tail(log_path: Path, lines: int = 5) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return " | ".join(text.strip().splitlines()[-lines:]) or "(empty log)"


def live_group_members(pgid: int) -> list[int]:
    """Pids of processes in group ``pgid`` that are not zombies (Linux ``/proc``; elsewhere
    ``[pgid]`` while the group exists)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return []
        return [pgid]
    members = []
    for stat in proc.glob("[0-9]*/stat"):
        try:
            # Fields after the parenthesised command: state, ppid, pgrp, ...
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        if fields[2] == str(pgid) and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def stop_process_group(process: subprocess.Popen[bytes], grace_s: float = _STOP_GRACE_S) -> None:
    """SIGTERM the group led by ``process``; SIGKILL whatever is left after ``grace_s``."""
    pgid = process.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    # The leader may be gone while its uvicorn worker still shuts down: wait for the group.
    while live_group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if live_group_members(pgid):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
