"""Progress bars for sarl's long loops: one policy for terminals, notebooks and logs.

Called by every loop that shows progress: the built-in policy's warm start
(:mod:`sarl.runner.tiny`), the trainer's step bar (:mod:`sarl.runner.callbacks`), Study runs
(:mod:`sarl.study.runner`), checkpoint transfers (:mod:`sarl.storage.base`), evaluation and
token counting, ``sarl reward score``. :func:`progress_bar` returns a tqdm bar drawn to suit
where the output goes (:func:`progress_mode`):

* ``notebook`` (a Jupyter kernel): an HTML bar updated in place through a display handle. Every
  front end renders it and the saved notebook keeps its last state; tqdm's notebook bar needs
  ipywidgets (not a sarl dependency) and without it falls back to a text bar with a warning.
* ``terminal`` (stderr is a TTY): tqdm's usual bar, redrawn in place.
* ``log`` (a file, CI, a pipe): one plain line when the bar starts, at most one per
  ``SARL_PROGRESS_INTERVAL`` seconds (default 30) and one when it ends, each ending in a newline.
  tqdm's redraws are carriage returns, which a log keeps one after the other: a ``make demo`` log
  held thousands of them per bar.
* ``off``: ``SARL_NO_PROGRESS`` is set (any non-empty value), or the caller disabled the bar.

Updates are throttled in every mode (tqdm's ``set_postfix`` redraws at once by default; these
bars redraw at most once per ``mininterval``). A step that has no bar of its own but takes a
while (preparing the built-in policy, the step-0 evaluation) says what it does in one line on
stderr, in a notebook on stdout (:func:`status_line`), so no bar seems to hang at 0 % meanwhile.
"""

from __future__ import annotations

import html
import importlib
import io
import os
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from tqdm.std import tqdm

if TYPE_CHECKING:
    _Tqdm = tqdm[Any]  # generic in types-tqdm only; at run time tqdm is a plain class
else:
    _Tqdm = tqdm
Mode = Literal["notebook", "terminal", "log", "off"]

#: Seconds between two lines of a bar in a log (``SARL_PROGRESS_INTERVAL`` overrides).
LOG_INTERVAL_S = 30.0
#: Seconds between two redraws of a notebook bar (each is a message to the front end).
NOTEBOOK_INTERVAL_S = 0.5


def progress_mode() -> Mode:
    """Where bars go now (see the module docstring)."""
    if os.environ.get("SARL_NO_PROGRESS"):
        return "off"
    if in_notebook():
        return "notebook"
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):  # no stderr, or a closed one
        return "off"
    return "terminal" if tty else "log"


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (an IPython shell that talks to a front end)."""
    zmqshell = sys.modules.get("ipykernel.zmqshell")
    ipython = sys.modules.get("IPython")
    if zmqshell is None or ipython is None:
        return False
    shell = ipython.get_ipython()
    return isinstance(shell, zmqshell.ZMQInteractiveShell)


def log_interval() -> float:
    """``SARL_PROGRESS_INTERVAL`` in seconds (at least 1), else :data:`LOG_INTERVAL_S`."""
    raw = os.environ.get("SARL_PROGRESS_INTERVAL", "")
    try:
        return max(1.0, float(raw))
    except ValueError:
        return LOG_INTERVAL_S


def status_line(message: str, *, enabled: bool = True) -> None:
    """Print ``message`` as one line on stderr, unless progress is off (``enabled=False`` or
    mode ``off``): what a long step without a bar of its own is doing. In a notebook it goes to
    stdout: a front end shows stderr as an error box, and this is no error."""
    mode = progress_mode() if enabled else "off"
    if mode == "off":
        return
    print(message, file=sys.stdout if mode == "notebook" else sys.stderr, flush=True)


def progress_bar(
    iterable: Iterable[Any] | None = None,
    *,
    desc: str | None = None,
    total: float | None = None,
    enabled: bool = True,
    leave: bool = True,
    **kwargs: Any,
) -> tqdm[Any]:
    """A tqdm bar drawn as :func:`progress_mode` says; ``kwargs`` go to tqdm (``unit``,
    ``initial``, ``delay``, ``unit_scale`` ...). With ``enabled=False`` or mode ``off`` the bar
    is tqdm's disabled bar: iterating and updating it cost nothing and print nothing."""
    mode = progress_mode() if enabled else "off"
    if mode == "off":
        return tqdm(iterable, desc=desc, total=total, disable=True, **kwargs)
    if mode == "notebook":
        kwargs.setdefault("mininterval", NOTEBOOK_INTERVAL_S)
        # The bar draws through display handles; tqdm still writes "" to its file on close,
        # which a kernel would turn into an empty stderr output.
        kwargs["file"] = io.StringIO()
        return NotebookBar(iterable, desc=desc, total=total, leave=leave, **kwargs)
    if mode == "log":
        kwargs.setdefault("mininterval", log_interval())
        return LogBar(iterable, desc=desc, total=total, leave=leave, **kwargs)
    return _ThrottledBar(iterable, desc=desc, total=total, leave=leave, **kwargs)


