"""Saving a local run's checkpoints to the store through failures: bounded retries, and a final
checkpoint the store refused kept locally for ``sarl run --resume`` to upload.

Called by :class:`sarl.runner.callbacks.CheckpointCallback` (each save) and by
:class:`sarl.runner.session.LocalSession` (a pending upload, when a run starts). The S3 client
retries each request (``sarl.storage.s3.RETRIES``); a save that still fails is tried again whole,
``SAVE_ATTEMPTS`` times with ``BACKOFF_S`` between them (a flapping gateway answers a few 500s in
a row). After that:

* a checkpoint before the last step fails the run (training further would make the resume point
  older than the user thinks); the previous checkpoint is the resume point;
* the last step's checkpoint means training is done: the run finishes, the trainer checkpoint
  stays in ``<run dir>/trainer/checkpoint-N`` and ``<run dir>/pending-upload.json`` names it;
  ``sarl run --local --resume`` uploads it before anything else (and then has nothing to train).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sarl.storage.base import StorageError

logger = logging.getLogger(__name__)

SAVE_ATTEMPTS = 3
BACKOFF_S = (5.0, 15.0)  # before the 2nd and 3rd attempt
PENDING = "pending-upload.json"


@dataclass(frozen=True)
class PendingUpload:
    """The last checkpoint of a finished run that the store did not take."""

    step: int
    local: str
    metadata: dict[str, Any]
    error: str


def save_with_retries(
    store: Any,
    step: int,
    local: Path,
    metadata: Mapping[str, Any],
    *,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """``store.save`` retried whole up to ``SAVE_ATTEMPTS`` times; the last StorageError raises."""
    for attempt in range(1, SAVE_ATTEMPTS + 1):
        try:
            store.save(step, local, metadata)
            return
        except StorageError as e:
            if attempt == SAVE_ATTEMPTS:
                raise
            delay = BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)]
            logger.warning(
                "saving checkpoint step %d failed (attempt %d of %d): %s; again in %.0f s",
                step, attempt, SAVE_ATTEMPTS, e, delay,
            )  # fmt: skip
            sleep(delay)


def keep_pending(run_dir: Path, step: int, local: Path, metadata: Mapping[str, Any],
                 error: StorageError) -> PendingUpload:  # fmt: skip
    """Record that the final checkpoint at ``local`` waits for an upload; returns the record."""
    from sarl.durable import write_atomic

    pending = PendingUpload(step, str(local), dict(metadata), " ".join(str(error).split()))
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / PENDING, json.dumps(pending.__dict__, indent=1).encode())
    logger.warning(
        "the store did not take the final checkpoint (step %d) after %d attempts: %s. Training "
        "is done and the checkpoint is kept at %s; upload it with `sarl run --local --resume`",
        step, SAVE_ATTEMPTS, pending.error, local,
    )  # fmt: skip
    return pending


def pending(run_dir: Path) -> PendingUpload | None:
    """The run's pending upload, or None (none, or its record is unreadable)."""
    try:
        doc = json.loads((run_dir / PENDING).read_text(encoding="utf-8"))
        return PendingUpload(int(doc["step"]), str(doc["local"]), dict(doc["metadata"]),
                             str(doc.get("error", "")))  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError):
        return None


def upload_pending(store: Any, run_dir: Path) -> int | None:
    """Upload the checkpoint a finished run could not store (before a resume reads the store);
    returns its step, or None when nothing was pending. StorageError if the store still fails."""
    found = pending(run_dir)
    if found is None:
        return None
    local = Path(found.local)
    if not local.is_dir():
        logger.warning("pending checkpoint %s is gone; nothing to upload", local)
        (run_dir / PENDING).unlink(missing_ok=True)
        return None
    save_with_retries(store, found.step, local, found.metadata)
    (run_dir / PENDING).unlink(missing_ok=True)
    logger.warning("uploaded the final checkpoint (step %d) kept at %s", found.step, local)
    return found.step
