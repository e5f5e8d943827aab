"""``--set KEY=VALUE`` on a raw document: dotted paths (list items as ``[i]`` or ``.i``), YAML
values, missing mappings created, and one-line errors naming the key and the closest valid one
without echoing the value."""

from __future__ import annotations

from typing import Any

import pytest

from sarl.spec import SpecError
from sarl.spec.loader import validate_document, validate_study
from sarl.spec.overrides import apply_sets, parse_key


def doc() -> dict[str, Any]:
    return {
        "apiVersion": "sarl.dev/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": "x"},
        "spec": {"preset": "local-grpo-arithmetic", "reward": [{"name": "structure"}]},
    }


@pytest.mark.parametrize(
    ("key", "loc"),
    [
        ("spec.algorithm.max_steps", ("spec", "algorithm", "max_steps")),
        ("spec.reward[1].weight", ("spec", "reward", 1, "weight")),
        ("spec.reward.1.weight", ("spec", "reward", 1, "weight")),
        ("spec.arms[0].override.reward[2]", ("spec", "arms", 0, "override", "reward", 2)),
    ],
)
def test_keys(key: str, loc: tuple[Any, ...]) -> None:
    assert parse_key(key) == loc


@pytest.mark.parametrize(
    ("sets", "check"),
    [
        # a field the file does not hold: the preset's other algorithm fields stay
        (["spec.algorithm.max_steps=5"], lambda e: e.spec.algorithm.max_steps == 5),
        (
            ["spec.algorithm.max_steps=5"],
            lambda e: e.spec.algorithm.rollouts_per_prompt == 8,  # from the preset
        ),
        (["spec.reward[0].weight=0.5"], lambda e: e.spec.reward[0].weight == 0.5),
        (["spec.reward.0.weight=0"], lambda e: e.spec.reward[0].weight == 0.0),
        (
            ["spec.reward[1]={name: ground_truth, weight: 0}"],
            lambda e: [t.name for t in e.spec.reward] == ["structure", "ground_truth"],
        ),
        (
            ["spec.reward[0].settings.clustering=hdbscan"],
            lambda e: e.spec.reward[0].settings == {"clustering": "hdbscan"},
        ),
        (["spec.data.shuffle=true"], lambda e: e.spec.data.shuffle is True),
        (["metadata.labels.team=rl"], lambda e: e.metadata.labels == {"team": "rl"}),
        (  # later wins
            ["spec.algorithm.max_steps=5", "spec.algorithm.max_steps=7"],
            lambda e: e.spec.algorithm.max_steps == 7,
        ),
        # null is a value (no cap here), not "back to the preset's 64"
        (["spec.algorithm.max_steps=null"], lambda e: e.spec.algorithm.max_steps is None),
    ],
)
def test_sets_change_the_document_before_validation(sets: list[str], check: Any) -> None:
    original = doc()
    assert check(validate_document(apply_sets(original, sets)))
    assert original == doc()  # the caller's document is left alone


def test_a_study_is_edited_with_study_paths() -> None:
    study = {
        "kind": "Study",
        "metadata": {"name": "s"},
        "spec": {
            "base": {"preset": "local-grpo-arithmetic"},
            "arms": [{"name": "a"}],
            "seeds": [0],
        },
    }
    edited = apply_sets(study, ["spec.base.algorithm.max_steps=3", "spec.seeds=[0, 1]"])
    runs = validate_study(edited).runs()
    assert [r.experiment.spec.algorithm.max_steps for r in runs] == [3, 3]
    with pytest.raises(SpecError, match=r"spec has no field 'bas'; did you mean 'base'\?"):
        apply_sets(study, ["spec.bas.algorithm.max_steps=3"])


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            "spec.algorithm.max_step=5",
            "--set spec.algorithm.max_step: spec.algorithm has no field 'max_step'; did you mean "
            "'max_steps'?",
        ),
        (
            "spec.algoritm.max_steps=5",
            "--set spec.algoritm.max_steps: spec has no field 'algoritm'; did you mean "
            "'algorithm'?",
        ),
        ("foo=1", "--set foo: no field 'foo' at the top or under spec; known: algorithm, "),
        (
            "algoritm.max_steps=5",
            "--set algoritm.max_steps: no field 'algoritm' at the top or under spec; did you mean "
            "'algorithm'?",
        ),
        ("spec.algorithm", "--set: expected KEY=VALUE (e.g. --set spec.algorithm.max_steps=5)"),
        ("=5", "--set: expected KEY=VALUE"),
        ("spec..x=1", "--set spec..x: '' is not a field name or [index]"),
        (
            "spec.reward[3].weight=0",
            "--set spec.reward[3].weight: spec.reward has 1 item, so there is no item [3] (the "
            "next one is [1])",
        ),
        (
            "spec.evaluation.benchmarks[0]=math500",
            "--set spec.evaluation.benchmarks[0]: spec.evaluation.benchmarks is not in the file "
            "(its items come from the preset or the defaults); set the whole list",
        ),
        ("metadata.labels.a.b=c", "--set metadata.labels.a.b: metadata.labels.a is not a mapping"),
        ("spec.algorithm.max_steps=[1", "--set spec.algorithm.max_steps:"),
    ],
)
def test_bad_sets_name_the_key(item: str, message: str) -> None:
    with pytest.raises(SpecError) as info:
        apply_sets(doc(), [item])
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_a_value_is_never_echoed_in_a_set_error() -> None:
    secret = "hf_Zq8xT2mNv4Lp9Rk3Wb7Yc1Ds"
    for item in (f"spec.algoritm.x={secret}", f"spec.reward[5].name={secret}", secret):
        with pytest.raises(SpecError) as info:
            apply_sets(doc(), [item])
        assert secret not in str(info.value)


def test_keys_may_leave_out_the_spec_prefix() -> None:
    """Issue 40 item 7: ``algorithm.max_steps=5`` is ``spec.algorithm.max_steps=5`` (and under
    a Study's ``spec.base``), since only that place has an ``algorithm`` field."""
    assert apply_sets(doc(), ["algorithm.max_steps=5", "reward[0].weight=2"]) == apply_sets(
        doc(), ["spec.algorithm.max_steps=5", "spec.reward[0].weight=2"]
    )
    study = {
        "kind": "Study",
        "metadata": {"name": "s"},
        "spec": {"base": {"preset": "local-grpo-arithmetic"}, "arms": [{"name": "a"}]},
    }
    edited = apply_sets(study, ["algorithm.max_steps=3", "seeds=[0, 1]"])
    assert edited["spec"]["base"]["algorithm"] == {"max_steps": 3}
    assert edited["spec"]["seeds"] == [0, 1]
    assert apply_sets(doc(), ["metadata.name=y"])["metadata"]["name"] == "y"  # the top first


def test_a_key_two_places_have_is_refused_naming_both() -> None:
    """Exactly one place must have the first field; the Experiment and Study models have no
    such overlap, so a document model that does (``spec.x`` and ``spec.base.x``) shows it."""
    from pydantic import BaseModel

    from sarl.spec.overrides import with_prefix

    class Base(BaseModel):
        x: int = 0

    class Spec(BaseModel):
        base: Base = Base()
        x: int = 0

    class Doc(BaseModel):
        spec: Spec = Spec()

    with pytest.raises(SpecError) as info:
        with_prefix(Doc, ("x",), "x")
    assert str(info.value) == (
        "--set x: 'x' is a field of several places; write --set spec.x=... or --set spec.base.x=..."
    )
