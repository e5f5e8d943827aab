"""preflight fails fast, with one line naming the URI, when runs could not be logged."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sarl.tracking.tracker import TrackingError, default_tracking_uri, preflight
from tests.support.embedding_server import running_embedding_server
from tests.support.mlflow_server import MlflowServer, free_port


def test_closed_port_fails_fast_with_one_line() -> None:
    uri = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(TrackingError) as info:
        preflight(uri)
    assert time.monotonic() - started < 10
    message = str(info.value)
    assert message == f"tracking.mlflow_uri: cannot reach MLflow at {uri} (connection refused)"
    assert "\n" not in message


def test_unknown_host_is_named() -> None:
    with pytest.raises(TrackingError, match=r"cannot reach MLflow at http://no-such-host\.invalid"):
        preflight("http://no-such-host.invalid:5000", timeout_s=3)


def test_real_server_passes(mlflow_server: MlflowServer) -> None:
    preflight(mlflow_server.url)


def test_http_server_that_is_not_mlflow_is_refused() -> None:
    # A real HTTP server that answers 404 for MLflow's REST path.
    with (
        running_embedding_server() as server,
        pytest.raises(TrackingError, match=r"does not answer like an MLflow .*HTTP 404"),
    ):
        preflight(server.url)


def test_local_sqlite_store_is_creatable(tmp_path: Path) -> None:
    preflight(default_tracking_uri(tmp_path / "deep" / "er" / ".sarl"))
    assert not (tmp_path / "deep").exists()  # checking creates nothing


def test_sqlite_under_a_file_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(TrackingError, match="is not a directory"):
        preflight(default_tracking_uri(blocker / ".sarl"))


def test_file_store_is_refused_like_mlflow_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(TrackingError, match="file store"):
        preflight(tmp_path.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    preflight(tmp_path.as_uri())


def test_default_uri_is_absolute_sqlite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert default_tracking_uri() == f"sqlite:///{tmp_path.resolve()}/.sarl/mlflow.db"
