"""What a local run says, and what its MLflow run records, when a fault outside sarl ends it:
a full disk, a dead embedding service, a lost run lease, a store or tracking server that stays
down.

Called by :class:`sarl.runner.session.LocalSession` when training raised: :func:`explain` turns the
error into one line (:class:`RunFailed`, which ``sarl run`` prints without a traceback, exit 1);
:func:`close_failed` records that line on the MLflow run (tag ``sarl.failure``) and closes it
FAILED through the spool, or, when the spool cannot be written (its disk is full), directly.
Errors not listed here keep their traceback: they are bugs to report, not faults to explain.
"""

from __future__ import annotations

import errno
import logging
import shutil
import traceback
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

FAILURE_TAG = "sarl.failure"


class RunFailed(RuntimeError):
    """Training stopped on a fault outside sarl; the message is one line naming it and what to
    do. The MLflow run is closed FAILED (or the status waits in the spool)."""


def explain(exc: BaseException, places: dict[str, Path | str]) -> str | None:
    """The one line for ``exc`` (None: not a known fault). ``places`` name where the run writes:
    ``run`` (its directory), ``spool``, ``trainer`` and ``checkpoints`` (a path or an S3 URI)."""
    from sarl.embedding.base import EmbeddingError
    from sarl.storage.base import StorageError
    from sarl.tracking.tracker import TrackingError

    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return disk_full(exc, places)
    if isinstance(exc, EmbeddingError):
        return (
            f"the embedding service failed mid-run: {_line(exc)}. Checkpoints up to the last "
            "saved step are kept; start the service (or fix the reward's embedder base_url) "
            "and continue with `sarl run --local --resume`"
        )
    if isinstance(exc, StorageError | TrackingError):
        return f"{_line(exc)}; continue with `sarl run --local --resume` once it is fixed"
    return None


def disk_full(exc: OSError, places: dict[str, Path | str]) -> str:
    """Disk full: which of the run's places the write was for, its free space, how much the run
    has written there, and how to continue."""
    what, path = _where(exc, places)
    free = _free(path)
    used = _size(Path(places["run"])) if "run" in places else None
    written = f"; the run's directory {places['run']} holds {_bytes(used)}" if used else ""
    flush = (
        f" (unsent metrics wait in {places['spool']}: `sarl tracking flush {places['spool']}`)"
        if "spool" in places
        else ""
    )
    return (
        f"disk full writing the run's {what} at {path}: {free} free there{written}. Free "
        "space (or point --workdir / storage.checkpoint_uri elsewhere) and continue with "
        f"`sarl run --local --resume`{flush}"
    )


def _where(exc: OSError, places: dict[str, Path | str]) -> tuple[str, str]:
    """(what, path) of the failed write: the file the error names, else the place of the
    innermost sarl/transformers frame that wrote (spool, checkpoint store, trainer output)."""
    if exc.filename:
        path = str(exc.filename)
        for name in ("spool", "trainer", "checkpoints", "run"):
            if name in places and path.startswith(str(places[name])):
                return _WHAT[name], path
        return "files", path
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        for marker, name in _FRAMES:
            if marker in frame.filename.replace("\\", "/") and name in places:
                return _WHAT[name], str(places[name])
    return _WHAT["run"], str(places.get("run", "."))


_WHAT = {
    "spool": "tracking spool",
    "trainer": "trainer checkpoint",
    "checkpoints": "checkpoint store",
    "run": "files",
}
_FRAMES = (
    ("sarl/tracking/", "spool"),
    ("sarl/storage/", "checkpoints"),
    ("transformers/", "trainer"),
    ("safetensors/", "trainer"),
    ("torch/serialization", "trainer"),
)


def _free(path: str) -> str:
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError:
        return "unknown"
    return f"{_bytes(usage.free)} of {_bytes(usage.total)}"


def _size(root: Path) -> int | None:
    try:
        return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    except OSError:
        return None


def _bytes(n: int | None) -> str:
    size = float(n or 0)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def close_failed(tracker: Any, status: str, reason: str | None, wait_s: float) -> None:
    """Close the MLflow run ``status`` with ``reason`` as its ``sarl.failure`` tag: through the
    spool (sent now, or by the next flush); when the spool cannot be written (disk full), stop it
    and call MLflow directly. Never raises: the training error is what the user must see."""
    try:
        if reason:
            tracker.set_tags({FAILURE_TAG: reason})
        tracker.finish(status, wait_s=wait_s)
        return
    except OSError as e:
        logger.warning(
            "tracking spool not writable (%s); closing run %s directly", e, tracker.run_id
        )
    except Exception as e:  # a tracking failure must not hide the training error
        logger.warning("could not close run %s cleanly: %s", tracker.run_id, _line(e))
        return
    _close_directly(tracker, status, reason)


def _close_directly(tracker: Any, status: str, reason: str | None) -> None:
    from sarl.tracking.store import guarded, make_client

    try:
        tracker.abandon()  # the drainer stops; unsent records stay for `sarl tracking flush`
        client = make_client(tracker.uri)
        if reason:
            guarded(tracker.uri, "tagging the failure", lambda: client.set_tag(
                tracker.run_id, FAILURE_TAG, reason[:5000]))  # fmt: skip
        guarded(tracker.uri, f"closing run {tracker.run_id}",
                lambda: client.set_terminated(tracker.run_id, status))  # fmt: skip
    except Exception as e:
        logger.warning(
            "run %s stays RUNNING in MLflow (%s); `sarl run --resume` continues it",
            tracker.run_id, _line(e),
        )  # fmt: skip
