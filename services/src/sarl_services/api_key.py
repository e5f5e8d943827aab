"""API-key authentication of sarl's services: ``Authorization: Bearer <key>`` on every route but
the probes'.

Used by :func:`sarl_services.server.serve` (both services) with the key the CLI reads from
:data:`API_KEY_ENV` in ``main()`` (:func:`api_key_from_env`); the operator gives a tenant's
served models its key from the Secret ``sarl-tenant`` (``sarl_operator.served_models``), and
sarl's clients send it (``sarl.http.serving_auth``). No key set: the service is open, as before.

The routes left open are those a probe calls without credentials: Kubernetes' liveness and
readiness probes (``/v2/health/live``, ``/v1/models/<name>``: charts/sarl-inference), the
container HEALTHCHECK (``/v2/models``, ``/v2/models/<name>/ready``:
:mod:`sarl_services.healthcheck`), KServe's server readiness and Prometheus' ``/metrics``
(counters, no request content). A refused request gets 401 with the services' JSON error body
and ``WWW-Authenticate: Bearer`` (RFC 6750 section 3), never an echo of what was sent; keys are
compared with :func:`hmac.compare_digest` (no timing oracle).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Final

from starlette.routing import compile_path
from starlette.types import ASGIApp, Receive, Scope, Send

from sarl_services.errors import ServiceError, error_response

#: Where the services read their key (the tenant Secret's key of the same name).
API_KEY_ENV: Final = "SARL_SERVING_API_KEY"
#: ``GET`` routes open without a key: probes and metrics (module docstring).
OPEN_ROUTES: Final = (
    "/v2/health/live",
    "/v2/health/ready",
    "/v1/models/{model_name}",
    "/v2/models",
    "/v2/models/{model_name}/ready",
    "/metrics",
)
_BEARER: Final = "bearer "


class Unauthorized(ServiceError):
    """401: the services require a key (``SARL_SERVING_API_KEY``) and the request's
    ``Authorization: Bearer`` token is missing or wrong; probes, model listings and /metrics
    need none."""

    status = 401
    kind = "authentication_error"


def api_key_from_env(environ: Mapping[str, str]) -> str:
    """The services' key from :data:`API_KEY_ENV`, stripped; empty: no key required."""
    return environ.get(API_KEY_ENV, "").strip()


def bearer_token(header: bytes | None) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header value (scheme case-insensitive,
    RFC 6750 section 2.1); None when absent or another scheme."""
    if not header or header[: len(_BEARER)].lower() != _BEARER.encode():
        return None
    return header[len(_BEARER) :].strip()


class ApiKeyRequired:
    """ASGI middleware: 401 unless the request carries the key, except on :data:`OPEN_ROUTES`."""

    def __init__(self, app: ASGIApp, *, key: str) -> None:
        if not key:
            raise ValueError(f"{API_KEY_ENV} is empty: no key to require")
        self.app = app
        self._key = key.encode()
        self._open = [compile_path(path)[0] for path in OPEN_ROUTES]

    def _is_open(self, method: str, path: str) -> bool:
        return method in ("GET", "HEAD") and any(rx.match(path) for rx in self._open)

    def _authorized(self, scope: Scope) -> bool:
        headers = dict(scope.get("headers") or [])
        token = bearer_token(headers.get(b"authorization"))
        return token is not None and hmac.compare_digest(token, self._key)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._is_open(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        if not self._authorized(scope):
            refused = Unauthorized(
                f"missing or wrong API key: send 'Authorization: Bearer <key>' with the key "
                f"in {API_KEY_ENV} of the Secret sarl-tenant",
                headers={"WWW-Authenticate": "Bearer"},
            )
            await error_response(refused)(scope, receive, send)
            return
        await self.app(scope, receive, send)
