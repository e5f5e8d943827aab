"""HTTP errors of the services and the one place where exceptions become HTTP status codes.

Used by the embedding server and the reward service: handlers raise a :class:`ServiceError`
subclass (or let a domain exception escape), and the route class :func:`service_route` builds
for both services' routers turns whatever escapes into an OpenAI-style error body
``{"error": {"message", "type", "param", "code"}}`` via :func:`to_service_error`. The sdk's
embedding client reads ``error.message`` from exactly this shape.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import orjson
from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.requests import ClientDisconnect

from sarl.embedding.base import EmbeddingError
from sarl.rewards.registry import RewardConfigError
from sarl.rewards.structure.requests import RequestError

_LOG = logging.getLogger(__name__)

#: Key in a request's ASGI ``scope["state"]`` that :mod:`sarl_services.connections` sets when the
#: body did not arrive within ``--body-timeout-s``: the route answers 408, not 499.
BODY_TIMED_OUT = "sarl.body_timed_out"


class ServiceError(Exception):
    """An error with an HTTP status; ``param`` names the offending request field, if any."""

    status = 500
    kind = "internal_error"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers = dict(headers or {})


class BadRequest(ServiceError):
    """400: the body or a field of it is invalid (not JSON, a wrong type, a value out of range);
    ``param`` names the field."""

    status = 400
    kind = "invalid_request_error"


class NotFound(ServiceError):
    """404: no such route, model or reward; the message says what exists."""

    status = 404
    kind = "not_found_error"


class PayloadTooLarge(ServiceError):
    """413: over a size limit (body bytes, items, group size, expected work); the message names
    the limit and its option."""

    status = 413
    kind = "request_too_large"


class Unavailable(ServiceError):
    """503: not ready yet, or overloaded. Clients should retry after ``Retry-After`` seconds."""

    status = 503

    def __init__(self, message: str, *, kind: str, retry_after_s: int) -> None:
        super().__init__(message, headers={"Retry-After": str(retry_after_s)})
        self.kind = kind


class ClientClosed(ServiceError):
    """The client closed the connection before the answer was ready; its work was stopped.
    Nobody reads the response; the status (nginx's 499) is for the metrics and the log."""

    status = 499
    kind = "client_closed_request"


class RequestTimeout(ServiceError):
    """408: the body did not arrive within ``--body-timeout-s``; the connection was closed."""

    status = 408
    kind = "request_timeout"


class UpstreamError(ServiceError):
    """502: a backend this service depends on (the embedding endpoint) failed."""

    status = 502
    kind = "upstream_error"


def not_ready(what: str) -> Unavailable:
    return Unavailable(f"{what} is still loading; retry shortly", kind="not_ready", retry_after_s=2)


def shutting_down() -> Unavailable:
    """503 for a request still running when the server's shutdown grace period ended."""
    error = Unavailable(
        "the server is shutting down and stopped this request; retry it (another replica, or "
        "this one once restarted)",
        kind="shutting_down",
        retry_after_s=1,
    )
    error.headers["Connection"] = "close"
    return error


def _stopped_by_shutdown() -> bool:
    """Whether the CancelledError being handled was the one cancellation of this request's
    task, which only uvicorn's shutdown does (``uvicorn/server.py`` 0.54, ``Server.shutdown``:
    tasks still running when ``timeout_graceful_shutdown`` ends are cancelled); undone here so
    the route can still answer."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() == 1 and task.uncancel() == 0


def to_service_error(exc: BaseException) -> ServiceError:
    """Map any exception to the HTTP error it means (the only such mapping in the services)."""
    if isinstance(exc, ServiceError):
        return exc
    if isinstance(exc, ClientDisconnect):  # the client left while its body was being read
        return ClientClosed("the client closed the connection before sending its whole body")
    if isinstance(exc, EmbeddingError):
        return UpstreamError(f"embedding failed: {exc}")
    if isinstance(exc, RewardConfigError | RequestError):
        return BadRequest(str(exc))
    return ServiceError(f"internal error ({type(exc).__name__}); see the server log")


def error_response(error: ServiceError) -> Response:
    body = {
        "error": {
            "message": error.message,
            "type": error.kind,
            "param": error.param,
            "code": error.status,
        }
    }
    return Response(
        orjson.dumps(body),
        status_code=error.status,
        headers=error.headers,
        media_type="application/json",
    )


Endpoint = Callable[[Request], Coroutine[Any, Any, Response]]
#: Called once per request with (request, HTTP status, error type or None, seconds taken).
Observer = Callable[[Request, int, str | None, float], None]


def service_route(observe: Observer | None = None) -> type[APIRoute]:
    """An APIRoute class whose handler renders every escaping exception with
    :func:`error_response` and then reports the outcome to ``observe`` (metrics).

    Doing it per route rather than with ``app.add_exception_handler(Exception, ...)`` leaves
    KServe's own routes and handlers (registered on the same app) untouched.
    """

    class ServiceRoute(APIRoute):
        def get_route_handler(self) -> Endpoint:
            handler = super().get_route_handler()

            async def handle(request: Request) -> Response:
                start = time.perf_counter()
                kind: str | None = None
                try:
                    response = await handler(request)
                except asyncio.CancelledError:
                    # Without this the cancellation reached uvicorn, which logged a traceback
                    # and wrote a 500: a clean 503 + Retry-After tells the client to retry.
                    if not _stopped_by_shutdown():
                        raise
                    stopped = shutting_down()
                    kind, response = stopped.kind, error_response(stopped)
                except Exception as e:
                    error = to_service_error(e)
                    if isinstance(error, ClientClosed):  # counted (499 / 408), never logged
                        if request.scope.get("state", {}).get(BODY_TIMED_OUT):
                            error = RequestTimeout("the request body did not arrive in time")
                    elif error is not e:  # unexpected: keep the traceback in the log
                        _LOG.exception("%s %s failed", request.method, request.url.path)
                    kind = error.kind
                    response = error_response(error)
                if observe is not None:
                    observe(request, response.status_code, kind, time.perf_counter() - start)
                return response

            return handle

    return ServiceRoute
