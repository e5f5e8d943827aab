"""The local OpenAI-compatible embedding server: wire format, validation, faults, stats, CLI."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import sarl
from tests.support import REPO_ROOT
from tests.support.embedding_server import (
    EmbeddingServer,
    Fault,
    pseudo_embedding,
    running_embedding_server,
)

DIM = 16


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with running_embedding_server(dim=DIM) as srv:
        yield srv


def post(server: EmbeddingServer, payload: Any, **kwargs: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/embeddings", json=payload, timeout=10, **kwargs)


def test_response_has_vllm_shape(server: EmbeddingServer) -> None:
    reply = post(server, {"model": "m", "input": ["one two", "three"]})
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/json"
    body = reply.json()
    assert {"id", "object", "created", "model", "data", "usage"} <= body.keys()
    assert (body["object"], body["model"]) == ("list", "m")
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert [(d["object"], d["index"], len(d["embedding"])) for d in body["data"]] == [
        ("embedding", 0, DIM),
        ("embedding", 1, DIM),
    ]


def test_embeddings_are_deterministic_per_text_across_servers(server: EmbeddingServer) -> None:
    first = post(server, {"model": "m", "input": ["same text"]}).json()["data"][0]["embedding"]
    with running_embedding_server(dim=DIM) as other:
        second = post(other, {"model": "m", "input": ["same text"]}).json()["data"][0]["embedding"]
    assert first == second == pseudo_embedding("same text", DIM).tolist()
    assert pseudo_embedding("other text", DIM).tolist() != first


def test_single_string_input_is_accepted(server: EmbeddingServer) -> None:
    data = post(server, {"model": "m", "input": "just one"}).json()["data"]
    assert len(data) == 1


def test_dimensions_truncate_the_vectors(server: EmbeddingServer) -> None:
    data = post(server, {"model": "m", "input": ["a"], "dimensions": 4}).json()["data"]
    assert data[0]["embedding"] == pseudo_embedding("a", DIM)[:4].tolist()


@pytest.mark.parametrize("dimensions", [None, 5])
def test_base64_reply_carries_the_same_float32_values_as_the_float_reply(
    server: EmbeddingServer, dimensions: int | None
) -> None:
    texts = ["one", "two words", "three"]
    payload: dict[str, Any] = {"model": "m", "input": texts}
    if dimensions is not None:
        payload["dimensions"] = dimensions
    floats = post(server, payload).json()["data"]
    packed = post(server, {**payload, "encoding_format": "base64"}).json()["data"]
    for as_float, as_base64, text in zip(floats, packed, texts, strict=True):
        decoded = np.frombuffer(base64.b64decode(as_base64["embedding"]), dtype="<f4")
        expected = pseudo_embedding(text, DIM)[: dimensions or DIM].tolist()
        assert decoded.tolist() == as_float["embedding"] == expected
        assert as_base64["index"] == as_float["index"]
    assert (server.stats.requests, server.stats.base64_requests) == (2, 1)


def test_float_only_server_refuses_base64_with_400_naming_the_field() -> None:
    with running_embedding_server(dim=DIM, encoding_formats=("float",)) as srv:
        refused = post(srv, {"model": "m", "input": ["a"], "encoding_format": "base64"})
        answered = post(srv, {"model": "m", "input": ["a"], "encoding_format": "float"})
    assert (refused.status_code, answered.status_code) == (400, 200)
    error = refused.json()["error"]
    assert error["param"] == "encoding_format"
    assert error["message"] == "'encoding_format' must be 'float'"


@pytest.mark.parametrize("formats", [(), ("float", "int8"), "float"])
def test_invalid_encoding_formats_are_rejected(formats: Any) -> None:
    with pytest.raises(ValueError, match="encoding_formats must be a non-empty subset"):
        EmbeddingServer(dim=DIM, encoding_formats=formats)


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"input": ["a"]}, "model"),
        ({"model": "", "input": ["a"]}, "model"),
        ({"model": 3, "input": ["a"]}, "model"),
        ({"model": "m"}, "input"),
        ({"model": "m", "input": 5}, "input"),
        ({"model": "m", "input": ["a", 1]}, "input"),
        ({"model": "m", "input": [[1, 2, 3]]}, "input"),
        ({"model": "m", "input": []}, "input"),
        ({"model": "m", "input": ["a"], "encoding_format": "int8"}, "encoding_format"),
        ({"model": "m", "input": ["a"], "encoding_format": None}, "encoding_format"),
        ({"model": "m", "input": ["a"], "dimensions": 0}, "dimensions"),
        ({"model": "m", "input": ["a"], "dimensions": DIM + 1}, "dimensions"),
        ({"model": "m", "input": ["a"], "dimensions": "4"}, "dimensions"),
        (["model", "input"], None),
    ],
)
def test_invalid_request_gets_400_naming_the_field(
    server: EmbeddingServer, payload: Any, param: str | None
) -> None:
    reply = post(server, payload)
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert param is None or param in error["message"]


def test_body_that_is_not_json_gets_400(server: EmbeddingServer) -> None:
    reply = httpx.post(f"{server.url}/v1/embeddings", content=b"{nope", timeout=10)
    assert reply.status_code == 400
    assert "not valid JSON" in reply.json()["error"]["message"]


def test_unknown_route_gets_404_and_health_is_ok(server: EmbeddingServer) -> None:
    assert httpx.post(f"{server.url}/v1/chat/completions", json={}, timeout=10).status_code == 404
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200
    assert server.stats.requests == 0  # only /v1/embeddings requests are counted


def test_api_key_is_required_when_configured() -> None:
    with running_embedding_server(dim=DIM, api_key="k") as srv:
        payload = {"model": "m", "input": ["a"]}
        assert post(srv, payload).status_code == 401
        assert post(srv, payload, headers={"Authorization": "Bearer nope"}).status_code == 401
        assert post(srv, payload, headers={"Authorization": "Bearer k"}).status_code == 200


def test_fault_list_applies_in_request_order_then_answers_normally() -> None:
    faults = [Fault.error(503, "warming up", retry_after=2), None, Fault.wrong_count(-1)]
    with running_embedding_server(dim=DIM, faults=faults) as srv:
        replies = [post(srv, {"model": "m", "input": ["a", "b"]}) for _ in range(4)]
    assert [r.status_code for r in replies] == [503, 200, 200, 200]
    assert replies[0].headers["retry-after"] == "2"
    assert replies[0].json()["error"]["message"] == "warming up"
    assert [len(r.json()["data"]) for r in replies[1:]] == [2, 1, 2]


def test_fault_callable_receives_the_request_index(server: EmbeddingServer) -> None:
    seen: list[int] = []

    def plan(index: int) -> Fault | None:
        seen.append(index)
        return Fault.error(500) if index % 2 else None

    server.set_faults(plan)
    codes = [post(server, {"model": "m", "input": ["a"]}).status_code for _ in range(4)]
    assert (seen, codes) == ([0, 1, 2, 3], [200, 500, 200, 500])


def test_reversed_order_fault_keeps_each_index_with_its_vector(server: EmbeddingServer) -> None:
    server.set_faults([Fault.reversed_order()])
    data = post(server, {"model": "m", "input": ["a", "b", "c"]}).json()["data"]
    assert [d["index"] for d in data] == [2, 1, 0]
    assert data[0]["embedding"] == pseudo_embedding("c", DIM).tolist()


def test_dropped_connection_fault_sends_no_reply(server: EmbeddingServer) -> None:
    server.set_faults([Fault.dropped_connection()])
    with pytest.raises(httpx.RemoteProtocolError):
        post(server, {"model": "m", "input": ["a"]})


@pytest.mark.parametrize(
    "kwargs", [{"delay_s": -1.0}, {"delay_s": float("nan")}, {"status": 99}, {"status": 600}]
)
def test_fault_rejects_invalid_values(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        Fault(**kwargs)


def test_stats_count_requests_texts_and_reset(server: EmbeddingServer) -> None:
    post(server, {"model": "m", "input": ["a", "b", "c"]})
    post(server, {"model": "m", "input": "d"})
    post(server, {"model": "m"})  # invalid: counted as a request, no texts
    assert server.stats.requests == 3
    assert server.stats.texts == 4
    assert server.stats.max_in_flight == 1
    server.reset_stats()
    assert (server.stats.requests, server.stats.texts, server.stats.max_in_flight) == (0, 0, 0)


def test_stop_cuts_an_injected_delay_short() -> None:
    srv = EmbeddingServer(dim=DIM, faults=lambda i: Fault.delay(30.0)).start()
    errors: list[Exception] = []

    def call() -> None:
        try:
            post(srv, {"model": "m", "input": ["a"]})
        except httpx.HTTPError as e:
            errors.append(e)

    caller = threading.Thread(target=call)
    caller.start()
    while srv.stats.requests == 0:
        time.sleep(0.01)
    start = time.monotonic()
    srv.stop()
    caller.join(timeout=30)
    assert time.monotonic() - start < 10  # the delay is 30 s; slack for a loaded machine
    assert not caller.is_alive() and len(errors) == 1


def test_invalid_dim_is_rejected() -> None:
    with pytest.raises(ValueError, match="dim must be an integer >= 1, got 0"):
        EmbeddingServer(dim=0)


# Hang guards for a loaded machine (a busy `make test`): the server starts in well under a second
# and exits at once on a stop signal, so these bounds are never approached when things work.
START_TIMEOUT_S = 60.0
EXIT_TIMEOUT_S = 60.0


def _ignore_stop_signals() -> None:
    # What a child of `make test &` in a non-interactive shell (or of a runner doing this) gets.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _block_stop_signals() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})


_INHERITED = {"default": None, "ignored": _ignore_stop_signals, "blocked": _block_stop_signals}


def _first_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """The process's first stdout line (its readiness banner), waiting at most ``timeout_s``."""
    assert proc.stdout is not None
    stdout = proc.stdout
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not lines:
        raise AssertionError(f"the server printed no line within {timeout_s:g} s")
    return lines[0]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("inherited", list(_INHERITED))
