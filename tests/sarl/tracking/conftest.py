"""Fixtures for the tracking tests: a TCP proxy that can cut the MLflow server off, and a small
PNG. The real MLflow server itself (``mlflow_server``) lives in ``tests/conftest.py``, shared with
the runner tests.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.mlflow_server import MlflowServer


@pytest.fixture
def experiment_name() -> str:
    """A fresh experiment name, so tests sharing the server do not see each other's runs."""
    return f"test-{uuid.uuid4().hex[:10]}"


def write_png(path: Path, width: int = 4, height: int = 3) -> Path:
    """Write a valid grey ``width`` x ``height`` PNG by hand (no imaging library needed)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit greyscale
    rows = b"".join(b"\x00" + bytes([128] * width) for _ in range(height))
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )
    return path


@pytest.fixture
def png_file(tmp_path: Path) -> Path:
    return write_png(tmp_path / "map_step_5.png")


class FlakyProxy:
    """A TCP forwarder in front of a server; while ``down`` it drops every connection at once,
    as a server restart or a network cut would. Existing connections are cut when it goes down.
    """

    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        self._target = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._down = False
        self._closed = False
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        threading.Thread(target=self._accept_loop, daemon=True).start()

    def set_down(self, down: bool) -> None:
        with self._lock:
            self._down = down
            cut = list(self._sockets) if down else []
        for sock in cut:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        self.set_down(True)
        self._listener.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._down:
                client.close()
                continue
            upstream = socket.create_connection(self._target)
            with self._lock:
                self._sockets |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            with self._lock:
                self._sockets -= {src, dst}


@pytest.fixture
def flaky_proxy(mlflow_server: MlflowServer) -> Iterator[FlakyProxy]:
    proxy = FlakyProxy(mlflow_server.url)
    try:
        yield proxy
    finally:
        proxy.close()
