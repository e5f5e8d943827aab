"""Bound what one client connection may hold: deadlines for its request headers and body, and a
cap on open connections.

Used by :func:`sarl_services.server.serve`, which hands the protocol class that
:func:`http_protocol` builds to uvicorn (through KServe's REST server) for both services; the
limits come from ``sarl serve``'s ``--header-timeout-s``, ``--body-timeout-s`` and
``--max-connections``.

Why our own protocol: uvicorn 0.54 (``uvicorn/protocols/http/httptools_impl.py``, the protocol
its ``http="auto"`` picks since httptools is installed with KServe) arms only a keep-alive
timer, and only after a response; a connection that sends part of a request is never timed
out. Its ``limit_concurrency`` answers 503 only once a request's headers are complete, so it
cannot bound connections that never complete them (3,000 such connections stayed open,
limited only by the file-descriptor limit). Hence, per connection:

* **headers**: from the connection's start, or from the first byte of each further request, the
  headers must be complete within ``header_timeout_s`` — a deadline, not an idle timer, so a
  client trickling a byte a second is closed too — and within 64 KiB (else 431), counted
  before a packet is parsed (headers complete in one packet are never dispatched) and again as
  the parser reports a request line and headers (a request pipelined behind another). A connection
  idle between requests is still closed by uvicorn's keep-alive timer (KServe's 65 s).
* **body**: from the end of the headers, the body must be complete within ``body_timeout_s``.
  The route then sees the client as gone (``http.disconnect``) and answers 408 (see
  :data:`sarl_services.errors.BODY_TIMED_OUT`), which is what the client reads.
* **cap**: a connection beyond ``max_connections`` open ones first closes the one idle the
  longest between requests; with none idle, it gets 503 and is closed at once, before anything
  is read or a task started. At most one pipelined request is read ahead, and a response must
  be read within ``write_timeout_s`` once the write buffer is full (:mod:`sarl_services.keepalive`).

A slow client is thus held at most ``header_timeout_s + body_timeout_s`` (10 s + 20 s by
default). Closed and refused connections are counted in one warning line per minute at most.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import ClassVar

from sarl_services.errors import BODY_TIMED_OUT
from sarl_services.keepalive import KeepAliveBounds

_LOG = logging.getLogger(__name__)

#: Request line plus headers (nginx's default is 4 x 8 KiB; KServe clients send well under 1 KiB).
MAX_HEADER_BYTES = 64 * 1024


def _response(status: str, retry_after: bool = False) -> bytes:
    extra = b"retry-after: 1\r\n" if retry_after else b""
    return (
        b"HTTP/1.1 " + status.encode() + b"\r\ncontent-length: 0\r\nconnection: close\r\n"
        + extra + b"\r\n"
    )  # fmt: skip


_TIMEOUT = _response("408 Request Timeout")
_HEADERS_TOO_LARGE = _response("431 Request Header Fields Too Large")
_OVER_CAP = _response("503 Service Unavailable", retry_after=True)


class _HeadersTooLarge(Exception):
    """Raised inside httptools' callbacks when parsed headers pass :data:`MAX_HEADER_BYTES`."""


