"""Progress bars are drawn only for a person at a terminal, and SARL_NO_PROGRESS turns them off."""

from __future__ import annotations

import io

import pytest

from sarl.storage.progress import show_progress


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self._tty = tty

    def isatty(self) -> bool:
        return self._tty


@pytest.mark.parametrize(
    ("tty", "no_progress", "expected"),
    [(True, None, True), (True, "1", False), (False, None, False), (False, "1", False)],
)
def test_progress_shown_only_on_a_tty_without_sarl_no_progress(
    monkeypatch: pytest.MonkeyPatch, tty: bool, no_progress: str | None, expected: bool
) -> None:
    monkeypatch.setattr("sys.stderr", _Stream(tty))
    if no_progress is None:
        monkeypatch.delenv("SARL_NO_PROGRESS", raising=False)
    else:
        monkeypatch.setenv("SARL_NO_PROGRESS", no_progress)
    assert show_progress() is expected
