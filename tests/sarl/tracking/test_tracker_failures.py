"""A tracking server that drops out during training: records wait in the durable spool and are
sent in order once it answers; an outage of any length never raises into training, and what is
still spooled when the run ends is sent by ``sarl tracking flush``, exactly once.

The outage is real: a TCP proxy in front of the real MLflow server drops every connection. (The
real server killed and restarted under a whole training run: ``tests/sarl/runner/
test_tracking_outage.py``.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from sarl.cli.main import app
from sarl.tracking.drainer import DrainSettings
from sarl.tracking.tracker import Tracker
from tests.support.mlflow_server import MlflowServer

from .conftest import FlakyProxy

FAST = DrainSettings(retry_min_s=0.05, retry_max_s=0.2, report_every_s=0.0, finish_wait_s=60.0)


@pytest.fixture(autouse=True)
def _no_mlflow_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    # MLflow's own retries (bounded to 3 by the Tracker) would only slow the outage down here.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")


def _steps(server: MlflowServer, run_id: str) -> list[int]:
    return sorted(m.step for m in MlflowClient(server.url).get_metric_history(run_id, "kl"))


def _failed_sends(tracker: Tracker) -> int:
    return tracker._drainer.failures


def _wait_for(condition: object, what: str) -> None:
    """Poll ``condition()`` (a mechanism, not a duration: the bound is only a safety net)."""
    import time

    deadline = time.monotonic() + 120
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_outage_is_bridged_by_the_spool(
    flaky_proxy: FlakyProxy, mlflow_server: MlflowServer, experiment_name: str
) -> None:
    tracker = Tracker.start(flaky_proxy.url, experiment_name, "flaky", spec_yaml="", settings=FAST)
    tracker.log_metrics({"kl": 0.0}, step=0)
    assert tracker.drain(60) == 0
    flaky_proxy.set_down(True)
    tracker.log_metrics({"kl": 1.0}, step=1)
    tracker.log_metrics({"kl": 2.0}, step=2)
    assert tracker.waiting == 2
    flaky_proxy.set_down(False)
    tracker.log_metrics({"kl": 3.0}, step=3)
    assert tracker.drain(60) == 0
    assert _steps(mlflow_server, tracker.run_id) == [0, 1, 2, 3]


def test_outage_longer_than_every_retry_budget_never_stops_training(
    flaky_proxy: FlakyProxy, mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    tracker = Tracker.start(
        flaky_proxy.url, experiment_name, "down", spec_yaml="", settings=FAST,
        spool_root=tmp_path / "spools",
    )  # fmt: skip
    tracker.log_metrics({"kl": 0.0}, step=0)
    assert tracker.drain(60) == 0
    flaky_proxy.set_down(True)
    for step in range(1, 6):  # training goes on: nothing raises
        tracker.log_metrics({"kl": float(step)}, step=step)
        _wait_for(lambda s=step: _failed_sends(tracker) >= s, "the drainer never retried")
    # The run ends while MLflow is still away: a bounded wait, then everything stays spooled.
    tracker.finish("FINISHED", wait_s=0.5)
    assert tracker.left == 6  # five steps and the run's status
    spool = tracker.spool_dir
    assert tracker.closing_line().startswith(f"tracking: 6 records of run {tracker.run_id} ")
    assert tracker.closing_line().endswith(f"send them with: sarl tracking flush {spool}")
    flaky_proxy.set_down(False)
    assert MlflowClient(mlflow_server.url).get_run(tracker.run_id).info.status == "RUNNING"

    status = CliRunner().invoke(app, ["tracking", "status", str(spool)])
    assert status.exit_code == 0 and status.output.startswith("6 records of run ")
    # MLflow at the proxy answers again: `sarl tracking flush` sends it all and closes the run.
    flushed = CliRunner().invoke(app, ["tracking", "flush", str(spool), "--timeout", "120"])
    assert flushed.exit_code == 0, flushed.output
    assert f"run {tracker.run_id}: 6 records sent" in flushed.output
    assert _steps(mlflow_server, tracker.run_id) == [0, 1, 2, 3, 4, 5]
    assert MlflowClient(mlflow_server.url).get_run(tracker.run_id).info.status == "FINISHED"


def test_resend_after_a_lost_ack_adds_no_points(
    mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    """A crash between MLflow taking a batch and the spool noting it: the batch goes again, and
    MLflow keeps one point per (key, timestamp, step, value)."""
    tracker = Tracker.start(
        mlflow_server.url, experiment_name, "ack", spec_yaml="", settings=FAST,
        spool_root=tmp_path / "spools",
    )  # fmt: skip
    for step in range(3):
        tracker.log_metrics({"kl": float(step), "loss": 1.0}, step=step)
    assert tracker.drain(60) == 0
    tracker.abandon()
    (tracker.spool_dir / "acked").write_text("0")  # as if no ack had been written

    resumed = Tracker.resume(
        mlflow_server.url, tracker.run_id, spool_root=tmp_path / "spools", settings=FAST
    )
    assert resumed.waiting > 0  # the already-sent records are pending again
    resumed.finish()
    assert resumed.left == 0
    assert resumed.closing_line().startswith(f"tracking: every record of run {tracker.run_id} ")
    client = MlflowClient(mlflow_server.url)
    assert [m.step for m in client.get_metric_history(tracker.run_id, "kl")] == [0, 1, 2]
    assert len(client.get_metric_history(tracker.run_id, "loss")) == 3


def test_a_torn_last_record_is_cut_off(tmp_path: Path) -> None:
    """A process killed mid-append leaves half a line; the spool drops it and keeps the rest."""
    from sarl.tracking.spool import Spool

    spool = Spool(tmp_path / "s", "run-1", "http://127.0.0.1:9")
    spool.append("metrics", {"step": 1, "metrics": [["kl", 1.0, 5]]})
    spool.close()
    with (tmp_path / "s" / "records.jsonl").open("ab") as f:
        f.write(b'{"pos": 2, "id": "x:2", "kind": "metr')
    again = Spool.open_existing(tmp_path / "s")
    assert [r.body["step"] for r in again.pending()] == [1]
    assert again.append("metrics", {"step": 2, "metrics": [["kl", 2.0, 6]]}) == 2
    again.close()
    lines = (tmp_path / "s" / "records.jsonl").read_text().splitlines()
    assert [json.loads(line)["pos"] for line in lines] == [1, 2]


def test_finish_sends_the_queue_first(
    flaky_proxy: FlakyProxy, mlflow_server: MlflowServer, experiment_name: str
) -> None:
    tracker = Tracker.start(flaky_proxy.url, experiment_name, "late", spec_yaml="", settings=FAST)
    assert tracker.drain(60) == 0
    flaky_proxy.set_down(True)
    tracker.log_metrics({"kl": 1.0}, step=7)
    flaky_proxy.set_down(False)
    tracker.finish()
    assert tracker.left == 0
    assert _steps(mlflow_server, tracker.run_id) == [7]
    assert MlflowClient(mlflow_server.url).get_run(tracker.run_id).info.status == "FINISHED"
