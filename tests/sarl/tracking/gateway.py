"""A fault proxy in front of a real MLflow server that acts like a gateway: it forwards, answers
every request itself with a plain-text status (a 403 from an auth proxy, a 400 from a gateway), or
holds requests unanswered (a hung server); it can also be pointed at another server (MLflow back
on a new database).

Used by the spool fault tests (``test_spool_faults.py``, ``test_spool_trust.py``). The TCP
forwarding is :class:`tests.sarl.tracking.conftest.FlakyProxy`'s; what is added is HTTP-aware
only where it must be: a refused request is read whole (headers, then ``Content-Length`` bytes) so
the client gets the status and not a reset. Changing the mode cuts open connections, so a client's
keep-alive connection cannot bypass it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit

_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 503: "Unavailable"}


class GatewayProxy:
    def __init__(self, target_url: str) -> None:
        self._target = _address(target_url)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._mode: tuple[str, int] = ("forward", 0)
        self._closed = False
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self.refused = 0  # requests answered with the plain-text status
        self.held = 0  # requests held unanswered
        threading.Thread(target=self._accept_loop, daemon=True).start()

    # -- modes -----------------------------------------------------------------------------------

    def forward(self) -> None:
        self._set(("forward", 0))

    def refuse(self, status: int) -> None:
        """Answer every request with ``status`` and a plain-text body, as a gateway does."""
        self._set(("refuse", status))

    def hold(self) -> None:
        """Read each request and never answer it (until the mode changes)."""
        self._set(("hold", 0))

    def retarget(self, url: str) -> None:
        """Forward to another server from now on."""
        with self._lock:
            self._target = _address(url)
        self._set(("forward", 0))

    def close(self) -> None:
        self._closed = True
        self._set(("refuse", 503))
        self._listener.close()

    def _set(self, mode: tuple[str, int]) -> None:
        with self._lock:
            self._mode = mode
            cut = list(self._sockets)
        for sock in cut:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # -- serving ---------------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with self._lock:
            kind, status = self._mode
            target = self._target
            self._sockets.add(client)
        if kind == "forward":
            try:
                upstream = socket.create_connection(target)
            except OSError:
                self._drop(client)
                return
            with self._lock:
                self._sockets.add(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()
            return
        if not _read_request(client):
            self._drop(client)
            return
        if kind == "hold":
            self.held += 1
            with contextlib.suppress(OSError):
                client.recv(1)  # returns when the mode changes (shutdown) or the client goes
        else:
            self.refused += 1
            body = f"{_REASONS.get(status, 'Error')}\n".encode()
            head = (
                f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
                f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
            with contextlib.suppress(OSError):
                client.sendall(head + body)
        self._drop(client)

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(src)
            self._drop(dst)

    def _drop(self, sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        with self._lock:
            self._sockets.discard(sock)


def _address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 80


def _read_request(sock: socket.socket) -> bool:
    """Read one HTTP request (headers and ``Content-Length`` body); False if the client left."""
    data = b""
    try:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return False
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                return False
            rest += chunk
    except OSError:
        return False
    return True
