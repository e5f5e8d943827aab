"""A verl worker pod exits non-zero when its Ray node ends before the head finished the job, so
``restartPolicy: OnFailure`` restarts it; it exits 0 only after the head's end-of-job marker.

Replaced: ``ray`` itself. A ``ray`` script on ``PATH`` stands in for ``ray start --block``, which
in Ray 2.58 (``ray/scripts/scripts.py``, the ``--block`` loop) ends with ``os._exit(1)`` once a
Ray subprocess (the raylet, when it loses the head's GCS) exits unexpectedly; this environment has
no Ray. The real Ray does it in ``test_verl_multinode.py`` (a killed head, in the PyTorchJob
emulator).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from pathlib import Path

import pytest
import yaml

from sarl_jobs import verl_trainer
from sarl_jobs.verl_trainer import DONE_MARKER, RayNodeLost, run_worker
from tests.support.waiting import wait_until

SPEC = {
    "metadata": {"name": "verl-2node"},
    "spec": {
        "preset": "local-grpo-arithmetic",
        "resources": {"backend": "verl", "nodes": 2, "gpus_per_node": 0},
    },
}


def worker_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ray_exit: int) -> None:
    """Node 1 of a 2-node PyTorchJob, no checkpoint store, and the stand-in ``ray``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ray = bin_dir / "ray"
    ray.write_text(f"#!/bin/sh\nexit {ray_exit}\n")
    ray.chmod(ray.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    env = {"PET_NNODES": "2", "PET_NODE_RANK": "1", "MASTER_ADDR": "job-master-0"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("SARL_CHECKPOINT_URI", raising=False)
    # No head here: its Ray port "answers" at once. The wait itself (a real listener opened
    # late, back-off, time-out) is tested in tests/jobs/test_cluster.py.
    monkeypatch.setattr(verl_trainer, "wait_for_head", lambda *_a, **_k: 0.0)


def test_a_worker_whose_ray_node_ends_early_exits_1(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    worker_env(monkeypatch, tmp_path, ray_exit=1)
    config = tmp_path / "experiment.yaml"
    config.write_text(yaml.safe_dump(SPEC))
    code = verl_trainer._cli([str(config), "--workdir", str(tmp_path / "work")])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: Ray node 1: `ray start` exited with 1 before the head")


def test_the_head_marker_ends_the_worker_with_0_and_an_old_marker_does_not(
    tmp_path: Path,
) -> None:
    done = tmp_path / "work" / DONE_MARKER
    done.parent.mkdir()
    done.touch()  # left by an earlier container in a volume: must not count
    with pytest.raises(RayNodeLost, match="exited with 3"):
        run_worker(["sh", "-c", "sleep 0.5; exit 3"], done, node_rank=1, poll_s=0.05)

    def head_finishes() -> None:
        # Once the worker's node runs (after run_worker removed any old marker): a fixed 0.5 s
        # could touch it before the removal on a loaded machine, and the worker waited 60 s.
        wait_until(lambda: _child_named(b"sleep"))
        time.sleep(0.3)
        done.touch()

    thread = threading.Thread(target=head_finishes)
    thread.start()
    started = time.monotonic()
    run_worker(["sleep", "60"], done, node_rank=1, poll_s=0.05)  # returns: exit 0
    thread.join()
    assert time.monotonic() - started < 30


def _child_named(name: bytes) -> bool:
    """Whether a child process of this one runs the program ``name`` (read from /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            program = (entry / "cmdline").read_bytes().split(b"\0")[0]
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and program == name:
            return True
    return False
