"""``run_in_processes``: each call in its own spawned process, ``jobs`` at a time; results and
errors come back by index; an interrupt in the parent stops the live children and starts no
other call."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from sarl.study.processes import Call, run_in_processes

# -- targets: module-level, so a spawned child imports them by name -------------------------------


def square(x: int) -> int:
    return x * x


def fail(message: str) -> None:
    raise ValueError(message)


def die(code: int) -> None:
    os._exit(code)


def write_pid_and_sleep(path: str) -> None:
    Path(path).write_text(str(os.getpid()))
    time.sleep(600)


def touch(path: str) -> None:
    Path(path).write_text("started")


# -------------------------------------------------------------------------------------------------


def test_results_and_errors_come_back_by_index() -> None:
    seen: dict[int, tuple[Any, str | None]] = {}
    calls = [Call(square, (3,)), Call(fail, ("bad <input>",)), Call(die, (7,)), Call(square, (4,))]
    run_in_processes(calls, 2, lambda i, result, error: seen.__setitem__(i, (result, error)))
    assert seen[0] == (9, None)
    assert seen[3] == (16, None)
    assert seen[1] == (None, "ValueError: bad <input>")
    assert seen[2] == (None, "its process exited with code 7 before reporting a result")


def test_an_interrupt_stops_the_live_children_and_starts_no_other(tmp_path: Path) -> None:
    pid_file, started = tmp_path / "sleeper.pid", tmp_path / "third-started"
    calls = [
        Call(write_pid_and_sleep, (str(pid_file),)),
        Call(square, (2,)),
        Call(touch, (str(started),)),  # queued behind the two others: must never start
    ]

    def done(index: int, result: Any, error: str | None) -> None:
        # The quick call ended while the sleeper runs: the user presses Ctrl-C now. Wait until
        # the sleeper is surely running, so it is a live child the interrupt must stop.
        deadline = time.monotonic() + 120
        while not pid_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_in_processes(calls, 2, done)
    sleeper = int(pid_file.read_text())
    assert not psutil.pid_exists(sleeper) or psutil.Process(sleeper).status() == "zombie"
    assert not started.exists()
    assert not _call_processes()


def _call_processes() -> list[psutil.Process]:
    """Children of this process running a call: spawned ones (``spawn_main``), which leaves out
    multiprocessing's resource tracker and any server a fixture started."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "spawn_main" in " ".join(child.cmdline()) and child.status() != "zombie":
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found
