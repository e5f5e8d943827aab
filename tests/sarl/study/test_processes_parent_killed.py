"""A Study's run processes end when the Study's process is SIGKILLed (nothing trains on alone).

A real parent process runs two calls with :func:`~sarl.study.processes.run_in_processes`; each
child writes its pid and sleeps. The test SIGKILLs the parent and waits, with a generous bound,
until neither child is left.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[3]

PARENT = textwrap.dedent(
    """
    import sys
    from sarl.study.processes import Call, run_in_processes
    from tests.sarl.study.test_processes import write_pid_and_sleep

    calls = [Call(write_pid_and_sleep, (f"{sys.argv[1]}/{i}.pid",)) for i in range(2)]
    run_in_processes(calls, 2, lambda *_: None)
    """
)


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_children_exit_when_the_parent_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path)], cwd=ROOT)
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while len(list(tmp_path.glob("*.pid"))) < 2:
            assert parent.poll() is None, f"parent exited with {parent.returncode}"
            assert time.monotonic() < deadline, "the children never started"
            time.sleep(0.1)
        pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
        children = [psutil.Process(pid) for pid in pids]
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 120  # generous: a signal, or the 1 s watch
        while any(_alive(c) for c in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [c.pid for c in children if _alive(c)], "children outlived the killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        for child in children:  # on failure: leave nothing behind on the test machine
            if _alive(child):
                child.kill()
