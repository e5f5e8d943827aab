"""The run lease of a local session: taken when the run starts, renewed by a thread while it
trains, checked before each checkpoint is saved, released when the session ends.

Called by :class:`sarl.runner.session.LocalSession`; the lease itself is
:mod:`sarl.storage.lease`. It is taken before anything in the store is touched (the S3 store's
``clean_leftovers`` aborts uploads it takes for a dead save's, which a live second owner's are
not). A lease another live process holds fails the run before training as a
:class:`~sarl.runner.preflight.PreflightError` naming that owner.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sarl.runner.preflight import PreflightError
from sarl.storage.base import CheckpointStore, StorageError
from sarl.storage.lease import Lease, LeaseHeld, LeaseLost, lease_for

logger = logging.getLogger(__name__)

#: The MLflow run tag naming the process that owns the run.
OWNER_TAG = "sarl.owner"


class RunOwnership:
    """Owns the run of ``store`` for one session (a context-managed lease plus its renewer)."""

    def __init__(self, store: CheckpointStore, *, take_over: bool, period_s: float | None = None):
        self.lease: Lease = (
            lease_for(store) if period_s is None else lease_for(store, period_s=period_s)
        )
        self.take_over = take_over
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lost: LeaseLost | None = None

    def __enter__(self) -> RunOwnership:
        try:
            self.lease.acquire(take_over=self.take_over)
        except LeaseHeld as e:
            raise PreflightError(str(e)) from e
        self._thread = threading.Thread(target=self._renew_loop, name="sarl-lease", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.lease.release()

    def owner_tags(self, run_id: str) -> dict[str, str]:
        """Record ``run_id`` in the lease; the MLflow tags naming this owner."""
        self.lease.run_id = run_id
        tags = {OWNER_TAG: self.lease.holder.describe()}
        if self.lease.taken_from is not None:
            tags["sarl.owner.taken_from"] = self.lease.taken_from.holder.describe()
        return tags

    def check(self) -> None:
        """Before a checkpoint is saved: still the owner (:class:`LeaseLost` otherwise)."""
        if self.lost is not None:
            raise self.lost
        self.lease.check()

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.lease.period_s):
            try:
                self.lease.renew()
            except LeaseLost as e:
                self.lost = e  # the next checkpoint check fails the run
                logger.error("%s", e)
                return
            except StorageError as e:  # the store is unreachable: try again next period
                logger.warning("run lease not renewed: %s", e)


def tag_owner(tracker: Any, ownership: RunOwnership) -> None:
    """Name the owner on the MLflow run (spooled like every tag: an outage delays it)."""
    tracker.set_tags(ownership.owner_tags(tracker.run_id))
