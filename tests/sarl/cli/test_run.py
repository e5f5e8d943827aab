"""``sarl run`` without ``--local`` points to ``sarl submit`` instead of doing anything."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from sarl.cli.main import app

EXAMPLE = Path(__file__).parents[3] / "examples" / "sarl-grpo-math.yaml"


def test_run_without_local_names_the_submit_command() -> None:
    result = CliRunner().invoke(app, ["run", str(EXAMPLE)])
    assert result.exit_code == 2
    assert f"sarl submit {EXAMPLE}" in result.output
