"""``sarl reward score`` / ``structure`` refuse NaN, Infinity and 1e309 as the services do.

The services decode bodies with orjson, which refuses all three (400); Python's ``json`` accepts
them (``json/decoder.py``: ``parse_constant`` for ``NaN``/``Infinity``, ``float('1e309')`` is
``inf``), so the CLI scored lines the service refuses. Both now follow one contract
(:mod:`sarl.finite_json`): each such line is that line's error, naming the field.
"""

from __future__ import annotations

import pytest

from sarl.finite_json import NonFiniteNumber, loads, require_finite
from tests.sarl.cli.conftest import RunCli, outputs

HOSTILE = [
    ('{"response": "\\\\boxed{1}", "ground_truth": "1", "score": NaN}', "score", "NaN"),
    (
        '{"response": "\\\\boxed{1}", "ground_truth": "1", "meta": {"w": [1, Infinity]}}',
        "meta.w[1]",
        "Infinity",
    ),
    (
        '{"response": "\\\\boxed{1}", "ground_truth": "1", "temperature": -1e309}',
        "temperature",
        "-Infinity",
    ),
]


@pytest.mark.parametrize("command", [["score", "ground_truth"], ["structure"]])
def test_non_finite_numbers_are_the_lines_error(run_cli: RunCli, command: list[str]) -> None:
    valid = '{"response": "\\\\boxed{1}", "ground_truth": "1", "step_labels": [0]}'
    stdin = "\n".join([valid] + [line for line, _, _ in HOSTILE]) + "\n"
    result = run_cli("reward", *command, stdin=stdin)
    assert result.returncode == 1, result.stderr
    rows = outputs(result)
    assert "error" not in rows[0]
    for number, (row, (_, field, token)) in enumerate(zip(rows[1:], HOSTILE, strict=True), 2):
        assert row["error"].startswith(
            f"line {number}: {field}: expected a finite number, got {token}"
        ), row


@pytest.mark.parametrize("text", ["NaN", "[1e400]", '{"a": {"b": [[-Infinity]]}}'])
def test_loads_refuses_what_orjson_refuses(text: str) -> None:
    orjson = pytest.importorskip("orjson")  # the services' decoder, installed with them
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)
    with pytest.raises(NonFiniteNumber):
        loads(text)


def test_finite_documents_pass_unchanged() -> None:
    text = '{"a": [1e308, 1e308, -0.0, 5e-324], "b": [1, "x", true, null], "c": {"d": 2.5}}'
    assert loads(text) == {
        "a": [1e308, 1e308, -0.0, 5e-324],
        "b": [1, "x", True, None],
        "c": {"d": 2.5},
    }
    require_finite({"big": 10**400})  # an int is exact, never infinite