@dataclass(frozen=True)
class ConnectionLimits:
    """Per-connection deadlines (seconds) and the cap on open connections."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 20.0
    max_connections: int = 1024
    write_timeout_s: float = 20.0

    def __post_init__(self) -> None:
        if not (self.header_timeout_s > 0 and self.body_timeout_s > 0 and self.write_timeout_s > 0):
            raise ValueError("header, body and write timeouts must be positive")
        if self.max_connections < 1:
            raise ValueError("max_connections must be at least 1")


class _Tally:
    """Counts connections closed or refused by reason; logs the counts at most once a minute
    (3,000 slow clients must not write 3,000 lines)."""

    def __init__(self, every_s: float = 60.0) -> None:
        self.every_s = every_s
        self.counts: dict[str, int] = {}
        self.logged_at = -float("inf")

    def note(self, reason: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        now = time.monotonic()
        if now - self.logged_at >= self.every_s:
            summary = ", ".join(f"{k}: {v}" for k, v in sorted(self.counts.items()))
            _LOG.warning("connections closed or refused since the last report: %s", summary)
            self.counts.clear()
            self.logged_at = now


class _BoundedProtocol(KeepAliveBounds):
    """uvicorn's httptools protocol with the deadlines and the cap of the module docstring."""

    limits: ClassVar[ConnectionLimits]
    tally: ClassVar[_Tally]

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._header_bytes = self._parsed_bytes = 0
        self._parsed_over = False
        self._awaiting_headers = True
        at_cap = len(self.connections) >= self.limits.max_connections
        self._refused = at_cap and not self.make_room()
        if self._refused:  # not added to the server's connections; nothing is read
            self.transport = transport
            transport.write(_OVER_CAP)
            transport.close()
            self.tally.note("over --max-connections")
            return
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._body_timer is None and self._headers_over(data):
            # Checked before parsing (in headers, or between requests: no body under way):
            # headers complete within this packet would otherwise be parsed and the request
            # dispatched before any count below could see them.
            self._close(_HEADERS_TOO_LARGE, "headers over 64 KiB")
            return
        super().data_received(data)
        # Counted here, not in on_header: httptools buffers a header's value until it is
        # complete, so an endless value would never reach on_header.
        if self._awaiting_headers:
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES and not self.transport.is_closing():
                self._close(_HEADERS_TOO_LARGE, "headers over 64 KiB")

    def _headers_over(self, data: bytes) -> bool:
        """Whether this request's header bytes so far plus those of ``data`` (up to the blank
        line that ends them, if it is in ``data``) pass :data:`MAX_HEADER_BYTES`."""
        end = data.find(b"\r\n\r\n")
        return self._header_bytes + (len(data) if end < 0 else end + 4) > MAX_HEADER_BYTES

    def send_400_response(self, msg: str) -> None:
        if self._parsed_over:  # raised by on_url/on_header below, not a malformed request
            self._close(_HEADERS_TOO_LARGE, "headers over 64 KiB")
            return
        super().send_400_response(msg)

    # -- parser callbacks (called by httptools from inside data_received) ---------------------
    # A request pipelined behind another in the same packet is parsed past the check in
    # data_received, so the parsed request line and headers are counted too (with their
    # separators: many tiny headers are as large as one big one). Raising from a callback
    # makes httptools fail the packet; uvicorn then calls send_400_response, answered 431.
    def _count_parsed(self, n: int) -> None:
        self._parsed_bytes += n
        if self._parsed_bytes > MAX_HEADER_BYTES:
            self._parsed_over = True
            raise _HeadersTooLarge

    def on_url(self, url: bytes) -> None:
        self._count_parsed(len(url) + 12)  # "GET " and " HTTP/1.1\r\n" at least
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_parsed(len(name) + len(value) + 4)  # ": " and "\r\n"
        super().on_header(name, value)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = self._parsed_bytes = 0
        self._awaiting_headers = True
        self._arm_header_timer()  # restarts the deadline at the first byte of this request

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._cancel(self._header_timer)
        self._header_timer = None
        self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_late)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._cancel(self._body_timer)
        self._body_timer = None
        self._header_bytes = 0  # the next packet starts the next request's headers
        super().on_message_complete()

    # -- deadlines ------------------------------------------------------------------------------
    def _arm_header_timer(self) -> None:
        self._cancel(self._header_timer)
        self._header_timer = self.loop.call_later(self.limits.header_timeout_s, self._headers_late)

    def _headers_late(self) -> None:
        self._header_timer = None
        # A response still being written (a pipelined request behind it) must not be corrupted.
        answering = self.cycle is not None and not self.cycle.response_complete
        self._close(None if answering else _TIMEOUT, "headers not complete in time")

    def _body_late(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if cycle is None or cycle.response_started:  # answered already (e.g. 413 from headers)
            self._close(None, "body not complete in time")
            return
        # The route is waiting in receive(): make it see the client as gone now, and mark why,
        # so it answers (and counts) 408 rather than 499. Its response is dropped (disconnected);
        # the client reads the 408 written here.
        cycle.scope.setdefault("state", {})[BODY_TIMED_OUT] = True
        cycle.disconnected = True
        cycle.message_event.set()
        self._close(_TIMEOUT, "body not complete in time")

    def _close(self, response: bytes | None, reason: str) -> None:
        if self.transport.is_closing():
            return
        if response is not None:
            self.transport.write(response)
        self.transport.close()
        self.tally.note(reason)

    def _cancel_timers(self) -> None:
        self._cancel(self._header_timer)
        self._cancel(self._body_timer)

    @staticmethod
    def _cancel(timer: asyncio.TimerHandle | None) -> None:
        if timer is not None:
            timer.cancel()


def http_protocol(limits: ConnectionLimits) -> type[asyncio.Protocol]:
    """The uvicorn HTTP protocol class (``uvicorn.Config.http``) that enforces ``limits``."""
    return type(
        "SarlHttpProtocol",
        (_BoundedProtocol,),
        {"limits": limits, "tally": _Tally(), "write_timeout_s": limits.write_timeout_s},
    )