def test_module_runs_the_server_in_the_foreground(signum: signal.Signals, inherited: str) -> None:
    """Ctrl-C (SIGINT) and SIGTERM stop it cleanly (exit 0), also when the parent left the
    signals ignored or blocked: a child inherits both, and the server would never stop."""
    src = str(Path(sarl.__file__).resolve().parents[1])
    path = [str(REPO_ROOT), src, os.environ.get("PYTHONPATH", "")]  # the server lives in tests/
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    command = [sys.executable, "-m", "tests.support.embedding_server", "--port", "0", "--dim", "4"]
    pre = _INHERITED[inherited]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env, preexec_fn=pre)
    try:
        # The banner is printed once the stop signals are caught; the socket already accepts.
        match = re.search(r"(http://\S+)/v1/embeddings", _first_line(proc, START_TIMEOUT_S))
        assert match, "the server should print its URL"
        reply = httpx.post(
            f"{match.group(1)}/v1/embeddings",
            json={"model": "m", "input": ["a"]},
            timeout=START_TIMEOUT_S,
        )
        assert len(json.loads(reply.text)["data"][0]["embedding"]) == 4
        proc.send_signal(signum)
        assert proc.wait(timeout=EXIT_TIMEOUT_S) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_burst_of_connections_is_queued_not_dropped() -> None:
    """The listen backlog holds a burst of clients while the server is busy: 64 connects
    complete before anything is accepted (socketserver's default backlog of 5 left the rest
    waiting on SYN retransmits, ~1 s each; the 5 s connect timeout is only a hang guard)."""
    import socket

    server = EmbeddingServer(dim=DIM)  # bound and listening, not accepting yet
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    clients = []
    try:
        for _ in range(64):
            clients.append(socket.create_connection((host, int(port)), timeout=5))
    finally:
        for sock in clients:
            sock.close()
        server.stop()
    assert len(clients) == 64
