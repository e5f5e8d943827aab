"""``sarl render`` and ``sarl submit --dry-run`` without the ``sarl-operator`` package: one line
naming the package to install, exit 2, no traceback (issue 40 item 3).

The package is installed in the test environment, so its absence is simulated: the entry point
lookup of :mod:`sarl.cli.render` is replaced by one that finds nothing (the only fake here; the
command itself is the real CLI, run with typer's runner)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sarl.cli import render
from sarl.cli.main import app

STUDY = Path(__file__).resolve().parents[3] / "examples" / "studies" / "sarl-math.yaml"


@pytest.mark.parametrize("args", [["render", str(STUDY)], ["submit", "--dry-run", str(STUDY)]])
def test_names_the_package_to_install(monkeypatch: pytest.MonkeyPatch, args: list[str]) -> None:
    monkeypatch.setattr(render, "entry_points", lambda group: [])
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr == (
        "error: rendering needs the operator's builders: pip install sarl-operator (from this "
        "repository: pip install -e operators)\n"
    )
    assert result.stdout == ""
