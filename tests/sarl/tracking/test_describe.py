"""What sarl tells MLflow's UI about its experiments and runs (sarl.tracking.describe): the kind
MLflow's UI bundle knows, descriptions that say what a run is, a Study run's arm/seed params."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarl.spec import load_experiment
from sarl.spec.loader import load_study
from sarl.tracking.describe import (
    ARMS_HOWTO,
    EXPERIMENT_KIND_TAG,
    MODEL_TRAINING_KIND,
    NOTE_TAG,
    UI_TRAINING_QUERY,
    experiment_description,
    missing_experiment_tags,
    run_description,
    study_description,
    study_run_params,
    ui_url,
)

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "examples" / "studies" / "local-demo.yaml"


def _ui_bundle() -> str:
    """The installed MLflow UI's main JavaScript bundle (where the experiment kinds are)."""
    mlflow = pytest.importorskip("mlflow")
    js = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    mains = sorted(js.glob("main.*.js"))
    if not mains:
        pytest.skip("this MLflow install has no UI bundle")
    return mains[0].read_text(encoding="utf-8", errors="replace")


def test_the_kind_tag_and_the_layout_switch_are_the_ones_mlflows_ui_reads() -> None:
    bundle = _ui_bundle()
    # ExperimentKind enum and the tag lookup (getExperimentKindFromTags) in MLflow 3.17.2.
    assert f'CUSTOM_MODEL_DEVELOPMENT="{MODEL_TRAINING_KIND}"' in bundle
    assert f'"{EXPERIMENT_KIND_TAG}"===e.key' in bundle
    # The UI's global layout switch and its query parameter (WorkflowType.MACHINE_LEARNING).
    key, value = UI_TRAINING_QUERY.split("=")
    assert f'MACHINE_LEARNING="{value}"' in bundle and f'get("{key}")' in bundle


def test_ui_url_opens_the_training_layout() -> None:
    assert ui_url("http://mlflow:5000/", "3") == (
        "http://mlflow:5000/#/experiments/3/runs?workflowType=machine_learning"
    )
    assert ui_url("http://mlflow:5000", "3", "abc") == (
        "http://mlflow:5000/#/experiments/3/runs/abc?workflowType=machine_learning"
    )


def test_study_runs_are_described_and_get_arm_and_seed_params() -> None:
    study = load_study(DEMO)
    runs = study.runs("parent-id")
    assert [study_run_params(r.experiment.spec.tracking.tags) for r in runs] == [
        {"arm": "ground-truth", "seed": "0"},
        {"arm": "structure", "seed": "0"},
        {"arm": "ground-truth", "seed": "1"},
        {"arm": "structure", "seed": "1"},
    ]
    text = run_description(runs[1].experiment)
    assert text.startswith("Arm **structure**, seed 0 of Study 'local-demo'.")
    for part in ("GRPO", "structure (weight 1)", "ground_truth (weight 0)", "builtin:tiny-qwen"):
        assert part in text, part


def test_a_run_outside_a_study_has_no_arm_params() -> None:
    exp = load_experiment(
        {"metadata": {"name": "solo"}, "spec": {"preset": "local-grpo-arithmetic"}}
    )
    assert study_run_params(exp.spec.tracking.tags) == {}
    # A user's own tag called "arm" makes no Study run: sarl's role tag decides.
    assert study_run_params({"arm": "mine", "seed": "3"}) == {}
    assert run_description(exp).startswith("Experiment 'solo': GRPO")


def test_the_study_and_its_experiment_say_what_the_arms_are_and_how_to_see_them() -> None:
    study = load_study(DEMO)
    parent = study_description(study)
    assert "2 arms x 2 seeds" in parent
    assert "**ground-truth** (reference) — GRPO on the ground-truth answer reward; " in parent
    assert "**structure** — GRPO on the SARL structure reward" in parent
    # Where to click comes first: MLflow folds the description to two lines above the table.
    about = experiment_description("local-demo", study)
    assert about == f"{ARMS_HOWTO}\n\n{parent}"
    assert experiment_description("solo").startswith(ARMS_HOWTO)  # it may hold Studies too


@pytest.mark.parametrize(
    ("existing", "added"),
    [
        ({}, {EXPERIMENT_KIND_TAG, NOTE_TAG}),
        ({EXPERIMENT_KIND_TAG: "genai_development"}, {NOTE_TAG}),  # someone chose GenAI
        ({NOTE_TAG: "my notes"}, {EXPERIMENT_KIND_TAG}),
        ({EXPERIMENT_KIND_TAG: MODEL_TRAINING_KIND, NOTE_TAG: "x"}, set()),
        ({EXPERIMENT_KIND_TAG: "", NOTE_TAG: ""}, {EXPERIMENT_KIND_TAG, NOTE_TAG}),
    ],
)
def test_an_existing_experiment_only_gets_the_tags_it_lacks(
    existing: dict[str, str], added: set[str]
) -> None:
    tags = missing_experiment_tags(existing, "about")
    assert set(tags) == added
    assert tags.get(EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND) == MODEL_TRAINING_KIND
