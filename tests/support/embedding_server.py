"""A small, real OpenAI-compatible ``/v1/embeddings`` server on loopback, with fault injection.

Used by the embedding-client, CLI and reward-service tests and the embedding benchmark, wherever
no model server (vLLM, KServe's Hugging Face runtime) is around. It speaks the same wire format
as vLLM, so the client under test does real HTTP, JSON and connection handling; only the vectors
are fake: each text maps to a deterministic pseudo-embedding (:func:`pseudo_embedding`), so any
two servers agree and tests can compute the expected vectors themselves. Like OpenAI and vLLM it
answers ``encoding_format: "float"`` (the default: JSON numbers) and ``"base64"`` (each vector's
little-endian float32 bytes, base64-encoded); both carry exactly the same float32 values.

Tests script per-request behaviour with :class:`Fault` values (error status, delay, malformed
body, wrong count, dropped connection), given as a list (request ``i`` gets item ``i``) or a
callable ``request_index -> Fault | None``.

Run it in the foreground, from the repository root, with
``python -m tests.support.embedding_server --port 8080 --dim 384``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import numpy as np
import numpy.typing as npt

from tests.support.http_server import (
    JSON_CONTENT_TYPE,
    BadRequest,
    LoopbackHandler,
    LoopbackServer,
    check_reply_fields,
    error_json,
    parse_model_request,
    retry_after_headers,
    serve_in_foreground,
    server_arg_parser,
)

DEFAULT_DIM = 384
# Large enough for thousands of long steps per request, small enough to refuse runaway uploads.
_MAX_BODY_BYTES = 64 * 1024 * 1024
ENCODING_FORMATS = ("float", "base64")


def pseudo_embedding(text: str, dim: int = DEFAULT_DIM) -> npt.NDArray[np.float32]:
    """Return the server's deterministic ``(dim,)`` vector for ``text``.

    Seeded by the first 8 bytes of ``sha256(text)``, so it is stable across processes and runs.
    Deliberately *not* unit-norm (entries are standard normal): clients must normalise.
    """
    seed = int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")
    return np.random.default_rng(seed).standard_normal(dim).astype(np.float32)  # (dim,)


@dataclass(frozen=True)
class Fault:
    """How the server answers one request; the default ``Fault()`` answers normally.

    ``delay_s`` is waited first (after reading the request), then: ``disconnect`` drops the
    connection without a reply; ``body`` (or a ``status`` other than 200) replies verbatim;
    otherwise the normal reply is sent with ``count_delta`` items dropped (< 0) or added (> 0)
    and, with ``reverse``, the ``data`` list in reverse order (indices stay correct).
    """

    delay_s: float = 0.0
    status: int = 200
    body: str | None = None
    content_type: str = JSON_CONTENT_TYPE
    headers: tuple[tuple[str, str], ...] = ()
    count_delta: int = 0
    reverse: bool = False
    disconnect: bool = False

    def __post_init__(self) -> None:
        check_reply_fields(self.delay_s, self.status)

    @classmethod
    def delay(cls, seconds: float) -> Fault:
        """Answer normally, but only after ``seconds``."""
        return cls(delay_s=seconds)

    @classmethod
    def error(
        cls,
        status: int,
        message: str = "injected fault",
        *,
        retry_after: float | None = None,
        plain_text: bool = False,
    ) -> Fault:
        """Reply ``status`` with an OpenAI-shaped error (or ``message`` as plain text)."""
        headers = retry_after_headers(retry_after)
        if plain_text:
            return cls(status=status, body=message, content_type="text/plain", headers=headers)
        return cls(status=status, body=error_json(message, "server_error"), headers=headers)

    @classmethod
    def raw(cls, body: str, status: int = 200) -> Fault:
        """Reply ``status`` with ``body`` verbatim (e.g. a hand-made bad 200 response)."""
        return cls(status=status, body=body)

    @classmethod
    def malformed(cls) -> Fault:
        """Reply 200 with truncated JSON, as a proxy cutting the body short would."""
        return cls(body='{"object": "list", "data": [{"object": "embedding", "index": 0, ')

    @classmethod
    def wrong_count(cls, delta: int = -1) -> Fault:
        """Reply 200 with ``delta`` embeddings too many (> 0) or too few (< 0)."""
        return cls(count_delta=delta)

    @classmethod
    def reversed_order(cls) -> Fault:
        """Reply normally but list ``data`` in reverse order (each item keeps its ``index``)."""
        return cls(reverse=True)

    @classmethod
    def dropped_connection(cls) -> Fault:
        """Close the connection without sending any reply."""
        return cls(disconnect=True)


# Request ``i`` (0-based, counting POSTs to /v1/embeddings) gets ``plan[i]`` or ``plan(i)``;
# ``None`` or running off the end of the list means "answer normally".
FaultPlan = Sequence[Fault | None] | Callable[[int], Fault | None]


@dataclass(frozen=True)
class ServerStats:
    """A snapshot of what the server has seen since start (or the last ``reset_stats``)."""

    requests: int  # POST /v1/embeddings requests received, faulted and invalid ones included
    texts: int  # input strings in requests that were answered with embeddings
    max_in_flight: int  # most requests being handled at the same time
    base64_requests: int = 0  # requests answered with base64 embeddings (the rest: floats)


def _invalid(message: str, param: str | None) -> BadRequest:
    return BadRequest(400, message, param=param)


@dataclass(frozen=True)
class _Request:
    model: str
    inputs: list[str]
    dimensions: int | None
    encoding_format: str  # one of ENCODING_FORMATS


def _parse_request(body: bytes, dim: int, formats: tuple[str, ...]) -> _Request:
    """Validate an embeddings request body; ``formats`` are the encoding formats served."""
    payload, model = parse_model_request(body)
    raw_input = payload.get("input")
    inputs = [raw_input] if isinstance(raw_input, str) else raw_input
    # Token-id arrays are valid OpenAI input, but nothing in sarl sends them; refuse clearly.
    if not isinstance(inputs, list) or not all(isinstance(t, str) for t in inputs):
        raise _invalid("'input' is required and must be a string or a list of strings", "input")
    if not inputs:
        raise _invalid("'input' must not be an empty list", "input")
    encoding_format = payload.get("encoding_format", "float")
    if encoding_format not in formats:  # as OpenAI: no null, no other formats
        allowed = " or ".join(repr(f) for f in formats)
        raise _invalid(f"'encoding_format' must be {allowed}", "encoding_format")
    dims = payload.get("dimensions")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int)):
        raise _invalid("'dimensions' must be an integer", "dimensions")
    if dims is not None and not 1 <= dims <= dim:
        raise _invalid(f"'dimensions' must be between 1 and {dim}, got {dims}", "dimensions")
    return _Request(model, inputs, dims, encoding_format)


class _Handler(LoopbackHandler):
    server_version = "sarl-embedding-server/0.1"
    models: ClassVar[dict[str, Any]] = {
        "object": "list",
        "data": [{"id": "sarl-pseudo-embedding", "object": "model"}],
    }

    @property
    def _app(self) -> EmbeddingServer:
        return cast(EmbeddingServer, self.loopback)

    def do_POST(self) -> None:
        body = self._read_body()
        if body is None:
            return
        if self.route != "/v1/embeddings":
            self.send_not_found()
            return
        fault = self._app._begin_request()
        try:
            self._answer(body, fault)
        finally:
            self._app._request_finished()

    def _read_body(self) -> bytes | None:
        length_header = self.headers.get("Content-Length")
        if length_header is None or not length_header.isdigit():
            self.close_connection = True
            self.send_json(411, error_json("Content-Length required", "invalid_request_error"))
            return None
        length = int(length_header)
        if length > _MAX_BODY_BYTES:
            self.close_connection = True
            message = f"request body over {_MAX_BODY_BYTES} bytes"
            self.send_json(413, error_json(message, "invalid_request_error"))
            return None
        return self.rfile.read(length)

    def _answer(self, body: bytes, fault: Fault) -> None:
        if self.send_scripted(fault, f"injected fault: HTTP {fault.status}", fault.content_type):
            return
        app = self._app
        try:
            self.check_auth(app.api_key)
            request = _parse_request(body, app.dim, app.encoding_formats)
        except BadRequest as e:
            self.send_json(e.status, error_json(e.message, e.kind, e.param, e.status))
            return
        self.send_json(200, json.dumps(app._respond(request, fault)))


class EmbeddingServer(LoopbackServer):
    """An OpenAI-compatible embedding server bound to ``host:port`` (``port=0``: a free port).

    The socket is bound on construction; :meth:`start` serves on a background thread and
    :meth:`stop` shuts down, cutting injected delays short and closing open connections.
    ``api_key``, when set, is required as ``Authorization: Bearer <key>`` (401 otherwise),
    as with vLLM's ``--api-key``. ``encoding_formats`` are the formats it serves (both by
    default); ``("float",)`` plays an older server that refuses base64 with a 400.
    """

    def __init__(
        self,
        *,
        dim: int = DEFAULT_DIM,
        host: str = "127.0.0.1",
        port: int = 0,
        faults: FaultPlan | None = None,
        api_key: str | None = None,
        encoding_formats: Sequence[str] = ENCODING_FORMATS,
    ) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
        formats = tuple(encoding_formats)
        if not formats or not set(formats) <= set(ENCODING_FORMATS):
            raise ValueError(
                f"encoding_formats must be a non-empty subset of {ENCODING_FORMATS}, "
                f"got {encoding_formats!r}"
            )
        self.dim = dim
        self.api_key = api_key
        self.encoding_formats = formats
        self._faults = faults
        self._requests = self._texts = self._base64_requests = 0
        super().__init__(host=host, port=port, handler=_Handler, name="embedding-server")

    @property
    def stats(self) -> ServerStats:
        """What the server has seen so far."""
        with self._lock:
            return ServerStats(
                self._requests, self._texts, self._max_in_flight, self._base64_requests
            )

    def reset_stats(self) -> None:
        """Zero the counters (fault plans keep counting from the new request 0)."""
        with self._lock:
            self._requests = self._texts = self._max_in_flight = self._base64_requests = 0

    def set_faults(self, faults: FaultPlan | None) -> None:
        """Replace the fault plan; it applies from the next request on."""
        with self._lock:
            self._faults = faults

    def _begin_request(self) -> Fault:
        with self._lock:
            index = self._requests
            self._requests += 1
            self._request_started()
            plan = self._faults
        if plan is None:
            return Fault()
        if callable(plan):
            return plan(index) or Fault()
        return (plan[index] if index < len(plan) else None) or Fault()

    def _respond(self, request: _Request, fault: Fault) -> dict[str, Any]:
        """Build vLLM's response body for the request (the real per-text work happens here)."""
        inputs = request.inputs
        width = request.dimensions or self.dim
        vectors = np.empty((len(inputs), width), dtype="<f4")  # (n, width), little-endian
        for i, text in enumerate(inputs):
            vectors[i] = pseudo_embedding(text, self.dim)[:width]
        data = [
            {"object": "embedding", "index": i, "embedding": embedding}
            for i, embedding in enumerate(_encode(vectors, request.encoding_format))
        ]
        with self._lock:
            self._texts += len(inputs)
            self._base64_requests += request.encoding_format == "base64"
        if fault.count_delta < 0:
            data = data[: max(0, len(data) + fault.count_delta)]
        for extra in range(fault.count_delta):
            data.append({**data[-1], "index": len(inputs) + extra})
        if fault.reverse:
            data.reverse()
        tokens = sum(len(t.split()) for t in inputs)  # a rough stand-in for a tokenizer
        return {
            "id": f"embd-{time.monotonic_ns():x}",
            "object": "list",
            "created": int(time.time()),
            "model": request.model,
            "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }


def _encode(vectors: npt.NDArray[np.float32], encoding_format: str) -> list[Any]:
    """Each row of ``vectors`` (n, width) as OpenAI sends it: a list of numbers or base64 text.

    The float form is every float32 value as the shortest decimal of the equal double
    (``tolist``), so a client parsing either form gets the same float32 numbers.
    """
    if encoding_format == "base64":
        return [base64.b64encode(row.tobytes()).decode("ascii") for row in vectors]
    rows: list[Any] = vectors.tolist()  # (n, width) Python floats
    return rows


@contextlib.contextmanager
def running_embedding_server(
    *,
    dim: int = DEFAULT_DIM,
    host: str = "127.0.0.1",
    port: int = 0,
    faults: FaultPlan | None = None,
    api_key: str | None = None,
    encoding_formats: Sequence[str] = ENCODING_FORMATS,
) -> Iterator[EmbeddingServer]:
    """Start an :class:`EmbeddingServer` on a background thread; stop it on exit."""
    with EmbeddingServer(
        dim=dim,
        host=host,
        port=port,
        faults=faults,
        api_key=api_key,
        encoding_formats=encoding_formats,
    ) as server:
        yield server


def main(argv: Sequence[str] | None = None) -> int:
    """Run the server in the foreground (from the repository root):
    ``python -m tests.support.embedding_server --port 8080``."""
    parser = server_arg_parser(
        "python -m tests.support.embedding_server",
        "OpenAI-compatible /v1/embeddings server with deterministic pseudo-embeddings.",
        default_port=8080,
    )
    parser.add_argument("--dim", type=int, default=DEFAULT_DIM, help="embedding dimension")
    parser.add_argument("--api-key", default=None, help="require this Bearer token")
    args = parser.parse_args(argv)
    return serve_in_foreground(
        parser,
        lambda: EmbeddingServer(dim=args.dim, host=args.host, port=args.port, api_key=args.api_key),
        lambda server: f"serving {server.url}/v1/embeddings (dim={server.dim}); Ctrl-C stops",
        errors=(ValueError, OSError),
    )


if __name__ == "__main__":
    raise SystemExit(main())
