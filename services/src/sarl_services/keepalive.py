"""Bound what a connection may hold around its requests: one request read ahead, idle keep-alive
connections yielded when the cap fills, and a deadline for writing a response.

The base class of :class:`sarl_services.connections._BoundedProtocol` (which adds the header and
body deadlines and the cap); used by both services through
:func:`sarl_services.connections.http_protocol`.

Why, against uvicorn 0.54's httptools protocol (``uvicorn/protocols/http/httptools_impl.py``):

* **Pipelining**: it queues every pipelined request it parses (``self.pipeline``), pausing the
  socket only until the request in flight reads its body or is answered, and each answer starts
  one queued request while the next read (up to 256 KiB) queues dozens more; a client streaming
  pipelined 4 KiB requests grew the reward service by 2 GB in 30 s. Here at most one request is
  read ahead of the one being answered: when a further one begins, parsing stops there, the
  socket is no longer read, and the connection is closed once the two requests are answered
  (``connection: close`` on the second). RFC 9112 §9.3.2 has a client retry requests left
  unanswered when a connection closes, so a well-behaved pipelining client loses nothing.
* **Idle connections**: a keep-alive connection between requests holds no work, yet counted
  against ``--max-connections`` (1,024 connections each sending a request every 55 s kept
  every other client, health probes included, at 503). When the cap is full, a new connection
  closes the connection idle the longest instead of being refused; only when none is idle is
  it refused. (A request sent just as its idle connection is closed meets the usual keep-alive
  race, the same as at the keep-alive timeout.)
* **Writing**: a response is written into the transport's buffer whole (a 9.7 MB response at
  once), and a client that never reads it was never cut. Once the buffer is over its high-water
  mark (the transport calls ``pause_writing``), the client must read it below the low-water mark
  within ``write_timeout_s``, else the connection is aborted and the buffer dropped.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import ClassVar, Protocol

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _Notes(Protocol):
    def note(self, reason: str) -> None: ...


class _StopReadingAhead(Exception):
    """Raised from the parser's ``on_message_begin`` to stop it at a second request ahead."""


def _quiet_logger() -> logging.Logger:
    # uvicorn logs "Invalid HTTP request received." when a parser callback raises; after the
    # deliberate stop above there is nothing to report (and one line per hostile connection).
    return logging.Logger("sarl_services.keepalive.stopped", level=logging.CRITICAL + 1)


class KeepAliveBounds(HttpToolsProtocol):
    """uvicorn's httptools protocol with the read-ahead, idle and write bounds of the module
    docstring; subclasses set :attr:`write_timeout_s` and :attr:`tally`."""

    write_timeout_s: ClassVar[float]
    tally: ClassVar[_Notes]
    # Class-level defaults: a connection refused at the cap never runs connection_made here.
    _read_ahead_stopped = False
    _write_timer: asyncio.TimerHandle | None = None
    _idle_since = math.inf

    def make_room(self) -> bool:
        """Whether a new connection fits under ``max_connections`` (passed by the caller as
        ``len(self.connections)`` already at the cap): closes the connection idle the longest
        to make room; False when none is idle."""
        idle = [c for c in self.connections if isinstance(c, KeepAliveBounds) and c.idle]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c._idle_since)
        oldest.transport.close()
        self.connections.discard(oldest)  # connection_lost discards it again, later
        self.tally.note("idle, closed for a new connection at --max-connections")
        return True

    @property
    def idle(self) -> bool:
        """Between requests: answered, nothing queued, nothing of a next request received (the
        keep-alive timer is armed only then, and cancelled by any byte received)."""
        return self.timeout_keep_alive_task is not None and not self.transport.is_closing()

    # -- read ahead ---------------------------------------------------------------------------
    def data_received(self, data: bytes) -> None:
        if self._read_ahead_stopped:  # a finishing request's receive() resumed reading
            self.flow.pause_reading()
            return
        super().data_received(data)

    def send_400_response(self, msg: str) -> None:
        if self._read_ahead_stopped:  # our own stop, not a malformed request
            return
        super().send_400_response(msg)

    def on_message_begin(self) -> None:
        if self.pipeline:  # a request already waits behind the one being answered
            self._read_ahead_stopped = True
            self.cycle.keep_alive = False  # the waiting request's answer closes the connection
            self.flow.pause_reading()
            # The socket stays paused: uvicorn's receive() and response callbacks resume reading
            # through the flow control whenever it says paused, so it must not say so.
            self.flow.read_paused = False
            self.logger = _quiet_logger()
            self.tally.note("pipelined more than one request ahead")
            raise _StopReadingAhead
        super().on_message_begin()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._idle_since = asyncio.get_running_loop().time()

    # -- write deadline -----------------------------------------------------------------------
    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.write_timeout_s, self._write_late)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._cancel_write_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_write_timer()
        super().connection_lost(exc)

    def _write_late(self) -> None:
        self._write_timer = None
        if not self.transport.is_closing() or self.transport.get_write_buffer_size():
            self.transport.abort()  # close() would wait for the buffer the client never reads
            self.tally.note("response not read in time")

    def _cancel_write_timer(self) -> None:
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
