"""``sarl run --local`` ends by printing the run's ``RunResult`` as notebooks show it (one
rendering, :mod:`sarl.display`): heading with the steps, where the MLflow run and checkpoints
are, records still spooled (one whole line, copyable), and the headline final metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import sarl.runner.local
from sarl.cli.main import app
from sarl.runner.local import LocalOptions
from sarl.runner.result import RunResult
from sarl.spec.experiment import Experiment

EXAMPLE = Path(__file__).parents[3] / "examples" / "sarl-grpo-math.yaml"
SPOOL = "/tmp/state/runs/x/tracking/" + "a" * 32


def _result(name: str) -> RunResult:
    return RunResult(
        run_id="a" * 32,
        run_url="http://mlflow:5000/#/experiments/1/runs/" + "a" * 32,
        tracking_uri="http://mlflow:5000",
        checkpoint_uri="/tmp/state/checkpoints/x",
        steps=4,
        final_metrics={"reward/mean": 0.25, "loss": 1.0, "eval/heldout/avg_at_2": 0.5},
        resumed_from=2,
        name=name,
        spooled=3,
        spool_dir=SPOOL,
    )


def test_the_summary_is_the_run_results_rendering(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_run_local(exp: Experiment, opts: LocalOptions | None = None) -> RunResult:
        return _result(exp.name)

    monkeypatch.setattr(sarl.runner.local, "run_local", fake_run_local)
    result = CliRunner().invoke(app, ["run", str(EXAMPLE), "--local"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    name = yaml.safe_load(EXAMPLE.read_text())["metadata"]["name"]
    assert lines[0] == f"Run {name}: 4 steps (resumed from step 2)"
    assert f"MLflow run {'a' * 32} at http://mlflow:5000/#/experiments/1/runs/{'a' * 32}" in lines
    assert "checkpoints: /tmp/state/checkpoints/x" in lines
    flush = f"sarl tracking flush {SPOOL}"
    assert f"tracking: 3 records still spooled in {SPOOL}; send them with: {flush}" in lines
    rows = [line.split() for line in lines if line.startswith("│")]
    assert rows == [
        ["│", "reward/mean", "│", "0.25", "│"],
        ["│", "eval/heldout/avg_at_2", "│", "0.5", "│"],
    ]


def test_records_mlflow_refused_make_the_run_exit_3(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 37: a run whose tracking records MLflow refused for their content (or found
    damaged) is not reported as a clean success: its summary, then one line naming where the
    records are kept, and exit 3 (as `sarl tracking flush` does). The run itself is a stand-in
    here; the refusals are produced by the real MLflow server in tests/sarl/tracking."""
    import dataclasses

    def fake_run_local(exp: Experiment, opts: LocalOptions | None = None) -> RunResult:
        return dataclasses.replace(_result(exp.name), tracking_refused=2)

    monkeypatch.setattr(sarl.runner.local, "run_local", fake_run_local)
    result = CliRunner().invoke(app, ["run", str(EXAMPLE), "--local"])
    assert result.exit_code == 3, result.output
    assert (
        f"error: MLflow's record of run {'a' * 32} is incomplete: 2 tracking records were "
        f"refused by MLflow or damaged; they are kept in {SPOOL}" in result.stderr
    )


def test_refused_records_count_rejected_and_quarantined() -> None:
    from types import SimpleNamespace

    from sarl.runner.result import refused_records

    assert refused_records(None) == 0
    tracker = SimpleNamespace(rejected=2, quarantined=1)
    assert refused_records(tracker) == 3  # type: ignore[arg-type]
