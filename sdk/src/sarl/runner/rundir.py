"""A local run's own directory, ``<workdir>/runs/<name>/``: its lock, the marker naming its MLflow
run, and the trainer's local checkpoint.

Called by :class:`sarl.runner.session.LocalSession`.

* ``.lock`` is held (``flock``, released by the kernel when the process dies) for the whole
  session: two ``sarl run``s of one experiment in one workdir never interleave, and anything found
  here once the lock is taken was left by a process that is gone.
* ``run.json`` names the MLflow run (id, tracking URI, checkpoint URI); written as soon as the run
  exists. ``--resume`` continues that run when it was killed before its first checkpoint (from
  then on the checkpoint's manifest names the run), and a run it names that is still RUNNING while
  nobody holds the lock died by SIGKILL: the next ``sarl run`` marks it KILLED.
* ``trainer/`` is the Trainer's output directory. When a session starts it keeps at most the
  ``checkpoint-N`` a resume starts from, and only if it holds exactly the stored checkpoint's
  files; half-written checkpoints and interrupted downloads of killed runs are removed.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from sarl.runner.preflight import PreflightError
from sarl.storage.base import CheckpointInfo, hash_file

MARKER = "run.json"
LOCK = ".lock"


@dataclass(frozen=True)
class RunMarker:
    """The MLflow run a local run logs to, and where (trusted only for the same URIs)."""

    run_id: str
    tracking_uri: str
    checkpoint_uri: str


class RunDir:
    """``root`` = ``<workdir>/runs/<experiment name>``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.trainer = self.root / "trainer"

    @contextmanager
    def locked(self, name: str) -> Iterator[None]:
        """Hold the run's lock; :class:`PreflightError` naming the holder's pid if it is taken.

        Where the filesystem has no ``flock`` the block runs unlocked.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / LOCK
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as e:
                holder = path.read_text(encoding="utf-8").strip() or "unknown"
                raise PreflightError(
                    f"another `sarl run` of {name!r} is running (pid {holder}); it holds {path}"
                ) from e
            except OSError:
                pass  # no flock on this filesystem
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            yield
        finally:
            os.close(fd)

    def marker(self) -> RunMarker | None:
        """The marker, or None when there is none or it is unreadable."""
        try:
            doc = json.loads((self.root / MARKER).read_text(encoding="utf-8"))
            return RunMarker(
                str(doc["run_id"]), str(doc["tracking_uri"]), str(doc["checkpoint_uri"])
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def write_marker(self, marker: RunMarker) -> None:
        from sarl.durable import write_atomic

        self.root.mkdir(parents=True, exist_ok=True)
        write_atomic(self.root / MARKER, json.dumps(asdict(marker), indent=2).encode())

    def prepare_trainer(self, start: CheckpointInfo | None) -> Path | None:
        """Empty ``trainer/`` but for ``checkpoint-<start.step>`` when it holds exactly the files
        of ``start``; returns that directory (None: download it, or nothing to resume from)."""
        keep = self.trainer / f"checkpoint-{start.step}" if start is not None else None
        if keep is not None and start is not None and not _holds(keep, start):
            keep = None
        if self.trainer.is_dir():
            for path in self.trainer.iterdir():
                if path == keep:
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        return keep


def _holds(local: Path, info: CheckpointInfo) -> bool:
    """Whether ``local`` has every file of ``info`` with its size and sha256."""
    for entry in info.files:
        path = local / entry.path
        try:
            if not path.is_file() or path.stat().st_size != entry.size:
                return False
        except OSError:
            return False
    return all(hash_file(local / e.path, e.path).sha256 == e.sha256 for e in info.files)
