"""``load_experiment(..., overrides=...)`` (``sarl.Client.local().validate``/``run``): fields
merged over a document's ``spec`` before validation, nested mappings merging and lists
replacing, with errors that say the overrides took part."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sarl.spec import SpecError, load_experiment

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "local-structure.yaml"


@pytest.mark.parametrize("source", ["path", "text", "experiment"])
def test_overrides_merge_over_the_spec(source: str) -> None:
    given: Any = {
        "path": EXAMPLE,
        "text": EXAMPLE.read_text(),
        "experiment": load_experiment(EXAMPLE),
    }[source]
    plain = load_experiment(EXAMPLE)
    exp = load_experiment(given, overrides={"algorithm": {"max_steps": 3}})
    assert exp.spec.algorithm.max_steps == 3
    # The other fields of the same mapping, and the preset's, are kept.
    assert exp.spec.algorithm.name == plain.spec.algorithm.name
    assert exp.spec.algorithm.learning_rate == plain.spec.algorithm.learning_rate
    assert exp.spec.data == plain.spec.data
    assert exp.name == plain.name


def test_a_list_is_replaced_and_the_source_left_as_it_was() -> None:
    doc = {"metadata": {"name": "x"}, "spec": {"reward": [{"name": "structure"}]}}
    exp = load_experiment(doc, overrides={"reward": [{"name": "ground_truth", "weight": 2.0}]})
    assert [(r.name, r.weight) for r in exp.spec.reward] == [("ground_truth", 2.0)]
    assert doc["spec"] == {"reward": [{"name": "structure"}]}


def test_a_document_without_spec_takes_the_overrides_as_its_spec() -> None:
    exp = load_experiment({"metadata": {"name": "x"}}, overrides={"algorithm": {"max_steps": 4}})
    assert exp.spec.algorithm.max_steps == 4


def test_no_overrides_returns_the_experiment_itself() -> None:
    exp = load_experiment(EXAMPLE)
    assert load_experiment(exp, overrides={}) is exp


@pytest.mark.parametrize(
    ("source", "prefix"),
    [(EXAMPLE, f"{EXAMPLE} + overrides: "), ({"metadata": {"name": "x"}, "spec": {}}, "")],
)
def test_an_error_names_the_field_and_the_overrides(source: Any, prefix: str) -> None:
    with pytest.raises(SpecError) as raised:
        load_experiment(source, overrides={"algorithm": {"learning_rate": -1.0}})
    assert str(raised.value) == (
        f"{prefix}spec.algorithm.learning_rate=-1.0: Input should be greater than 0"
    )
