"""Another team's pod cannot use a tenant's Ray cluster: with the tenant's ``RAY_AUTH_TOKEN`` the
head runs Ray's token authentication, and a client without the token, or with another, is
refused (issue 36 item 3: "whoever reaches these ports can run code").

Real: Ray 2.60.0's ``ray start --head`` (the command :func:`sarl_jobs.cluster.ray_start_command`
builds for node 0, on a free loopback port, one CPU, no dashboard, in its own process group) with
the environment :func:`sarl_jobs.cluster.ray_auth_env` adds, and ``ray.init(address=...)`` from
separate processes, as verl's driver connects. Runs in ``.venv-verl`` (``make test-verl``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray")

from sarl_jobs.cluster import ClusterEnv, ray_auth_env, ray_start_command

pytestmark = pytest.mark.slow

TOKEN = "team-a-" + "a" * 32
#: What a client runs: connect as verl's driver does, then list the cluster's resources.
CLIENT = (
    "import ray, sys\n"
    "ray.init(address=sys.argv[1], log_to_driver=False)\n"
    "print('CONNECTED', ray.cluster_resources().get('CPU'))\n"
    "ray.shutdown()\n"
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _without_ray_auth() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}


@contextlib.contextmanager
def ray_head(tmp_path: Path) -> Iterator[str]:
    """A token-authenticated Ray head on loopback; its GCS address. Stopped by its process
    group (never ``ray stop``, which ends every Ray process of the machine)."""
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    command = ray_start_command(ClusterEnv("127.0.0.1", 23456, 0, 1), num_gpus=0)
    command = [c for c in command if not c.startswith("--port=")]
    command[0] = str(Path(sys.executable).parent / "ray")
    command += [
        f"--port={port}",
        "--block",
        "--num-cpus=1",
        "--include-dashboard=false",
        "--node-ip-address=127.0.0.1",
        # Short: Ray's unix sockets live under it (at most 107 bytes a path).
        f"--temp-dir={temp_dir}",
    ]
    env = {**_without_ray_auth(), "RAY_AUTH_TOKEN": TOKEN}
    env.update(ray_auth_env(env))
    log = (tmp_path / "head.log").open("wb")
    head = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((tmp_path / "head.log").read_text(errors="replace")[-2000:])
            time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(head.pid, signal.SIGKILL)
        head.wait()
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _connect(address: str, extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**_without_ray_auth(), **extra_env}
    return subprocess.run(
        [sys.executable, "-c", CLIENT, address],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_a_client_without_the_tenants_ray_token_is_refused(tmp_path: Path) -> None:
    """Attack: team-b's pod (no token, or its own) connects to team-a's Ray head to run code.
    Must happen: refused with Ray's authentication error; team-a's own driver connects."""
    with ray_head(tmp_path) as address:
        none = _connect(address, {})
        other = _connect(
            address, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "team-b-" + "b" * 32}
        )
        own = _connect(
            address, {"RAY_AUTH_TOKEN": TOKEN, **ray_auth_env({"RAY_AUTH_TOKEN": TOKEN})}
        )
    for refused in (none, other):
        assert refused.returncode != 0
        assert "CONNECTED" not in refused.stdout
        assert "token" in refused.stderr.lower()
    assert "InvalidAuthToken" in other.stderr
    assert own.returncode == 0, own.stderr[-2000:]
    assert "CONNECTED 1.0" in own.stdout
