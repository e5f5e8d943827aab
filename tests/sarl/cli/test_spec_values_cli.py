"""``sarl validate`` refuses a huge integer, an infinite rate and a duplicate key in one line.

The real ``sarl`` in a subprocess (``run_cli``), on a file and on ``--set``: a 4,301-digit
integer printed PyYAML's ``ValueError`` traceback, ``learning_rate: .inf`` validated, and a
second top-level ``spec:`` silently replaced the first (issue 38 item 9).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sarl.cli.conftest import RunCli

SPEC = (
    "apiVersion: sarl.dev/v1alpha1\nkind: Experiment\nmetadata:\n  name: t\n"
    "spec:\n  preset: local-grpo-arithmetic\n  algorithm:\n    max_steps: 4\n"
)
HUGE = "9" * 4301


@pytest.mark.parametrize(
    ("tail", "sets", "words"),
    [
        (
            f"    learning_rate: {HUGE}\n",
            [],
            "line 9: spec.algorithm.learning_rate: an integer of 4,301 digits",
        ),
        (
            "    learning_rate: .inf\n",
            [],
            "line 9: spec.algorithm.learning_rate: inf is not a finite number",
        ),
        (
            "spec:\n  preset: local-grpo-arithmetic\n",
            [],
            "line 9: spec: duplicate key (first at line 5)",
        ),
        (
            "",
            ["--set", f"spec.algorithm.max_steps={HUGE}"],
            "--set spec.algorithm.max_steps: line 1: an integer of 4,301",
        ),
        (
            "",
            ["--set", "spec.algorithm.learning_rate=.inf"],
            "--set spec.algorithm.learning_rate: line 1: inf is not",
        ),
    ],
    ids=["huge-int", "inf", "duplicate-spec", "set-huge-int", "set-inf"],
)
def test_validate_refuses_in_one_line(
    run_cli: RunCli, tmp_path: Path, tail: str, sets: list[str], words: str
) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC + tail)
    result = run_cli("validate", str(path), *sets)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert words in lines[0] and HUGE not in lines[0], result.stderr
