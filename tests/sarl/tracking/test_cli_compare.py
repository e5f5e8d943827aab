"""``sarl compare`` (the typer command, registered on a local app as main.py will)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from sarl.cli.compare import compare_command
from sarl.tracking.tracker import Tracker
from tests.support.mlflow_server import MlflowServer


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("compare")(compare_command)

    @app.callback()
    def _root() -> None:
        """A group, as in sarl.cli.main."""

    return app


@pytest.fixture(scope="module")
def runs(mlflow_server: MlflowServer) -> list[str]:
    ids = []
    for name, kl in (("cli-a", 0.1), ("cli-b", 0.2)):
        tracker = Tracker.start(
            mlflow_server.url, "cli-compare", name, params={"kl_coef": str(kl)}, spec_yaml=""
        )
        tracker.log_metrics({"kl": kl, "entropy": 1.0}, step=0)
        tracker.finish()
        ids.append(tracker.run_id)
    return ids


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")


def test_compare_prints_tables_and_writes_png(
    mlflow_server: MlflowServer, runs: list[str], tmp_path: Path
) -> None:
    out = tmp_path / "c.png"
    result = CliRunner().invoke(
        _app(), ["compare", *runs, "--tracking-uri", mlflow_server.url, "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "kl_coef" in result.stdout
    assert "cli-a" in result.stdout
    assert f"curves: {out}" in result.stdout
    assert out.read_bytes().startswith(b"\x89PNG")


def test_compare_by_experiment(
    mlflow_server: MlflowServer, runs: list[str], tmp_path: Path
) -> None:
    args = ["compare", "-e", "cli-compare", "--tracking-uri", mlflow_server.url]
    result = CliRunner().invoke(_app(), [*args, "--out", str(tmp_path / "e.png")])
    assert result.exit_code == 0, result.output
    assert all(run_id in result.stdout for run_id in runs)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([], "error: give run ids or names (or a Study's name) and/or --experiment NAME"),
        (["0" * 32], f"error: unknown run id '{'0' * 32}' at http://127.0.0.1:"),
        (["-e", "nope"], "error: unknown experiment 'nope' at http://127.0.0.1:"),
    ],
)
def test_errors_are_one_line_with_exit_code_2(
    mlflow_server: MlflowServer, args: list[str], error: str, tmp_path: Path
) -> None:
    uri_args = ["--tracking-uri", mlflow_server.url, "--out", str(tmp_path / "x.png")]
    result = CliRunner().invoke(_app(), ["compare", *args, *uri_args])
    assert result.exit_code == 2
    assert result.stderr.startswith(error)
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "x.png").exists()


def test_default_uri_is_the_local_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(_app(), ["compare", "a" * 32])
    assert result.exit_code == 2
    assert f"no MLflow store at {tmp_path.resolve()}/.sarl/mlflow.db" in result.stderr


def test_workdir_names_the_local_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--workdir DIR`` reads DIR/mlflow.db, as ``sarl run --workdir DIR`` writes it."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(_app(), ["compare", "a" * 32, "--workdir", "elsewhere"])
    assert result.exit_code == 2
    assert f"no MLflow store at {tmp_path.resolve()}/elsewhere/mlflow.db" in result.stderr
