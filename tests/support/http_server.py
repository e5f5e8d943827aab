"""Lifecycle machinery shared by the local test servers (stdlib HTTP on loopback).

Used by :mod:`tests.support.embedding_server` and :mod:`tests.support.chat_server`, which the
tests, benchmarks and reward-service tests start in-process, and whose ``main`` runs them
in the foreground (:func:`serve_in_foreground`). :class:`LoopbackServer` binds the socket on
construction, serves on a background thread (:meth:`LoopbackServer.start`) or in the foreground
until SIGINT or SIGTERM (:meth:`LoopbackServer.serve_until_signalled`), and on
:meth:`LoopbackServer.stop` cuts scripted delays short and closes the connections still open; it
also tracks connections and counts requests in flight. :class:`LoopbackHandler` is the matching
request handler base: HTTP/1.1 keep-alive, the shared ``GET`` routes (``/health``,
``/v1/models``) and helpers that write JSON and OpenAI-style error replies. Each server
subclasses both and adds its own route, validation and reply logic.

Stopping is event-driven, never polled: the accept loop blocks in ``select`` on the listening
socket and a wake-up socket, which :meth:`LoopbackServer.stop` writes to and, in the foreground,
the C-level signal handler too (:func:`signal.set_wakeup_fd`), whichever thread the kernel
delivered the signal to. So a stop takes effect at once on a busy machine as on an idle one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import selectors
import signal
import socket
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any, ClassVar, Protocol, Self, TypeVar, cast

_LOG = logging.getLogger(__name__)

JSON_CONTENT_TYPE = "application/json"
# What stops a server in the foreground: Ctrl-C, and what a shell's kill, Kubernetes or a test's
# proc.terminate() sends.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# The byte stop() writes to the wake-up socket; set_wakeup_fd writes each signal's number.
_STOP_BYTE = 0
_WAKE_BYTES = frozenset({_STOP_BYTE, *(int(s) & 0xFF for s in STOP_SIGNALS)})
# A hang guard for stop()'s wait on the accept loop, which exits as soon as it is woken.
_STOP_WAIT_S = 10.0

S = TypeVar("S", bound="LoopbackServer")


def error_json(message: str, kind: str, param: str | None = None, code: int | None = None) -> str:
    """An OpenAI-style error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


def check_reply_fields(delay_s: float, status: int) -> None:
    """Validate a scripted reply's delay and HTTP status; raise ``ValueError`` if invalid."""
    if not (math.isfinite(delay_s) and delay_s >= 0):
        raise ValueError(f"delay_s must be a finite number >= 0, got {delay_s!r}")
    if not 100 <= status <= 599:
        raise ValueError(f"status must be an HTTP status code (100-599), got {status!r}")


def retry_after_headers(retry_after: float | None) -> tuple[tuple[str, str], ...]:
    """A ``Retry-After`` header for ``retry_after`` seconds, or none."""
    return () if retry_after is None else (("Retry-After", f"{retry_after:g}"),)


class BadRequest(Exception):
    """A request the server refuses: reply ``status`` with an error of type ``kind``."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param


def parse_model_request(body: bytes) -> tuple[dict[str, Any], str]:
    """Parse a JSON object body with a non-empty ``model``; return ``(payload, model)``."""
    try:
        payload = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise BadRequest(400, f"request body is not valid JSON: {e}") from e
    if not isinstance(payload, dict):
        raise BadRequest(400, "request body must be a JSON object")
    model = payload.get("model")
    if not isinstance(model, str) or not model.strip():
        message = "'model' is required and must be a non-empty string"
        raise BadRequest(400, message, param="model")
    return cast(dict[str, Any], payload), model


def server_arg_parser(prog: str, description: str, default_port: int) -> argparse.ArgumentParser:
    """The command line of a server's foreground ``main``: ``--host`` and ``--port`` so far."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    parser.add_argument("--port", type=int, default=default_port, help="port (0 picks a free one)")
    return parser


class ScriptedReply(Protocol):
    """The scripted fields of a reply (``Fault``, ``ChatReply``) that a handler plays."""

    @property
    def delay_s(self) -> float: ...
    @property
    def disconnect(self) -> bool: ...
    @property
    def body(self) -> str | None: ...
    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> tuple[tuple[str, str], ...]: ...


def serve_in_foreground(
    parser: argparse.ArgumentParser,
    make_server: Callable[[], S],
    banner: Callable[[S], str],
    errors: tuple[type[Exception], ...] = (OSError,),
) -> int:
    """Build the server (``errors`` become usage errors), print ``banner`` once SIGINT and
    SIGTERM are caught (a line to wait for: the socket already accepts), serve until one of them
    arrives, stop, and return 0."""
    try:
        server = make_server()
    except errors as e:
        parser.error(str(e))
    server.serve_until_signalled(on_ready=lambda: print(banner(server), flush=True))
    return 0


