"""The structure scorer's worker pool dies with the process that holds it, even when SIGKILLed.

A real scorer runs in a real child process (2 spawned workers, 64 responses: the parallel path);
the test SIGKILLs that process and waits, with a generous bound, until none of its descendants
(the pool's workers and multiprocessing's resource tracker) is left. The pool is also first used
from a thread that ends before the kill: Linux's parent-death signal follows the thread that
forked, and the workers must survive that thread and still serve the process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

SCRIPT = textwrap.dedent(
    """
    import sys, threading, time
    import numpy as np
    from sarl.rewards.structure import StructureScorer
    from sarl.rewards.structure.segmentation import Steps

    scorer = StructureScorer(workers=2)
    steps = [Steps(texts=("a", "b", "c", "d"), truncated=False, has_think=True)] * 64
    vectors = np.random.default_rng(0).normal(size=(4 * 64, 8)).astype(np.float32)

    def score() -> None:
        assert len(scorer.score_embedded(steps, vectors)) == 64

    if sys.argv[1] == "thread":  # the pool starts on a thread that then ends
        t = threading.Thread(target=score)
        t.start()
        t.join()
    score()
    print("ready", flush=True)
    time.sleep(3600)
    """
)


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cmdline(p: psutil.Process) -> str:
    """The command line, "" for a process that has ended or is a zombie (a short-lived helper
    of the pool may be exiting while the descendants are listed)."""
    try:
        return " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return ""


@pytest.mark.parametrize("first_use", ["main", "thread"])
def test_workers_and_tracker_exit_when_the_parent_is_killed(first_use: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, first_use],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    descendants: list[psutil.Process] = []
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"scorer process exited with {proc.wait()}"
        descendants += psutil.Process(proc.pid).children(recursive=True)
        workers = [p for p in descendants if "spawn_main" in _cmdline(p)]
        assert len(workers) == 2  # both workers still serve after their first thread ended
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 120  # generous: the mechanism is a signal, or a 1 s watch
        while [p for p in descendants if _alive(p)] and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [(p.pid, _cmdline(p)[:80]) for p in descendants if _alive(p)]
        assert not left, f"left running after the parent was killed: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for p in descendants:  # on failure: leave nothing behind on the test machine
            if _alive(p):
                p.kill()
