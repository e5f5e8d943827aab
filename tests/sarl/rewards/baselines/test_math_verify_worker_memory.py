"""A math-verify worker's memory is capped (issue 38: measuring item 4's attack showed the
service's two workers at +541 to +888 MiB): one hostile item, a tower of powers that SymPy
evaluates until the worker's 10 s timer, took a real worker from 57 to 732 MiB RSS. With the
cap (``WORKER_MEMORY_BYTES`` past its start, ``RLIMIT_DATA``) the same item ends in a verdict,
the worker stays alive and answers the next comparison, and its peak RSS (``VmHWM`` from
``/proc``: the kernel's own high-water mark, no sampling) stays within the cap.

A real worker subprocess, spoken to over its JSON-lines protocol as the pool does.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sarl.rewards.baselines.math_verify_pool import CORRECT, WORKER_MEMORY_BYTES

pytest.importorskip("math_verify")
pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="Linux /proc")

HOSTILE = ["\\boxed{2^{2^{2^{2^{2^{2}}}}}}", "3", 10.0]


def _status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_a_hostile_item_stays_within_the_worker_memory_cap() -> None:
    command = [sys.executable, "-m", "sarl.rewards.baselines.math_verify_pool", "--worker"]
    worker = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert worker.stdin is not None and worker.stdout is not None
    try:
        assert json.loads(worker.stdout.readline()) == "ready"
        ready_kib = _status_kib(worker.pid, "VmRSS")
        for request in (HOSTILE, ["\\boxed{1/2}", "0.5", 10.0]):
            worker.stdin.write(json.dumps(request) + "\n")
            worker.stdin.flush()
            answer = json.loads(worker.stdout.readline())
        assert answer == CORRECT  # the same worker answered the next comparison
        grown = (_status_kib(worker.pid, "VmHWM") - ready_kib) * 1024
        assert grown <= WORKER_MEMORY_BYTES
    finally:
        worker.kill()
        worker.wait()