def _note_signal(signum: int, frame: FrameType | None) -> None:
    """The Python-level handler of the stop signals: nothing to do here.

    Installing it makes the C-level handler write the signal's number to the wake-up socket
    (``signal.set_wakeup_fd``), which is what stops the accept loop. Raising (as SIGINT's
    default ``KeyboardInterrupt`` does) would land at an arbitrary point of the main thread,
    e.g. half-way through stopping; and it would only run once the main thread ran bytecode
    again, which it does not while blocked in ``select`` when another thread got the signal.
    """


def _catch_stop_signals() -> dict[int, Any]:
    """Route SIGINT and SIGTERM to :func:`_note_signal`; return the handlers they had.

    Whatever this process inherited: a child inherits an ignored SIGINT from a parent such as a
    test runner or a background shell job (Python then installs no ``KeyboardInterrupt``
    handler), and a blocked signal mask, which would keep the signals pending forever.
    """
    previous = {int(s): signal.signal(s, _note_signal) for s in STOP_SIGNALS}
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOP_SIGNALS))
    return previous


class _HTTPServer(ThreadingHTTPServer):
    """Carries a reference to the owning :class:`LoopbackServer` for the handlers."""

    daemon_threads = True
    # listen() backlog. socketserver's default of 5 makes a burst of more concurrent clients
    # (an async client with many requests in flight) wait for SYN retransmits, ~1 s each.
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[LoopbackHandler],
        app: LoopbackServer,
    ) -> None:
        self.app = app
        super().__init__(address, handler)

    def accept_one(self) -> None:
        """Accept a pending connection and start its handler thread (the listening socket is
        readable, so this does not block); what ``serve_forever`` does per ready ``select``."""
        # socketserver's own per-request step (errors handled, request closed); typeshed omits it.
        self._handle_request_noblock()  # type: ignore[attr-defined]


class LoopbackHandler(BaseHTTPRequestHandler):
    """Request handler base: keep-alive, connection tracking, shared routes, reply helpers."""

    # HTTP/1.1 keep-alive, like real model servers, so clients exercise connection reuse.
    protocol_version = "HTTP/1.1"
    # Idle keep-alive connections time out eventually, so handler threads cannot pile up.
    timeout = 60
    # The body of ``GET /v1/models``.
    models: ClassVar[dict[str, Any]] = {"object": "list", "data": []}

    @property
    def loopback(self) -> LoopbackServer:
        """The server this handler serves for (subclasses narrow the type)."""
        return cast(_HTTPServer, self.server).app

    @property
    def route(self) -> str:
        """The request path without its query string."""
        return self.path.split("?", 1)[0]

    def setup(self) -> None:
        super().setup()
        self.loopback._track(self.connection, add=True)

    def finish(self) -> None:
        self.loopback._track(self.connection, add=False)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        _LOG.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        path = self.route
        if path == "/health":
            self.send_json(200, "{}")
        elif path == "/v1/models":
            self.send_json(200, json.dumps(self.models))
        else:
            self.send_json(404, error_json(f"no route {path}", "not_found_error"))

    def send_not_found(self) -> None:
        """Reply 404 naming the full request path."""
        self.send_json(404, error_json(f"no route {self.path}", "not_found_error"))

    def check_auth(self, api_key: str | None) -> None:
        """Raise a 401 :class:`BadRequest` unless ``Authorization: Bearer <api_key>`` is sent."""
        if api_key is not None and self.headers.get("Authorization") != f"Bearer {api_key}":
            raise BadRequest(401, "invalid or missing API key", "authentication_error")

    def delay_or_drop(self, delay_s: float, disconnect: bool) -> bool:
        """Wait ``delay_s``, then say whether to drop the connection without a reply.

        Waiting on the stop event (not ``time.sleep``) lets a stopping server cut delays short;
        a cut-short delay drops the connection too.
        """
        if (delay_s and self.loopback._closing.wait(delay_s)) or disconnect:
            self.close_connection = True
            return True
        return False

    def send_scripted(
        self,
        reply: ScriptedReply,
        fault_message: str,
        content_type: str = JSON_CONTENT_TYPE,
    ) -> bool:
        """Play the scripted part of ``reply``; return whether that answered the request.

        The delay is waited first, then a dropped connection, a verbatim ``body`` or a
        non-200 ``status`` (an error of type ``server_error`` saying ``fault_message`` unless a
        body is given) answer it; otherwise the caller sends the normal reply.
        """
        if self.delay_or_drop(reply.delay_s, reply.disconnect):
            return True
        if reply.body is not None or reply.status != 200:
            body = reply.body
            if body is None:
                body = error_json(fault_message, "server_error")
            self.send_json(reply.status, body, reply.headers, content_type)
            return True
        return False

    def send_json(
        self,
        status: int,
        body: str | bytes,
        headers: Sequence[tuple[str, str]] = (),
        content_type: str = JSON_CONTENT_TYPE,
    ) -> None:
        """Reply ``status`` with ``body``; a client that already hung up is ignored."""
        data = body.encode("utf-8") if isinstance(body, str) else body
        try:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (e.g. its timeout fired during a delay); nobody to tell.
            self.close_connection = True


