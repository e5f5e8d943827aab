"""sarl_operator.tracking against the real MLflow server (``mlflow_server`` fixture) and a real
loopback HTTP server that fails on purpose; the JSON -> status mappings on their own."""

from __future__ import annotations

import http.server
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from sarl_operator.tracking import (
    MlflowTracking,
    Progress,
    RunRef,
    TrackingError,
    progress_from_metrics,
    run_url,
    uid_filter,
)
from tests.support.mlflow_server import free_port


@pytest.mark.parametrize(
    ("metrics", "expected"),
    [
        ([], None),
        ([{"key": "kl", "value": 0.1, "step": 3}], None),
        ([{"key": "reward/mean", "value": 0.5, "step": 3}], Progress(3, 0.5)),
        ([{"key": "critic/score/mean", "value": 0.2, "step": 9}], Progress(9, 0.2)),
        ([{"key": "reward", "value": 0.4, "step": 2}], Progress(2, 0.4)),  # the TRL backend
        (
            [
                {"key": "critic/score/mean", "value": 0.2, "step": 9},
                {"key": "reward/mean", "value": 0.7, "step": 8},
            ],
            Progress(8, 0.7),  # sarl's own metric wins over verl's
        ),
    ],
)
def test_progress_from_metrics(metrics: list[dict[str, Any]], expected: Progress | None) -> None:
    assert progress_from_metrics(metrics) == expected


def test_run_url_and_filter() -> None:
    ref = RunRef(run_id="abc", experiment_id="4")
    assert run_url("http://mlflow:5000/", ref) == (
        "http://mlflow:5000/#/experiments/4/runs/abc?workflowType=machine_learning"
    )
    assert uid_filter("u-1") == "tags.`sarl.dev/experiment-uid` = 'u-1'"


def test_run_found_by_uid_tag_and_progress_read(mlflow_server: Any) -> None:
    from mlflow import MlflowClient

    tracking = MlflowTracking(mlflow_server.url)
    kwargs: dict[str, Any] = {"run_name": "exp-t", "namespace": "ns", "tags": {"team": "a"}}
    first = tracking.ensure_run("tracking-test", uid="uid-a", **kwargs)
    assert tracking.ensure_run("tracking-test", uid="uid-a", **kwargs) == first
    other = tracking.ensure_run("tracking-test", uid="uid-b", **kwargs)
    assert other.run_id != first.run_id and other.experiment_id == first.experiment_id
    client = MlflowClient(mlflow_server.url)
    run = client.get_run(first.run_id)
    assert run.info.run_name == "exp-t"
    assert run.data.tags["sarl.dev/experiment-uid"] == "uid-a"
    assert run.data.tags["sarl.dev/namespace"] == "ns" and run.data.tags["team"] == "a"
    assert tracking.latest_progress(first.run_id) is None
    for step, value in [(1, 0.1), (2, 0.4)]:
        client.log_metric(first.run_id, "reward/mean", value, step=step)
    assert tracking.latest_progress(first.run_id) == Progress(step=2, reward=0.4)


def test_experiments_are_model_training_and_runs_described_with_arm_params(
    mlflow_server: Any,
) -> None:
    from mlflow import MlflowClient

    from sarl.tracking.describe import EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND, NOTE_TAG

    tracking = MlflowTracking(mlflow_server.url)
    client = MlflowClient(mlflow_server.url)
    name = f"kind-{uuid.uuid4().hex[:8]}"
    ref = tracking.ensure_run(
        name,
        run_name="fan-structure-s1",
        namespace="ns",
        uid="uid-k",
        params={"arm": "structure", "seed": "1"},
        description="Arm **structure**, seed 1.",
        experiment_description="Study 'fan'.",
    )
    experiment = client.get_experiment(ref.experiment_id)
    assert experiment.tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING_KIND
    assert experiment.tags[NOTE_TAG] == "Study 'fan'."
    run = client.get_run(ref.run_id)
    assert run.data.params == {"arm": "structure", "seed": "1"}
    assert run.data.tags[NOTE_TAG] == "Arm **structure**, seed 1."
    # A reconcile that finds the run logs the same params again: accepted, nothing changes.
    again = tracking.ensure_run(
        name, run_name="x", namespace="ns", uid="uid-k", params={"arm": "structure", "seed": "1"}
    )
    assert again == ref
    # An experiment made elsewhere gets the kind it lacks.
    plain = client.create_experiment(f"plain-{uuid.uuid4().hex[:8]}")
    assert tracking.experiment_id(client.get_experiment(plain).name) == plain
    assert client.get_experiment(plain).tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING_KIND


def test_unreachable_server_raises_after_bounded_retries() -> None:
    waits: list[float] = []
    tracking = MlflowTracking(
        f"http://127.0.0.1:{free_port()}", timeout_s=1.0, max_retries=2, sleep=waits.append
    )
    with pytest.raises(TrackingError, match=r"ConnectError.*after 3 attempts"):
        tracking.experiment_id("x")
    assert len(waits) == 2 and all(0 <= w <= tracking.max_backoff_s for w in waits)


class _Flaky(http.server.BaseHTTPRequestHandler):
    """503 for the first ``failures`` requests, then MLflow's get-by-name answer."""

    failures = 0
    seen = 0

    def do_GET(self) -> None:
        type(self).seen += 1
        ok = type(self).seen > type(self).failures
        body = b'{"experiment": {"experiment_id": "5"}}' if ok else b"overloaded"
        self.send_response(200 if ok else 503)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def flaky() -> Iterator[str]:
    _Flaky.seen = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("failures", "ok"), [(2, True), (3, False)])
def test_5xx_is_retried_max_retries_times(flaky: str, failures: int, ok: bool) -> None:
    _Flaky.failures = failures
    tracking = MlflowTracking(flaky, max_retries=2, sleep=lambda _s: None)
    if ok:
        assert tracking.experiment_id("x") == "5"
    else:
        with pytest.raises(TrackingError, match="HTTP 503: overloaded"):
            tracking.experiment_id("x")
    assert _Flaky.seen == 3
