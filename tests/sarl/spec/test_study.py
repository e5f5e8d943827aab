"""The Study document: expansion into arm x seed Experiments and errors that name the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sarl.spec.loader import SpecError, load_study
from sarl.spec.study import TAG_ARM, TAG_PARENT, TAG_SEED, TAG_STUDY, run_name

BASE: dict[str, Any] = {
    "apiVersion": "sarl.dev/v1alpha1",
    "kind": "Study",
    "metadata": {"name": "demo", "labels": {"team": "rl"}},
    "spec": {
        "base": {"preset": "local-grpo-arithmetic", "algorithm": {"max_steps": 4}},
        "arms": [
            {
                "name": "ground-truth",
                "override": {
                    "reward": [
                        {"name": "ground_truth"},
                        {"name": "structure", "weight": 0.0},
                    ]
                },
            },
            {"name": "sarl", "override": {"algorithm": {"learning_rate": 3e-4}}},
        ],
        "seeds": [0, 1],
    },
}


def doc(**changes: Any) -> dict[str, Any]:
    d = copy.deepcopy(BASE)
    d["spec"].update(changes)
    return d


def test_runs_are_arm_by_seed_seed_major() -> None:
    study = load_study(doc())
    runs = study.runs(parent_run_id="p123")
    assert [(r.arm, r.seed) for r in runs] == [
        ("ground-truth", 0),
        ("sarl", 0),
        ("ground-truth", 1),
        ("sarl", 1),
    ]
    assert [r.name for r in runs] == [run_name("demo", r.arm, r.seed) for r in runs]
    assert runs[0].name == "demo-ground-truth-s0"


def test_override_merges_over_base_and_preset() -> None:
    gt, sarl = load_study(doc()).runs()[:2]
    assert [t.name for t in gt.experiment.spec.reward] == ["ground_truth", "structure"]
    assert gt.experiment.spec.algorithm.learning_rate != 3e-4
    assert sarl.experiment.spec.algorithm.learning_rate == 3e-4
    # The base's own field and the preset's fields survive the override.
    assert sarl.experiment.spec.algorithm.max_steps == 4
    assert sarl.experiment.spec.model.name == "builtin:tiny-qwen"
    assert [t.name for t in sarl.experiment.spec.reward] == ["structure"]


def test_seed_labels_and_tags() -> None:
    run = load_study(doc()).runs(parent_run_id="p123")[3]
    exp = run.experiment
    assert exp.spec.algorithm.seed == 1
    assert exp.metadata.labels == {
        "team": "rl",
        "sarl.dev/study": "demo",
        "sarl.dev/arm": "sarl",
        "sarl.dev/seed": "1",
    }
    tags = exp.spec.tracking.tags
    assert tags[TAG_PARENT] == "p123"
    assert (tags[TAG_STUDY], tags[TAG_ARM], tags[TAG_SEED]) == ("demo", "sarl", "1")
    assert exp.spec.tracking.experiment_name == "demo"


def test_without_parent_no_parent_tag() -> None:
    assert TAG_PARENT not in load_study(doc()).runs()[0].experiment.spec.tracking.tags


def test_reference_defaults_to_first_arm() -> None:
    assert load_study(doc()).spec.reference_arm == "ground-truth"
    assert load_study(doc(reference="sarl")).spec.reference_arm == "sarl"


def _arm(i: int, **override: Any) -> dict[str, Any]:
    d = doc()
    d["spec"]["arms"][i]["override"].update(override)
    return d


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (_arm(1, algoritm={"learning_rate": 1}), "spec.arms[1].override.algoritm"),
        (
            _arm(1, algorithm={"learning_rate": -1}),
            "spec.arms[1].override.algorithm.learning_rate=-1: Input should be greater than 0",
        ),
        (
            _arm(0, reward=[{"name": "no_such_reward"}]),
            "spec.arms[0].override.reward",
        ),
        (_arm(1, preset="paper-grpo-math"), "cannot change the preset"),
        (_arm(1, algorithm={"seed": 3}), "set per run by spec.seeds"),
        (
            _arm(1, algorithm={"mini_batch_size": 100}),
            "mini_batch_size: 100 exceeds train_batch_size 8",
        ),
        (
            doc(arms=[{"name": "a", "override": {"data": {"task": "dataset"}}}]),
            "spec.arms[0].override.data",
        ),
        (doc(seeds=[1, 1]), "spec.seeds=[1, 1]: duplicate seeds [1]"),
        (doc(seeds=[]), "spec.seeds=[]"),
        (doc(seeds=[-1]), "seeds must be >= 0"),
        (doc(arms=[]), "spec.arms=[]"),
        (doc(reference="ppo"), "spec.reference='ppo': is not an arm"),
        (doc(parallelism=0), "spec.parallelism=0"),
        (
            doc(arms=[{"name": "a"}, {"name": "a"}]),
            "spec.arms=['a']: duplicate arm names",
        ),
        (doc(arms=[{"name": "Bad_Name"}]), "spec.arms[0].name='Bad_Name'"),
        (
            doc(arms=[{"name": "a", "overide": {}}]),
            "spec.arms[0].overide: unknown field; did you mean 'override'?",
        ),
    ],
)
def test_errors_name_the_field(document: dict[str, Any], expected: str) -> None:
    with pytest.raises(SpecError) as info:
        load_study(document)
    message = str(info.value)
    assert expected in message
    assert "\n" not in message


def test_names_must_fit_kubernetes() -> None:
    d = doc()
    d["metadata"]["name"] = "s" * 30
    d["spec"]["arms"] = [{"name": "a" * 30}]
    with pytest.raises(SpecError, match=r"metadata\.name=.*at most 63"):
        load_study(d)


def test_yaml_file_and_label(tmp_path: Any) -> None:
    import yaml

    path = tmp_path / "study.yaml"
    bad = doc(seeds=[2, 2])
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(SpecError, match=r"study\.yaml: spec\.seeds"):
        load_study(path)
    path.write_text(yaml.safe_dump(doc()))
    assert load_study(path).name == "demo"


def test_kind_must_be_study() -> None:
    d = doc()
    d["kind"] = "Experiment"
    with pytest.raises(SpecError, match="kind"):
        load_study(d)
