"""Reading ``kubectl set env --list`` output (:mod:`sarl.cluster.operator_env`), the file of
``sarl render --operator-env``: kubectl prints ``%s=%s`` with nothing quoted and every
``valueFrom`` entry as a ``#`` comment (kubernetes/kubectl v0.34.0 pkg/cmd/set/set_env.go)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sarl.cluster.operator_env import OperatorEnvError, parse_operator_env, read_operator_env


def test_values_are_everything_after_the_first_equals_and_comments_are_skipped() -> None:
    text = (
        "# deployments/sarl-operator, container operator\n"
        "SARL_S3_BUCKET=first\n"
        "\n"
        "  # MLFLOW_TRACKING_PASSWORD from secret sarl-mlflow, key password\n"
        'SARL_TENANTS={"tenants":[{"namespace":"a=b #c"}]}\n'
        "SARL_DEFAULT_QUEUE=\n"
        "SARL_S3_BUCKET=second\n"
    )
    assert parse_operator_env(text, "f") == {
        "SARL_S3_BUCKET": "second",  # a later entry wins, as in the container
        "SARL_TENANTS": '{"tenants":[{"namespace":"a=b #c"}]}',
        "SARL_DEFAULT_QUEUE": "",
    }


@pytest.mark.parametrize(
    "line", ["no equals sign", "=value", "1ABC=x", "SARL S3=x", '  "namespace": "a=b"']
)
def test_a_line_that_is_not_name_equals_value_is_named_by_number(line: str) -> None:
    with pytest.raises(OperatorEnvError) as caught:
        parse_operator_env(f"A=1\n# c\n{line}\n", "ops.env")
    assert str(caught.value).startswith("ops.env:3: not a NAME=VALUE line (write the file with ")
    assert line.strip() not in str(caught.value)


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(OperatorEnvError, match=r"missing.env: cannot read the operator's env"):
        read_operator_env(tmp_path / "missing.env")
