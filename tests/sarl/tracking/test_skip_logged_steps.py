"""A resumed training run that replays steps logs each (metric, step) once: after
``skip_logged_steps`` points at or below the run's last step for their metric are dropped, the
first value stays, later steps and new metrics are logged. Without the call a resumed run appends
as before (an evaluation re-run must be able to log at an old step)."""

from __future__ import annotations

from pathlib import Path

from mlflow import MlflowClient

from sarl.tracking.tracker import Tracker


def _history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, key))


def _killed_run(uri: str) -> str:
    """Steps 1-3 of ``loss`` and an evaluation at step 0 logged, then the process died."""
    tracker = Tracker.start(uri, "skip-steps", "r1", spec_yaml="a: 1\n")
    tracker.log_metrics({"eval/acc": 0.1}, step=0)
    for step in (1, 2, 3):
        tracker.log_metrics({"loss": float(step)}, step=step)
    tracker.abandon()  # what a dead process leaves: the spool, some of it maybe not sent yet
    return tracker.run_id


def test_resumed_run_skips_the_steps_it_holds(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = _killed_run(uri)

    resumed = Tracker.resume(uri, run_id)
    assert resumed.skip_logged_steps() == {"loss": 3, "eval/acc": 0}
    resumed.log_metrics({"eval/acc": 0.9}, step=0)  # step 0 evaluated again: dropped
    for step in (2, 3, 4, 5):  # replayed from the checkpoint at step 1
        resumed.log_metrics({"loss": 10.0 * step, "kl": 0.5}, step=step)
    resumed.finish()

    assert _history(uri, run_id, "loss") == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 40.0), (5, 50.0)]
    assert _history(uri, run_id, "eval/acc") == [(0, 0.1)]
    assert [s for s, _ in _history(uri, run_id, "kl")] == [2, 3, 4, 5]  # new metric: all logged


def test_plain_resume_still_appends(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = _killed_run(uri)

    resumed = Tracker.resume(uri, run_id)
    resumed.log_metrics({"eval/acc": 0.9}, step=0)
    resumed.finish()

    assert _history(uri, run_id, "eval/acc") == [(0, 0.1), (0, 0.9)]
