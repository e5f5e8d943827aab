"""Checkpoint store on a local (or mounted) filesystem directory.

Layout: ``<root>/step-XXXXXXXX/files/...`` and ``<root>/step-XXXXXXXX/manifest.json``. A save
copies into ``<root>/step-XXXXXXXX.tmp-<uuid>/`` (fsynced), renames that directory into place with
``os.replace`` and only then writes the manifest (temp file + ``os.replace``), so a process killed
at any point leaves either the previous state or a ``*.tmp-*`` directory / manifest-less step that
``latest`` ignores. A save holds an exclusive ``flock`` on its directory from creation until its
manifest is written, and the kernel drops the lock when the process dies, so ``clean_leftovers``
(called when a run starts) removes exactly what dead saves left behind; ``prune`` removes
leftovers older than the newest checkpoint. Created by :func:`sarl.storage.open_store` for any
checkpoint URI that is not ``s3://``.
"""

from __future__ import annotations

import builtins
import fcntl
import logging
import os
import re
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sarl.durable import fsync_dir as _fsync_dir
from sarl.durable import write_atomic
from sarl.storage.base import (
    FILES_DIR,
    MANIFEST_NAME,
    CheckpointInfo,
    CheckpointStore,
    FileEntry,
    StorageError,
    check_step,
    checked_metadata,
    copy_and_hash,
    decode_manifest,
    encode_manifest,
    parse_step_name,
    signed,
    source_files,
    step_name,
    utc_now,
)
from sarl.storage.progress import Progress
from sarl.storage.signing import CheckpointKey

logger = logging.getLogger(__name__)

_TMP_DIR = re.compile(r"^step-(\d{8,})\.tmp-[0-9a-f]{32}$")


