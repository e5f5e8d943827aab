"""``sarl.progress``: where a bar goes decides how it is drawn — plain lines at most once per
interval in a log (no carriage returns), an HTML bar updated in place in a notebook, nothing when
switched off."""

from __future__ import annotations

import io
from typing import Any

import pytest

from sarl import progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SARL_NO_PROGRESS", raising=False)
    monkeypatch.delenv("SARL_PROGRESS_INTERVAL", raising=False)


def test_modes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert progress.progress_mode() == "log"
    monkeypatch.setattr("sys.stderr", _Tty())
    assert progress.progress_mode() == "terminal"
    monkeypatch.setattr(progress, "in_notebook", lambda: True)
    assert progress.progress_mode() == "notebook"
    monkeypatch.setenv("SARL_NO_PROGRESS", "1")
    assert progress.progress_mode() == "off"


def test_not_a_notebook_here() -> None:
    assert progress.in_notebook() is False


@pytest.mark.parametrize(("raw", "seconds"), [("", 30.0), ("5", 5.0), ("0.1", 1.0), ("x", 30.0)])
def test_log_interval(monkeypatch: pytest.MonkeyPatch, raw: str, seconds: float) -> None:
    monkeypatch.setenv("SARL_PROGRESS_INTERVAL", raw)
    assert progress.log_interval() == seconds


def test_a_log_gets_lines_not_carriage_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    monkeypatch.setenv("SARL_PROGRESS_INTERVAL", "3600")  # no redraw between start and end
    bar = progress.progress_bar(range(500), desc="warm start", unit="step")
    assert isinstance(bar, progress.LogBar)
    for i in bar:
        bar.set_postfix(loss=i)  # tqdm redraws at once on set_postfix by default
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 2, lines  # the start, the end
    assert lines[0].startswith("warm start:   0%") and "0/500" in lines[0]
    assert lines[1].startswith("warm start: 100%") and "500/500" in lines[1]
    assert "loss=499" in lines[1]


def test_a_log_bar_ended_early_prints_where_it_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    bar = progress.progress_bar(total=10, desc="training", leave=False)
    bar.update(3)
    bar.close()
    bar.close()  # a second close (e.g. the session's clean-up after on_train_end) adds nothing
    lines = log.getvalue().splitlines()
    assert len(lines) == 2 and "3/10" in lines[-1]


@pytest.mark.parametrize("mode", ["disabled", "env"])
def test_off_prints_nothing(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    if mode == "env":
        monkeypatch.setenv("SARL_NO_PROGRESS", "1")
    bar = progress.progress_bar(range(5), desc="x", enabled=mode != "disabled")
    assert list(bar) == [0, 1, 2, 3, 4]
    bar.close()
    assert log.getvalue() == ""


def test_a_terminal_gets_tqdm_redraws(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    with progress.progress_bar(total=3, desc="runs", mininterval=0) as bar:
        bar.update(3)
    assert "\r" in tty.getvalue() and "3/3" in tty.getvalue()


class _Handle:
    def __init__(self, shown: list[Any]) -> None:
        self.shown = shown

    def update(self, obj: Any) -> None:
        self.shown.append(obj)


@pytest.fixture
def notebook(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Pretend to be a kernel: what the bars display, in order."""
    import IPython.display

    shown: list[Any] = []

    def fake_display(obj: Any, display_id: bool = False) -> _Handle:
        assert display_id, "a bar must be displayed with a handle to update it in place"
        shown.append(obj)
        return _Handle(shown)

    monkeypatch.setattr(progress, "in_notebook", lambda: True)
    monkeypatch.setattr(IPython.display, "display", fake_display)
    return shown


def test_a_notebook_gets_one_html_bar_updated_in_place(
    notebook: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    stderr = io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    bar = progress.progress_bar(total=4, desc="training", unit="step", mininterval=0)
    assert isinstance(bar, progress.NotebookBar)
    for _ in range(4):
        bar.update(1)
    bar.close()
    last = notebook[-1]
    assert '<progress value="4" max="4"' in last._repr_html_()
    assert "training: 100%" in repr(last) and "4/4" in repr(last)
    assert stderr.getvalue() == ""  # nothing on stderr: a kernel would show it as a red box


def test_a_notebook_bar_without_leave_disappears(notebook: list[Any]) -> None:
    bar = progress.progress_bar(total=2, desc="upload", leave=False, mininterval=0)
    bar.update(2)
    bar.close()
    assert notebook[-1]._repr_html_() == ""


def test_notebook_bar_of_unknown_length_is_indeterminate(notebook: list[Any]) -> None:
    bar = progress.progress_bar(desc="lines", mininterval=0)
    bar.update(7)
    bar.close()
    html = notebook[-1]._repr_html_()
    assert "<progress style" in html and "value=" not in html
    assert "7" in repr(notebook[-1])


def test_notebook_redraws_are_throttled(notebook: list[Any]) -> None:
    bar = progress.progress_bar(total=1000, desc="x", mininterval=3600)
    for i in range(1000):
        bar.update(1)
        bar.set_postfix(i=i)
    bar.close()
    assert len(notebook) == 2  # the first draw and the final state


@pytest.mark.parametrize(
    ("tty", "off", "enabled", "printed"),
    [
        (False, False, True, "step-0 evaluation…\n"),  # a log
        (True, False, True, "step-0 evaluation…\n"),  # a terminal
        (False, True, True, ""),  # SARL_NO_PROGRESS
        (False, False, False, ""),  # the caller turned progress off
    ],
)
def test_a_status_line_says_what_a_step_without_bar_does(
    monkeypatch: pytest.MonkeyPatch, tty: bool, off: bool, enabled: bool, printed: str
) -> None:
    stderr = _Tty() if tty else io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    if off:
        monkeypatch.setenv("SARL_NO_PROGRESS", "1")
    progress.status_line("step-0 evaluation…", enabled=enabled)
    assert stderr.getvalue() == printed


def test_a_status_line_in_a_notebook_is_not_on_stderr(monkeypatch: pytest.MonkeyPatch) -> None:
    # A front end shows every stderr output as an error box.
    stdout, stderr = io.StringIO(), io.StringIO()
    monkeypatch.setattr("sys.stdout", stdout)
    monkeypatch.setattr("sys.stderr", stderr)
    monkeypatch.setattr(progress, "in_notebook", lambda: True)
    progress.status_line("step-0 evaluation…")
    assert stdout.getvalue() == "step-0 evaluation…\n"
    assert stderr.getvalue() == ""
