"""Opening a new local MLflow store through sarl prints none of MLflow's INFO lines about
creating its tables (stderr, which a notebook shows as an error box), unless the user chose
MLflow's log level."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from sarl.tracking.store import QUIET_MLFLOW_LOGGERS, default_tracking_uri, make_client


@pytest.fixture(autouse=True)
def _levels_as_mlflow_leaves_them(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("MLFLOW_LOGGING_LEVEL", raising=False)
    loggers = [logging.getLogger(name) for name in QUIET_MLFLOW_LOGGERS]
    before = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.NOTSET)
    yield
    for logger, level in zip(loggers, before, strict=True):
        logger.setLevel(level)


def _open_new_store(root: Path) -> None:
    make_client(default_tracking_uri(root)).search_experiments()  # creates the tables


def test_a_new_local_store_says_nothing(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    _open_new_store(tmp_path)
    assert (tmp_path / "mlflow.db").is_file()
    captured = capfd.readouterr()
    assert "database tables" not in captured.err + captured.out


@pytest.mark.parametrize("chosen", ["env", "logger"])
def test_a_level_the_user_chose_is_kept(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, chosen: str
) -> None:
    if chosen == "env":
        monkeypatch.setenv("MLFLOW_LOGGING_LEVEL", "INFO")
    else:
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.INFO)
    _open_new_store(tmp_path)
    assert "Creating initial MLflow database tables" in capfd.readouterr().err
