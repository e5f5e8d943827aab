"""``sarl study report`` through typer's runner (the ``study`` app, as main.py will mount it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

import sarl.cli.study
from sarl.spec.study import Study
from tests.sarl.study.conftest import ARMS


@pytest.mark.usefixtures("no_drawing")
def test_report_prints_the_table_and_writes_under_out_study(
    store_uri: str,
    logged_study: tuple[Study, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    study, parent_id = logged_study
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(
        sarl.cli.study.app, ["report", study.name, "--tracking-uri", store_uri]
    )
    assert result.exit_code == 0, result.output
    # The rich tables every CLI result prints (not the Markdown of report.md).
    assert result.stdout.startswith(f"Study {study.name}\n")
    assert "arms (reference: gt)" in result.stdout
    assert "|" not in result.stdout and "`" not in result.stdout
    for arm in ARMS:
        assert f"│ {arm} " in result.stdout
    out = Path("out") / study.name
    for name in ("summary.json", "report.md", "curves.png"):
        assert f"wrote {out / name}\n" in result.stdout
        assert (tmp_path / out / name).is_file()
    assert len(MlflowClient(store_uri).list_artifacts(parent_id, "report")) == 3


@pytest.mark.usefixtures("no_drawing")
def test_no_log_leaves_the_parent_run_alone(
    store_uri: str, logged_study: tuple[Study, str], tmp_path: Path
) -> None:
    _, parent_id = logged_study
    client = MlflowClient(store_uri)
    before = len(client.get_metric_history(parent_id, "study/gt/flags"))
    args = ["report", parent_id, "--tracking-uri", store_uri, "--out", str(tmp_path), "--no-log"]
    result = CliRunner().invoke(sarl.cli.study.app, args)
    assert result.exit_code == 0, result.output
    assert f"wrote {tmp_path / 'report.md'}" in result.stdout
    assert len(client.get_metric_history(parent_id, "study/gt/flags")) == before


@pytest.mark.usefixtures("no_drawing")
def test_finish_closes_the_parent_run(
    store_uri: str, logged_study: tuple[Study, str], tmp_path: Path
) -> None:
    """What the cluster's report Job runs (the parent run by id): it ends FINISHED, not
    RUNNING. A run found by Study name is never closed (issue 36: it may be another team's)."""
    study, parent_id = logged_study
    client = MlflowClient(store_uri)
    client.update_run(parent_id, status="RUNNING")
    args = ["report", parent_id, "--tracking-uri", store_uri, "--out", str(tmp_path)]
    result = CliRunner().invoke(sarl.cli.study.app, args)
    assert result.exit_code == 0, result.output
    assert client.get_run(parent_id).info.status == "RUNNING"  # not without --finish
    by_name = ["report", study.name, "--tracking-uri", store_uri, "--out", str(tmp_path)]
    result = CliRunner().invoke(sarl.cli.study.app, [*by_name, "--finish"])
    assert result.exit_code == 2
    assert "pass the parent run's MLflow id" in result.output
    assert client.get_run(parent_id).info.status == "RUNNING"
    result = CliRunner().invoke(sarl.cli.study.app, [*args, "--finish"])
    assert result.exit_code == 0, result.output
    assert client.get_run(parent_id).info.status == "FINISHED"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["no-such-study"], "error: no Study named 'no-such-study' at "),
        (["bad name!"], "error: 'bad name!' is neither an MLflow run id nor a Study name"),
        ([], "error: no MLflow store at "),  # the default store ./.sarl/mlflow.db does not exist
    ],
)
def test_errors_are_one_line_and_exit_2(
    store_uri: str,
    args: list[str],
    error: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    uri_args = ["--tracking-uri", store_uri] if args else []
    result = CliRunner().invoke(sarl.cli.study.app, ["report", *(args or ["x"]), *uri_args])
    assert result.exit_code == 2
    assert result.stderr.startswith(error)
    assert result.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # no store created, no report written


@pytest.mark.usefixtures("no_drawing")
def test_workdir_picks_the_local_store(
    logged_study: tuple[Study, str], store_uri: str, tmp_path: Path
) -> None:
    """``--workdir DIR`` reads DIR/mlflow.db, as ``sarl run --workdir DIR`` wrote it."""
    study, _ = logged_study
    result = CliRunner().invoke(sarl.cli.study.app, ["report", "x", "--workdir", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: no MLflow store at {tmp_path / 'mlflow.db'}")
    workdir = Path(store_uri.removeprefix("sqlite:///")).parent  # the store is DIR/mlflow.db
    args = ["report", study.name, "--workdir", str(workdir), "-o", str(tmp_path / "r"), "--no-log"]
    result = CliRunner().invoke(sarl.cli.study.app, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "r" / "report.md").is_file()
