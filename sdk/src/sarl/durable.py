"""Durable writes on a local filesystem: one file replaced atomically, a directory's entries
synced. Dependency-free, so the checkpoint stores (:mod:`sarl.storage.local`), the tracking spool
(:mod:`sarl.tracking.spool`, which must not import the storage package and its S3 client) and the
run directory share one writer."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` at ``path`` via a temp sibling, fsync, rename and directory fsync: readers see the
    old file or the whole new one."""
    tmp = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        with tmp.open("xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` (creations, renames, removals) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
