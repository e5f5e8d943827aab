"""Where sarl runs are tracked, and reaching that MLflow store: URIs, preflight, the client.

Used by :mod:`sarl.tracking.tracker` (logging a run), :mod:`sarl.tracking.compare` (reading runs)
and the local runner's preflight (through the names ``tracker`` re-exports).

Where runs go: ``tracking.mlflow_uri`` when set, else :func:`default_tracking_uri`, a SQLite
database ``./.sarl/mlflow.db`` with artifacts in ``./.sarl/mlartifacts``. MLflow 3.17 refuses the
old ``file:`` store unless ``MLFLOW_ALLOW_FILE_STORE=true`` (``FileStore.__init__`` in
``mlflow/store/tracking/file_store.py``), and its own default is ``sqlite:///mlflow.db``, so
SQLite is the local backend. A bare ``MlflowClient`` on SQLite would put artifacts in
``./mlruns`` of whatever the working directory is (``_get_sqlalchemy_store`` in
``mlflow/tracking/_tracking_service/utils.py``); experiments created by the tracker therefore get
an explicit artifact location: :func:`local_artifact_location`, ``mlartifacts`` beside the DB.

MLflow's HTTP client retries on its own — 7 retries and a 120 s timeout by default
(``mlflow/environment_variables.py``), minutes per call against a dead server.
:func:`bound_http_retries` lowers that through the environment variables MLflow reads on every
request (``mlflow/utils/rest_utils.py``), unless the user set them.

MLflow logs at INFO to stderr from the moment it is imported, and opening a new local store
says "Creating initial MLflow database tables..." and "Updating database tables": noise in a
terminal, and an error-styled box in a notebook. :func:`make_client` raises those loggers
(:data:`QUIET_MLFLOW_LOGGERS`) to WARNING unless the user chose a level.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import quote, unquote, urlsplit

import httpx

from sarl.tracking.describe import ui_url

if TYPE_CHECKING:
    from mlflow import MlflowClient

HTTP_ENV_DEFAULTS: Mapping[str, str] = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",  # seconds per request (MLflow: 120)
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3",  # MLflow: 7
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",  # MLflow: 2
}
#: MLflow loggers whose INFO lines say nothing a user acts on (creating a local store's tables).
QUIET_MLFLOW_LOGGERS = ("mlflow.store.db.utils",)
_T = TypeVar("_T")


class TrackingError(RuntimeError):
    """Tracking cannot go on; the message is one line naming the URI, run or metric at fault."""


# -- where runs go ---------------------------------------------------------------------------------


def default_tracking_uri(root: Path = Path(".sarl")) -> str:
    """``sqlite:///<absolute root>/mlflow.db`` — the local store used when no URI is given."""
    # An absolute path after "sqlite:///" gives the four slashes SQLAlchemy wants; quoted like
    # mlflow.utils.file_utils.path_to_local_sqlite_uri (SQLAlchemy unquotes it again).
    return "sqlite:///" + quote(str((root / "mlflow.db").resolve()), safe="/")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (``None`` for other URIs)."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(unquote(uri[len("sqlite:///") :].split("?", 1)[0])).resolve()


def local_artifact_location(uri: str) -> str | None:
    """Where new experiments of a SQLite store keep artifacts: ``mlartifacts`` beside the DB."""
    db = sqlite_path(uri)
    return None if db is None else str(db.parent / "mlartifacts")


def run_url(uri: str, experiment_id: str, run_id: str) -> str | None:
    """The MLflow UI page of a run when the store is an HTTP server (the URL MLflow prints, in
    the UI's model-training layout: :func:`sarl.tracking.describe.ui_url`)."""
    if urlsplit(uri).scheme not in ("http", "https"):
        return None
    return ui_url(uri, experiment_id, run_id)


def bound_http_retries() -> None:
    """Lower MLflow's HTTP timeout and retries to :data:`HTTP_ENV_DEFAULTS` unless already set.

    MLflow reads these variables on every request, so this takes effect for existing clients.
    """
    for name, value in HTTP_ENV_DEFAULTS.items():
        os.environ.setdefault(name, value)


# -- preflight -------------------------------------------------------------------------------------


def preflight(uri: str, timeout_s: float = 5.0, *, source: str = "tracking.mlflow_uri") -> None:
    """Fail fast, before training, when runs could not be logged to ``uri``; errors name
    ``source``, where the URI was given (the spec's field, or a flag such as ``--tracking-uri``).

    http(s): one GET of MLflow's ``experiments/search`` REST endpoint (credentials from
    ``MLFLOW_TRACKING_TOKEN`` or ``MLFLOW_TRACKING_USERNAME``/``PASSWORD``) within ``timeout_s``.
    ``sqlite:///``: the database's folder must exist or be creatable. ``file:`` and plain paths:
    refused unless ``MLFLOW_ALLOW_FILE_STORE`` is true, as MLflow 3.17 does. Other schemes
    (postgresql, databricks, ...) are not checked here.
    """
    scheme = urlsplit(uri).scheme
    if scheme in ("http", "https"):
        _preflight_http(uri, timeout_s, source)
    elif scheme == "sqlite":
        db = sqlite_path(uri)
        if db is None:
            raise TrackingError(f"{source}: {uri} is not a sqlite:///<path> URI")
        _check_creatable(db.parent, uri, source)
    elif scheme in ("", "file"):
        if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() not in ("true", "1"):
            raise TrackingError(
                f"{source}: {uri} is a file store, which MLflow 3 refuses; use "
                "sqlite:///<path>/mlflow.db (or set MLFLOW_ALLOW_FILE_STORE=true)"
            )
        _check_creatable(Path(unquote(urlsplit(uri).path) if scheme else uri), uri, source)