class _ThrottledBar(_Tqdm):
    """tqdm whose forced redraws (``set_postfix``, ``refresh``) respect ``mininterval`` too."""

    # tqdm's monitor thread redraws bars that went quiet for maxinterval; these bars redraw
    # when they are updated and when they end, which is all a log or a notebook needs.
    monitor_interval = 0

    # tqdm's own display/refresh return whether they drew (its close() reads that); its type
    # stubs say None.
    def refresh(  # type: ignore[override]
        self, nolock: bool = False, lock_args: Any = None
    ) -> bool | None:
        if self.disable:
            return None
        now = time.time()
        drawn: float | None = getattr(self, "_last_draw", None)
        if drawn is not None and now - drawn < self.mininterval:
            return False
        self._last_draw: float | None = now
        return super().refresh(nolock=nolock, lock_args=lock_args)

    def _final(self) -> None:
        """Draw the last state now, bypassing the throttle (the bar is ending)."""
        self._last_draw = None
        self.refresh()


class LogBar(_ThrottledBar):
    """One line per redraw, no carriage returns; the last state once more when it closes."""

    def display(  # type: ignore[override]
        self, msg: str | None = None, pos: int | None = None
    ) -> bool:
        if msg == "":  # tqdm clearing a line of a terminal: nothing to clear in a log
            return False
        line = self.__str__() if msg is None else msg
        self.fp.write(line.strip() + "\n")
        self.fp.flush()
        return True

    def close(self) -> None:
        if self.disable:
            return
        if self.last_print_n != self.n and self.last_print_t >= self.start_t + (self.delay or 0):
            self._final()  # the end state was not printed yet
            self.last_print_n = self.n
        # tqdm would then print the last state again (leave) or clear it: neither fits a log.
        self.leave = False
        super().close()


class NotebookBar(_ThrottledBar):
    """An HTML ``<progress>`` bar in a Jupyter output, updated in place (display handle).

    When it closes tqdm draws the final state (``leave``, the default: it stays in the notebook)
    or clears the line (``leave=False``: the output becomes empty).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._handle: Any = None
        super().__init__(*args, **kwargs)

    def display(  # type: ignore[override]
        self, msg: str | None = None, pos: int | None = None
    ) -> bool:
        show = importlib.import_module("IPython.display").display
        view = BarView("", "") if msg == "" else _bar_view(self)
        if self._handle is None:
            self._handle = show(view, display_id=True)
        else:
            self._handle.update(view)
        return True


class BarView:
    """What a notebook bar shows: HTML for the front end, the text line for a plain console."""

    def __init__(self, html_text: str, text: str) -> None:
        self.html_text = html_text
        self.text = text

    def _repr_html_(self) -> str:
        return self.html_text

    def __repr__(self) -> str:
        return self.text


def quiet_tqdm_notebook_warning() -> None:
    """In a kernel without ipywidgets, importing ``tqdm.auto`` (transformers does) warns that
    tqdm's widget bar is unavailable; sarl's bars do not use it (:class:`NotebookBar`), so the
    warning only confuses. Importing it once here, with that warning silenced, leaves nothing to
    warn about later. Called by the notebook entry points (``Client.local().run`` / ``.study``).
    """
    if "tqdm.autonotebook" in sys.modules or not in_notebook():
        return
    import warnings

    from tqdm import TqdmWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)
        importlib.import_module("tqdm.autonotebook")


@contextmanager
def mlflow_bars_off() -> Iterator[None]:
    """Within the block MLflow draws no download bar (stderr noise when reading a run's few
    artifacts back), unless the user chose a setting; MLflow reads the variable on every
    download."""
    name = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    if name in os.environ:
        yield
        return
    os.environ[name] = "false"
    try:
        yield
    finally:
        os.environ.pop(name, None)


@contextmanager
def transformers_bars_off() -> Iterator[None]:
    """Within the block, transformers' own bars (loading and saving weights) stay quiet: they
    say nothing sarl's bars do not, and redraw with carriage returns in logs. The switch is
    global to transformers (imported here), so it is put back afterwards."""
    hf_logging: Any = importlib.import_module("transformers.utils.logging")
    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _bar_view(bar: tqdm[Any]) -> BarView:
    d = bar.format_dict
    total = d["total"]
    text = tqdm.format_meter(**{**d, "ncols": 0})  # the text line without the drawn bar
    if total:
        gauge = f'<progress value="{d["n"]}" max="{total}" style="width: 16em"></progress>'
    else:
        gauge = '<progress style="width: 16em"></progress>'  # indeterminate: total unknown
    body = html.escape(text)
    return BarView(f'<div class="sarl-progress">{gauge} <code>{body}</code></div>', text)


__all__ = [
    "LOG_INTERVAL_S",
    "BarView",
    "LogBar",
    "Mode",
    "NotebookBar",
    "in_notebook",
    "log_interval",
    "mlflow_bars_off",
    "progress_bar",
    "progress_mode",
    "quiet_tqdm_notebook_warning",
    "status_line",
    "transformers_bars_off",
]
