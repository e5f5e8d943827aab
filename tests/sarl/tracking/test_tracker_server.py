"""Tracker against the real MLflow server: a run's params, spec, metrics and images, and resume.

Everything is read back through a separate ``MlflowClient``, as the MLflow UI or a notebook
would see it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from mlflow import MlflowClient

from sarl.tracking.tracker import SPEC_ARTIFACT, Tracker, TrackingError, flatten_params
from tests.support.mlflow_server import MlflowServer

SPEC_YAML = "apiVersion: sarl.dev/v1alpha1\nkind: Experiment\nmetadata:\n  name: demo\n"
SPEC = {"metadata": {"name": "demo"}, "spec": {"algorithm": {"name": "grpo", "kl_coef": 0.001},
        "reward": [{"name": "structure", "weight": 1.0}]}}  # fmt: skip


def _history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


@pytest.fixture
def started(mlflow_server: MlflowServer, experiment_name: str) -> Tracker:
    return Tracker.start(
        mlflow_server.url,
        experiment_name,
        "run-a",
        tags={"sarl.preset": "demo"},
        params=flatten_params(SPEC),
        spec_yaml=SPEC_YAML,
    )


def test_start_logs_params_tags_and_spec(
    started: Tracker, mlflow_server: MlflowServer, tmp_path: Path
) -> None:
    assert started.drain(60) == 0  # the spec artifact is sent in the background
    client = MlflowClient(mlflow_server.url)
    run = client.get_run(started.run_id)
    assert run.info.status == "RUNNING"
    assert run.info.run_name == "run-a"
    assert run.data.params == {
        "metadata.name": "demo",
        "spec.algorithm.kl_coef": "0.001",
        "spec.algorithm.name": "grpo",
        "spec.reward.0.name": "structure",
        "spec.reward.0.weight": "1.0",
    }
    assert run.data.tags["sarl.preset"] == "demo"
    local = client.download_artifacts(started.run_id, SPEC_ARTIFACT, str(tmp_path))
    assert Path(local).read_text() == SPEC_YAML
    assert started.run_url == (
        f"{mlflow_server.url}/#/experiments/{started.experiment_id}/runs/{started.run_id}"
        "?workflowType=machine_learning"
    )


def test_metrics_by_step_skip_nan_and_none(started: Tracker, mlflow_server: MlflowServer) -> None:
    for step in range(3):
        started.log_metrics(
            {"reward/mean": 0.1 * step, "kl": math.nan, "accuracy": None, "entropy": 2.0 - step},
            step=step,
        )
    assert started.drain(60) == 0  # metrics are sent in the background
    client = MlflowClient(mlflow_server.url)
    assert _history(client, started.run_id, "reward/mean") == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert _history(client, started.run_id, "entropy") == [(0, 2.0), (1, 1.0), (2, 0.0)]
    metrics = client.get_run(started.run_id).data.metrics
    assert "kl" not in metrics
    assert "accuracy" not in metrics


def test_many_params_and_metrics_are_batched(
    mlflow_server: MlflowServer, experiment_name: str
) -> None:
    params = {f"p{i:03d}": str(i) for i in range(250)}  # > MLflow's 100 params per batch
    tracker = Tracker.start(mlflow_server.url, experiment_name, "big", params=params, spec_yaml="")
    tracker.log_metrics({f"m/{i:04d}": float(i) for i in range(1500)}, step=0)  # > 1000
    assert tracker.drain(60) == 0
    run = MlflowClient(mlflow_server.url).get_run(tracker.run_id)
    assert len(run.data.params) == 250
    assert len(run.data.metrics) == 1500


def test_image_and_files_are_listed(
    started: Tracker, mlflow_server: MlflowServer, png_file: Path, tmp_path: Path
) -> None:
    started.log_image(png_file, "maps")
    started.log_dict({"a": 1}, "eval/summary.json")
    png_file.write_bytes(b"changed after logging")  # the spool sent its own copy
    assert started.drain(60) == 0
    client = MlflowClient(mlflow_server.url)
    assert [f.path for f in client.list_artifacts(started.run_id, "maps")] == [
        "maps/map_step_5.png"
    ]
    local = client.download_artifacts(started.run_id, "maps/map_step_5.png", str(tmp_path / "d"))
    assert Path(local).read_bytes().startswith(b"\x89PNG")
    assert [f.path for f in client.list_artifacts(started.run_id, "eval")] == ["eval/summary.json"]
    with pytest.raises(FileNotFoundError):
        started.log_image(tmp_path / "missing.png")


def test_resume_continues_the_same_run(started: Tracker, mlflow_server: MlflowServer) -> None:
    started.log_metrics({"reward/mean": 0.5}, step=1)
    started.finish("KILLED")
    client = MlflowClient(mlflow_server.url)
    assert client.get_run(started.run_id).info.status == "KILLED"

    resumed = Tracker.resume(mlflow_server.url, started.run_id)
    assert resumed.run_id == started.run_id
    assert client.get_run(started.run_id).info.status == "RUNNING"
    resumed.log_metrics({"reward/mean": 0.7}, step=2)
    resumed.set_tags({"sarl.resumed": "1"})
    resumed.finish()

    run = client.get_run(started.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["sarl.resumed"] == "1"
    assert _history(client, started.run_id, "reward/mean") == [(1, 0.5), (2, 0.7)]


def test_resume_of_unknown_run_names_it(mlflow_server: MlflowServer) -> None:
    with pytest.raises(TrackingError, match=r"cannot resume: no run '0{32}' at http://127"):
        Tracker.resume(mlflow_server.url, "0" * 32)


def test_invalid_metric_name_fails_at_once(started: Tracker) -> None:
    with pytest.raises(ValueError, match=r"'eval/heldout/avg@4' is not valid"):
        started.log_metrics({"eval/heldout/avg@4": 0.5}, step=0)


def test_context_manager_marks_failed_runs(
    mlflow_server: MlflowServer, experiment_name: str
) -> None:
    with (
        pytest.raises(RuntimeError, match="boom"),
        Tracker.start(mlflow_server.url, experiment_name, "crash", spec_yaml="") as tracker,
    ):
        tracker.log_metrics({"reward/mean": 1.0}, step=0)
        raise RuntimeError("boom")
    assert MlflowClient(mlflow_server.url).get_run(tracker.run_id).info.status == "FAILED"


def test_two_runs_in_one_process_stay_apart(
    mlflow_server: MlflowServer, experiment_name: str
) -> None:
    one = Tracker.start(mlflow_server.url, experiment_name, "one", spec_yaml="")
    two = Tracker.start(mlflow_server.url, experiment_name, "two", spec_yaml="")
    one.log_metrics({"kl": 1.0}, step=0)
    two.log_metrics({"kl": 2.0}, step=0)
    assert one.drain(60) == 0 and two.drain(60) == 0
    client = MlflowClient(mlflow_server.url)
    assert client.get_run(one.run_id).data.metrics == {"kl": 1.0}
    assert client.get_run(two.run_id).data.metrics == {"kl": 2.0}
    assert one.experiment_id == two.experiment_id


def test_deleted_experiment_is_reported(mlflow_server: MlflowServer, experiment_name: str) -> None:
    client = MlflowClient(mlflow_server.url)
    client.delete_experiment(client.create_experiment(experiment_name))
    with pytest.raises(TrackingError, match=f"experiment '{experiment_name}' .* is deleted"):
        Tracker.start(mlflow_server.url, experiment_name, "r", spec_yaml="")