class LocalCheckpointStore(CheckpointStore):
    """Checkpoints under the directory ``root`` (created on first save or ``check_access``);
    ``key`` signs and verifies manifests (:mod:`sarl.storage.signing`)."""

    def __init__(self, root: Path, *, key: CheckpointKey | None = None) -> None:
        self.root = Path(root)
        self.uri = str(self.root)
        self.key = key

    def step_uri(self, step: int) -> str:
        return str(self._step_dir(step))

    def _step_dir(self, step: int) -> Path:
        return self.root / step_name(step)

    def check_access(self) -> None:
        """The root can be created and a file written and removed in it."""
        probe = self.root / f".sarl-access-probe-{uuid.uuid4().hex}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"sarl")
            probe.unlink()
        except OSError as e:
            raise StorageError(f"checkpoint directory {self.root} is not writable: {e}") from e

    def save(self, step: int, local_dir: Path, metadata: Mapping[str, Any]) -> CheckpointInfo:
        check_step(step)
        meta = checked_metadata(metadata)
        sources = source_files(Path(local_dir))
        final = self._step_dir(step)
        try:
            tmp, lock = _new_tmp_dir(self.root, step)
        except OSError as e:
            raise StorageError(f"saving step {step} to {final} failed: {e}") from e
        try:
            (tmp / FILES_DIR).mkdir()
            entries = self._copy_in(sources, tmp / FILES_DIR, step)
            info = signed(
                CheckpointInfo(step, self.step_uri(step), utc_now(), entries, meta), self.key
            )
            if final.exists():
                self._delete(step)  # manifest first: the old checkpoint stops being complete
            os.replace(tmp, final)
            _fsync_dir(self.root)
            write_atomic(final / MANIFEST_NAME, encode_manifest(info))
        except OSError as e:
            raise StorageError(f"saving step {step} to {final} failed: {e}") from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)  # gone after the rename; cleans up on failure
            if lock is not None:
                os.close(lock)  # after the manifest: the step is complete, or tmp is gone
        return info

    def _put(self, step: int, src: Path, relpath: str, progress: Progress) -> FileEntry:
        """Copy into ``files/`` of the step directory through a temp sibling: two machines of
        one job writing the same file (same bytes) on a shared mount never see half a file."""
        target = self._step_dir(step) / FILES_DIR / relpath
        tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex}")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            entry = copy_and_hash(src, tmp, relpath, progress.update)
            os.replace(tmp, target)
            _fsync_dir(target.parent)
        except OSError as e:
            raise StorageError(f"saving {src} to {target} failed: {e}") from e
        finally:
            tmp.unlink(missing_ok=True)
        return entry

    def _put_manifest(self, step: int, data: bytes) -> None:
        path = self._step_dir(step) / MANIFEST_NAME
        try:
            write_atomic(path, data)
        except OSError as e:
            raise StorageError(f"writing manifest {path} failed: {e}") from e

    def _copy_in(
        self, sources: list[tuple[Path, str]], dest: Path, step: int
    ) -> tuple[FileEntry, ...]:
        total = sum(src.stat().st_size for src, _ in sources)
        entries = []
        with Progress(total, f"save step {step}") as progress:
            for src, rel in sources:
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                entries.append(copy_and_hash(src, target, rel, progress.update))
        # A file's data is durable after its fsync; its name only after its directory's fsync.
        for dirpath, _dirs, _files in os.walk(dest.parent):
            _fsync_dir(Path(dirpath))
        return tuple(entries)

    def _step_numbers(self) -> builtins.list[int]:
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StorageError(f"cannot list checkpoint directory {self.root}: {e}") from e
        steps = (parse_step_name(name) for name in names)
        return sorted({s for s in steps if s is not None})

    def _load(self, step: int) -> CheckpointInfo | None:
        step_dir = self._step_dir(step)
        try:
            data = (step_dir / MANIFEST_NAME).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            logger.debug("skipping %s: no manifest (incomplete save)", step_dir)
            return None
        except OSError as e:
            raise StorageError(f"cannot read manifest of {step_dir}: {e}") from e
        info = decode_manifest(data, step, self.step_uri(step))
        if info is None:
            return None
        for entry in info.files:
            path = step_dir / FILES_DIR / entry.path
            try:
                size = path.stat().st_size if path.is_file() else -1
            except OSError:
                size = -1
            if size != entry.size:
                logger.warning("ignoring checkpoint %s: %s missing or wrong size", step_dir, path)
                return None
        return info

    def _fetch(
        self, info: CheckpointInfo, entry: FileEntry, target: Path, progress: Progress
    ) -> None:
        src = self._step_dir(info.step) / FILES_DIR / entry.path
        copy_and_hash(src, target, entry.path, progress.update)

    def _delete(self, step: int) -> None:
        step_dir = self._step_dir(step)
        try:
            (step_dir / MANIFEST_NAME).unlink(missing_ok=True)
            if step_dir.is_dir():
                _fsync_dir(step_dir)  # the manifest is durably gone before any file goes
                shutil.rmtree(step_dir)
        except OSError as e:
            raise StorageError(f"deleting checkpoint {step_dir} failed: {e}") from e

    def _delete_leftovers(self, before: int) -> builtins.list[int]:
        """Remove ``step-XXXXXXXX.tmp-*`` dirs of killed saves older than ``before`` (newer ones
        may belong to a save still running)."""
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        deleted = []
        for name in names:
            m = _TMP_DIR.match(name)
            if m and int(m.group(1)) < before:
                shutil.rmtree(self.root / name, ignore_errors=True)
                deleted.append(int(m.group(1)))
        return deleted

    def clean_leftovers(self) -> builtins.list[str]:
        """Remove ``step-XXXXXXXX.tmp-*`` directories and manifest-less step directories whose
        lock no live save holds (what saves killed at any point left behind); returns their
        names. Where the filesystem has no ``flock`` nothing is removed: ownership is unknown."""
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StorageError(f"cannot list checkpoint directory {self.root}: {e}") from e
        removed = []
        for name in names:
            path = self.root / name
            incomplete = parse_step_name(name) is not None and not (path / MANIFEST_NAME).exists()
            if (_TMP_DIR.match(name) or incomplete) and _remove_if_unowned(path):
                removed.append(name)
        return removed


def _new_tmp_dir(root: Path, step: int) -> tuple[Path, int | None]:
    """A new ``step-XXXXXXXX.tmp-<uuid>`` directory under ``root`` and a descriptor holding an
    exclusive ``flock`` on it (None where the filesystem has no ``flock``)."""
    root.mkdir(parents=True, exist_ok=True)
    while True:
        tmp = root / f"{step_name(step)}.tmp-{uuid.uuid4().hex}"
        tmp.mkdir()
        fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            os.close(fd)
            return tmp, None
        if os.fstat(fd).st_nlink > 0:
            return tmp, fd
        # A cleaner locked and removed the directory between our mkdir and flock.
        os.close(fd)


def _remove_if_unowned(path: Path) -> bool:
    """Delete the directory ``path`` unless a process holds its ``flock``; True if deleted."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False  # gone already, or not a directory
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # a live save holds it (or flock is unsupported here)
        # While we hold the lock, a save that has just created this directory waits for it and
        # then finds the directory gone (see _new_tmp_dir).
        shutil.rmtree(path)
        return True
    except OSError as e:
        raise StorageError(f"removing leftover {path} failed: {e}") from e
    finally:
        os.close(fd)
