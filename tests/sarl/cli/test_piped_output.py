"""Command output that is not a terminal is not wrapped at 80 columns (issue 40 item 7): a
path, a URL or a run's line piped to a file or ``grep`` stays one line. ``sarl study run``'s
closing lines (``sarl.cli.study_run._print``) printed through pytest's captured (non-terminal)
stdout, from a real report built from run histories (``tests.sarl.study.test_result``)."""

from __future__ import annotations

import pytest

from sarl.cli import study_run
from tests.sarl.study.test_result import _result


def test_study_run_lines_are_whole_when_piped(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    uri = "sqlite:///" + "/very/long/workdir/of/a/researcher" * 4 + "/mlflow.db"
    study_run._print(_result(uri=uri))
    lines = capsys.readouterr().out.splitlines()
    assert f"MLflow parent run {'p' * 32} at {uri}" in lines
    assert "demo-gt-s1: failed: RuntimeError: <boom>" in lines