class LoopbackServer:
    """A threading HTTP server bound to ``host:port`` (``port=0``: a free port).

    The socket is bound on construction; :meth:`start` serves on a background thread and
    :meth:`stop` shuts down, cutting delays short and closing open connections. Subclasses guard
    their own state with ``self._lock`` and count requests in flight with
    :meth:`_request_started` / :meth:`_request_finished`.
    """

    def __init__(self, *, host: str, port: int, handler: type[LoopbackHandler], name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._closing = threading.Event()  # set by stop(): cuts scripted delays short
        self._stopped = False  # guarded by _lock
        self._loop_done = threading.Event()  # clear while an accept loop runs
        self._loop_done.set()
        self._connections: set[socket.socket] = set()
        self._thread: threading.Thread | None = None
        self._in_flight = self._max_in_flight = 0
        self._httpd = _HTTPServer((host, port), handler, self)
        # Wakes the accept loop at once: stop() writes _STOP_BYTE, and in the foreground so does
        # every signal, whichever thread the kernel delivers it to (see serve_until_signalled).
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_w.setblocking(False)

    @property
    def url(self) -> str:
        """Base URL without ``/v1``, e.g. ``http://127.0.0.1:54321``."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> Self:
        """Serve on a daemon thread; returns ``self``."""
        if self._thread is not None:
            raise RuntimeError("server already started")
        self._thread = threading.Thread(
            target=self.serve_forever, name=f"{self._name}-{self.url}", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until :meth:`stop` is called (from another thread)."""
        with self._lock:
            if self._stopped:
                return
            self._loop_done.clear()
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self._httpd, selectors.EVENT_READ)
                selector.register(self._wake_r, selectors.EVENT_READ)
                while not self._closing.is_set():
                    for key, _ in selector.select():  # no timeout: woken, never polled
                        if key.fileobj is self._wake_r:
                            self._drain_wake_ups()
                        elif not self._closing.is_set():
                            self._httpd.accept_one()
        finally:
            self._loop_done.set()

    def serve_until_signalled(self, on_ready: Callable[[], None] | None = None) -> None:
        """Serve in the main thread until SIGINT or SIGTERM (or :meth:`stop`), then stop.

        ``on_ready`` runs once the signals are caught, e.g. to print a line a parent waits for.
        The signals' previous handlers are restored on return.
        """
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("serve_until_signalled must run in the main thread")
        previous = _catch_stop_signals()
        try:
            wakeup_fd = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
            try:
                if on_ready is not None:
                    on_ready()
                self.serve_forever()
            finally:
                # Before stop() closes the wake-up socket: a later signal must not be written
                # to a closed (or since reused) descriptor.
                signal.set_wakeup_fd(wakeup_fd)
                self.stop()
        finally:
            for signum, handler in previous.items():
                # None: a handler not installed from Python, which cannot be put back.
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)

    def stop(self) -> None:
        """Stop serving, wake delayed handlers, close the socket and any open connections.

        Prompt: the accept loop is woken, not polled; waits are bounded. Idempotent.
        """
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._closing.set()
        with contextlib.suppress(OSError):  # full: a wake-up is already pending
            self._wake_w.send(bytes([_STOP_BYTE]))
        if not self._loop_done.wait(_STOP_WAIT_S):
            _LOG.warning("%s: accept loop still running %g s after stop", self._name, _STOP_WAIT_S)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=_STOP_WAIT_S)
        self._httpd.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            _hang_up(conn)
        self._wake_r.close()
        self._wake_w.close()

    def _drain_wake_ups(self) -> None:
        """Read the wake-up socket; a stop byte or stop signal ends the accept loop."""
        try:
            data = self._wake_r.recv(4096)
        except OSError:  # closed under us: stop() gave up waiting
            data = bytes([_STOP_BYTE])
        # Other signals with Python handlers (e.g. a test runner's SIGALRM) also write here.
        if not data or not _WAKE_BYTES.isdisjoint(data):
            self._closing.set()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- called by request handlers -------------------------------------------------------------

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if not add:
                self._connections.discard(conn)
                return
            if not self._stopped:
                self._connections.add(conn)
                return
        # Accepted just as the server stopped, after stop() hung up on the others: without
        # this the handler would wait out its idle timeout on a connection nobody closes.
        _hang_up(conn)

    def _request_started(self) -> None:
        """Count one more request in flight; the caller holds ``self._lock``."""
        self._in_flight += 1
        self._max_in_flight = max(self._max_in_flight, self._in_flight)

    def _request_finished(self) -> None:
        with self._lock:
            self._in_flight -= 1


def _hang_up(conn: socket.socket) -> None:
    """Shut a connection down both ways, waking a handler blocked reading it."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_RDWR)
