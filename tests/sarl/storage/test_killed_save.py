"""A save killed with SIGKILL half way never becomes a checkpoint, and a later prune (or, for the
local store, ``clean_leftovers`` when the next run starts) removes its leftovers; a save still
running is never touched.

The saving process is a real subprocess killed with ``kill -9``. To make "half way" deterministic
instead of a race against a fast disk/loopback, the child slows itself down after the first file:
for S3 it sleeps after each uploaded multipart part (so objects of step 2 exist and a multipart
upload is open when it dies), for the local store after each copied file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from minio import Minio

from sarl.storage import open_store
from tests.sarl.storage.conftest import SDK_SRC, write_tree

S3_CHILD = """
import sys, time
from pathlib import Path
from minio import Minio
from sarl.storage import open_store

upload_part = Minio._upload_part
def slow_upload_part(self, *args, **kwargs):
    etag = upload_part(self, *args, **kwargs)
    time.sleep(30)  # a stalled network: the parent kills us here
    return etag
Minio._upload_part = slow_upload_part
open_store(sys.argv[1], endpoint_url=sys.argv[2]).save(2, Path(sys.argv[3]), {"run": "killed"})
"""

LOCAL_CHILD = """
import sys, time
from pathlib import Path
import sarl.storage.local as local

copy_and_hash = local.copy_and_hash
def slow_copy(*args, **kwargs):
    entry = copy_and_hash(*args, **kwargs)
    time.sleep(30)  # a slow disk: the parent kills us here
    return entry
local.copy_and_hash = slow_copy
local.LocalCheckpointStore(Path(sys.argv[1])).save(2, Path(sys.argv[3]), {"run": "killed"})
"""


def _start(code: str, uri: str, endpoint: str, src: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SDK_SRC), "SARL_NO_PROGRESS": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), uri, endpoint, str(src)],
        env=env,
        stderr=subprocess.PIPE,
    )


def _kill_when(proc: subprocess.Popen[bytes], ready: Callable[[], bool], timeout: float) -> None:
    _wait_until(proc, ready, timeout)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL


def _wait_until(proc: subprocess.Popen[bytes], ready: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise AssertionError(f"child exited early: {err}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("child never started writing step 2")
        time.sleep(0.02)
    assert proc.poll() is None, "child finished before it could be killed"


def _big_checkpoint(root: Path) -> Path:
    # "a.txt" sorts (and so uploads) first and completes; the 48 MiB file is the multipart one.
    src = write_tree(root, {"a.txt": b"first file", "model/weights.bin": b""})
    (src / "model" / "weights.bin").write_bytes(os.urandom(48 * 1024 * 1024))
    return src


def test_s3_save_killed_mid_upload_is_never_latest_and_is_pruned_later(
    s3_endpoint: str,
    bucket: str,
    minio_client: Minio,
    make_checkpoint: Callable[[int], Path],
    tmp_path: Path,
) -> None:
    uri = f"s3://{bucket}/exp"
    store = open_store(uri, endpoint_url=s3_endpoint)
    store.save(1, make_checkpoint(1), {})

    def step2_keys() -> list[str]:
        objs = minio_client.list_objects(bucket, prefix="exp/step-00000002/", recursive=True)
        return [o.object_name for o in objs if o.object_name]

    child = _start(S3_CHILD, uri, s3_endpoint, _big_checkpoint(tmp_path / "big"))
    _kill_when(child, lambda: bool(step2_keys()), timeout=30)

    assert step2_keys() == ["exp/step-00000002/files/a.txt"]  # no manifest, weights unfinished
    latest = store.latest()
    assert latest is not None and latest.step == 1
    assert [c.step for c in store.list()] == [1]

    store.save(3, make_checkpoint(3), {})
    assert store.prune(keep_last=2) == [2]
    assert step2_keys() == []
    assert [c.step for c in store.list()] == [1, 3]


def test_local_save_killed_mid_copy_leaves_only_a_tmp_dir_that_prune_removes(
    make_checkpoint: Callable[[int], Path], tmp_path: Path
) -> None:
    root = tmp_path / "checkpoints"
    store = open_store(str(root))
    store.save(1, make_checkpoint(1), {})
    src = write_tree(tmp_path / "src", {f"shard-{i}.bin": os.urandom(1024) for i in range(5)})

    child = _start(LOCAL_CHILD, str(root), "", src)
    _kill_when(child, lambda: any(root.glob("step-00000002.tmp-*/files/*")), timeout=30)

    assert [p.name for p in root.iterdir() if p.name.startswith("step-00000002")] == [
        next(root.glob("step-00000002.tmp-*")).name
    ]  # only the temp dir: the step never got its final name
    latest = store.latest()
    assert latest is not None and latest.step == 1
    assert [c.step for c in store.list()] == [1]

    store.save(3, make_checkpoint(3), {})
    assert store.prune(keep_last=2) == [2]
    assert sorted(p.name for p in root.iterdir()) == ["step-00000001", "step-00000003"]


def test_local_clean_leftovers_spares_a_running_save_and_removes_it_once_killed(
    make_checkpoint: Callable[[int], Path], tmp_path: Path
) -> None:
    root = tmp_path / "checkpoints"
    store = open_store(str(root))
    store.save(1, make_checkpoint(1), {})
    src = write_tree(tmp_path / "src", {f"shard-{i}.bin": os.urandom(1024) for i in range(5)})

    child = _start(LOCAL_CHILD, str(root), "", src)
    try:
        _wait_until(child, lambda: any(root.glob("step-00000002.tmp-*/files/*")), timeout=30)
        (tmp,) = root.glob("step-00000002.tmp-*")
        assert store.clean_leftovers() == []  # the save is alive: it holds its directory's lock
        assert tmp.is_dir()
    finally:
        child.kill()
        child.wait(timeout=10)

    assert store.clean_leftovers() == [tmp.name]
    assert sorted(p.name for p in root.iterdir()) == ["step-00000001"]
    latest = store.latest()
    assert latest is not None and latest.step == 1


def test_local_clean_leftovers_removes_steps_without_manifest_only(
    make_checkpoint: Callable[[int], Path], tmp_path: Path
) -> None:
    """A save killed between renaming its directory into place and writing the manifest."""
    root = tmp_path / "checkpoints"
    store = open_store(str(root))
    store.save(1, make_checkpoint(1), {})
    store.save(3, make_checkpoint(3), {})
    (root / "step-00000003" / "manifest.json").unlink()
    write_tree(root / "step-00000002" / "files", {"a.txt": b"half"})

    assert store.clean_leftovers() == ["step-00000002", "step-00000003"]
    assert sorted(p.name for p in root.iterdir()) == ["step-00000001"]
    assert [c.step for c in store.list()] == [1]