def _preflight_http(uri: str, timeout_s: float, source: str) -> None:
    url = uri.rstrip("/") + "/api/2.0/mlflow/experiments/search"
    headers, auth = {}, None
    if token := os.environ.get("MLFLOW_TRACKING_TOKEN"):
        headers["Authorization"] = f"Bearer {token}"
    elif user := os.environ.get("MLFLOW_TRACKING_USERNAME"):
        auth = (user, os.environ.get("MLFLOW_TRACKING_PASSWORD", ""))
    insecure = os.environ.get("MLFLOW_TRACKING_INSECURE_TLS", "").lower() in ("true", "1")
    try:
        response = httpx.get(
            url,
            params={"max_results": 1},
            headers=headers,
            auth=auth,
            timeout=timeout_s,
            verify=not insecure,
        )
    except httpx.TimeoutException as e:
        reason = f"no answer within {timeout_s:g} s"
        raise TrackingError(f"{source}: cannot reach MLflow at {uri} ({reason})") from e
    except httpx.HTTPError as e:
        reason = _connect_reason(e)
        raise TrackingError(f"{source}: cannot reach MLflow at {uri} ({reason})") from e
    if response.status_code in (401, 403):
        raise TrackingError(
            f"{source}: MLflow at {uri} refused the credentials (HTTP "
            f"{response.status_code}); set MLFLOW_TRACKING_TOKEN or "
            "MLFLOW_TRACKING_USERNAME/MLFLOW_TRACKING_PASSWORD"
        )
    if response.status_code != 200:
        raise TrackingError(
            f"{source}: {uri} does not answer like an MLflow tracking server "
            f"(HTTP {response.status_code} for /api/2.0/mlflow/experiments/search)"
        )


def _connect_reason(error: BaseException) -> str:
    """'connection refused', 'host not found', ... from the OS error under an httpx error."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        if isinstance(cause, socket.gaierror):
            return "host not found"
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror.lower()
        cause = cause.__cause__ or cause.__context__
    return one_line(error) or type(error).__name__


def _check_creatable(folder: Path, uri: str, source: str) -> None:
    """``folder`` exists as a writable directory, or its nearest existing ancestor is one."""
    existing = folder.resolve()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise TrackingError(f"{source}: {uri}: {existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise TrackingError(f"{source}: {uri}: cannot create files under {existing}")


# -- talking to MLflow ---------------------------------------------------------------------------


def one_line(error: BaseException, limit: int = 300) -> str:
    """``str(error)`` on one line, cut to ``limit`` characters (MLflow messages run long)."""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def error_code(error: BaseException) -> str | None:
    """MLflow's error code (``RESOURCE_DOES_NOT_EXIST``, ...) of an ``MlflowException``."""
    code = getattr(error, "error_code", None)
    return code if isinstance(code, str) else None


def make_client(uri: str) -> MlflowClient:
    """An ``MlflowClient`` for ``uri``; a :class:`TrackingError` if MLflow is not installed."""
    try:
        from mlflow import MlflowClient
    except ImportError as e:
        raise TrackingError("tracking needs MLflow: pip install 'sarl[local]'") from e
    quiet_mlflow_logs()
    try:
        return MlflowClient(tracking_uri=uri)
    except Exception as e:  # MLflow raises a mix of MlflowException and store-specific errors
        raise TrackingError(f"tracking.mlflow_uri: cannot open {uri}: {one_line(e)}") from e


def quiet_mlflow_logs() -> None:
    """Raise :data:`QUIET_MLFLOW_LOGGERS` to WARNING, unless ``MLFLOW_LOGGING_LEVEL`` is set or
    the logger has a level already (the user's). Idempotent."""
    if os.environ.get("MLFLOW_LOGGING_LEVEL"):
        return
    for name in QUIET_MLFLOW_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)


def guarded(uri: str, what: str, call: Callable[[], _T]) -> _T:
    """Run one MLflow call; any failure becomes a one-line :class:`TrackingError`."""
    try:
        return call()
    except Exception as e:  # MLflow, requests, SQLAlchemy and OS errors all end up here
        raise TrackingError(f"tracking: {what} at {uri} failed: {one_line(e)}") from e
