"""``RunResult`` as a notebook shows it: headline metrics and where the MLflow run is (HTML and
text alike), its final metrics as one DataFrame row, and the reasoning maps it logged read back
from a real MLflow store."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sarl import display
from sarl.runner.result import RunResult
from sarl.tracking.tracker import Tracker
from tests.sarl.tracking.conftest import write_png

METRICS = {
    "entropy": 1.5,
    "reward/mean": 0.25,
    "loss": 0.0,
    "eval/heldout/avg_at_4": 0.375,
    "accuracy": 0.5,
}


def _result(**kwargs: object) -> RunResult:
    fields: dict[str, object] = {
        "run_id": "r" * 32,
        "run_url": None,
        "tracking_uri": "sqlite:////tmp/x/mlflow.db",
        "checkpoint_uri": "/tmp/x/ckpt",
        "steps": 16,
        "final_metrics": METRICS,
        "name": "local-structure",
        **kwargs,
    }
    return RunResult(**fields)  # type: ignore[arg-type]


def test_headline_orders_the_summary_metrics_and_leaves_out_the_rest() -> None:
    assert list(_result().headline()) == [
        "reward/mean",
        "accuracy",
        "entropy",
        "eval/heldout/avg_at_4",
    ]


def test_html_shows_the_run_its_metrics_and_how_to_browse_it() -> None:
    html = _result()._repr_html_()
    assert "<b>Run local-structure: 16 steps</b>" in html
    assert f"MLflow run {'r' * 32} at sqlite:////tmp/x/mlflow.db" in html
    assert "mlflow ui --backend-store-uri sqlite:////tmp/x/mlflow.db" in html
    assert '<tr><td>reward/mean</td><td class="num">0.25</td></tr>' in html
    assert "<td>loss</td>" not in html


@pytest.mark.parametrize(
    ("kwargs", "heading"),
    [
        ({"resumed_from": 8}, "Run local-structure: 16 steps (resumed from step 8)"),
        (
            {"resumed_from": 16, "already_finished": True},
            "Run local-structure: 16 steps (already finished: nothing trained)",
        ),
        ({"name": ""}, f"Run {'r' * 32}: 16 steps"),
    ],
)
def test_heading(kwargs: dict[str, object], heading: str) -> None:
    assert str(_result(**kwargs)).splitlines()[0] == heading


def test_a_server_run_links_to_its_page() -> None:
    url = "http://mlflow:5000/#/experiments/1/runs/" + "r" * 32
    text = display.to_text(_result(run_url=url, tracking_uri="http://mlflow:5000"), width=200)
    assert f"at {url}" in text and "mlflow ui" not in text


def test_a_local_run_links_to_its_page_in_the_training_layout() -> None:
    text = display.to_text(_result(experiment_id="3"), width=200)
    page = f"http://127.0.0.1:5000/#/experiments/3/runs/{'r' * 32}?workflowType=machine_learning"
    assert f"then open {page}" in text


def test_to_frame_is_one_row_named_after_the_run() -> None:
    frame = _result().to_frame()
    assert list(frame.index) == ["local-structure"]
    assert frame.loc["local-structure", "steps"] == 16
    assert frame.loc["local-structure", "reward/mean"] == 0.25
    assert {"run_id", *METRICS} <= set(frame.columns)


@pytest.fixture
def logged(tmp_path: Path) -> RunResult:
    """A run with maps at steps 1 and 2 (two samples each) in a SQLite store."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker.start(uri, "maps-test", "mapped", spec_yaml="")
    for step in (1, 2):
        for sample in range(2):
            png = write_png(tmp_path / f"sample-{sample}.png", width=step + sample + 1)
            tracker.log_image(png, f"maps/step-{step:06d}")
    tracker.finish()
    return _result(run_id=tracker.run_id, tracking_uri=uri, name="mapped")


def test_maps_are_those_of_the_last_step(logged: RunResult) -> None:
    gallery = logged.maps()
    assert gallery.title == "mapped: reasoning maps at step 2"
    assert [i.caption for i in gallery] == ["sample-0", "sample-1"]
    assert all(i.png.startswith(b"\x89PNG") for i in gallery)
    assert gallery._repr_html_().count("data:image/png;base64,") == 2


def test_maps_of_a_chosen_step(logged: RunResult, capfd: pytest.CaptureFixture[str]) -> None:
    first, last = logged.maps(step=1), logged.maps(step=2)
    assert [i.png for i in first] != [i.png for i in last]  # each step's own pictures
    assert "Downloading artifacts" not in capfd.readouterr().err  # no MLflow download bar
    with pytest.raises(ValueError, match="no maps at step 3; it logged maps at steps 1, 2"):
        logged.maps(step=3)
    assert "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR" not in os.environ  # put back


def test_a_run_without_maps_says_so(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker.start(uri, "maps-test", "plain", spec_yaml="")
    tracker.finish()
    gallery = _result(run_id=tracker.run_id, tracking_uri=uri).maps()
    assert len(gallery) == 0
    assert "the run logged no reasoning maps" in gallery._repr_html_()
