"""Loading Experiment documents: YAML/dict/objects, and one-line errors naming field and value."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarl.spec import Experiment, ExperimentSpec, SpecError, load_experiment
from sarl.spec.experiment import AlgorithmSpec, RewardTerm

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_validates(path: Path) -> None:
    exp = load_experiment(path)
    assert exp.apiVersion == "sarl.dev/v1alpha1" and exp.kind == "Experiment"
    assert exp.name == path.stem


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"spec": {}}, "metadata: Field required"),
        ({"metadata": {"name": "Bad_Name"}}, "metadata.name='Bad_Name': must be a DNS-1035"),
        (
            {"metadata": {"name": "x"}, "spec": {"algorithm": {"learning_rate": -0.1}}},
            "spec.algorithm.learning_rate=-0.1: Input should be greater than 0",
        ),
        (
            {"metadata": {"name": "x"}, "spec": {"reward": [{"name": "nope"}]}},
            "spec.reward[0].name='nope': unknown reward; known: ",
        ),
        ({"metadata": {"name": "x"}, "spec": {"reward": []}}, "spec.reward=[]"),
        (
            {
                "metadata": {"name": "x"},
                "spec": {"reward": [{"name": "structure", "settings": {"variant": "x"}}]},
            },
            "spec.reward[0].settings.variant='x': Input should be",
        ),
        (
            {"metadata": {"name": "x"}, "spec": {"data": {"task": "dataset"}}},
            "dataset: required when task is 'dataset'",
        ),
        (
            {"metadata": {"name": "x"}, "spec": {"data": {"prompt_template": "no placeholder"}}},
            "must contain the {question} placeholder",
        ),
        (
            {"metadata": {"name": "x"}, "spec": {"algorithm": {"name": "dpo"}}},
            "spec.algorithm.name='dpo'",
        ),
        (
            {"metadata": {"name": "x"}, "spec": {"algorithm": {"mini_batch_size": 512}}},
            "mini_batch_size: 512 exceeds train_batch_size 256",
        ),
        (
            {
                "metadata": {"name": "x"},
                "spec": {"preset": "paper-ppo-math", "resources": {"backend": "trl"}},
            },
            "spec.resources.backend='trl': the TRL trainer trains grpo and rloo only; "
            "algorithm 'ppo' (GAE with a critic) needs backend 'verl': set "
            "spec.resources.backend: verl, or spec.algorithm.name: grpo",
        ),
        (
            {"metadata": {"name": "x"}, "spec": {"resources": {"backend": "deepspeed"}}},
            "spec.resources.backend='deepspeed'",
        ),
        (
            {"metadata": {"name": "x"}, "spec": {"preset": "nope"}},
            "spec.preset='nope': unknown preset",
        ),
        ({"metadata": {"name": "x"}, "spec": {"modle": {}}}, "spec.modle"),
        ({"apiVersion": "v2", "metadata": {"name": "x"}}, "apiVersion='v2'"),
    ],
)
def test_invalid_documents_fail_with_one_line_naming_field_and_value(
    doc: dict[str, object], message: str
) -> None:
    with pytest.raises(SpecError) as info:
        load_experiment(doc)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("metadata:\n  name: x\nspec: [unclosed\n")
    with pytest.raises(SpecError, match=r"bad.yaml: line \d+: invalid YAML"):
        load_experiment(path)


def test_missing_file() -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_experiment("/no/such/exp.yaml")


def test_python_objects_build_the_same_document() -> None:
    exp = Experiment(
        metadata={"name": "nb"},  # type: ignore[arg-type]
        spec=ExperimentSpec(
            algorithm=AlgorithmSpec(name="rloo", learning_rate=1e-5),
            reward=[RewardTerm(name="structure", settings={"clustering": "hdbscan"})],
        ),
    )
    again = load_experiment(exp.model_dump(mode="json"))
    assert again == exp
