"""Duplicate keys, integers past 64 bits and non-finite floats are refused naming the field.

Issue 38 item 9: a 4,301-digit integer ended in PyYAML's ``ValueError`` traceback (CPython's
int-string limit), ``learning_rate: .inf`` validated, and a second top-level ``spec:`` silently
replaced the first. The real loader (:func:`sarl.spec.load_experiment`, the ``--set`` parser)
on real YAML text and on documents given as Python objects (the operator, ``sarl.Client``).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from sarl.spec import SpecError, load_experiment
from sarl.spec.documents import parse_yaml
from sarl.spec.overrides import apply_sets

SPEC = (
    "apiVersion: sarl.dev/v1alpha1\nkind: Experiment\nmetadata:\n  name: t\n"
    "spec:\n  preset: local-grpo-arithmetic\n  algorithm:\n    {field}: {value}\n"
)
HUGE = "9" * 4301
INT_WORDS = "an integer of 4,301 digits, outside 64 bits"
NOT_FINITE = "is not a finite number"


def one_line(text: Any) -> str:
    with pytest.raises(SpecError) as info:
        load_experiment(text)
    message = str(info.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("max_steps", HUGE, INT_WORDS),
        ("max_steps", "-" + HUGE, INT_WORDS),
        ("max_steps", "9223372036854775808", "an integer of 19 digits, outside 64 bits"),
        ("learning_rate", ".inf", f"inf {NOT_FINITE}"),
        ("learning_rate", "-.Inf", f"-inf {NOT_FINITE}"),
        ("learning_rate", ".nan", f"nan {NOT_FINITE}"),
        ("learning_rate", "1.0e+999", f"inf {NOT_FINITE}"),
    ],
)
def test_numbers_in_a_file_are_refused_naming_field_and_line(
    field: str, value: str, words: str
) -> None:
    message = one_line(SPEC.format(field=field, value=value))
    assert message.startswith(f"<text>: line 8: spec.algorithm.{field}: {words}"), message
    assert HUGE not in message


@pytest.mark.parametrize("value", ["1e999", "'-inf'", "nan"])
def test_number_strings_pydantic_would_read_as_non_finite_are_refused(value: str) -> None:
    message = one_line(SPEC.format(field="learning_rate", value=value))
    assert message.startswith("spec.algorithm.learning_rate="), message
    assert "finite number" in message, message


def test_numbers_within_range_still_load() -> None:
    exp = load_experiment(SPEC.format(field="max_steps", value="9223372036854775807"))
    assert exp.spec.algorithm.max_steps == 2**63 - 1
    exp = load_experiment(SPEC.format(field="learning_rate", value="1.0e-6"))
    assert exp.spec.algorithm.learning_rate == pytest.approx(1e-6)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (SPEC.format(field="max_steps", value=4) + "spec:\n  preset: local-grpo-arithmetic\n",
         "<text>: line 9: spec: duplicate key (first at line 5)"),
        (SPEC.format(field="max_steps", value=4) + "    max_steps: 5\n",
         "<text>: line 9: spec.algorithm.max_steps: duplicate key (first at line 8)"),
        ("kind: Experiment\nmetadata: {name: a, name: b}\n",
         "<text>: line 2: metadata.name: duplicate key (first at line 2)"),
        ("kind: Experiment\nspec:\n  reward:\n    - {name: ground_truth, weight: 1, weight: 0}\n",
         "<text>: line 4: spec.reward[0].weight: duplicate key (first at line 4)"),
    ],
    ids=["top-level", "nested", "flow", "in-list"],
)  # fmt: skip
def test_duplicate_keys_are_refused_naming_key_and_both_lines(text: str, words: str) -> None:
    assert one_line(text).startswith(words)


def test_merge_keys_are_not_duplicates() -> None:
    data = parse_yaml("b: &b {x: 1, y: 2}\no: {<<: *b, y: 3}\nm: {<<: [*b], <<: *b}\n", "t")
    assert data["o"] == {"x": 1, "y": 3}


def test_a_huge_integer_as_a_key_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape(f"line 1: {INT_WORDS}")):
        parse_yaml(f"? {HUGE}\n: 1\n", "t")


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("spec.algorithm.max_steps", HUGE, INT_WORDS),
        ("spec.algorithm.learning_rate", ".inf", f"inf {NOT_FINITE}"),
        ("spec.algorithm", "{max_steps: 3, max_steps: 4}", "max_steps: duplicate key"),
    ],
    ids=["huge-int", "inf", "duplicate"],
)
def test_set_values_are_refused_in_one_line(key: str, value: str, words: str) -> None:
    doc = parse_yaml(SPEC.format(field="max_steps", value=4), "t")
    with pytest.raises(SpecError) as info:
        apply_sets(doc, [f"{key}={value}"])
    message = str(info.value)
    assert message.startswith(f"--set {key}: line 1: {words}"), message
    assert "\n" not in message
    assert "quote text" not in message  # quoting is no fix for these


@pytest.mark.parametrize(
    ("value", "words"),
    [(10**5000, "an integer of about 5,000 digits"), (float("inf"), f"inf {NOT_FINITE}"),
     (float("nan"), f"nan {NOT_FINITE}"), (-(2**63) - 1, "an integer of 19 digits")],
    ids=["huge-int", "inf", "nan", "int64-min-minus-1"],
)  # fmt: skip
def test_documents_given_as_objects_are_refused_naming_the_field(value: Any, words: str) -> None:
    doc = {"kind": "Experiment", "metadata": {"name": "t"}, "spec": {"reward": [{"weight": value}]}}
    assert one_line(doc).startswith(f"document: spec.reward[0].weight: {words}")


@pytest.mark.parametrize(
    ("setting", "value"),
    [("correct_score", "'1e999'"), ("wrong_score", "'-inf'"), ("missing_answer_score", "'nan'")],
)
def test_reward_settings_read_as_non_finite_are_refused(setting: str, value: str) -> None:
    """A reward's Settings model is not a spec model: pydantic read these strings as inf/nan."""
    text = (
        "kind: Experiment\nmetadata: {name: t}\nspec:\n  preset: local-grpo-arithmetic\n"
        f"  reward:\n    - name: ground_truth\n      settings: {{{setting}: {value}}}\n"
    )
    message = one_line(text)
    assert message.startswith(f"spec.reward[0].settings.{setting}="), message
    assert "not a finite number" in message, message
