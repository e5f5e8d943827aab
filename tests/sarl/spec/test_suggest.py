"""Typos in a spec: the error names the field as it is written (``spec.reward[0].name``) and the
closest valid name, for unknown keys, literal choices, reward names, reward settings, presets
and kinds; the refused value is never echoed when it could be a secret."""

from __future__ import annotations

from typing import Any

import pytest

from sarl.rewards.registry import RewardConfigError, get_reward_class, parse_settings
from sarl.spec import Experiment, SpecError, load_experiment, load_study
from sarl.spec.experiment import ExperimentSpec
from sarl.spec.presets import preset
from sarl.spec.suggest import FieldError, closest, expected_choices, fields_at, path


def exp(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "x"}, "spec": spec}


@pytest.mark.parametrize(
    ("loc", "written"),
    [
        (("spec", "reward", 0, "name"), "spec.reward[0].name"),
        (("spec", "arms", 1, "override", "reward", 0), "spec.arms[1].override.reward[0]"),
        (("metadata",), "metadata"),
        ((), ""),
    ],
)
def test_paths_are_written_as_in_the_document(loc: tuple[Any, ...], written: str) -> None:
    assert path(loc) == written


@pytest.mark.parametrize(
    ("word", "choices", "best"),
    [
        ("structur", ["structure", "ground_truth"], "structure"),
        ("grp", ["grpo", "rloo", "ppo"], "grpo"),
        ("GRPO", ["grpo", "rloo", "ppo"], "grpo"),  # case does not hide the match
        ("wieght", ["name", "weight", "settings"], "weight"),
        ("zzzzzz", ["grpo", "rloo", "ppo"], None),  # nothing close: no guess
        ("grpo", ["grpo"], None),  # the word itself is no suggestion
        (5, ["grpo"], None),
    ],
)
def test_closest_valid_name(word: Any, choices: list[str], best: str | None) -> None:
    assert closest(word, choices) == best


def test_fields_at_follows_models_lists_and_stops_at_free_mappings() -> None:
    assert fields_at(Experiment, ("spec", "reward", 0)) == ["name", "weight", "settings"]
    assert "max_steps" in (fields_at(Experiment, ("spec", "algorithm")) or [])
    assert fields_at(Experiment, ("spec", "reward", 0, "settings")) is None  # dict[str, Any]
    assert fields_at(ExperimentSpec, ("nope",)) is None


def test_expected_choices_of_a_pydantic_literal_error() -> None:
    assert expected_choices("'grpo', 'rloo' or 'ppo'") == ["grpo", "rloo", "ppo"]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            exp(reward=[{"name": "structur"}]),
            "spec.reward[0].name='structur': unknown reward; did you mean 'structure'?",
        ),
        (
            exp(reward=[{"name": "structure", "wieght": 1}]),
            "spec.reward[0].wieght: unknown field; did you mean 'weight'?",
        ),
        (
            exp(algoritm={"max_steps": 1}),
            "spec.algoritm: unknown field; did you mean 'algorithm'?",
        ),
        (
            exp(algorithm={"name": "grp"}),
            "spec.algorithm.name='grp': Input should be 'grpo', 'rloo' or 'ppo'; did you mean "
            "'grpo'?",
        ),
        (
            exp(reward=[{"name": "structure", "settings": {"clustring": "kmeans"}}]),
            "spec.reward[0].settings.clustring: unknown setting; did you mean 'clustering'?",
        ),
        (
            exp(reward=[{"name": "structure", "settings": {"clustering": "kmean"}}]),
            "spec.reward[0].settings.clustering='kmean': Input should be 'kmeans' or 'hdbscan'; "
            "did you mean 'kmeans'?",
        ),
        (
            exp(preset="local-grpo-arithmetc"),
            "spec.preset='local-grpo-arithmetc': unknown preset; did you mean "
            "'local-grpo-arithmetic'?",
        ),
        (
            exp(model={"dtype": "bfloat61"}),
            "spec.model.dtype='bfloat61': Input should be 'float32', 'bfloat16' or 'float16'; did "
            "you mean 'bfloat16'?",
        ),
        (
            {**exp(), "kind": "Experment"},
            "kind='Experment': unknown kind; did you mean 'Experiment'?",
        ),
        (
            {**exp(), "kind": "Study"},
            "kind='Study': this document is a Study, not an Experiment; load it with load_study()",
        ),
    ],
)
def test_typos_name_the_field_and_the_closest_name(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as info:
        load_experiment(doc)
    assert str(info.value) == message


def test_nothing_close_lists_what_is_known() -> None:
    with pytest.raises(SpecError) as info:
        load_experiment(exp(reward=[{"name": "zzzzzz"}]))
    assert "unknown reward; known: empo, format_length, ground_truth" in str(info.value)
    with pytest.raises(SpecError) as info:
        load_experiment(exp(tracking={"zzzzzz": 1}))
    assert str(info.value) == (
        "spec.tracking.zzzzzz: unknown field; known fields: mlflow_uri, experiment_name, tags, "
        "log_maps_every_n_steps"
    )


def test_a_study_names_its_own_paths_with_hints() -> None:
    doc = {
        "kind": "Study",
        "metadata": {"name": "s"},
        "spec": {
            "base": {"preset": "local-grpo-arithmetic"},
            "arms": [{"name": "a", "override": {"reward": [{"name": "ground_trut"}]}}],
        },
    }
    with pytest.raises(SpecError) as info:
        load_study(doc)
    assert str(info.value) == (
        "spec.arms[0].override.reward[0].name='ground_trut': unknown reward; did you mean "
        "'ground_truth'?"
    )
    doc["spec"]["arms"][0]["override"] = {"algorithm": {"max_step": 2}}
    with pytest.raises(SpecError) as info:
        load_study(doc)
    assert str(info.value) == (
        "spec.arms[0].override.algorithm.max_step: unknown field; did you mean 'max_steps'?"
    )
    doc["spec"]["arms"][0]["override"] = {"reward": [{"weight": 1.0}]}
    with pytest.raises(SpecError) as info:
        load_study(doc)
    assert str(info.value) == "spec.arms[0].override.reward[0].name: Field required"
    with pytest.raises(SpecError, match="this document is an Experiment, not a Study"):
        load_study({**exp(), "kind": "Experiment"})


def test_a_secret_typed_into_a_name_is_not_echoed() -> None:
    token = "hf_Zq8xT2mNv4Lp9Rk3Wb7Yc1Ds"  # a token pasted where a reward name goes
    with pytest.raises(SpecError) as info:
        load_experiment(exp(reward=[{"name": token}]))
    assert token not in str(info.value)
    assert str(info.value).startswith("spec.reward[0].name=<str>: unknown reward; known: ")


def test_the_registry_and_presets_say_the_same_outside_a_spec() -> None:
    with pytest.raises(RewardConfigError, match=r"reward: unknown name 'structur'; did you mean"):
        get_reward_class("structur")
    with pytest.raises(RewardConfigError, match=r"setting 'clustring': unknown setting; did you"):
        parse_settings("structure", {"clustring": "kmeans"})
    with pytest.raises(FieldError, match=r"preset='paper-grpo-mat': unknown preset; did you"):
        preset("paper-grpo-mat")
