"""MLflow failures that are not outages: a record is acknowledged only when MLflow has it.

Against the real MLflow server behind :class:`~tests.sarl.tracking.gateway.GatewayProxy` (a
second real server stands for MLflow restored on a new database):

* MLflow comes back without the run: the records stay, the run's last line and ``sarl tracking
  flush`` say so, ``flush --new-run`` makes the run again and delivers them (issue 37 item 1);
* a gateway's plain-text 403/401/400 is retried like an outage, nothing is dropped (item 2);
* only a record MLflow read and refused goes to ``rejected.jsonl``; the rest of its batch is
  delivered, and ``flush`` exits 3 (item 1);
* the end time of a run finished during an outage, ``tracking status`` while the run is alive,
  ``flush --timeout`` against a hung server (item 6).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mlflow import MlflowClient
from typer.testing import CliRunner

from sarl.cli.main import app
from sarl.tracking import drainer as drainer_module
from sarl.tracking.drainer import DrainSettings
from sarl.tracking.reattach import REPLACES_TAG
from sarl.tracking.spool import Spool
from sarl.tracking.tracker import Tracker
from tests.support.mlflow_server import MlflowServer, running_mlflow_server

from .conftest import write_png
from .gateway import GatewayProxy

FAST = DrainSettings(retry_min_s=0.05, retry_max_s=0.2, report_every_s=0.0, finish_wait_s=60.0)


@pytest.fixture(autouse=True)
def _no_mlflow_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    # MLflow's own retries would only slow the faults down; the drainer's are what is tested.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")


@pytest.fixture
def gateway(mlflow_server: MlflowServer) -> Iterator[GatewayProxy]:
    proxy = GatewayProxy(mlflow_server.url)
    try:
        yield proxy
    finally:
        proxy.close()


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` (a mechanism, not a duration: the bound is only a safety net)."""
    deadline = time.monotonic() + 120
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _steps(url: str, run_id: str, key: str = "kl") -> list[int]:
    return sorted(m.step for m in MlflowClient(url).get_metric_history(run_id, key))


def _flush(spool: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["tracking", "flush", str(spool), *args])
    return result.exit_code, result.output


