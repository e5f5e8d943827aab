"""Raw-socket reads for the tests that speak HTTP byte by byte to a real service process.

Used by ``tests/services/test_keepalive.py`` and ``tests/services/test_slow_clients.py``: both
send hand-written (pipelined, slow, oversized) requests and then read everything the server
sends until it closes the connection, with the socket's own timeout as the bound.
"""

from __future__ import annotations

import socket

import pytest


def until_closed_or_reset(sock: socket.socket) -> tuple[bytes, bool]:
    """What the server sends until it closes the connection, and whether it reset it; fails the
    test if the server keeps it open past the socket's timeout. Closes the socket."""
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        pytest.fail(
            f"the server kept the connection open for {sock.gettimeout():g} s; got {data[:200]!r}"
        )
    except ConnectionResetError:
        return data, True
    finally:
        sock.close()
    return data, False


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (a reset counts as the
    close); fails the test if it does not close it within the socket's timeout."""
    return until_closed_or_reset(sock)[0]
