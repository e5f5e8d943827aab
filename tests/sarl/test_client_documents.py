"""What the notebooks do with the public client instead of internals (issue 40 item 5): a Study
with overrides over its base and other seeds (``Client.local().study(..., overrides=, seeds=)``),
and an Experiment validated for a cluster and renamed without a request
(``sarl.Client.validate``). The bundled example documents, validated for real."""

from __future__ import annotations

from pathlib import Path

import pytest

import sarl
from sarl.client import _study_with

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
DEMO = EXAMPLES / "studies" / "local-demo.yaml"


def test_study_overrides_reach_every_arm_and_seeds_are_replaced() -> None:
    study = _study_with(DEMO, {"algorithm": {"max_steps": 4}}, [3])
    runs = study.runs()
    assert {r.seed for r in runs} == {3}
    assert {r.arm for r in runs} == {"ground-truth", "structure"}
    assert all(r.experiment.spec.algorithm.max_steps == 4 for r in runs)
    # The arms' own overrides still apply on top of the base.
    names = {r.arm: r.experiment.spec.reward[0].name for r in runs}
    assert names == {"ground-truth": "ground_truth", "structure": "structure"}


def test_a_bad_study_override_names_the_file_and_the_field() -> None:
    with pytest.raises(sarl.SpecError, match=r"local-demo.yaml \+ overrides: .*learning_rate"):
        _study_with(DEMO, {"algorithm": {"learning_rate": -1}}, None)


def test_no_overrides_is_the_document_as_written() -> None:
    assert _study_with(DEMO, None, None) == sarl.spec.load_study(DEMO)


def test_validate_for_the_cluster_renames_without_a_request() -> None:
    experiment = sarl.Client.validate(EXAMPLES / "sarl-grpo-math.yaml", name="my-math")
    assert isinstance(experiment, sarl.Experiment)
    assert experiment.name == "my-math"
    assert sarl.Client.validate(str(EXAMPLES / "sarl-grpo-math.yaml")).name != "my-math"


def test_validate_for_the_cluster_refuses_a_bad_name() -> None:
    with pytest.raises(sarl.SpecError, match="metadata.name"):
        sarl.Client.validate(EXAMPLES / "sarl-grpo-math.yaml", name="Not_A_Name")
