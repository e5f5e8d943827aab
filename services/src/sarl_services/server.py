"""Run one ``kserve.Model`` plus sarl's routes on the KServe ModelServer (single worker, no gRPC).

Called by the ``sarl serve`` commands after they parsed their settings; import it only after
:func:`sarl_services._kserve.import_kserve` (see there why).

Lifecycle: the model is registered with KServe before it is ready and :meth:`kserve.Model.load`
runs on a background thread while the HTTP server already answers. Liveness
(``/v2/health/live``) is therefore 200 at once, while readiness (``/v1/models/<name>``,
``/v2/models/<name>/ready``) and every sarl route answer 503 until ``load()`` has set
``ready = True`` — so a Kubernetes readiness probe sees "not ready" rather than "connection
refused", and a slow model load is never mistaken for a dead process. A load that fails ends
the process with exit code 1, since the server could never become ready. Once loaded, a model
that is no longer ready makes liveness fail too (:func:`sarl_services.routes.liveness_router`).

Only the service's routes and a few of KServe's are answered (:mod:`sarl_services.routes`):
KServe's model-repository (load/unload), inference and metadata routes are closed.

On SIGTERM the server stops accepting connections and lets requests in flight finish for
``grace_period`` (10 s); one still running then is answered 503 ``shutting_down`` with
Retry-After (:func:`sarl_services.errors.shutting_down`), without a traceback.

Connections are bounded by :mod:`sarl_services.connections` (header and body deadlines, a cap on
open connections), whose protocol class replaces uvicorn's in KServe's REST server.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from typing import Any

import kserve
from fastapi import APIRouter
from fastapi.exceptions import FastAPIDeprecationWarning
from kserve.errors import ModelNotFound, ModelNotReady

from sarl_services.api_key import ApiKeyRequired
from sarl_services.connections import ConnectionLimits, http_protocol
from sarl_services.routes import ExposedRoutesOnly, exposed_routes, liveness_router

_LOG = logging.getLogger(__name__)


class _DropNotReadyTracebacks(logging.Filter):
    """KServe logs a full traceback for every 503 its readiness route answers while the model
    loads; a probe every few seconds would bury the real start-up log under them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], ModelNotReady))


class _OneLineModelNotFound(logging.Filter):
    """KServe logs ``GET /v1/models/<unknown>`` (a client's 404) at ERROR with a full traceback
    (``kserve/errors.py`` 0.21, ``model_not_found_handler``): keep one INFO line, the message
    quoted so a name with a line break in it cannot forge a second line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], ModelNotFound):
            record.msg, record.args = "404: %r", (str(record.exc_info[1]),)
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True


def _quiet_kserve_logs() -> None:
    logging.getLogger("kserve").addFilter(_DropNotReadyTracebacks())
    logging.getLogger("kserve").addFilter(_OneLineModelNotFound())
    # Three timing lines per request duplicate the Prometheus histograms on /metrics.
    logging.getLogger("kserve.trace").setLevel(logging.WARNING)
    # KServe 0.21 builds its app with FastAPI's deprecated ORJSONResponse; nothing to act on here.
    warnings.filterwarnings("ignore", category=FastAPIDeprecationWarning)


class _ModelServer(kserve.ModelServer):  # type: ignore[misc]  # kserve ships no type hints
    """KServe's ModelServer, bound to ``host`` instead of its hard-coded ``0.0.0.0``, with
    sarl's bounded HTTP protocol (:mod:`sarl_services.connections`) instead of uvicorn's."""

    def __init__(self, *, host: str, connections: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._sarl_host = host
        self._sarl_connections = connections

    async def _serve(self) -> None:
        # start() builds the REST server (whose uvicorn config says 0.0.0.0) and then runs
        # _serve(); the socket is bound only inside it, so the host can still be changed here
        # (a private hook: kserve is pinned to 0.21.x in services/pyproject.toml).
        # The same holds for the protocol class: uvicorn resolves Config.http in load(), which
        # runs inside serve() (uvicorn 0.54, uvicorn/config.py).
        if self._rest_server is not None:
            self._rest_server.config.host = self._sarl_host
            self._rest_server.config.http = http_protocol(self._sarl_connections)
        await super()._serve()


def _load(model: kserve.Model, delay_s: float, loaded: threading.Event) -> None:
    try:
        if delay_s > 0:  # test hook: widens the not-ready window so it can be observed
            time.sleep(delay_s)
        model.load()
    except Exception:
        _LOG.exception("model %r failed to load; exiting", model.name)
        # Nothing was served yet and the server could never become ready: exit at once so the
        # orchestrator restarts the pod and shows the failure (no graceful drain is needed).
        os._exit(1)
    loaded.set()
    _LOG.info("model %r is ready", model.name)


def serve(
    model: kserve.Model,
    router: APIRouter,
    *,
    host: str,
    port: int,
    load_delay_s: float = 0.0,
    connections: ConnectionLimits | None = None,
    api_key: str = "",
) -> None:
    """Serve ``model`` with ``router``'s routes on ``host:port`` until SIGTERM/SIGINT;
    ``connections`` bounds each connection (default: :class:`ConnectionLimits`'s defaults);
    ``api_key``: required as a Bearer token on all but the probes' routes
    (:mod:`sarl_services.api_key`; empty: none)."""
    from kserve.model_server import app

    loaded = threading.Event()
    # Included before KServe adds its own routes at start-up, so ours win where paths overlap
    # (GET /v1/models: the OpenAI model list, which also carries KServe's "models" key;
    # GET /v2/health/live, which here notices a model gone unready).
    app.include_router(router)
    app.include_router(liveness_router(model, loaded))
    app.add_middleware(ExposedRoutesOnly, routes=exposed_routes(router))
    if api_key:  # added last: the outermost, so no route is reached without the key
        app.add_middleware(ApiKeyRequired, key=api_key)
    server = _ModelServer(
        host=host,
        connections=connections or ConnectionLimits(),
        http_port=port,
        workers=1,
        enable_grpc=False,
        enable_latency_logging=False,
        grace_period=10,
    )
    _quiet_kserve_logs()
    server.register_model(model)  # registered while not ready; see the module docstring
    threading.Thread(
        target=_load, args=(model, load_delay_s, loaded), name=f"load-{model.name}", daemon=True
    ).start()
    # Models were registered above; start() with none skips its "at least one model is ready"
    # check, which would force loading before the server listens.
    server.start([])
