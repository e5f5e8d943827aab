"""running_mlflow_server leaves no process behind, even when the block fails."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest

from tests.support.mlflow_server import live_group_members, running_mlflow_server


@pytest.mark.slow
def test_server_group_is_gone_after_a_failing_block(tmp_path: Path) -> None:
    pgid = None
    with pytest.raises(RuntimeError, match="test failure"), running_mlflow_server(tmp_path) as s:
        pgid = s.pid
        assert httpx.get(f"{s.url}/health", timeout=5).text == "OK"
        assert len(live_group_members(pgid)) >= 2  # mlflow and its uvicorn worker
        raise RuntimeError("test failure")
    assert pgid is not None
    assert live_group_members(pgid) == []
    assert (tmp_path / "mlflow.db").is_file()


@pytest.mark.slow
def test_a_server_that_cannot_start_is_reported(tmp_path: Path) -> None:
    with socket.create_server(
        ("127.0.0.1", 0)
    ) as taken:  # port in use: uvicorn exits (mlflow with code 0)
        port = taken.getsockname()[1]
        with (
            pytest.raises(
                RuntimeError, match="mlflow server exited with code .* address already in use"
            ),
            running_mlflow_server(tmp_path, port=port, startup_timeout_s=60),
        ):
            pass
