"""Which HTTP routes a service answers, and a liveness route that notices a model gone unready.

Used by :func:`sarl_services.server.serve` for both services. Besides health, readiness and
metrics, KServe's ModelServer registers routes that bypass the services' limits or let anyone
change their state: the model repository's ``POST /v2/repository/models/<name>/load`` and
``/unload`` (unauthenticated: one POST made every later request 503 while liveness stayed
200, so Kubernetes never restarted the pod), V1 ``:predict`` / ``:explain`` and V2 ``/infer``
(the body read whole, without the size or count limits: 20 MiB took 78 s and 3.3 GB),
server and model metadata, and FastAPI's ``/openapi.json``. :class:`ExposedRoutesOnly` answers
404 to any request whose route is neither the service's own nor in :data:`KSERVE_ROUTES`,
before a byte of its body is read. Deny by default: a route a later KServe adds stays closed
until someone decides it may be open.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import kserve
from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from sarl_services.errors import NotFound, error_response

#: KServe's routes both services keep (all ``GET``): they take no body and change nothing.
KSERVE_ROUTES = (
    "/v2/health/live",  # liveness (the services' own version, below)
    "/v2/health/ready",  # server readiness
    "/v1/models",  # names of the served models
    "/v1/models/{model_name}",  # model readiness: the Kubernetes readiness probe
    "/v2/models",  # names of the served models (the container HEALTHCHECK)
    "/v2/models/{model_name}/ready",  # model readiness
    "/metrics",  # Prometheus
)

#: A route as registered: path template and methods.
Exposed = tuple[str, frozenset[str]]


def exposed_routes(service_routes: APIRouter) -> list[Exposed]:
    """The routes a service answers: its own and :data:`KSERVE_ROUTES`."""
    own = [
        (r.path, frozenset(r.methods or ()))
        for r in service_routes.routes
        if isinstance(r, APIRoute)
    ]
    return own + [(path, frozenset({"GET"})) for path in KSERVE_ROUTES]


class ExposedRoutesOnly:
    """ASGI middleware: 404 unless the request's method and path match an exposed route.

    Paths are matched with the templates the routes were registered with, compiled the way
    Starlette compiles them, so a request passes exactly when one of those routes could take
    it (``HEAD`` goes with ``GET``, as in Starlette). The services run without a root path.
    """

    def __init__(self, app: ASGIApp, *, routes: Iterable[Exposed]) -> None:
        self.app = app
        self._routes = [(compile_path(path)[0], methods) for path, methods in routes]

    def _exposed(self, method: str, path: str) -> bool:
        if method == "HEAD":
            method = "GET"
        return any(method in methods and rx.match(path) for rx, methods in self._routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._exposed(scope["method"], scope["path"]):
            refused = NotFound(f"{scope['method']} {scope['path']}: this service has no such route")
            await error_response(refused)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def liveness_router(model: kserve.Model, loaded: threading.Event) -> APIRouter:
    """``GET /v2/health/live``: 200 while loading and while ready; 503 once the model is not
    ready after having loaded, so the liveness probe fails and Kubernetes restarts the pod
    (KServe's own answers 200 whatever the model's state)."""

    async def live() -> Response:
        if loaded.is_set() and not model.ready:
            body = {"status": "dead", "reason": f"model {model.name!r} is no longer ready"}
            return JSONResponse(body, status_code=503)
        return JSONResponse({"status": "alive"})

    router = APIRouter()
    router.add_api_route("/v2/health/live", live, methods=["GET"])
    return router
