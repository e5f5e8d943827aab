"""compare_runs / plot_curves / render_tables on runs logged to the real MLflow server."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from sarl.tracking.compare import Comparison, compare_runs, plot_curves, render_tables
from sarl.tracking.tracker import Tracker, TrackingError, flatten_params
from tests.support.mlflow_server import MlflowServer

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _log_run(uri: str, experiment: str, name: str, lr: float, scale: float) -> str:
    params = flatten_params({"algorithm": {"learning_rate": lr, "name": "grpo"}, "seed": 0})
    tracker = Tracker.start(uri, experiment, name, params=params, spec_yaml="")
    for step in range(6):
        tracker.log_metrics(
            {
                "reward/mean": scale * step,
                "accuracy": 0.1 * step,
                "reward/structure": 0.5 + scale * step,
                "response_length": 100.0 + step,
            },
            step=step,
        )
    tracker.finish()
    return tracker.run_id


@pytest.fixture(scope="module")
def two_runs(mlflow_server: MlflowServer) -> tuple[str, str, str]:
    """Experiment 'compare-demo-…' with runs 'low-lr' and 'high-lr' (only the lr differs)."""
    experiment = f"compare-demo-{id(mlflow_server):x}"
    low = _log_run(mlflow_server.url, experiment, "low-lr", 1e-6, 0.01)
    high = _log_run(mlflow_server.url, experiment, "high-lr", 1e-5, 0.05)
    return experiment, low, high


def test_by_run_ids(mlflow_server: MlflowServer, two_runs: tuple[str, str, str]) -> None:
    _, low, high = two_runs
    comparison = compare_runs(mlflow_server.url, run_ids=[low, high, low])  # repeats collapse
    assert [r.run_id for r in comparison.runs] == [low, high]
    assert [r.name for r in comparison.runs] == ["low-lr", "high-lr"]
    assert {r.status for r in comparison.runs} == {"FINISHED"}
    assert comparison.differing_params == {"algorithm.learning_rate": {low: "1e-06", high: "1e-05"}}
    assert comparison.final_metrics[high]["reward/mean"] == pytest.approx(0.25)
    assert comparison.final_metrics[low]["accuracy"] == pytest.approx(0.5)
    history = comparison.histories[high]
    assert set(history) == {"reward/mean", "accuracy", "reward/structure", "response_length"}
    assert [step for step, _ in history["reward/mean"]] == list(range(6))


def test_by_experiment(mlflow_server: MlflowServer, two_runs: tuple[str, str, str]) -> None:
    experiment, low, high = two_runs
    comparison = compare_runs(mlflow_server.url, experiments=[experiment])
    assert [r.run_id for r in comparison.runs] == [low, high]  # oldest first


def test_unknown_ids_and_experiments_are_all_named(
    mlflow_server: MlflowServer, two_runs: tuple[str, str, str]
) -> None:
    _, low, _ = two_runs
    with pytest.raises(TrackingError) as info:
        compare_runs(
            mlflow_server.url, run_ids=[low, "f" * 32, "nope"], experiments=["no-such-exp"]
        )
    message = str(info.value)
    assert message.startswith(
        f"unknown run id '{'f' * 32}', run 'nope', experiment 'no-such-exp' at "
    )
    assert "; known experiments: " in message and "runs: " in message  # what to type instead


def test_nothing_to_compare_and_missing_local_store(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="give run ids"):
        compare_runs("sqlite:///x.db")
    with pytest.raises(TrackingError, match="no MLflow store at .*mlflow.db"):
        compare_runs(f"sqlite:///{tmp_path}/.sarl/mlflow.db", run_ids=["a" * 32])
    assert not (tmp_path / ".sarl").exists()


def test_plot_is_a_png(
    mlflow_server: MlflowServer, two_runs: tuple[str, str, str], tmp_path: Path
) -> None:
    _, low, high = two_runs
    comparison = compare_runs(mlflow_server.url, run_ids=[low, high])
    out = plot_curves(comparison, tmp_path / "nested" / "compare.png")
    data = out.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 20_000  # six panels with lines and text, not an empty canvas


def test_plot_without_any_data(tmp_path: Path) -> None:
    empty = Comparison(uri="sqlite:///unused.db", runs=())
    assert plot_curves(empty, tmp_path / "empty.png").read_bytes().startswith(PNG_MAGIC)


def test_tables(mlflow_server: MlflowServer, two_runs: tuple[str, str, str]) -> None:
    _, low, high = two_runs
    comparison = compare_runs(mlflow_server.url, run_ids=[low, high])
    console = Console(width=200, record=True)
    runs, params, metrics = render_tables(comparison)
    for table in (runs, params, metrics):
        console.print(table)
    text = console.export_text()
    # Columns are named after the runs (their names are unique here); the runs table has the ids.
    assert [c.header for c in metrics.columns] == ["metric", "low-lr", "high-lr"]
    assert low in text and high in text
    assert "algorithm.learning_rate" in text
    assert "algorithm.name" not in text  # equal in both runs
    assert "seed" not in text
    assert "reward/structure" in text
    assert "0.75" in text  # high-lr's final reward/structure
    assert params.row_count == 1
    assert metrics.row_count == 4
