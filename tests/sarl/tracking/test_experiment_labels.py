"""Experiments sarl creates are "model training" experiments with a description, and its runs
carry a description, in a real MLflow store (SQLite in tmp_path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mlflow import MlflowClient

from sarl.tracking.describe import EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND, NOTE_TAG
from sarl.tracking.tracker import Tracker


@pytest.fixture
def uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    # An experiment made "by hand" (MlflowClient, no artifact location) keeps its artifacts in
    # ./mlruns: in tmp_path, not in the checkout the suite runs from.
    monkeypatch.chdir(tmp_path)
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def _start(uri: str, experiment: str = "labels", **kwargs: Any) -> Tracker:
    tracker = Tracker.start(uri, experiment, "r1", spec_yaml="a: 1\n", **kwargs)
    tracker.finish()
    return tracker


def test_a_new_experiment_is_model_training_with_a_description(uri: str) -> None:
    tracker = _start(uri, description="Arm **structure**, seed 0.")
    client = MlflowClient(uri)
    experiment = client.get_experiment(tracker.experiment_id)
    assert experiment.tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING_KIND
    assert "Group by" in experiment.tags[NOTE_TAG]  # says where the arms are
    assert client.get_run(tracker.run_id).data.tags[NOTE_TAG] == "Arm **structure**, seed 0."


def test_the_callers_experiment_description_is_used(uri: str) -> None:
    tracker = _start(uri, experiment_description="Study 'x': 2 arms.")
    tags = MlflowClient(uri).get_experiment(tracker.experiment_id).tags
    assert tags[NOTE_TAG] == "Study 'x': 2 arms."


def test_an_experiment_made_elsewhere_gets_the_kind_and_keeps_its_own_choices(uri: str) -> None:
    client = MlflowClient(uri)
    plain = client.create_experiment("labels")  # by an older sarl, or by hand
    tracker = _start(uri)
    assert tracker.experiment_id == plain
    tags = client.get_experiment(plain).tags
    assert tags[EXPERIMENT_KIND_TAG] == MODEL_TRAINING_KIND and tags[NOTE_TAG]
    chosen = {EXPERIMENT_KIND_TAG: "genai_development", NOTE_TAG: "ours"}
    other = client.create_experiment("chosen", tags=chosen)
    _start(uri, "chosen")
    assert {k: client.get_experiment(other).tags[k] for k in chosen} == chosen


def test_a_description_among_the_spec_tags_wins(uri: str) -> None:
    tracker = _start(uri, description="sarl's", tags={NOTE_TAG: "the user's"})
    assert MlflowClient(uri).get_run(tracker.run_id).data.tags[NOTE_TAG] == "the user's"


def test_a_study_run_starts_with_arm_and_seed_params_and_says_what_it_is(uri: str) -> None:
    """What the local runner and the TRL job start for each arm x seed of a Study."""
    from sarl.spec.loader import load_study

    demo = Path(__file__).resolve().parents[3] / "examples" / "studies" / "local-demo.yaml"
    run = load_study(demo).runs("parent-id")[1]  # arm structure, seed 0
    tracker = Tracker.start_experiment(uri, run.experiment, backend="trl")
    tracker.finish()
    logged = MlflowClient(uri).get_run(tracker.run_id)
    assert {k: logged.data.params[k] for k in ("arm", "seed")} == {"arm": "structure", "seed": "0"}
    assert logged.data.params["algorithm.seed"] == "0"  # the flattened spec is there too
    assert logged.data.tags["sarl.backend"] == "trl" and logged.data.tags["arm"] == "structure"
    assert logged.data.tags[NOTE_TAG].startswith("Arm **structure**, seed 0 of Study 'local-demo'")
    assert logged.info.run_name == "local-demo-structure-s0"