def test_mlflow_back_without_the_run_keeps_the_records_for_a_new_run(
    gateway: GatewayProxy, mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    tracker = Tracker.start(
        gateway.url, experiment_name, "lost", spec_yaml="a: 1\n", settings=FAST,
        params={"lr": "0.1"}, tags={"team": "a"}, spool_root=tmp_path / "spools",
    )  # fmt: skip
    for step in range(3):
        tracker.log_metrics({"kl": float(step)}, step=step)
    assert tracker.drain(60) == 0
    with running_mlflow_server(tmp_path / "restored") as restored:  # a new database
        gateway.retarget(restored.url)
        for step in range(3, 6):
            tracker.log_metrics({"kl": float(step)}, step=step)
        tracker.log_image(write_png(tmp_path / "map.png"))
        tracker.finish("FINISHED")
        # Three steps, the map and the run's status: kept, not dropped as "rejected".
        assert tracker.left == 5
        assert tracker.rejected == 0
        old = tracker.run_id
        assert "no longer exists" in tracker.closing_line()
        assert f"sarl tracking flush {tracker.spool_dir} --new-run" in tracker.closing_line()

        code, output = _flush(tracker.spool_dir, "--timeout", "60")
        assert code == 1, output
        assert f"run {old} no longer exists" in output and "--new-run" in output

        code, output = _flush(tracker.spool_dir, "--new-run", "--timeout", "60")
        assert code == 0, output
        client = MlflowClient(restored.url)
        (run,) = client.search_runs([client.get_experiment_by_name(experiment_name).experiment_id])
        assert f"run {old} replaced by new run {run.info.run_id}" in output
        assert run.info.run_name == "lost" and run.info.status == "FINISHED"
        assert run.data.params == {"lr": "0.1"}
        assert run.data.tags["team"] == "a" and run.data.tags[REPLACES_TAG] == old
        assert _steps(restored.url, run.info.run_id) == [3, 4, 5]  # each once
        assert [a.path for a in client.list_artifacts(run.info.run_id, "maps")] == ["maps/map.png"]


@pytest.mark.parametrize("status", [403, 401, 400])
def test_a_gateway_refusing_for_a_while_loses_nothing(
    gateway: GatewayProxy,
    mlflow_server: MlflowServer,
    experiment_name: str,
    tmp_path: Path,
    status: int,
) -> None:
    tracker = Tracker.start(
        gateway.url, experiment_name, "gw", spec_yaml="", settings=FAST,
        spool_root=tmp_path / "spools",
    )  # fmt: skip
    tracker.log_metrics({"kl": 0.0}, step=0)
    assert tracker.drain(60) == 0
    gateway.refuse(status)
    for step in range(1, 4):
        tracker.log_metrics({"kl": float(step)}, step=step)
    _wait_for(lambda: gateway.refused >= 3, "the drainer never retried")
    tracker.finish("FINISHED", wait_s=0.5)
    assert tracker.left == 4 and tracker.rejected == 0  # three steps and the status
    code, output = _flush(tracker.spool_dir, "--timeout", "1")
    assert code == 1, output
    assert "4 records still waiting" in output and f"{status}" in output
    if status in (401, 403):
        assert "MLFLOW_TRACKING_TOKEN" in output

    gateway.forward()
    code, output = _flush(tracker.spool_dir, "--timeout", "60")
    assert code == 0, output
    assert _steps(mlflow_server.url, tracker.run_id) == [0, 1, 2, 3]
    assert MlflowClient(mlflow_server.url).get_run(tracker.run_id).info.status == "FINISHED"


def test_only_what_mlflow_refuses_is_set_aside(
    mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    """A tag key over MLflow's 250 characters (``MAX_ENTITY_KEY_LENGTH``): refused as
    INVALID_PARAMETER_VALUE; the metric record in the same batch as a refused one still goes."""
    tracker = Tracker.start(
        mlflow_server.url, experiment_name, "refused", spec_yaml="", settings=FAST,
        spool_root=tmp_path / "spools",
    )  # fmt: skip
    tracker.log_metrics({"kl": 0.0}, step=0)
    tracker.set_tags({"k" * 300: "v"})
    tracker.log_metrics({"kl": 1.0}, step=1)
    tracker.finish()
    assert (tracker.left, tracker.rejected) == (0, 1)
    closing = tracker.closing_line()
    assert "NOT complete" in closing and "1 records refused" in closing
    (entry,) = [json.loads(line) for line in (tracker.spool_dir / "rejected.jsonl").open()]
    assert entry["record"]["kind"] == "tags" and "INVALID_PARAMETER_VALUE" in entry["reason"]
    assert _steps(mlflow_server.url, tracker.run_id) == [0, 1]

    # A metric MLflow refuses inside a batch of good ones (written by hand: the Tracker checks
    # names): the batch is split, the good points are delivered, flush exits 3.
    spool = Spool(tmp_path / "by-hand", tracker.run_id, mlflow_server.url)
    for step in (2, 3, 4):
        key = "x" * 300 if step == 3 else "kl"
        spool.append("metrics", {"step": step, "metrics": [[key, 1.0, 1000 + step]]})
    spool.close()
    code, output = _flush(tmp_path / "by-hand", "--timeout", "60")
    assert code == 3, output
    assert "2 records sent" in output and "1 records refused by MLflow" in output
    assert _steps(mlflow_server.url, tracker.run_id) == [0, 1, 2, 4]


def test_a_run_finished_during_an_outage_keeps_its_end_time(
    gateway: GatewayProxy, mlflow_server: MlflowServer, experiment_name: str, tmp_path: Path
) -> None:
    tracker = Tracker.start(
        gateway.url, experiment_name, "ended", spec_yaml="", settings=FAST,
        spool_root=tmp_path / "spools",
    )  # fmt: skip
    assert tracker.drain(60) == 0
    gateway.refuse(503)
    tracker.finish("FINISHED", wait_s=0.2)
    finished_ms = int(time.time() * 1000)
    time.sleep(0.05)  # the flush is later than the end, by more than a millisecond
    gateway.forward()
    code, output = _flush(tracker.spool_dir, "--timeout", "60")
    assert code == 0, output
    run = MlflowClient(mlflow_server.url).get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and run.info.end_time <= finished_ms


def test_status_works_while_the_run_is_alive_and_changes_nothing(
    gateway: GatewayProxy, experiment_name: str, tmp_path: Path
) -> None:
    tracker = Tracker.start(
        gateway.url, experiment_name, "alive", spec_yaml="", settings=FAST,
        spool_root=tmp_path / "spools",
    )  # fmt: skip
    assert tracker.drain(60) == 0
    gateway.refuse(503)
    tracker.log_metrics({"kl": 1.0}, step=1)
    tracker.log_metrics({"kl": 2.0}, step=2)
    before = (tracker.spool_dir / "records.jsonl").read_bytes()
    result = CliRunner().invoke(app, ["tracking", "status", str(tracker.spool_dir)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"2 records of run {tracker.run_id} waiting for ")
    assert "(the run is sending them now)" in result.output
    assert (tracker.spool_dir / "records.jsonl").read_bytes() == before
    gateway.forward()
    tracker.finish()
    assert tracker.left == 0


def test_flush_does_not_wait_past_its_timeout_for_a_hung_server(
    gateway: GatewayProxy,
    mlflow_server: MlflowServer,
    experiment_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A send held by a hung server is not waited for past the deadline (it was: the sender
    thread was joined for 5 s more); checked on the join's bound, not on the clock."""
    tracker = Tracker.start(
        gateway.url, experiment_name, "hung", spec_yaml="", settings=FAST,
        spool_root=tmp_path / "spools",
    )  # fmt: skip
    assert tracker.drain(60) == 0
    gateway.hold()
    tracker.log_metrics({"kl": 1.0}, step=1)
    _wait_for(lambda: gateway.held >= 1, "the drainer never sent")
    tracker.abandon()
    joins: list[float] = []
    stop = drainer_module.Drainer.stop

    def spy(self: drainer_module.Drainer, timeout_s: float = 5.0) -> None:
        joins.append(timeout_s)
        stop(self, timeout_s)

    monkeypatch.setattr(drainer_module.Drainer, "stop", spy)
    code, output = _flush(tracker.spool_dir, "--timeout", "1")
    assert code == 1, output
    assert "1 records still waiting" in output
    assert joins and all(j <= 1.0 for j in joins)
    gateway.forward()
    code, output = _flush(tracker.spool_dir, "--timeout", "60")
    assert code == 0, output
    assert _steps(mlflow_server.url, tracker.run_id) == [1]
