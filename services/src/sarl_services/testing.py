"""Run a sarl service as a real subprocess on a free loopback port, for tests and benchmarks.

Used by ``tests/services`` and ``tests/bench/bench_reward_service.py``. A service is started the
way a user starts it — ``python -m sarl.cli.main serve <kind> ...``, i.e. through the sdk's CLI
and the ``sarl.cli`` entry point — in its own process group, with its output in a log file.
:meth:`ServiceProcess.stop` ends the whole group (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

#: Default KServe model names (readiness: ``GET /v1/models/<name>``).
DEFAULT_NAMES = {"embedding": "all-MiniLM-L6-v2", "reward": "sarl-reward"}


def free_port() -> int:
    """A currently free loopback port (the usual bind-to-0 trick; the race is harmless here)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class ServiceProcess:
    """A started service: its base URL, KServe model name, process and log file."""

    kind: str
    url: str
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def status(self, path: str) -> int | None:
        """HTTP status of ``GET path``, or None while nothing answers."""
        try:
            return httpx.get(self.url + path, timeout=2.0).status_code
        except httpx.TransportError:
            return None

    def wait_for(self, path: str, statuses: Sequence[int], timeout_s: float = 120.0) -> int:
        """Poll ``GET path`` until its status is one of ``statuses``; return it."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.kind} service exited with code {self.process.returncode}:\n"
                    f"{self.log_tail()}"
                )
            status = self.status(path)
            if status is not None and status in statuses:
                return status
            time.sleep(0.1)
        raise TimeoutError(
            f"{self.kind} service: GET {path} not in {list(statuses)} after {timeout_s:g} s:\n"
            f"{self.log_tail()}"
        )

    def wait_until_ready(self, timeout_s: float = 120.0) -> None:
        """Wait for KServe's model readiness route to answer 200."""
        self.wait_for(f"/v1/models/{self.name}", (200,), timeout_s)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it if it is still there after ``timeout_s``."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start_service(
    kind: str,
    args: Sequence[str] = (),
    *,
    log_dir: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> ServiceProcess:
    """Start ``sarl serve <kind> --port <free> args...`` on loopback; does not wait. ``env``
    adds to (or replaces entries of) this process's environment."""
    if kind not in DEFAULT_NAMES:
        raise ValueError(f"kind must be one of {sorted(DEFAULT_NAMES)}, got {kind!r}")
    args = list(args)
    name = args[args.index("--name") + 1] if "--name" in args else DEFAULT_NAMES[kind]
    port = free_port()
    directory = log_dir or Path(tempfile.mkdtemp(prefix="sarl-services-"))
    log_path = directory / f"{kind}-{port}.log"
    command = [sys.executable, "-m", "sarl.cli.main", "serve", kind]
    command += ["--host", "127.0.0.1", "--port", str(port), *args]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so stop() reaches any children
            env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"},
        )
    return ServiceProcess(kind, f"http://127.0.0.1:{port}", name, process, log_path)


@contextlib.contextmanager
def running_service(
    kind: str,
    args: Sequence[str] = (),
    *,
    log_dir: Path | None = None,
    timeout_s: float = 120.0,
) -> Iterator[ServiceProcess]:
    """Start a service, wait until it is ready, and stop it on exit."""
    service = start_service(kind, args, log_dir=log_dir)
    try:
        service.wait_until_ready(timeout_s)
        yield service
    finally:
        service.stop()
