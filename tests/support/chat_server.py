"""A small, real OpenAI-compatible ``/v1/chat/completions`` server on loopback, scripted replies.

Used by the tests of judge-based rewards (``structured_qa``, ``rlkd``), the CLI's and the reward
service's tests, wherever no chat model server (vLLM, KServe, a hosted API) is around. It speaks
the OpenAI wire format, so the client under test does real HTTP, JSON and connection handling;
only the replies are recorded.

A *script* says how to answer each request: a list (valid request ``i`` gets item ``i``) or a
callable ``ChatRequest -> reply`` (for concurrent clients, whose arrival order is not fixed, key
the reply on the request's content). A reply is a plain string (the assistant's message content
in a normal 200 completion) or a :class:`ChatReply` (error status, raw body such as malformed
JSON, delay for timeouts, dropped connection). A request with no scripted reply gets HTTP 500
naming its index. Every valid request is recorded (:attr:`ChatServer.requests`).

Run it in the foreground, from the repository root, with
``python -m tests.support.chat_server --port 8000 --reply '{...}'``
(every request then gets that content).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from tests.support.http_server import (
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

_MAX_BODY_BYTES = 16 * 1024 * 1024
_ROUTE = "/v1/chat/completions"


@dataclass(frozen=True)
class ChatRequest:
    """One valid request as received: its index among valid requests and its parsed body."""

    index: int
    model: str
    messages: tuple[Mapping[str, Any], ...]
    body: Mapping[str, Any]

    @property
    def text(self) -> str:
        """All message contents joined by newlines (handy for keying replies on the prompt)."""
        return "\n".join(str(m.get("content", "")) for m in self.messages)


@dataclass(frozen=True)
class ChatReply:
    """How the server answers one request; ``ChatReply("...")`` is a normal completion.

    ``delay_s`` is waited first, then: ``disconnect`` drops the connection without a reply;
    ``body`` (any ``status``) or a ``status`` other than 200 (an OpenAI error object) is sent as
    is; otherwise a completion whose message content is ``content``.
    """

    content: str = ""
    status: int = 200
    body: str | None = None
    delay_s: float = 0.0
    disconnect: bool = False
    headers: tuple[tuple[str, str], ...] = ()
    finish_reason: str = "stop"

    def __post_init__(self) -> None:
        check_reply_fields(self.delay_s, self.status)

    @classmethod
    def error(cls, status: int, message: str = "", retry_after: float | None = None) -> ChatReply:
        """An OpenAI-style error reply, optionally with a ``Retry-After`` header."""
        headers = retry_after_headers(retry_after)
        text = message or f"scripted HTTP {status}"
        return cls(status=status, body=error_json(text, "server_error"), headers=headers)

    @classmethod
    def raw(cls, body: str, status: int = 200) -> ChatReply:
        """Send ``body`` verbatim (e.g. a truncated or non-JSON envelope)."""
        return cls(status=status, body=body)

    @classmethod
    def delayed(cls, seconds: float, content: str = "") -> ChatReply:
        """A normal completion after ``seconds`` (longer than a client timeout: a hang)."""
        return cls(content=content, delay_s=seconds)

    @classmethod
    def dropped(cls) -> ChatReply:
        """Close the connection without answering."""
        return cls(disconnect=True)


Reply = ChatReply | str
Script = Sequence[Reply] | Callable[[ChatRequest], Reply | None]


@dataclass(frozen=True)
class ChatServerStats:
    """What a :class:`ChatServer` has seen (see :attr:`ChatServer.stats`)."""

    requests: int  # valid chat-completion requests received
    max_in_flight: int  # most of them being handled at the same time


def _parse_request(body: bytes) -> tuple[str, tuple[Mapping[str, Any], ...], dict[str, Any]]:
    """Validate a chat-completions body; return ``(model, messages, payload)``."""
    payload, model = parse_model_request(body)
    messages = payload.get("messages")
    valid = isinstance(messages, list) and messages
    if not valid or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m
        for m in cast(list[Any], messages)
    ):
        raise BadRequest(400, "'messages' must be a non-empty list of {role, content} objects")
    return model, tuple(cast(list[dict[str, Any]], messages)), payload


class _Handler(LoopbackHandler):
    server_version = "sarl-chat-server/0.1"
    models: ClassVar[dict[str, Any]] = {"object": "list", "data": [{"id": "scripted"}]}

    @property
    def _app(self) -> ChatServer:
        return cast(ChatServer, self.loopback)

    def do_POST(self) -> None:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit() or int(length) > _MAX_BODY_BYTES:
            self.close_connection = True
            self.send_json(411, error_json("a Content-Length up to 16 MiB is required", "invalid"))
            return
        body = self.rfile.read(int(length))
        if self.route != _ROUTE:
            self.send_not_found()
            return
        app = self._app
        try:
            self.check_auth(app.api_key)
            model, messages, payload = _parse_request(body)
        except BadRequest as e:
            self.send_json(e.status, error_json(e.message, e.kind))
            return
        request, reply = app._begin(model, messages, payload)
        try:
            self._answer(request, reply)
        finally:
            app._request_finished()

    def _answer(self, request: ChatRequest, reply: ChatReply) -> None:
        if self.send_scripted(reply, f"scripted HTTP {reply.status}"):
            return
        self.send_json(200, json.dumps(_completion(request, reply)), reply.headers)


def _completion(request: ChatRequest, reply: ChatReply) -> dict[str, Any]:
    prompt_tokens = sum(len(str(m.get("content", "")).split()) for m in request.messages)
    completion_tokens = len(reply.content.split())  # a rough stand-in for a tokenizer
    return {
        "id": f"chatcmpl-{time.monotonic_ns():x}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.content},
                "finish_reason": reply.finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class ChatServer(LoopbackServer):
    """An OpenAI-compatible chat server bound to ``host:port`` (``port=0``: a free port).

    The socket is bound on construction; :meth:`start` serves on a background thread and
    :meth:`stop` shuts down, cutting delays short and closing open connections. ``api_key``, when
    set, is required as ``Authorization: Bearer <key>`` (401 otherwise).
    """

    def __init__(
        self,
        *,
        script: Script | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
    ) -> None:
        self.api_key = api_key
        self._script = script
        self._requests: list[ChatRequest] = []
        super().__init__(host=host, port=port, handler=_Handler, name="chat-server")

    @property
    def requests(self) -> list[ChatRequest]:
        """The valid requests received so far, in arrival order (a copy)."""
        with self._lock:
            return list(self._requests)

    @property
    def stats(self) -> ChatServerStats:
        with self._lock:
            return ChatServerStats(len(self._requests), self._max_in_flight)

    def set_script(self, script: Script | None) -> None:
        """Replace the script and forget past requests: the next valid request is index 0."""
        with self._lock:
            self._script = script
            self._requests.clear()
            self._max_in_flight = 0

    def _begin(
        self, model: str, messages: tuple[Mapping[str, Any], ...], payload: dict[str, Any]
    ) -> tuple[ChatRequest, ChatReply]:
        with self._lock:
            request = ChatRequest(len(self._requests), model, messages, payload)
            self._requests.append(request)
            self._request_started()
            script = self._script
        # A callable script runs outside the lock: it may be slow or look at server.requests.
        reply = _scripted(script, request)
        if reply is None:
            return request, ChatReply.error(500, f"no scripted reply for request {request.index}")
        return request, ChatReply(content=reply) if isinstance(reply, str) else reply


def _scripted(script: Script | None, request: ChatRequest) -> Reply | None:
    if script is None:
        return None
    if callable(script):
        return script(request)
    return script[request.index] if request.index < len(script) else None


@contextlib.contextmanager
def running_chat_server(
    script: Script | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
) -> Iterator[ChatServer]:
    """Start a :class:`ChatServer` on a background thread; stop it on exit."""
    with ChatServer(script=script, host=host, port=port, api_key=api_key) as server:
        yield server


def main(argv: Sequence[str] | None = None) -> int:
    """Serve in the foreground: ``python -m tests.support.chat_server --port 8000 --reply TEXT``."""
    parser = server_arg_parser(
        "python -m tests.support.chat_server",
        "OpenAI-compatible /v1/chat/completions server that answers with fixed text.",
        default_port=8000,
    )
    parser.add_argument("--reply", default="{}", help="message content of every reply")
    parser.add_argument("--api-key", default=None, help="require this Bearer token")
    args = parser.parse_args(argv)
    reply: str = args.reply
    return serve_in_foreground(
        parser,
        lambda: ChatServer(
            script=lambda _request: reply, host=args.host, port=args.port, api_key=args.api_key
        ),
        lambda server: f"serving {server.url}{_ROUTE}; Ctrl-C stops",
    )


if __name__ == "__main__":
    raise SystemExit(main())
